//! UD send/receive through an address handle with a GRH.
use verbs::{
    AccessFlags, AhAttr, MemoryRegion, QpEndpoint, QpInitAttr, QpType, RecvRequest, SendRequest,
    WcFlags,
};

use crate::support::{gid, one, open, PORT};

const QKEY: u32 = 0x1111_2222;

/// Two UD QPs of the test device, in RTS, each with its own CQ.
struct UdPair {
    pd: verbs::Pd,
    cq_a: verbs::Cq,
    cq_b: verbs::Cq,
    a: verbs::Qp,
    b: verbs::Qp,
    /// The GID index and GID both send from.
    sgid: u8,
    gid: verbs::Gid,
}

impl UdPair {
    fn new() -> UdPair {
        let ctx = open();
        let (sgid, gid) = gid(&ctx);
        let pd = ctx.alloc_pd().unwrap();
        let cq_a = ctx.create_cq(16, None).unwrap();
        let cq_b = ctx.create_cq(16, None).unwrap();
        let a = pd
            .create_qp(&QpInitAttr::new(QpType::Ud, &cq_a, &cq_a))
            .unwrap();
        let b = pd
            .create_qp(&QpInitAttr::new(QpType::Ud, &cq_b, &cq_b))
            .unwrap();
        let any = QpEndpoint {
            qp_num: 0,
            psn: 0,
            lid: 0,
            gid,
        };
        for qp in [&a, &b] {
            qp.to_init_ud(PORT, QKEY).unwrap();
            qp.to_rtr(&any, PORT, Some(sgid), verbs::Mtu::Mtu1024)
                .unwrap();
            qp.to_rts(0x42).unwrap();
        }
        UdPair {
            pd,
            cq_a,
            cq_b,
            a,
            b,
            sgid,
            gid,
        }
    }
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn ud_send_recv_through_an_address_handle() {
    if crate::support::lacks(testkit::test_name!(), verbs::Capability::UnreliableDatagram) {
        return;
    }
    let UdPair {
        pd,
        cq_a,
        cq_b,
        a,
        b,
        sgid,
        gid: my_gid,
    } = UdPair::new();
    // The receive buffer starts with room for the 40-byte GRH.
    let rx = pd.reg_mr(40 + 512, AccessFlags::LOCAL_WRITE).unwrap();
    b.post_recv(RecvRequest::new(rx, ..).unwrap()).unwrap();

    let ah = pd.create_ah(&AhAttr::roce(PORT, my_gid, sgid)).unwrap();
    let mut tx = pd.reg_mr(512, AccessFlags::LOCAL_WRITE).unwrap();
    tx.as_mut_slice()[..11].copy_from_slice(b"hello, ud!!");
    // A UD send needs a destination.
    let e = a.post_send(
        SendRequest::send(pd.reg_mr(64, AccessFlags::LOCAL_WRITE).unwrap(), ..).unwrap(),
    );
    assert!(e.is_err());
    a.post_send(
        SendRequest::send(tx, 0..11)
            .unwrap()
            .ud(&ah, b.qp_num(), QKEY),
    )
    .unwrap();
    let (c, _) = one(&cq_a, &a);
    assert_eq!(c.status, Ok(()));
    let (r, mut back) = one(&cq_b, &b);
    assert_eq!(r.status, Ok(()));
    assert_eq!(r.byte_len, 40 + 11);
    assert_eq!(r.src_qp, a.qp_num());
    assert!(r.flags.contains(WcFlags::GRH));
    let rx: MemoryRegion = back[0].take().unwrap();
    assert_eq!(&rx.as_slice()[40..51], b"hello, ud!!");
}

/// Objects of one device context are refused by another's QP: its kernel handles name other
/// objects there, and its provider would read them as its own structs.
/// A UD request posted through fixed buffers needs its address handle until its completion,
/// past any borrow of the post: the buffers refuse an address handle they do not keep, and one
/// they keep outlives the program's own handle, so the datagram still goes out and arrives.
#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn fixed_buffers_keep_the_address_handles_of_their_ud_requests() {
    if crate::support::lacks(testkit::test_name!(), verbs::Capability::UnreliableDatagram) {
        return;
    }
    let p = UdPair::new();
    let mut tx = p.pd.reg_mr(512, AccessFlags::LOCAL_WRITE).unwrap();
    tx.as_mut_slice()[..9].copy_from_slice(b"fixed, ud");
    let tx = std::sync::Arc::new(tx);
    let sge = [tx.local(0..9).unwrap()];
    let mut fixed = verbs::FixedBuffers::new();
    fixed.add_source(tx);
    let rx = p.pd.reg_mr(40 + 512, AccessFlags::LOCAL_WRITE).unwrap();
    p.b.post_recv(RecvRequest::new(rx, ..).unwrap()).unwrap();

    let ah = p.pd.create_ah(&AhAttr::roce(PORT, p.gid, p.sgid)).unwrap();
    let wr = verbs::SendWr {
        wr_id: 7,
        op: verbs::WrOp::Send,
        sges: &sge,
        flags: verbs::SendFlags::SIGNALED,
        ud: Some(verbs::UdDest {
            ah: &ah,
            remote_qpn: p.b.qp_num(),
            remote_qkey: QKEY,
        }),
    };
    for e in [
        fixed.post_send(&p.a, &[wr]).unwrap_err(),
        fixed.prepare_send(&p.a, &wr).unwrap_err(),
    ] {
        assert!(
            matches!(&e, verbs::Error::InvalidWorkRequest { reason, .. } if reason.contains("add_ah")),
            "{e}"
        );
    }

