//! Extended CQs (batch polling, timestamps), the `ibv_wr_*` posting API of extended QPs, and
//! inline sends from `IoSlice`s, over a loopback RC pair with data verified byte for byte
//! (`ext_hosts` runs them between the two hosts).
use std::io::IoSlice;
use std::time::Instant;

use verbs::{
    AccessFlags, Completion, CqEx, CqExAttr, Error, MemoryRegion, Qp, QpCap, QpEx, QpInitAttr,
    QpType, Reclaimed, RecvRequest, SendFlags, SendOps, SendRequest, WcOpcode, WrOp,
};

use crate::support::{connect, open, ALL_REMOTE, TIMEOUT};

pub(crate) fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(17).wrapping_add(seed))
        .collect()
}

/// Polls `cq` in batches until `n` completions arrived, reclaiming each through `qp`.
pub(crate) fn drain_ex(cq: &mut CqEx, qp: &Qp, n: usize) -> Vec<(Completion, Vec<Reclaimed>)> {
    let deadline = Instant::now() + TIMEOUT;
    let mut out = Vec::new();
    while out.len() < n {
        assert!(
            Instant::now() < deadline,
            "only {} of {n} completions within {TIMEOUT:?}",
            out.len()
        );
        let Some(mut batch) = cq.start_poll().unwrap() else {
            continue;
        };
        while let Some(wc) = batch.next().unwrap() {
            out.push((wc.to_completion(), qp.reclaim(&wc)));
        }
    }
    out
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn extended_cq_batches_complete_and_reclaim() {
    if crate::support::lacks(testkit::test_name!(), verbs::Capability::ManualConnect) {
        return;
    }
    let ctx = open();
    let pd = ctx.alloc_pd().unwrap();
    let mut cq_a = ctx.create_cq_ex(CqExAttr::new(64)).unwrap();
    let mut cq_b = ctx.create_cq_ex(CqExAttr::new(64)).unwrap();
    assert!(cq_a.cqe() >= 64);
    // The ENOENT path: an empty CQ makes no session (and nothing to end), every time.
    for _ in 0..3 {
        assert!(cq_a.start_poll().unwrap().is_none());
    }
    let a = pd
        .create_qp(&QpInitAttr::new(QpType::Rc, &cq_a, &cq_a))
        .unwrap();
    let b = pd
        .create_qp(&QpInitAttr::new(QpType::Rc, &cq_b, &cq_b))
        .unwrap();
    connect(&ctx, &a, &b);

    let rx: Vec<u64> = (0..3)
        .map(|_| {
            let mr = pd.reg_mr(4096, AccessFlags::LOCAL_WRITE).unwrap();
            b.post_recv(RecvRequest::new(mr, ..).unwrap()).unwrap()
        })
        .collect();
    let mut sent = Vec::new();
    let mut ids = Vec::new();
    for (i, imm) in [None, Some(0xfeed_0001u32), Some(7)]
        .into_iter()
        .enumerate()
    {
        let data = pattern(1000 + i * 500, i as u8);
        let mut mr = pd.reg_mr(4096, AccessFlags::LOCAL_WRITE).unwrap();
        mr.as_mut_slice()[..data.len()].copy_from_slice(&data);
        let op = imm.map_or(WrOp::Send, WrOp::SendWithImm);
        let req = SendRequest::new(op)
            .sge(mr, 0..data.len())
            .unwrap()
            .tag(i as u64);
        ids.push(a.post_send(req).unwrap());
        sent.push((data, imm));
    }

    let sends = drain_ex(&mut cq_a, &a, 3);
    for ((c, mut back), id) in sends.into_iter().zip(&ids) {
        assert_eq!(
            (c.wr_id, c.status, c.opcode),
            (*id, Ok(()), Some(WcOpcode::Send))
        );
        assert_eq!(c.qp_num, a.qp_num());
        assert_eq!(back.len(), 1);
        assert!(back[0].take::<MemoryRegion>().is_ok());
    }
    let recvs = drain_ex(&mut cq_b, &b, 3);
    for (((c, mut back), id), (data, imm)) in recvs.into_iter().zip(&rx).zip(&sent) {
        assert_eq!(
            (c.wr_id, c.status, c.opcode),
            (*id, Ok(()), Some(WcOpcode::Recv))
        );
        assert_eq!(c.byte_len as usize, data.len());
        assert_eq!(c.imm, *imm);
        assert_eq!(c.qp_num, b.qp_num());
        let mr: MemoryRegion = back[0].take().unwrap();
        assert_eq!(&mr.as_slice()[..data.len()], &data[..]);
    }
    assert_eq!(a.in_flight(), (0, 0));
    assert_eq!(b.in_flight(), (0, 0));
    assert!(cq_a.start_poll().unwrap().is_none());
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn completion_timestamps_where_the_device_has_them() {
    let ctx = open();
    let dev = ctx.query_device_ex().unwrap();
    let r = ctx.create_cq_ex(CqExAttr::new(16).completion_timestamp(true));
    if dev.completion_timestamp_mask() == 0 {
        let e = r.unwrap_err();
        assert!(matches!(e, Error::Unsupported { .. }), "{e:?}");
        assert!(e.to_string().contains("completion timestamps"), "{e}");
        return;
    }
    let mut cq = r.unwrap();
    assert!(cq.has_completion_timestamp());
    let pd = ctx.alloc_pd().unwrap();
    let a = pd
        .create_qp(&QpInitAttr::new(QpType::Rc, &cq, &cq))
        .unwrap();
    let b = pd
        .create_qp(&QpInitAttr::new(QpType::Rc, &cq, &cq))
        .unwrap();
    connect(&ctx, &a, &b);
    let target = pd
        .reg_mr(64, AccessFlags::LOCAL_WRITE | ALL_REMOTE)
        .unwrap();
    for _ in 0..2 {
        let src = pd.reg_mr(64, AccessFlags::LOCAL_WRITE).unwrap();
        a.post_send(SendRequest::rdma_write(src, 0..8, target.remote(0..8).unwrap()).unwrap())
            .unwrap();
    }
    let mut stamps = Vec::new();
    let deadline = Instant::now() + TIMEOUT;
    while stamps.len() < 2 && Instant::now() < deadline {
        if let Some(mut batch) = cq.start_poll().unwrap() {
            while let Some(wc) = batch.next().unwrap() {
                stamps.push(wc.completion_ts().expect("asked for timestamps"));
                a.reclaim(&wc);
            }
        }
    }
    assert_eq!(stamps.len(), 2);
    assert!(stamps[0] <= stamps[1], "{stamps:?}");
}

fn ex_pair(
    ops: SendOps,
    cap: QpCap,
) -> (verbs::Context, verbs::Pd, verbs::Cq, verbs::Cq, QpEx, Qp) {
    let ctx = open();
    let pd = ctx.alloc_pd().unwrap();
    let cq_a = ctx.create_cq(64, None).unwrap();
    let cq_b = ctx.create_cq(64, None).unwrap();
    let a = pd
        .create_qp_ex(&QpInitAttr::new(QpType::Rc, &cq_a, &cq_a).cap(cap), ops)
        .unwrap();
    let b = pd
        .create_qp(&QpInitAttr::new(QpType::Rc, &cq_b, &cq_b).cap(cap))
        .unwrap();
    connect(&ctx, &a, &b);
    (ctx, pd, cq_a, cq_b, a, b)
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn wr_api_posts_owned_requests_and_hands_them_back() {
    if crate::support::lacks(testkit::test_name!(), verbs::Capability::ManualConnect) {
        return;
    }
    let ops = SendOps::SEND | SendOps::RDMA_WRITE | SendOps::RDMA_READ;
    let (_ctx, pd, cq_a, cq_b, a, b) = ex_pair(ops, QpCap::default());
    assert_eq!(a.send_ops(), ops);
    let target = pd
        .reg_mr(8192, AccessFlags::LOCAL_WRITE | ALL_REMOTE)
        .unwrap();
    let rx = pd.reg_mr(4096, AccessFlags::LOCAL_WRITE).unwrap();
    let rid = b.post_recv(RecvRequest::new(rx, ..).unwrap()).unwrap();

    let msg = pattern(3000, 1);
    let written = pattern(5000, 2);
    let mut m1 = pd.reg_mr(4096, AccessFlags::LOCAL_WRITE).unwrap();
    m1.as_mut_slice()[..msg.len()].copy_from_slice(&msg);
    let mut m2 = pd.reg_mr(8192, AccessFlags::LOCAL_WRITE).unwrap();
    m2.as_mut_slice()[..written.len()].copy_from_slice(&written);
    let m3 = pd.reg_mr(8192, AccessFlags::LOCAL_WRITE).unwrap();
    // One session: SEND, WRITE (unsignaled), then READ back what the WRITE wrote.
    let reqs = vec![
        SendRequest::send(m1, 0..msg.len()).unwrap(),
        SendRequest::rdma_write(m2, 0..5000, target.remote(0..5000).unwrap())
            .unwrap()
            .signaled(false),
        SendRequest::rdma_read(m3, 10..5010, target.remote(0..5000).unwrap()).unwrap(),
    ];
    let ids = a.wr_post(reqs).unwrap();
    assert_eq!(ids.len(), 3);
    assert_eq!(a.in_flight(), (3, 0));

    let mut back = Vec::new();
    crate::support::drain(&cq_a, 2, |wc| {
        assert_eq!(wc.status(), Ok(()));
        back.extend(a.reclaim(wc));
    });
    assert_eq!(back.iter().map(|r| r.wr_id).collect::<Vec<_>>(), ids);
    assert_eq!(a.in_flight(), (0, 0));
    let read: MemoryRegion = back[2].take().unwrap();
    assert_eq!(&read.as_slice()[10..5010], &written[..]);

    let mut got = None;
    crate::support::drain(&cq_b, 1, |wc| {
        got = Some((wc.to_completion(), b.reclaim(wc)))
    });
    let (c, mut rb) = got.unwrap();
    assert_eq!((c.wr_id, c.byte_len as usize), (rid, msg.len()));
    let rx: MemoryRegion = rb[0].take().unwrap();
    assert_eq!(&rx.as_slice()[..msg.len()], &msg[..]);

    // An operation the QP was not created for is refused before anything is posted, and the
    // request (with its buffer) comes back.
    let mr = pd.reg_mr(64, AccessFlags::LOCAL_WRITE).unwrap();
    let e = a
        .wr_post(vec![SendRequest::fetch_and_add(
            mr,
            0,
            target.remote(0..8).unwrap(),
            1,
        )
        .unwrap()])
        .unwrap_err();
    assert!(matches!(e.error, Error::InvalidWorkRequest { .. }), "{e:?}");
    assert!(
        e.error
            .to_string()
            .contains("not created for this operation"),
        "{}",
        e.error
    );
    assert_eq!(e.unposted.len(), 1);
    assert_eq!(a.in_flight(), (0, 0));
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn inline_sends_gather_io_slices() {
    if crate::support::lacks(testkit::test_name!(), verbs::Capability::ManualConnect) {
        return;
    }
    let cap = QpCap {
        max_inline_data: 64,
        ..QpCap::default()
    };
    let (_ctx, pd, cq_a, cq_b, a, b) = ex_pair(SendOps::SEND | SendOps::SEND_WITH_IMM, cap);
    let max = a.cap().max_inline_data as usize;
    assert!(max >= 64, "granted max_inline_data {max}");

    for (k, through_wr) in [false, true].into_iter().enumerate() {
        let rx = pd.reg_mr(4096, AccessFlags::LOCAL_WRITE).unwrap();
        b.post_recv(RecvRequest::new(rx, ..).unwrap()).unwrap();
        // Plain stack and heap memory, never registered, reused right after the call.
        let mut head = *b"head:";
        let mut body = pattern(40, k as u8);
        let tail = vec![0xaa; 3];
        let slices = [
            IoSlice::new(&head),
            IoSlice::new(&body),
            IoSlice::new(&[]),
            IoSlice::new(&tail),
        ];
        let op = WrOp::SendWithImm(0x77 + k as u32);
        let id = if through_wr {
            a.wr_post_inline(op, &slices, SendFlags::SIGNALED, None)
                .unwrap()
        } else {
            a.post_send_inline(op, &slices, SendFlags::SIGNALED, None)
                .unwrap()
        };
        let mut expected = head.to_vec();
        expected.extend_from_slice(&body);
        expected.extend_from_slice(&tail);
        head.fill(0);
        body.fill(0);

        let mut sc = None;
        crate::support::drain(&cq_a, 1, |wc| {
            sc = Some((wc.to_completion(), a.reclaim(wc)))
        });
        let (sc, sb) = sc.unwrap();
        assert_eq!((sc.wr_id, sc.status), (id, Ok(())));
        assert_eq!(sb.len(), 1, "the inline request is accounted for");
        let mut rc = None;
        crate::support::drain(&cq_b, 1, |wc| {
            rc = Some((wc.to_completion(), b.reclaim(wc)))
        });
        let (rc, mut rb) = rc.unwrap();
        assert_eq!(rc.imm, Some(0x77 + k as u32));
        assert_eq!(rc.byte_len as usize, expected.len());
        let rx: MemoryRegion = rb[0].take().unwrap();
        assert_eq!(&rx.as_slice()[..expected.len()], &expected[..]);
    }

    // Over the limit: a typed error that names both sizes, nothing posted.
    let big = vec![1u8; max + 1];
    for through_wr in [false, true] {
        let slices = [IoSlice::new(&big[..10]), IoSlice::new(&big[10..])];
        let e = if through_wr {
            a.wr_post_inline(WrOp::Send, &slices, SendFlags::SIGNALED, None)
        } else {
            a.post_send_inline(WrOp::Send, &slices, SendFlags::SIGNALED, None)
        }
        .unwrap_err();
        assert!(
            matches!(e, Error::InlineTooLong { len, max: m, .. } if len == max + 1 && m as usize == max),
            "{e:?}"
        );
        assert!(e.to_string().contains("max_inline_data"), "{e}");
    }
    assert_eq!(a.in_flight(), (0, 0));
}

/// The lean inline SEND of a connected QP gathers its slices as the general one does, holds
/// nothing (its completion finishes the tracked requests before it), and refuses what it
/// cannot post with typed errors, posting nothing.
#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn lean_inline_sends_gather_slices_and_refuse_what_they_cannot_post() {
    if crate::support::lacks(testkit::test_name!(), verbs::Capability::ManualConnect) {
        return;
    }
    let cap = QpCap {
        max_inline_data: 64,
        ..QpCap::default()
    };
    let (ctx, pd, cq_a, cq_b, a, b) = ex_pair(SendOps::SEND, cap);
    let max = a.cap().max_inline_data as usize;
    let max_sge = a.cap().max_send_sge as usize;
    assert!(max_sge >= 2, "granted max_send_sge {max_sge}");
    for (k, parts) in [1usize, 2, max_sge.min(4)].into_iter().enumerate() {
        let rx = pd.reg_mr(4096, AccessFlags::LOCAL_WRITE).unwrap();
        b.post_recv(RecvRequest::new(rx, ..).unwrap()).unwrap();
        let mut bytes = pattern(60, k as u8);
        let mut slices: Vec<IoSlice<'_>> = bytes.chunks(60 / parts).map(IoSlice::new).collect();
        slices.insert(1, IoSlice::new(&[]));
        let id = a.post_inline_send(&slices, SendFlags::SIGNALED).unwrap();
        let expected = bytes.clone();
        bytes.fill(0);

        let mut sc = None;
        crate::support::drain(&cq_a, 1, |wc| {
            sc = Some((wc.to_completion(), a.reclaim(wc)))
        });
        let (sc, sb) = sc.unwrap();
        assert_eq!((sc.wr_id, sc.status), (id, Ok(())), "{parts} slices");
        // A lean send hands back nothing; a longer list of slices goes the general, tracked
        // way and hands back an entry without buffers.
        assert!(sb.iter().all(|r| r.is_empty()), "{parts} slices: {sb:?}");
        assert_eq!(a.in_flight().0, 0);
        let mut rc = None;
        crate::support::drain(&cq_b, 1, |wc| {
            rc = Some((wc.to_completion(), b.reclaim(wc)))
        });
        let (rc, mut rb) = rc.unwrap();
        assert_eq!((rc.opcode, rc.imm), (Some(WcOpcode::Recv), None));
        assert_eq!(rc.byte_len as usize, expected.len());
        let rx: MemoryRegion = rb[0].take().unwrap();
        assert_eq!(
            &rx.as_slice()[..expected.len()],
            &expected[..],
            "{parts} slices"
        );
    }

    // With immediate data: the receiver's completion carries it, the payload is the slices.
    let rx = pd.reg_mr(4096, AccessFlags::LOCAL_WRITE).unwrap();
    b.post_recv(RecvRequest::new(rx, ..).unwrap()).unwrap();
    let id = a
        .post_inline_send_with_imm(
            &[IoSlice::new(b"im"), IoSlice::new(b"m!")],
            0xdead_beef,
            SendFlags::SIGNALED,
        )
        .unwrap();
    let mut sc = None;
    crate::support::drain(&cq_a, 1, |wc| {
        sc = Some((wc.to_completion(), a.reclaim(wc)))
    });
    let (sc, sb) = sc.unwrap();
    assert_eq!((sc.wr_id, sc.status), (id, Ok(())));
    assert!(sb.iter().all(|r| r.is_empty()), "a lean send holds nothing");
    let mut rc = None;
    crate::support::drain(&cq_b, 1, |wc| {
        rc = Some((wc.to_completion(), b.reclaim(wc)))
    });
    let (rc, mut rb) = rc.unwrap();
    assert_eq!(
        (rc.opcode, rc.imm),
        (Some(WcOpcode::Recv), Some(0xdead_beef))
    );
    assert_eq!(rc.byte_len, 4);
    let rx: MemoryRegion = rb[0].take().unwrap();
    assert_eq!(&rx.as_slice()[..4], b"imm!");

    // An unsignaled tracked send, then a signaled lean one: the lean one's completion hands
    // back the tracked one's buffer, and nothing of its own.
    for _ in 0..2 {
        let rx = pd.reg_mr(4096, AccessFlags::LOCAL_WRITE).unwrap();
        b.post_recv(RecvRequest::new(rx, ..).unwrap()).unwrap();
    }
    let tracked = pd.reg_mr(64, AccessFlags::LOCAL_WRITE).unwrap();
    a.post_send(SendRequest::send(tracked, 0..8).unwrap().signaled(false))
        .unwrap();
    let id = a
        .post_inline_send(&[IoSlice::new(b"lean")], SendFlags::SIGNALED)
        .unwrap();
    assert_eq!(a.in_flight().0, 1, "the lean send is entered nowhere");
    let mut sc = None;
    crate::support::drain(&cq_a, 1, |wc| {
        sc = Some((wc.to_completion(), a.reclaim(wc)))
    });
    let (sc, mut sb) = sc.unwrap();
    assert_eq!((sc.wr_id, sc.status), (id, Ok(())));
    assert_eq!(sb.len(), 1, "the tracked send before it");
    let back: MemoryRegion = sb[0].take().unwrap();
    assert_eq!(back.len(), 64);
    assert_eq!(a.in_flight().0, 0);
    let mut lens = Vec::new();
    crate::support::drain(&cq_b, 2, |wc| {
        lens.push(wc.byte_len());
        b.reclaim(wc);
    });
    assert_eq!(lens, [8, 4]);

    // More slices than the QP gathers: a typed error naming the limit, nothing posted.
    let many: Vec<IoSlice<'_>> = (0..=max_sge).map(|_| IoSlice::new(b"ab")).collect();
    let e = a.post_inline_send(&many, SendFlags::SIGNALED).unwrap_err();
    assert!(matches!(e, Error::InvalidWorkRequest { .. }), "{e:?}");
    assert!(e.to_string().contains("max_send_sge"), "{e}");
    // Over the limit: the size error, as from the general path.
    let big = vec![1u8; max + 1];
    let e = a
        .post_inline_send(
            &[IoSlice::new(&big[..9]), IoSlice::new(&big[9..])],
            SendFlags::empty(),
        )
        .unwrap_err();
    assert!(
        matches!(e, Error::InlineTooLong { len, .. } if len == max + 1),
        "{e:?}"
    );
    // A UD QP needs a destination; a QP not yet able to send says which state it is in.
    let cq = ctx.create_cq(4, None).unwrap();
    for (qp_type, names) in [(QpType::Ud, "UdDest"), (QpType::Rc, "RTS")] {
        let qp = pd.create_qp(&QpInitAttr::new(qp_type, &cq, &cq)).unwrap();
        let e = qp
            .post_inline_send(&[IoSlice::new(b"x")], SendFlags::SIGNALED)
            .unwrap_err();
        assert!(matches!(e, Error::InvalidWorkRequest { .. }), "{e:?}");
        assert!(e.to_string().contains(names), "{qp_type:?}: {e}");
        assert_eq!(qp.in_flight(), (0, 0));
    }
    assert_eq!(a.in_flight(), (0, 0));
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn wr_api_sends_ud_datagrams_owned_and_borrowed() {
    if crate::support::lacks(testkit::test_name!(), verbs::Capability::UnreliableDatagram) {
        return;
    }
    const QKEY: u32 = 0x5151_0001;
    let ctx = open();
    let (sgid, my_gid) = crate::support::gid(&ctx);
    let pd = ctx.alloc_pd().unwrap();
    let cq_a = ctx.create_cq(16, None).unwrap();
    let cq_b = ctx.create_cq(16, None).unwrap();
    let a = pd
        .create_qp_ex(
            &QpInitAttr::new(QpType::Ud, &cq_a, &cq_a),
            SendOps::SEND | SendOps::SEND_WITH_IMM,
        )
        .unwrap();
    let b = pd
        .create_qp(&QpInitAttr::new(QpType::Ud, &cq_b, &cq_b))
        .unwrap();
    let any = verbs::QpEndpoint {
        qp_num: 0,
        psn: 0,
        lid: 0,
        gid: my_gid,
    };
    for qp in [&*a, &b] {
        qp.to_init_ud(crate::support::PORT, QKEY).unwrap();
        qp.to_rtr(&any, crate::support::PORT, Some(sgid), verbs::Mtu::Mtu1024)
            .unwrap();
        qp.to_rts(0).unwrap();
    }
    let ah = pd
        .create_ah(&verbs::AhAttr::roce(crate::support::PORT, my_gid, sgid))
        .unwrap();
    for _ in 0..2 {
        let rx = pd.reg_mr(40 + 256, AccessFlags::LOCAL_WRITE).unwrap();
        b.post_recv(RecvRequest::new(rx, ..).unwrap()).unwrap();
    }

    // Owned, through ibv_wr_send_imm + ibv_wr_set_ud_addr.
    let owned = pattern(200, 5);
    let mut mr = pd.reg_mr(256, AccessFlags::LOCAL_WRITE).unwrap();
    mr.as_mut_slice()[..200].copy_from_slice(&owned);
    let req = SendRequest::new(WrOp::SendWithImm(0xabc))
        .sge(mr, 0..200)
        .unwrap()
        .ud(&ah, b.qp_num(), QKEY);
    let id = a.wr_post(vec![req]).unwrap()[0];

    // Borrowed (unsafe): a region of ours, untouched until its completion below.
    let borrowed = pattern(120, 9);
    let mut mr2 = pd.reg_mr(256, AccessFlags::LOCAL_WRITE).unwrap();
    mr2.as_mut_slice()[..120].copy_from_slice(&borrowed);
    let sge = [mr2.local(0..120).unwrap()];
    let wr = verbs::SendWr {
        wr_id: 77,
        op: WrOp::Send,
        sges: &sge,
        flags: SendFlags::SIGNALED,
        ud: Some(verbs::UdDest {
            ah: &ah,
            remote_qpn: b.qp_num(),
            remote_qkey: QKEY,
        }),
    };
    // SAFETY: `mr2` and `ah` outlive the completion drained below and are not written
    // meanwhile.
    unsafe { a.wr_post_unchecked(&[wr]) }.unwrap();
    // The reserved bit is refused.
    let bad = verbs::SendWr {
        wr_id: verbs::OWNED_WR_ID | 1,
        ..wr
    };
    // SAFETY: refused before anything is posted.
    let e = unsafe { a.wr_post_unchecked(&[bad]) }.unwrap_err();
    assert!(matches!(e, Error::InvalidWorkRequest { .. }), "{e:?}");

    let mut ids = Vec::new();
    crate::support::drain(&cq_a, 2, |wc| {
        assert_eq!(wc.status(), Ok(()));
        ids.push(wc.wr_id());
        a.reclaim(wc);
    });
    assert_eq!(ids, [id, 77]);
    assert_eq!(a.in_flight(), (0, 0));
    drop(mr2);

    let mut got = Vec::new();
    crate::support::drain(&cq_b, 2, |wc| {
        let c = wc.to_completion();
        let mut back = b.reclaim(wc);
        let rx: MemoryRegion = back[0].take().unwrap();
        got.push((c, rx.as_slice()[40..40 + c.byte_len as usize - 40].to_vec()));
    });
    assert_eq!(got[0].0.imm, Some(0xabc));
    assert_eq!(got[0].0.src_qp, a.qp_num());
    assert_eq!(got[0].1, owned);
    assert_eq!(got[1].0.imm, None);
    assert_eq!(got[1].1, borrowed);
}
