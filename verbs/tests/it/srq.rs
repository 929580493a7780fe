//! A shared receive queue feeding two QPs.
use std::collections::BTreeSet;

use verbs::{AccessFlags, MemoryRegion, QpInitAttr, QpType, RecvRequest, SendRequest, WcOpcode};

use crate::support::{connect, drain, one, open};

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn srq_shared_by_two_qps() {
    let ctx = open();
    let pd = ctx.alloc_pd().unwrap();
    let scq = ctx.create_cq(64, None).unwrap();
    let rcq = ctx.create_cq(64, None).unwrap();
    let srq = pd.create_srq(32, 1).unwrap();
    let s1 = pd
        .create_qp(&QpInitAttr::new(QpType::Rc, &scq, &scq))
        .unwrap();
    let s2 = pd
        .create_qp(&QpInitAttr::new(QpType::Rc, &scq, &scq))
        .unwrap();
    let r1 = pd
        .create_qp(&QpInitAttr::new(QpType::Rc, &scq, &rcq).srq(&srq))
        .unwrap();
    let r2 = pd
        .create_qp(&QpInitAttr::new(QpType::Rc, &scq, &rcq).srq(&srq))
        .unwrap();
    connect(&ctx, &s1, &r1);
    connect(&ctx, &s2, &r2);
    // A QP on an SRQ takes no receives of its own.
    let mr = pd.reg_mr(64, AccessFlags::LOCAL_WRITE).unwrap();
    let e = r1.post_recv(RecvRequest::new(mr, ..).unwrap()).unwrap_err();
    assert!(
        matches!(e.error, verbs::Error::InvalidWorkRequest { .. }),
        "{:?}",
        e.error
    );
    assert!(e.posted.is_empty());
    let e = r1.post_recv_batch(vec![e.unposted]).unwrap_err();
    assert!(
        matches!(e.error, verbs::Error::InvalidWorkRequest { .. }),
        "{:?}",
        e.error
    );
    assert!(e.posted.is_empty());
    assert_eq!(e.unposted.len(), 1, "the request comes back");

    let ids: BTreeSet<u64> = (0..4)
        .map(|_| {
            let mr = pd.reg_mr(256, AccessFlags::LOCAL_WRITE).unwrap();
            srq.post_recv(RecvRequest::new(mr, ..).unwrap()).unwrap()
        })
        .collect();
    for (i, qp) in [&s1, &s2, &s1, &s2].into_iter().enumerate() {
        let mut mr = pd.reg_mr(256, AccessFlags::LOCAL_WRITE).unwrap();
        mr.as_mut_slice()[..4].copy_from_slice(&[i as u8; 4]);
        qp.post_send(SendRequest::send(mr, 0..4).unwrap()).unwrap();
        let (c, _) = one(&scq, qp);
        assert_eq!(c.status, Ok(()));
    }
    let mut by_qp = Vec::new();
    let mut got_ids = BTreeSet::new();
    let mut payloads = BTreeSet::new();
    drain(&rcq, 4, |wc| {
        assert_eq!(wc.opcode(), Some(WcOpcode::Recv));
        by_qp.push(wc.qp_num());
        got_ids.insert(wc.wr_id());
        // The completions go through each way of reclaiming in turn.
        let mr: MemoryRegion = match got_ids.len() % 3 {
            0 => srq.reclaim(wc)[0].take().unwrap(),
            1 => {
                let mut list = Vec::with_capacity(1);
                assert_eq!(srq.reclaim_into(wc, &mut list), 1);
                assert_eq!(list[0].wr_id, wc.wr_id());
                list[0].take().unwrap()
            }
            _ => srq.reclaim_one::<MemoryRegion, _>(wc).unwrap().unwrap(),
        };
        // Reclaimed once only.
        assert!(srq.reclaim_one::<MemoryRegion, _>(wc).is_none());
        payloads.insert(mr.as_slice()[0]);
    });
    assert_eq!(got_ids, ids);
    assert_eq!(payloads, (0..4).collect());
    assert_eq!(by_qp.iter().filter(|&&q| q == r1.qp_num()).count(), 2);
    assert_eq!(by_qp.iter().filter(|&&q| q == r2.qp_num()).count(), 2);
    assert_eq!(srq.in_flight(), 0);
}
