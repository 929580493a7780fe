//! Extended CQs and the `ibv_wr_*` API of extended QPs between the two hosts: a QP on this
//! host's device posts SEND with immediate, RDMA WRITE and READ in one session and inline
//! sends from `IoSlice`s to a QP on the peer's device; both sides poll extended CQs in
//! batches, and every byte is verified where it lands.
use std::io::IoSlice;

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
