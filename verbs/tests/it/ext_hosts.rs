//! Extended CQs and the `ibv_wr_*` API of extended QPs between the two hosts: a QP on this
//! host's device posts SEND with immediate, RDMA WRITE and READ in one session and inline
//! sends from `IoSlice`s to a QP on the peer's device; both sides poll extended CQs in
//! batches, and every byte is verified where it lands. And the two devices in one process:
//! a completion of one device's QP never finishes requests of the other's.
use std::io::IoSlice;
use std::time::Duration;

use verbs::{
    AccessFlags, Context, CqExAttr, Gid, MemoryRegion, Mtu, Qp, QpCap, QpEndpoint, QpInitAttr,
    QpType, RecvRequest, SendFlags, SendOps, SendRequest, WcOpcode, WrOp,
};

use crate::ext::{drain_ex, pattern};
use crate::support::{ALL_REMOTE, PORT};

/// A device of the test environment, opened, with its RoCE v2 GID index and GID.
fn open_dev(dev: &testkit::TestDevice) -> (Context, u8, Gid) {
    let ctx = Context::open(&dev.name).unwrap_or_else(|e| panic!("cannot open {}: {e}", dev.name));
    let gid = ctx.query_gid(PORT, dev.gid_index).unwrap().gid;
    (ctx, dev.gid_index, gid)
}

