//! Queue pairs reset with owned requests in flight: what `take_in_flight` hands back is only
//! what the reset discarded, and nothing posted in Reset can outlive it.
use verbs::{AccessFlags, Error, Mtu, QpEndpoint, QpInitAttr, QpType, RecvRequest, SendRequest};

use crate::support::{self, Pair, PORT};

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn owned_posts_are_refused_in_reset() {
    if crate::support::lacks(testkit::test_name!(), verbs::Capability::ManualConnect) {
        return;
    }
    let p = Pair::rc();
    let qp =
        p.pd.create_qp(&QpInitAttr::new(QpType::Rc, &p.cq_a, &p.cq_a))
            .unwrap();
    // Some providers accept a receive in Reset and keep it past Reset -> Init, after
    // take_in_flight would have handed its buffer back: the layer refuses it first.
    let buf = p.pd.reg_mr(64, AccessFlags::LOCAL_WRITE).unwrap();
    let e = qp
        .post_recv(RecvRequest::new(buf, ..).unwrap())
        .unwrap_err();
    assert!(
        matches!(e.error, Error::InvalidWorkRequest { .. }),
        "{:?}",
        e.error
    );
    let e = qp
        .post_recv_batch(vec![e.unposted, RecvRequest::empty()])
        .unwrap_err();
    assert!(matches!(e.error, Error::InvalidWorkRequest { .. }));
    assert_eq!(qp.in_flight(), (0, 0));
    let mut back = e.unposted.into_iter();
    qp.to_init(PORT, AccessFlags::empty()).unwrap();
    qp.post_recv(back.next().unwrap()).unwrap();
    assert_eq!(qp.in_flight(), (0, 1));

    // Back to Reset: the receive is discarded and handed back; posting is refused again.
    qp.reset().unwrap();
    assert_eq!(qp.take_in_flight().len(), 1);
    assert!(qp.post_recv(RecvRequest::empty()).is_err());
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn reset_hands_back_only_discarded_receives() {
    if crate::support::lacks(testkit::test_name!(), verbs::Capability::ManualConnect) {
        return;
    }
    let p = Pair::rc();
    let ctx = p.pd.context();
    let old = p.pd.reg_mr(64, AccessFlags::LOCAL_WRITE).unwrap();
    let old_id = p.b.post_recv(RecvRequest::new(old, ..).unwrap()).unwrap();
    assert!(
        p.b.take_in_flight().is_empty(),
        "nothing is handed back in RTS"
    );
    p.b.reset().unwrap();
    let mut taken = p.b.take_in_flight();
    assert_eq!(taken.len(), 1);
    assert_eq!(taken[0].wr_id, old_id);
    let old: verbs::MemoryRegion = taken[0].take().unwrap();

    // Reconnect b to a and receive: the new receive completes, the old one is gone.
    let (sgid, gid) = support::gid(&ctx);
    let ea = QpEndpoint {
        qp_num: p.a.qp_num(),
        psn: 0x100,
        lid: 0,
        gid,
    };
    p.b.to_init(PORT, support::ALL_REMOTE).unwrap();
    let new = p.pd.reg_mr(64, AccessFlags::LOCAL_WRITE).unwrap();
    let new_id = p.b.post_recv(RecvRequest::new(new, ..).unwrap()).unwrap();
    p.b.to_rtr(&ea, PORT, Some(sgid), Mtu::Mtu1024).unwrap();
    p.b.to_rts(0x200).unwrap();
    let mut src = p.pd.reg_mr(64, AccessFlags::LOCAL_WRITE).unwrap();
    src.as_mut_slice()[..5].copy_from_slice(b"hello");
    p.a.post_send(SendRequest::send(src, ..5).unwrap()).unwrap();
    let (c, mut bufs) = support::one(&p.cq_b, &p.b);
    c.status.unwrap();
    assert_eq!(c.wr_id, new_id);
    let new: verbs::MemoryRegion = bufs[0].take().unwrap();
    assert_eq!(&new.as_slice()[..5], b"hello");
    assert!(
        old.as_slice().iter().all(|&b| b == 0),
        "the old buffer was untouched"
    );
    support::assert_quiet(&p.cq_b);
}
