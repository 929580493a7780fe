//! A shared receive queue feeding two QPs.
use std::collections::BTreeSet;

use verbs::{AccessFlags, MemoryRegion, QpInitAttr, QpType, RecvRequest, SendRequest, WcOpcode};

use crate::support::{connect, drain, one, open};

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn srq_shared_by_two_qps() {
    if crate::support::lacks(testkit::test_name!(), verbs::Capability::ManualConnect) {
        return;
    }
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

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn recv_ring_reclaims_by_slot_beside_owned_receives() {
    if crate::support::lacks(testkit::test_name!(), verbs::Capability::ManualConnect) {
        return;
    }
    let ctx = open();
    let pd = ctx.alloc_pd().unwrap();
    let scq = ctx.create_cq(64, None).unwrap();
    let rcq = ctx.create_cq(64, None).unwrap();
    let srq = pd.create_srq(16, 1).unwrap();
    let depth = srq.max_wr();
    let s1 = pd
        .create_qp(&QpInitAttr::new(QpType::Rc, &scq, &scq))
        .unwrap();
    let r1 = pd
        .create_qp(&QpInitAttr::new(QpType::Rc, &scq, &rcq).srq(&srq))
        .unwrap();
    connect(&ctx, &s1, &r1);

    // Rings reserve their capacity: what is left is the owned receives'.
    let ring = srq.recv_ring::<MemoryRegion>(4).unwrap();
    let e = srq.recv_ring::<MemoryRegion>(depth - 3).unwrap_err();
    assert!(
        matches!(&e, verbs::Error::InvalidWorkRequest { reason, .. } if reason.contains("does not fit")),
        "{e}"
    );
    let other = srq.recv_ring::<MemoryRegion>(2).unwrap();
    let mut owned = Vec::new();
    for _ in 0..depth - 6 {
        let mr = pd.reg_mr(64, AccessFlags::LOCAL_WRITE).unwrap();
        owned.push(srq.post_recv(RecvRequest::new(mr, ..).unwrap()).unwrap());
    }
    let mr = pd.reg_mr(64, AccessFlags::LOCAL_WRITE).unwrap();
    let e = srq
        .post_recv(RecvRequest::new(mr, ..).unwrap())
        .unwrap_err();
    assert!(e.error.is_queue_full(), "{:?}", e.error);

    // A full ring hands the buffer back.
    for _ in 0..4 {
        let mr = pd.reg_mr(64, AccessFlags::LOCAL_WRITE).unwrap();
        ring.post(mr).unwrap();
    }
    assert_eq!(ring.posted(), 4);
    let mr = pd.reg_mr(64, AccessFlags::LOCAL_WRITE).unwrap();
    let e = ring.post(mr).unwrap_err();
    assert!(e.error.is_queue_full(), "{:?}", e.error);
    assert_eq!(
        e.unposted.map(|b| b.len()),
        Some(64),
        "the buffer comes back"
    );

    // The owned receives were posted first, so they take the first messages; then the ring's.
    let total = owned.len() + 4;
    for i in 0..total {
        let mut mr = pd.reg_mr(64, AccessFlags::LOCAL_WRITE).unwrap();
        mr.as_mut_slice()[..4].copy_from_slice(&(i as u32).to_le_bytes());
        s1.post_send(SendRequest::send(mr, 0..4).unwrap()).unwrap();
        let (c, _) = one(&scq, &s1);
        assert_eq!(c.status, Ok(()));
    }
    let mut from_ring = Vec::new();
    let mut from_srq = 0;
    drain(&rcq, total, |wc| {
        assert_eq!(wc.status(), Ok(()));
        assert_eq!(wc.byte_len(), 4);
        // Another ring's receive matches nothing here, and the other way round.
        assert!(other.reclaim(wc).is_none());
        match ring.reclaim(wc) {
            Some(mr) => {
                assert!(srq.reclaim_one::<MemoryRegion, _>(wc).is_none());
                assert!(ring.reclaim(wc).is_none(), "reclaimed once only");
                from_ring.push(u32::from_le_bytes(mr.as_slice()[..4].try_into().unwrap()));
                ring.post(mr).unwrap();
            }
            None => {
                srq.reclaim_one::<MemoryRegion, _>(wc).unwrap().unwrap();
                from_srq += 1;
            }
        }
    });
    assert_eq!(from_srq, owned.len());
    let expected: Vec<u32> = (owned.len() as u32..total as u32).collect();
    assert_eq!(from_ring, expected, "each buffer holds its own message");
    assert_eq!(srq.in_flight(), 0);
    assert_eq!(ring.posted(), 4, "reposted from the completions");
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn a_dropped_recv_ring_keeps_its_posted_buffers_until_the_srq_is_gone() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    use crate::rc::DropFlag;

    let ctx = open();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(16, None).unwrap();
    let srq = pd.create_srq(8, 1).unwrap();
    let qp = pd
        .create_qp(&QpInitAttr::new(QpType::Rc, &cq, &cq).srq(&srq))
        .unwrap();
    let ring = srq.recv_ring::<DropFlag>(2).unwrap();
    let flags: Vec<Arc<AtomicBool>> = (0..2).map(|_| Arc::default()).collect();
    for f in &flags {
        let mr = pd.reg_mr(64, AccessFlags::LOCAL_WRITE).unwrap();
        ring.post(DropFlag {
            mr,
            dropped: f.clone(),
        })
        .unwrap();
    }
    drop(ring);
    assert!(
        flags.iter().all(|f| !f.load(Ordering::SeqCst)),
        "posted buffers outlive the ring while the SRQ lives"
    );
    drop(srq);
    assert!(
        flags.iter().all(|f| !f.load(Ordering::SeqCst)),
        "the QP keeps the SRQ"
    );
    drop(qp);
    assert!(
        flags.iter().all(|f| f.load(Ordering::SeqCst)),
        "freed once the SRQ is destroyed"
    );
}

/// The sequence that handed a buffer back twice: a completion kept (`Cq::wait_one` returns an
/// owned one) and passed to `reclaim` again after its slot was posted anew. The second
/// reclaim must give nothing, and the new buffer must stay with the device until its own
/// completion, which then finds it holding the next message intact.
#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn a_kept_completion_reclaims_its_buffer_once_even_after_the_slot_is_posted_again() {
    if crate::support::lacks(testkit::test_name!(), verbs::Capability::ManualConnect) {
        return;
    }
    let ctx = open();
    let pd = ctx.alloc_pd().unwrap();
    let scq = ctx.create_cq(16, None).unwrap();
    let rcq = ctx.create_cq(16, None).unwrap();
    let srq = pd.create_srq(4, 1).unwrap();
    let s = pd
        .create_qp(&QpInitAttr::new(QpType::Rc, &scq, &scq))
        .unwrap();
    let r = pd
        .create_qp(&QpInitAttr::new(QpType::Rc, &scq, &rcq).srq(&srq))
        .unwrap();
    connect(&ctx, &s, &r);
    // One slot: every post takes the slot the last reclaim freed.
    let ring = srq.recv_ring::<MemoryRegion>(1).unwrap();
    let send = |byte: u8| {
        let mut mr = pd.reg_mr(64, AccessFlags::LOCAL_WRITE).unwrap();
        mr.as_mut_slice().fill(byte);
        s.post_send(SendRequest::send(mr, 0..64).unwrap()).unwrap();
        let (c, _) = one(&scq, &s);
        assert_eq!(c.status, Ok(()));
    };

    let first_id = ring
        .post(pd.reg_mr(64, AccessFlags::LOCAL_WRITE).unwrap())
        .unwrap();
    send(0xa1);
    let kept = rcq.wait_one(crate::support::TIMEOUT).unwrap();
    assert_eq!(kept.wr_id(), first_id);
    let first = ring.reclaim(&kept).expect("the first buffer");
    assert!(first.as_slice().iter().all(|&b| b == 0xa1));
    assert!(ring.reclaim(&kept).is_none(), "handed back twice");

    // The same slot, posted again: the kept completion must not reach the new buffer.
    let second_id = ring
        .post(pd.reg_mr(64, AccessFlags::LOCAL_WRITE).unwrap())
        .unwrap();
    assert_ne!(second_id, first_id, "a wr_id names one posting");
    assert!(
        ring.reclaim(&kept).is_none(),
        "an old completion handed back a buffer the device still holds"
    );
    assert_eq!(ring.posted(), 1, "the new receive is still the device's");
    drop(first);

    send(0xb2);
    let wc = rcq.wait_one(crate::support::TIMEOUT).unwrap();
    assert_eq!(wc.wr_id(), second_id);
    let second = ring
        .reclaim(&wc)
        .expect("the second buffer, by its own completion");
    assert!(
        second.as_slice().iter().all(|&b| b == 0xb2),
        "the second message landed in the second buffer"
    );
    assert_eq!(ring.posted(), 0);
}