/// Brings `qp` to RTS towards `peer`, sending from its own GID index `sgid`.
fn to_rts(qp: &Qp, sgid: u8, psn: u32, peer: &QpEndpoint) {
    qp.to_init(PORT, ALL_REMOTE).unwrap();
    qp.to_rtr(peer, PORT, Some(sgid), Mtu::Mtu1024).unwrap();
    qp.to_rts(psn).unwrap();
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn wr_api_and_extended_cqs_between_the_hosts() {
    if crate::support::lacks(testkit::test_name!(), verbs::Capability::ManualConnect) {
        return;
    }
    let (ctx_a, sgid_a, gid_a) = open_dev(&testkit::device());
    let (ctx_b, sgid_b, gid_b) = open_dev(&testkit::peer().device);
    let (pd_a, pd_b) = (ctx_a.alloc_pd().unwrap(), ctx_b.alloc_pd().unwrap());
    let mut cq_a = ctx_a.create_cq_ex(CqExAttr::new(64)).unwrap();
    let mut cq_b = ctx_b.create_cq_ex(CqExAttr::new(64)).unwrap();
    let ops = SendOps::SEND_WITH_IMM | SendOps::RDMA_WRITE | SendOps::RDMA_READ;
    let cap = QpCap {
        max_inline_data: 64,
        ..QpCap::default()
    };
    let a = pd_a
        .create_qp_ex(&QpInitAttr::new(QpType::Rc, &cq_a, &cq_a).cap(cap), ops)
        .unwrap();
    let b = pd_b
        .create_qp(&QpInitAttr::new(QpType::Rc, &cq_b, &cq_b).cap(cap))
        .unwrap();
    let end = |qp: &Qp, psn, gid| QpEndpoint {
        qp_num: qp.qp_num(),
        psn,
        lid: 0,
        gid,
    };
    let (ea, eb) = (end(&a, 0x100, gid_a), end(&b, 0x200, gid_b));
    to_rts(&a, sgid_a, ea.psn, &eb);
    to_rts(&b, sgid_b, eb.psn, &ea);

    // The peer's memory: receives, and a region this host writes and reads back.
    let rx: Vec<u64> = (0..2)
        .map(|_| {
            let mr = pd_b.reg_mr(4096, AccessFlags::LOCAL_WRITE).unwrap();
            b.post_recv(RecvRequest::new(mr, ..).unwrap()).unwrap()
        })
        .collect();
    let target = pd_b
        .reg_mr(8192, AccessFlags::LOCAL_WRITE | ALL_REMOTE)
        .unwrap();

    // One session: SEND with immediate, an unsignaled WRITE, then a READ of what it wrote.
    let msg = pattern(3000, 1);
    let written = pattern(5000, 2);
    let mut m1 = pd_a.reg_mr(4096, AccessFlags::LOCAL_WRITE).unwrap();
    m1.as_mut_slice()[..msg.len()].copy_from_slice(&msg);
    let mut m2 = pd_a.reg_mr(8192, AccessFlags::LOCAL_WRITE).unwrap();
    m2.as_mut_slice()[..written.len()].copy_from_slice(&written);
    let m3 = pd_a.reg_mr(8192, AccessFlags::LOCAL_WRITE).unwrap();
    let ids = a
        .wr_post(vec![
            SendRequest::new(WrOp::SendWithImm(0xa5a5_0001))
                .sge(m1, 0..msg.len())
                .unwrap(),
            SendRequest::rdma_write(m2, 0..5000, target.remote(100..5100).unwrap())
                .unwrap()
                .signaled(false),
            SendRequest::rdma_read(m3, 10..5010, target.remote(100..5100).unwrap()).unwrap(),
        ])
        .unwrap();
    // An inline send gathered from plain memory, reused right after the call.
    let mut head = *b"inline:";
    let mut body = pattern(40, 3);
    let inline_id = a
        .wr_post_inline(
            WrOp::SendWithImm(0xa5a5_0002),
            &[IoSlice::new(&head), IoSlice::new(&body)],
            SendFlags::SIGNALED,
            None,
        )
        .unwrap();
    let mut inline = head.to_vec();
    inline.extend_from_slice(&body);
    head.fill(0);
    body.fill(0);

    // This host: three completions (the WRITE's comes back with the READ's), in post order.
    let done = drain_ex(&mut cq_a, &a, 3);
    let mut back = Vec::new();
    for (c, r) in done {
        assert_eq!(c.status, Ok(()), "{c:?}");
        assert_eq!(c.qp_num, a.qp_num());
        back.extend(r);
    }
    let order: Vec<u64> = back.iter().map(|r| r.wr_id).collect();
    assert_eq!(order, [ids[0], ids[1], ids[2], inline_id]);
    let read: MemoryRegion = back[2].take().unwrap();
    assert_eq!(&read.as_slice()[10..5010], &written[..]);
    assert_eq!(a.in_flight(), (0, 0));

    // The peer: the WRITE landed, and both messages arrived with their immediates.
    let mut landed = vec![0u8; written.len()];
    target.read(100, &mut landed).unwrap();
    assert_eq!(landed, written);
    let got = drain_ex(&mut cq_b, &b, 2);
    for (((c, mut r), id), (data, imm)) in got
        .into_iter()
        .zip(&rx)
        .zip([(&msg, 0xa5a5_0001), (&inline, 0xa5a5_0002)])
    {
        assert_eq!(
            (c.wr_id, c.status, c.opcode, c.imm),
            (*id, Ok(()), Some(WcOpcode::Recv), Some(imm))
        );
        assert_eq!(c.byte_len as usize, data.len());
        let mr: MemoryRegion = r[0].take().unwrap();
        assert_eq!(&mr.as_slice()[..data.len()], &data[..]);
    }
    assert_eq!(b.in_flight(), (0, 0));
    assert!(cq_a.start_poll().unwrap().is_none());
    assert!(cq_b.start_poll().unwrap().is_none());
}

/// QP numbers are unique per device, not per process, and owned requests take their ids from
/// one process-wide count: a completion of another device's QP with the same number carries
/// an id newer than this QP's requests. Passed to this QP's `reclaim`, it must finish nothing
/// (it used to empty the send table, handing back the sink of a READ still in flight).
#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn a_completion_of_another_devices_qp_with_the_same_number_finishes_nothing() {
    if crate::support::lacks(testkit::test_name!(), verbs::Capability::ManualConnect) {
        return;
    }
    const TEST: &str =
        "ext_hosts::a_completion_of_another_devices_qp_with_the_same_number_finishes_nothing";
    let (dev_a, dev_b) = (testkit::device(), testkit::peer().device);
    if dev_a.name == dev_b.name {
        testkit::skip(
            TEST,
            "needs two RDMA devices in one host (the two-hosts guest has them)",
        );
        return;
    }
    let (ctx_a, sgid_a, gid_a) = open_dev(&dev_a);
    let (ctx_b, sgid_b, gid_b) = open_dev(&dev_b);
    let (pd_a, pd_b) = (ctx_a.alloc_pd().unwrap(), ctx_b.alloc_pd().unwrap());
    let (cq_a, cq_b) = (
        ctx_a.create_cq(16, None).unwrap(),
        ctx_b.create_cq(16, None).unwrap(),
    );
    let rc = |pd: &verbs::Pd, cq: &verbs::Cq| {
        pd.create_qp(&QpInitAttr::new(QpType::Rc, cq, cq)).unwrap()
    };
    // Each device numbers its QPs upwards: create on the one behind until the numbers meet.
    let (mut a1, mut b1) = (rc(&pd_a, &cq_a), rc(&pd_b, &cq_b));
    for _ in 0..200_000 {
        match a1.qp_num().cmp(&b1.qp_num()) {
            std::cmp::Ordering::Less => a1 = rc(&pd_a, &cq_a),
            std::cmp::Ordering::Greater => b1 = rc(&pd_b, &cq_b),
            std::cmp::Ordering::Equal => break,
        }
    }
    assert_eq!(
        a1.qp_num(),
        b1.qp_num(),
        "could not get two QPs of one number"
    );
    let (a2, b2) = (rc(&pd_a, &cq_a), rc(&pd_b, &cq_b));
    let end = |qp: &Qp, psn, gid| QpEndpoint {
        qp_num: qp.qp_num(),
        psn,
        lid: 0,
        gid,
    };
    to_rts(&a1, sgid_a, 0x10, &end(&a2, 0x20, gid_a));
    to_rts(&a2, sgid_a, 0x20, &end(&a1, 0x10, gid_a));
    to_rts(&b1, sgid_b, 0x30, &end(&b2, 0x40, gid_b));
    to_rts(&b2, sgid_b, 0x40, &end(&b1, 0x30, gid_b));

    // This device: a READ whose sink the device writes, its completion not polled yet.
    let mut source = pd_a
        .reg_mr(4096, ALL_REMOTE | AccessFlags::LOCAL_WRITE)
        .unwrap();
    source.write(0, &[0x5a; 4096]).unwrap();
    let sink = pd_a.reg_mr(4096, AccessFlags::LOCAL_WRITE).unwrap();
    let read = SendRequest::rdma_read(sink, .., source.remote(..).unwrap()).unwrap();
    let read_id = a1.post_send(read).unwrap();
    // The other device: a SEND of the QP with the same number, posted later (a newer id).
    b2.post_recv(RecvRequest::new(pd_b.reg_mr(64, AccessFlags::LOCAL_WRITE).unwrap(), ..).unwrap())
        .unwrap();
    let send = SendRequest::send(pd_b.reg_mr(64, AccessFlags::LOCAL_WRITE).unwrap(), ..).unwrap();
    let send_id = b1.post_send(send).unwrap();
    assert!(send_id > read_id, "the other queue's ids are newer");
    let foreign = loop {
        let wc = cq_b.wait_one(Duration::from_secs(10)).unwrap();
        if wc.qp_num() == b1.qp_num() {
            break wc;
        }
    };
    assert_eq!(foreign.wr_id(), send_id);
    assert_eq!(foreign.qp_num(), a1.qp_num());

    assert!(
        a1.reclaim(&foreign).is_empty(),
        "another device's completion handed back this QP's READ sink"
    );
    assert_eq!(a1.in_flight().0, 1, "the READ is still the device's");

    let own = cq_a.wait_one(Duration::from_secs(10)).unwrap();
    assert_eq!((own.wr_id(), own.status()), (read_id, Ok(())));
    let mut back = a1.reclaim(&own);
    assert_eq!(back.len(), 1);
    let sink = back[0].take::<MemoryRegion>().unwrap();
    assert!(
        sink.as_slice().iter().all(|&b| b == 0x5a),
        "the READ landed"
    );
    assert_eq!(a1.in_flight().0, 0);
}
