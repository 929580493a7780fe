//! Every RC opcode over a loopback pair, data verified byte for byte.
use std::sync::Arc;

use verbs::{
    AccessFlags, FixedBuffers, LocalSlice, MemoryRegion, QpCap, QpType, RecvRequest, RecvWr,
    RemoteSlice, SendFlags, SendRequest, SendWr, WcFlags, WcOpcode, WrOp,
};

use crate::support::{one, Pair, ALL_REMOTE};

const IGNORE: &str = "needs an RDMA device: cargo xtask test";

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

fn filled(p: &Pair, data: &[u8]) -> MemoryRegion {
    let mut mr =
        p.pd.reg_mr(data.len().max(4096), AccessFlags::LOCAL_WRITE)
            .unwrap();
    mr.as_mut_slice()[..data.len()].copy_from_slice(data);
    mr
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn send_and_send_with_imm() {
    if crate::support::lacks(testkit::test_name!(), verbs::Capability::ManualConnect) {
        return;
    }
    let _ = IGNORE;
    let p = Pair::rc();
    for imm in [None, Some(0xdead_beefu32)] {
        let data = pattern(3000, imm.is_some() as u8);
        let rx = p.pd.reg_mr(4096, AccessFlags::LOCAL_WRITE).unwrap();
        let rid = p.b.post_recv(RecvRequest::new(rx, ..).unwrap()).unwrap();
        let op = imm.map_or(WrOp::Send, WrOp::SendWithImm);
        let req = SendRequest::new(op)
            .sge(filled(&p, &data), 0..data.len())
            .unwrap();
        let sid = p.a.post_send(req).unwrap();

        let (sc, mut sbufs) = one(&p.cq_a, &p.a);
        assert_eq!(
            (sc.wr_id, sc.status, sc.opcode),
            (sid, Ok(()), Some(WcOpcode::Send))
        );
        assert_eq!(sbufs.len(), 1);
        assert!(sbufs[0].take::<MemoryRegion>().is_ok());

        let (rc, mut rbufs) = one(&p.cq_b, &p.b);
        assert_eq!(
            (rc.wr_id, rc.status, rc.opcode),
            (rid, Ok(()), Some(WcOpcode::Recv))
        );
        assert_eq!(rc.byte_len as usize, data.len());
        assert_eq!(rc.imm, imm);
        assert_eq!(rc.flags.contains(WcFlags::WITH_IMM), imm.is_some());
        assert_eq!(rc.qp_num, p.b.qp_num());
        let rx: MemoryRegion = rbufs[0].take().unwrap();
        assert_eq!(&rx.as_slice()[..data.len()], &data[..]);
        assert_eq!(p.a.in_flight(), (0, 0));
        assert_eq!(p.b.in_flight(), (0, 0));
    }
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn rdma_write_and_write_with_imm() {
    if crate::support::lacks(testkit::test_name!(), verbs::Capability::ManualConnect) {
        return;
    }
    let p = Pair::rc();
    let target =
        p.pd.reg_mr(8192, AccessFlags::LOCAL_WRITE | ALL_REMOTE)
            .unwrap();
    let data = pattern(5000, 7);
    let sid =
        p.a.post_send(
            SendRequest::rdma_write(
                filled(&p, &data),
                0..5000,
                target.remote(100..5100).unwrap(),
            )
            .unwrap(),
        )
        .unwrap();
    let (c, back) = one(&p.cq_a, &p.a);
    assert_eq!(
        (c.wr_id, c.status, c.opcode),
        (sid, Ok(()), Some(WcOpcode::RdmaWrite))
    );
    assert_eq!(back.len(), 1);
    let mut out = vec![0; 5200];
    target.read(0, &mut out).unwrap();
    assert!(out[..100].iter().all(|&b| b == 0));
    assert_eq!(&out[100..5100], &data[..]);
    assert!(out[5100..].iter().all(|&b| b == 0));

    // With immediate: consumes a receive (no memory needed) and carries the value.
    let rid = p.b.post_recv(RecvRequest::empty()).unwrap();
    let data2 = pattern(64, 99);
    let req = SendRequest::new(WrOp::RdmaWriteWithImm(
        target.remote(0..64).unwrap(),
        0x0102_0304,
    ))
    .sge(filled(&p, &data2), 0..64)
    .unwrap();
    p.a.post_send(req).unwrap();
    let (c, _) = one(&p.cq_a, &p.a);
    assert_eq!(c.status, Ok(()));
    let (r, _) = one(&p.cq_b, &p.b);
    assert_eq!(
        (r.wr_id, r.opcode, r.imm),
        (rid, Some(WcOpcode::RecvRdmaWithImm), Some(0x0102_0304))
    );
    assert_eq!(r.byte_len, 64);
    let mut out = [0; 64];
    target.read(0, &mut out).unwrap();
    assert_eq!(&out[..], &data2[..]);
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn rdma_read() {
    if crate::support::lacks(testkit::test_name!(), verbs::Capability::ManualConnect) {
        return;
    }
    let p = Pair::rc();
    let data = pattern(4096, 3);
    let mut source =
        p.pd.reg_mr(4096, AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ)
            .unwrap();
    source.as_mut_slice().copy_from_slice(&data);
    let dst = p.pd.reg_mr(8192, AccessFlags::LOCAL_WRITE).unwrap();
    let id =
        p.a.post_send(SendRequest::rdma_read(dst, 1000..5096, source.remote(..).unwrap()).unwrap())
            .unwrap();
    let (c, mut back) = one(&p.cq_a, &p.a);
    assert_eq!(
        (c.wr_id, c.status, c.opcode),
        (id, Ok(()), Some(WcOpcode::RdmaRead))
    );
    assert_eq!(c.byte_len, 4096);
    let dst: MemoryRegion = back[0].take().unwrap();
    assert_eq!(&dst.as_slice()[1000..5096], &data[..]);
    assert!(dst.as_slice()[..1000].iter().all(|&b| b == 0));
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn atomics_return_old_values() {
    if crate::support::lacks(testkit::test_name!(), verbs::Capability::ManualConnect) {
        return;
    }
    let p = Pair::rc();
    let mut target =
        p.pd.reg_mr(4096, AccessFlags::LOCAL_WRITE | ALL_REMOTE)
            .unwrap();
    target.write(8, &100u64.to_ne_bytes()).unwrap();
    let remote = target.remote(8..16).unwrap();

    let res = p.pd.reg_mr(4096, AccessFlags::LOCAL_WRITE).unwrap();
    // compare 100 -> swap 555: succeeds, old value 100.
    p.a.post_send(SendRequest::compare_and_swap(res, 0, remote, 100, 555).unwrap())
        .unwrap();
    let (c, mut back) = one(&p.cq_a, &p.a);
    assert_eq!((c.status, c.opcode), (Ok(()), Some(WcOpcode::CompSwap)));
    let res: MemoryRegion = back[0].take().unwrap();
    assert_eq!(
        u64::from_ne_bytes(res.as_slice()[..8].try_into().unwrap()),
        100
    );

    // compare 100 again -> fails, returns current 555, leaves it.
    p.a.post_send(SendRequest::compare_and_swap(res, 16, remote, 100, 1).unwrap())
        .unwrap();
    let (_, mut back) = one(&p.cq_a, &p.a);
    let res: MemoryRegion = back[0].take().unwrap();
    assert_eq!(
        u64::from_ne_bytes(res.as_slice()[16..24].try_into().unwrap()),
        555
    );

    // fetch-and-add 45: returns 555, leaves 600.
    p.a.post_send(SendRequest::fetch_and_add(res, 24, remote, 45).unwrap())
        .unwrap();
    let (c, mut back) = one(&p.cq_a, &p.a);
    assert_eq!(c.opcode, Some(WcOpcode::FetchAdd));
    let res: MemoryRegion = back[0].take().unwrap();
    assert_eq!(
        u64::from_ne_bytes(res.as_slice()[24..32].try_into().unwrap()),
        555
    );
    let mut now = [0; 8];
    target.read(8, &mut now).unwrap();
    assert_eq!(u64::from_ne_bytes(now), 600);
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn inline_multi_sge_and_unsignaled_batch() {
    if crate::support::lacks(testkit::test_name!(), verbs::Capability::ManualConnect) {
        return;
    }
    let cap = QpCap {
        max_send_wr: 32,
        max_recv_wr: 32,
        max_send_sge: 3,
        max_recv_sge: 2,
        max_inline_data: 64,
    };
    let p = Pair::new(QpType::Rc, cap);
    assert!(p.a.cap().max_inline_data >= 64 && p.a.cap().max_send_sge >= 3);

    // Inline: no registered memory at all.
    let rx = p.pd.reg_mr(4096, AccessFlags::LOCAL_WRITE).unwrap();
    p.b.post_recv(RecvRequest::new(rx, ..).unwrap()).unwrap();
    p.a.post_send(SendRequest::inline(WrOp::Send, b"inline bytes").unwrap())
        .unwrap();
    let (c, back) = one(&p.cq_a, &p.a);
    assert_eq!((c.status, back[0].len()), (Ok(()), 0));
    let (r, mut back) = one(&p.cq_b, &p.b);
    let rx: MemoryRegion = back[0].take().unwrap();
    assert_eq!(&rx.as_slice()[..r.byte_len as usize], b"inline bytes");
    // Too long for the inline limit: refused before posting.
    let big = vec![0u8; p.a.cap().max_inline_data as usize + 1];
    let e =
        p.a.post_send(SendRequest::inline(WrOp::Send, &big).unwrap())
            .unwrap_err();
    assert!(
        matches!(e.error, verbs::Error::InvalidWorkRequest { .. }),
        "{e:?}"
    );

    // Gather three buffers, scatter into two.
    let parts = [pattern(100, 1), pattern(200, 2), pattern(300, 3)];
    let r1 = p.pd.reg_mr(4096, AccessFlags::LOCAL_WRITE).unwrap();
    let r2 = p.pd.reg_mr(4096, AccessFlags::LOCAL_WRITE).unwrap();
    p.b.post_recv(
        RecvRequest::new(r1, 0..250)
            .unwrap()
            .sge(r2, 0..4096)
            .unwrap(),
    )
    .unwrap();
    let mut req = SendRequest::new(WrOp::Send);
    for part in &parts {
        req = req.sge(filled(&p, part), 0..part.len()).unwrap();
    }
    p.a.post_send(req).unwrap();
    let (_, back) = one(&p.cq_a, &p.a);
    assert_eq!(back[0].len(), 3);
    let (r, mut back) = one(&p.cq_b, &p.b);
    assert_eq!(r.byte_len, 600);
    let r1: MemoryRegion = back[0].take().unwrap();
    let r2: MemoryRegion = back[0].take().unwrap();
    let all: Vec<u8> = parts.concat();
    assert_eq!(&r1.as_slice()[..250], &all[..250]);
    assert_eq!(&r2.as_slice()[..350], &all[250..]);

    // Ten sends in one chain, only the last signaled: one completion returns all ten.
    let rxs: Vec<_> = (0..10)
        .map(|_| {
            RecvRequest::new(p.pd.reg_mr(4096, AccessFlags::LOCAL_WRITE).unwrap(), ..).unwrap()
        })
        .collect();
    p.b.post_recv_batch(rxs).unwrap();
    let reqs: Vec<_> = (0..10u8)
        .map(|i| {
            SendRequest::send(filled(&p, &[i; 10]), 0..10)
                .unwrap()
                .signaled(i == 9)
                .tag(100 + u64::from(i))
        })
        .collect();
    let ids = p.a.post_send_batch(reqs).unwrap();
    let (c, back) = one(&p.cq_a, &p.a);
    assert_eq!(c.wr_id, ids[9]);
    assert_eq!(back.iter().map(|r| r.wr_id).collect::<Vec<_>>(), ids);
    assert_eq!(
        back.iter().map(|r| r.tag).collect::<Vec<_>>(),
        (100..110).collect::<Vec<u64>>()
    );
    crate::support::drain(&p.cq_b, 10, |wc| {
        let mut back = p.b.reclaim(wc);
        let mr: MemoryRegion = back[0].take().unwrap();
        assert_eq!(mr.as_slice()[..10], [mr.as_slice()[0]; 10]);
    });
    crate::support::assert_quiet(&p.cq_a);
    assert_eq!(p.a.in_flight(), (0, 0));
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn borrowed_posting_with_raw_registration() {
    if crate::support::lacks(testkit::test_name!(), verbs::Capability::ManualConnect) {
        return;
    }
    let p = Pair::rc();
    let mut src = vec![0u8; 4096].into_boxed_slice();
    src[..6].copy_from_slice(b"borrow");
    let mut dst = vec![0u8; 4096].into_boxed_slice();
    // SAFETY: both boxes outlive the registrations and the requests, which complete below
    // before the boxes are touched again.
    let (smr, dmr) = unsafe {
        (
            p.pd.reg_mr_raw(src.as_mut_ptr(), src.len(), AccessFlags::LOCAL_WRITE)
                .unwrap(),
            p.pd.reg_mr_raw(dst.as_mut_ptr(), dst.len(), AccessFlags::LOCAL_WRITE)
                .unwrap(),
        )
    };
    let rsge: [LocalSlice; 1] = [dmr.local(..).unwrap()];
    let ssge: [LocalSlice; 1] = [smr.local(0..6).unwrap()];
    // SAFETY: as above.
    unsafe {
        p.b.post_recv_unchecked(&[RecvWr {
            wr_id: 7,
            sges: &rsge,
        }])
        .unwrap();
        p.a.post_send_unchecked(&[SendWr {
            wr_id: 8,
            op: WrOp::Send,
            sges: &ssge,
            flags: SendFlags::SIGNALED,
            ud: None,
        }])
        .unwrap();
    }
    let (c, back) = one(&p.cq_a, &p.a);
    assert_eq!((c.wr_id, c.status, back.len()), (8, Ok(()), 0));
    let (r, _) = one(&p.cq_b, &p.b);
    assert_eq!((r.wr_id, r.byte_len), (7, 6));
    drop((smr, dmr));
    assert_eq!(&dst[..6], b"borrow");
    // Ids with the reserved bit are refused.
    // SAFETY: nothing is posted (refused before the call).
    let e = unsafe {
        p.b.post_recv_unchecked(&[RecvWr {
            wr_id: verbs::OWNED_WR_ID,
            sges: &[],
        }])
    };
    assert!(matches!(e, Err(verbs::Error::InvalidWorkRequest { .. })));
}

/// What the fixed-buffer tests work on: a target on the peer's side, and fixed buffers
/// keeping a source that holds `data` (the NIC reads it; the program could keep a shared
/// handle) and a sink (the NIC writes it), each described for `data.len()` bytes.
struct Fixed {
    target: MemoryRegion,
    remote: RemoteSlice,
    fixed: FixedBuffers,
    from_src: [LocalSlice; 1],
    into_sink: [LocalSlice; 1],
}

impl Fixed {
    fn new(p: &Pair, data: &[u8]) -> Fixed {
        let target =
            p.pd.reg_mr(4096, AccessFlags::LOCAL_WRITE | ALL_REMOTE)
                .unwrap();
        let remote = target.remote(..).unwrap();
        let src = Arc::new(filled(p, data));
        let from_src = [src.local(0..data.len()).unwrap()];
        let mut fixed = FixedBuffers::new();
        fixed.add_source(src);
        let sink = fixed
            .add_sink(p.pd.reg_mr(4096, AccessFlags::LOCAL_WRITE).unwrap(), ..)
            .unwrap();
        Fixed {
            target,
            remote,
            from_src,
            into_sink: [sink.slice(0..data.len()).unwrap()],
            fixed,
        }
    }
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn fixed_buffers_post_borrowed_requests_safely_and_refuse_memory_they_do_not_keep() {
    if crate::support::lacks(testkit::test_name!(), verbs::Capability::ManualConnect) {
        return;
    }
    let p = Pair::rc();
    let data = pattern(3000, 11);
    let Fixed {
        target,
        remote,
        fixed,
        from_src,
        into_sink,
    } = Fixed::new(&p, &data);
    let write = |sges: &[LocalSlice], wr_id| {
        fixed
            .post_send(
                &p.a,
                &[SendWr {
                    wr_id,
                    op: WrOp::RdmaWrite(remote),
                    sges,
                    flags: SendFlags::SIGNALED,
                    ud: None,
                }],
            )
            .unwrap();
        let (c, back) = one(&p.cq_a, &p.a);
        assert_eq!((c.wr_id, c.status, back.len()), (wr_id, Ok(()), 0));
    };
    // WRITE from the source: the target holds the data.
    write(&from_src, 1);
    let mut got = vec![0u8; 3000];
    target.read(0, &mut got).unwrap();
    assert_eq!(got, data);
    // READ it back into the sink, clear the target, WRITE from the sink: the READ landed.
    fixed
        .post_send(
            &p.a,
            &[SendWr {
                wr_id: 2,
                op: WrOp::RdmaRead(remote.slice(0..3000).unwrap()),
                sges: &into_sink,
                flags: SendFlags::SIGNALED,
                ud: None,
            }],
        )
        .unwrap();
    assert_eq!(one(&p.cq_a, &p.a).0.status, Ok(()));
    let mut target = target;
    target.write(0, &[0; 4096]).unwrap();
    write(&into_sink, 3);
    target.read(0, &mut got).unwrap();
    assert_eq!(got, data);
    // A READ into the source, a receive into it, and memory the buffers do not keep are
    // refused before anything is posted.
    let read_into_src = SendWr {
        wr_id: 4,
        op: WrOp::RdmaRead(remote),
        sges: &from_src,
        flags: SendFlags::SIGNALED,
        ud: None,
    };
    let e = fixed.post_send(&p.a, &[read_into_src]).unwrap_err();
    assert!(e.to_string().contains("no sink"), "{e}");
    let e = fixed
        .post_recv(
            &p.b,
            &[RecvWr {
                wr_id: 5,
                sges: &from_src,
            }],
        )
        .unwrap_err();
    assert!(e.to_string().contains("no sink"), "{e}");
    let other = filled(&p, &data);
    let e = fixed
        .post_send(
            &p.a,
            &[SendWr {
                wr_id: 6,
                op: WrOp::Send,
                sges: &[other.local(..).unwrap()],
                flags: SendFlags::SIGNALED,
                ud: None,
            }],
        )
        .unwrap_err();
    assert!(e.to_string().contains("source or sink"), "{e}");
    // One byte past the sink is outside it too.
    let past = [LocalSlice {
        len: 4097,
        ..into_sink[0]
    }];
    assert!(fixed
        .post_recv(
            &p.b,
            &[RecvWr {
                wr_id: 7,
                sges: &past
            }]
        )
        .is_err());
    crate::support::assert_quiet(&p.cq_a);
    crate::support::assert_quiet(&p.cq_b);
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn uc_send_and_rdma_write_but_no_read() {
    if crate::support::lacks(
        testkit::test_name!(),
        verbs::Capability::UnreliableConnected,
    ) {
        return;
    }
    let p = Pair::new(QpType::Uc, QpCap::default());
    let target =
        p.pd.reg_mr(4096, AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE)
            .unwrap();
    let data = pattern(2000, 5);
    p.a.post_send(
        SendRequest::rdma_write(filled(&p, &data), 0..2000, target.remote(..).unwrap()).unwrap(),
    )
    .unwrap();
    let (c, _) = one(&p.cq_a, &p.a);
    assert_eq!((c.status, c.opcode), (Ok(()), Some(WcOpcode::RdmaWrite)));
    // UC has no acks: the send completion does not prove arrival, so poll the target.
    let deadline = std::time::Instant::now() + crate::support::TIMEOUT;
    let mut out = vec![0; 2000];
    loop {
        target.read(0, &mut out).unwrap();
        if out == data {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "UC write never landed"
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }

    let rx = p.pd.reg_mr(4096, AccessFlags::LOCAL_WRITE).unwrap();
    p.b.post_recv(RecvRequest::new(rx, ..).unwrap()).unwrap();
    p.a.post_send(
        SendRequest::new(WrOp::SendWithImm(77))
            .sge(filled(&p, b"uc!"), 0..3)
            .unwrap(),
    )
    .unwrap();
    one(&p.cq_a, &p.a);
    let (r, mut back) = one(&p.cq_b, &p.b);
    assert_eq!((r.byte_len, r.imm), (3, Some(77)));
    let rx: MemoryRegion = back[0].take().unwrap();
    assert_eq!(&rx.as_slice()[..3], b"uc!");

    // RDMA READ does not exist on UC: refused before posting, buffer handed back.
    let dst = p.pd.reg_mr(64, AccessFlags::LOCAL_WRITE).unwrap();
    let e =
        p.a.post_send(SendRequest::rdma_read(dst, 0..8, target.remote(0..8).unwrap()).unwrap())
            .unwrap_err();
    assert!(matches!(e.error, verbs::Error::InvalidWorkRequest { .. }));
    assert_eq!(e.unposted.into_buffers().len(), 1);
}

/// A QP created outside this crate (as librdmacm does) and wrapped gets the same posting.
#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn wrapped_raw_qp_and_context() {
    if crate::support::lacks(testkit::test_name!(), verbs::Capability::ManualConnect) {
        return;
    }
    use std::ptr::NonNull;
    use verbs::{sys, Qp, QpInitAttr};

    let p = Pair::rc();
    let ctx = p.pd.context();
    // SAFETY: the context stays open (held by `p`) for as long as the borrowed handle lives.
    let borrowed =
        unsafe { verbs::Context::from_raw(NonNull::new(ctx.as_raw()).unwrap(), false) }.unwrap();
    assert_eq!(borrowed.name(), ctx.name());
    drop(borrowed); // does not close the device

    let init = QpInitAttr::new(QpType::Rc, &p.cq_a, &p.cq_a);
    let mut raw_init = init.to_raw();
    // SAFETY: live PD and CQs; complete attribute struct.
    let raw = unsafe { sys::ibv_create_qp(p.pd.as_raw(), &mut raw_init) };
    let raw = NonNull::new(raw).expect("ibv_create_qp");
    let destroyed = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = destroyed.clone();
    let destroy: verbs::QpDestroy = Box::new(move |q: NonNull<sys::ibv_qp>| {
        // SAFETY: called once, by the last handle.
        let r = unsafe { sys::ibv_destroy_qp(q.as_ptr()) };
        flag.store(true, std::sync::atomic::Ordering::SeqCst);
        sys::errno::check_ret(r)
    });
    // SAFETY: created just above with `init`'s objects in `p.pd`; only the handle destroys it.
    let qp = unsafe { Qp::from_raw(raw, &p.pd, &init, init.get_cap(), 1, Some(destroy)) };
    let peer =
        p.pd.create_qp(&QpInitAttr::new(QpType::Rc, &p.cq_b, &p.cq_b))
            .unwrap();
    crate::support::connect(&ctx, &qp, &peer);
    let rx = p.pd.reg_mr(4096, AccessFlags::LOCAL_WRITE).unwrap();
    peer.post_recv(RecvRequest::new(rx, ..).unwrap()).unwrap();
    qp.post_send(SendRequest::send(filled(&p, b"wrapped"), 0..7).unwrap())
        .unwrap();
    let (c, _) = one(&p.cq_a, &qp);
    assert_eq!(c.status, Ok(()));
    let (r, mut back) = one(&p.cq_b, &peer);
    assert_eq!(r.byte_len, 7);
    let rx: MemoryRegion = back[0].take().unwrap();
    assert_eq!(&rx.as_slice()[..7], b"wrapped");
    drop(qp);
    assert!(destroyed.load(std::sync::atomic::Ordering::SeqCst));
    // The device is still open and usable.
    ctx.query_device().unwrap();
}

/// A region that records when it is dropped.
pub(crate) struct DropFlag {
    pub(crate) mr: MemoryRegion,
    pub(crate) dropped: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl Drop for DropFlag {
    fn drop(&mut self) {
        self.dropped
            .store(true, std::sync::atomic::Ordering::SeqCst);
    }
}

// SAFETY: delegates to the owned region it holds, which keeps memory and registration alive.
unsafe impl verbs::RegisteredBuf for DropFlag {
    fn local(&self) -> verbs::LocalSlice {
        self.mr.local(..).unwrap()
    }
}
// SAFETY: as above; the region is only reachable through this value.
unsafe impl verbs::RegisteredBufMut for DropFlag {}

/// A custom destroy that fails leaves the QP alive, so its in-flight receive buffer must be
/// leaked, not freed under the device.
#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn a_failed_custom_destroy_leaks_in_flight_buffers() {
    if crate::support::lacks(testkit::test_name!(), verbs::Capability::ManualConnect) {
        return;
    }
    use std::ptr::NonNull;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    use verbs::{sys, Qp, QpInitAttr};

    let p = Pair::rc();
    let init = QpInitAttr::new(QpType::Rc, &p.cq_a, &p.cq_a);
    let mut raw_init = init.to_raw();
    // SAFETY: live PD and CQs; complete attribute struct.
    let raw = unsafe { sys::ibv_create_qp(p.pd.as_raw(), &mut raw_init) };
    let raw = NonNull::new(raw).expect("ibv_create_qp");
    let raw_addr = raw.as_ptr() as usize;
    let destroy: verbs::QpDestroy =
        Box::new(|_| Err(std::io::Error::from_raw_os_error(libc::EBUSY)));
    // SAFETY: created just above with `init`'s objects in `p.pd`; only the handle destroys it
    // (here: fails to, and the test destroys it below, after the handle is gone).
    let qp = unsafe { Qp::from_raw(raw, &p.pd, &init, init.get_cap(), 1, Some(destroy)) };
    qp.to_init(1, AccessFlags::empty()).unwrap();
    let dropped = Arc::new(AtomicBool::new(false));
    let buf = DropFlag {
        mr: p.pd.reg_mr(4096, AccessFlags::LOCAL_WRITE).unwrap(),
        dropped: dropped.clone(),
    };
    qp.post_recv(RecvRequest::new(buf, ..).unwrap()).unwrap();
    drop(qp);
    assert!(
        !dropped.load(Ordering::SeqCst),
        "an in-flight buffer was freed although the QP could not be destroyed"
    );
    // SAFETY: the handle is gone and the QP still exists; destroy it for real now. The leaked
    // receive buffer stays leaked (its memory is never freed), which is what was asserted.
    let r = unsafe { sys::ibv_destroy_qp(raw_addr as *mut sys::ibv_qp) };
    assert_eq!(r, 0);
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn reclaim_into_one_list_for_every_buffer_kind() {
    if crate::support::lacks(testkit::test_name!(), verbs::Capability::ManualConnect) {
        return;
    }
    use std::sync::Arc;

    let cap = QpCap {
        max_send_wr: 8,
        max_recv_wr: 8,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    let p = Pair::new(QpType::Rc, cap);
    let data = pattern(500, 7);
    // Receives into an owned region (kept in place) and a boxed one (stored type-erased).
    let rx = || p.pd.reg_mr(4096, AccessFlags::LOCAL_WRITE).unwrap();
    p.b.post_recv(RecvRequest::new(rx(), ..).unwrap()).unwrap();
    p.b.post_recv(RecvRequest::new(rx(), ..).unwrap()).unwrap();
    p.b.post_recv(RecvRequest::new(Box::new(rx()), ..).unwrap())
        .unwrap();
    // Three sends of one shared region, only the last signaled.
    let shared = Arc::new(filled(&p, &data));
    let ids: Vec<u64> = (0..3)
        .map(|i| {
            let req = SendRequest::send(shared.clone(), 0..data.len())
                .unwrap()
                .signaled(i == 2)
                .tag(i);
            p.a.post_send(req).unwrap()
        })
        .collect();

    let mut back = Vec::with_capacity(4);
    crate::support::drain(&p.cq_a, 1, |wc| {
        assert_eq!(p.a.reclaim_into(wc, &mut back), 3);
        // Not this QP's completion: nothing, and the list is left alone.
        assert_eq!(p.b.reclaim_into(wc, &mut back), 0);
    });
    assert_eq!(back.iter().map(|r| r.wr_id).collect::<Vec<_>>(), ids);
    assert_eq!(back.iter().map(|r| r.tag).collect::<Vec<_>>(), [0, 1, 2]);
    for r in &mut back {
        assert!(r.take::<MemoryRegion>().is_err());
        assert!(r.take::<Arc<MemoryRegion>>().is_ok());
        assert!(r.is_empty());
    }
    assert_eq!(Arc::strong_count(&shared), 1);

    let mut got = Vec::new();
    crate::support::drain(&p.cq_b, 3, |wc| {
        back.clear();
        assert_eq!(p.b.reclaim_into(wc, &mut back), 1);
        assert_eq!(back[0].wr_id, wc.wr_id());
        let mr = match back[0].take::<MemoryRegion>() {
            Ok(mr) => mr,
            Err(_) => *back[0].take::<Box<MemoryRegion>>().unwrap(),
        };
        assert_eq!(&mr.as_slice()[..data.len()], &data[..]);
        got.push(mr);
    });
    assert_eq!(got.len(), 3);
    assert_eq!(p.a.in_flight(), (0, 0));
    assert_eq!(p.b.in_flight(), (0, 0));
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn a_prepared_request_posts_many_times_and_is_refused_where_post_send_refuses_it() {
    if crate::support::lacks(testkit::test_name!(), verbs::Capability::ManualConnect) {
        return;
    }
    let p = Pair::rc();
    let data = pattern(3000, 23);
    let Fixed {
        mut target,
        remote,
        fixed,
        from_src,
        into_sink,
    } = Fixed::new(&p, &data);
    let from_sink = into_sink;
    let wr = |op, sges, wr_id| SendWr {
        wr_id,
        op,
        sges,
        flags: SendFlags::SIGNALED,
        ud: None,
    };
    // One WRITE, posted three times under three ids: each completes with its id.
    let mut write = fixed
        .prepare_send(&p.a, &wr(WrOp::RdmaWrite(remote), &from_src, 1))
        .unwrap();
    for id in [1, 2, 3] {
        write.set_wr_id(id).unwrap();
        assert_eq!(write.wr_id(), id);
        target.write(0, &[0; 4096]).unwrap();
        write.post().unwrap();
        let (c, back) = one(&p.cq_a, &p.a);
        assert_eq!((c.wr_id, c.status, back.len()), (id, Ok(()), 0));
        let mut got = vec![0u8; 3000];
        target.read(0, &mut got).unwrap();
        assert_eq!(got, data, "post {id}");
    }
    // A prepared READ into the sink, then a prepared WRITE from it: the READ landed.
    let mut read = fixed
        .prepare_send(&p.a, &wr(WrOp::RdmaRead(remote), &into_sink, 4))
        .unwrap();
    read.post().unwrap();
    assert_eq!(one(&p.cq_a, &p.a).0.status, Ok(()));
    target.write(0, &[0; 4096]).unwrap();
    let mut back = fixed
        .prepare_send(&p.a, &wr(WrOp::RdmaWrite(remote), &from_sink, 5))
        .unwrap();
    back.post().unwrap();
    assert_eq!(one(&p.cq_a, &p.a).0.status, Ok(()));
    let mut got = vec![0u8; 3000];
    target.read(0, &mut got).unwrap();
    assert_eq!(got, data);
    // What post_send refuses, preparing refuses: a READ into the source, memory the buffers
    // do not keep, a reserved id; and a reserved id set later.
    let e = fixed
        .prepare_send(&p.a, &wr(WrOp::RdmaRead(remote), &from_src, 6))
        .unwrap_err();
    assert!(e.to_string().contains("no sink"), "{e}");
    let other = filled(&p, &data);
    let elsewhere = [other.local(..).unwrap()];
    let e = fixed
        .prepare_send(&p.a, &wr(WrOp::Send, &elsewhere, 7))
        .unwrap_err();
    assert!(e.to_string().contains("source or sink"), "{e}");
    let e = fixed
        .prepare_send(&p.a, &wr(WrOp::Send, &from_src, verbs::OWNED_WR_ID))
        .unwrap_err();
    assert!(matches!(e, verbs::Error::InvalidWorkRequest { .. }), "{e}");
    assert!(matches!(
        write.set_wr_id(verbs::OWNED_WR_ID | 8),
        Err(verbs::Error::InvalidWorkRequest { .. })
    ));
    assert_eq!(write.wr_id(), 3, "a refused id changes nothing");
    // A QP back in Reset takes no send: the prepared request says so and posts nothing.
    p.a.reset().unwrap();
    let e = write.post().unwrap_err();
    assert!(e.to_string().contains("Reset"), "{e}");
    crate::support::assert_quiet(&p.cq_a);
    crate::support::assert_quiet(&p.cq_b);
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn a_prepared_receive_posts_many_into_a_sink_and_is_refused_where_post_recv_refuses_it() {
    if crate::support::lacks(testkit::test_name!(), verbs::Capability::ManualConnect) {
        return;
    }
    let p = Pair::rc();
    let data = pattern(3000, 29);
    let Fixed {
        fixed,
        from_src,
        into_sink,
        ..
    } = Fixed::new(&p, &data);
    let recv = |sges, wr_id| RecvWr { wr_id, sges };
    // More receives than one chain holds: every SEND finds one and completes with its id.
    let mut prepared = fixed.prepare_recv(&p.b, &recv(&into_sink, 41)).unwrap();
    assert_eq!(prepared.wr_id(), 41);
    let n = verbs::PreparedRecv::CHAIN + 3;
    prepared.post(n).unwrap();
    let mut send = fixed
        .prepare_send(
            &p.a,
            &SendWr {
                wr_id: 42,
                op: WrOp::Send,
                sges: &from_src,
                flags: SendFlags::SIGNALED,
                ud: None,
            },
        )
        .unwrap();
    for i in 0..n {
        send.post().unwrap();
        assert_eq!(one(&p.cq_a, &p.a).0.status, Ok(()), "send {i}");
        let (c, back) = one(&p.cq_b, &p.b);
        assert_eq!(
            (c.wr_id, c.status, c.byte_len),
            (41, Ok(()), 3000),
            "receive {i}"
        );
        assert!(back.is_empty(), "a borrowed receive hands nothing back");
    }
    // What post_recv refuses, preparing refuses: a receive into a source (memory the program
    // reads), memory the buffers do not keep, a reserved id.
    let e = fixed.prepare_recv(&p.b, &recv(&from_src, 43)).unwrap_err();
    assert!(e.to_string().contains("no sink"), "{e}");
    let other = filled(&p, &data);
    let elsewhere = [other.local(..).unwrap()];
    let e = fixed.prepare_recv(&p.b, &recv(&elsewhere, 44)).unwrap_err();
    assert!(e.to_string().contains("no sink"), "{e}");
    let e = fixed
        .prepare_recv(&p.b, &recv(&into_sink, verbs::OWNED_WR_ID))
        .unwrap_err();
    assert!(matches!(e, verbs::Error::InvalidWorkRequest { .. }), "{e}");
    crate::support::assert_quiet(&p.cq_a);
    crate::support::assert_quiet(&p.cq_b);
}