    fixed.add_ah(&ah);
    {
        let mut prepared = fixed.prepare_send(&p.a, &wr).unwrap();
        prepared.post().unwrap();
    }
    // The program's handle goes while the request may still be in flight: the buffers keep
    // theirs.
    drop(ah);
    let (c, _) = one(&p.cq_a, &p.a);
    assert_eq!((c.wr_id, c.status), (7, Ok(())));
    let (r, mut back) = one(&p.cq_b, &p.b);
    assert_eq!(r.status, Ok(()));
    let rx: MemoryRegion = back[0].take().unwrap();
    assert_eq!(&rx.as_slice()[40..49], b"fixed, ud");
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn objects_of_another_context_are_refused() {
    if crate::support::lacks(testkit::test_name!(), verbs::Capability::UnreliableDatagram) {
        return;
    }
    let ctx = open();
    let other = open(); // a second context of the same device: its own handle namespace
    let (sgid, my_gid) = gid(&ctx);
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(16, None).unwrap();
    let foreign_cq = other.create_cq(16, None).unwrap();
    for (send, recv) in [(&foreign_cq, &cq), (&cq, &foreign_cq)] {
        let e = pd
            .create_qp(&QpInitAttr::new(QpType::Ud, send, recv))
            .unwrap_err();
        assert!(matches!(e, verbs::Error::CreateQp { .. }), "{e:?}");
    }
    let foreign_srq = other.alloc_pd().unwrap().create_srq(4, 1).unwrap();
    let e = pd
        .create_qp(&QpInitAttr::new(QpType::Rc, &cq, &cq).srq(&foreign_srq))
        .unwrap_err();
    assert!(matches!(e, verbs::Error::CreateQp { .. }), "{e:?}");

    let qp = pd
        .create_qp(&QpInitAttr::new(QpType::Ud, &cq, &cq))
        .unwrap();
    let any = QpEndpoint {
        qp_num: 0,
        psn: 0,
        lid: 0,
        gid: my_gid,
    };
    qp.to_init_ud(PORT, QKEY).unwrap();
    qp.to_rtr(&any, PORT, Some(sgid), verbs::Mtu::Mtu1024)
        .unwrap();
    qp.to_rts(0x42).unwrap();
    let foreign_ah = other
        .alloc_pd()
        .unwrap()
        .create_ah(&AhAttr::roce(PORT, my_gid, sgid))
        .unwrap();
    let tx = pd.reg_mr(64, AccessFlags::LOCAL_WRITE).unwrap();
    let e = qp
        .post_send(
            SendRequest::send(tx, ..8)
                .unwrap()
                .ud(&foreign_ah, qp.qp_num(), QKEY),
        )
        .unwrap_err();
    assert!(
        matches!(e.error, verbs::Error::InvalidWorkRequest { .. }),
        "{:?}",
        e.error
    );
    assert_eq!(qp.in_flight(), (0, 0));
}

/// A region that records being dropped.
struct Tracked(MemoryRegion, std::sync::Arc<std::sync::atomic::AtomicBool>);

impl Drop for Tracked {
    fn drop(&mut self) {
        self.1.store(true, std::sync::atomic::Ordering::SeqCst);
    }
}

// SAFETY: forwards to the region it owns, whose contract carries over.
unsafe impl verbs::RegisteredBuf for Tracked {
    fn local(&self) -> verbs::LocalSlice {
        verbs::RegisteredBuf::local(&self.0)
    }
}
// SAFETY: as above.
unsafe impl verbs::RegisteredBufMut for Tracked {}

/// The kernel refuses to destroy a QP with multicast groups attached (EBUSY): the QP lives on
/// and may still receive into its posted buffers, so they must not be freed.
#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn buffers_outlive_a_qp_that_could_not_be_destroyed() {
    if crate::support::lacks(testkit::test_name!(), verbs::Capability::UnreliableDatagram) {
        return;
    }
    use std::sync::atomic::{AtomicBool, Ordering};
    use verbs::sys;

    let ctx = open();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(16, None).unwrap();
    let qp = pd
        .create_qp(&QpInitAttr::new(QpType::Ud, &cq, &cq))
        .unwrap();
    qp.to_init_ud(PORT, QKEY).unwrap();
    let mut group = [0u8; 16];
    group[..2].copy_from_slice(&[0xff, 0x0e]);
    group[15] = 0x42;
    let gid = sys::ibv_gid { raw: group };
    // SAFETY: live UD QP; a multicast GID; detached below before the QP is destroyed.
    let r = unsafe { sys::ibv_attach_mcast(qp.as_raw(), &gid, 0) };
    if r != 0 {
        testkit::skip(
            "buffers_outlive_a_qp_that_could_not_be_destroyed",
            &format!("ibv_attach_mcast: {}", std::io::Error::from_raw_os_error(r)),
        );
        return;
    }
    let dropped = std::sync::Arc::new(AtomicBool::new(false));
    let buf = Tracked(
        pd.reg_mr(40 + 64, AccessFlags::LOCAL_WRITE).unwrap(),
        dropped.clone(),
    );
    qp.post_recv(RecvRequest::new(buf, ..).unwrap()).unwrap();
    let raw = qp.as_raw();
    drop(qp);
    assert!(
        !dropped.load(Ordering::SeqCst),
        "the receive buffer was freed while its QP lives on"
    );
    // The QP is still alive (that is what the leak protects): clean it up by hand.
    // SAFETY: ibv_destroy_qp failed, so `raw` is still a live QP, owned by nobody now.
    unsafe {
        assert_eq!(sys::ibv_detach_mcast(raw, &gid, 0), 0);
        assert_eq!(sys::ibv_destroy_qp(raw), 0);
    }
}
