//! Completion channels: event-driven waiting loses nothing over thousands of completions.
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use verbs::{
    AccessFlags, CompletionBuf, MemoryRegion, QpInitAttr, QpType, RecvRequest, SendRequest,
};

use crate::support::{connect, open, TIMEOUT};

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn event_mode_loses_no_completion() {
    if crate::support::lacks(testkit::test_name!(), verbs::Capability::ManualConnect) {
        return;
    }
    const N: usize = 3000;
    const RX: usize = 64;
    let ctx = open();
    let pd = ctx.alloc_pd().unwrap();
    let send_cq = ctx.create_cq(128, None).unwrap();
    let channel = ctx.create_comp_channel().unwrap();
    let recv_cq = ctx.create_cq(128, Some(channel)).unwrap();
    assert!(recv_cq.channel_fd().is_some());
    let a = pd
        .create_qp(&QpInitAttr::new(QpType::Rc, &send_cq, &send_cq).max_send_wr(32))
        .unwrap();
    let b = pd
        .create_qp(&QpInitAttr::new(QpType::Rc, &send_cq, &recv_cq).max_recv_wr(RX as u32))
        .unwrap();
    connect(&ctx, &a, &b);
    for _ in 0..RX {
        let mr = pd.reg_mr(64, AccessFlags::LOCAL_WRITE).unwrap();
        b.post_recv(RecvRequest::new(mr, ..).unwrap()).unwrap();
    }

    // Sender thread: keeps the send queue busy, reclaiming its own completions.
    let stop = Arc::new(AtomicBool::new(false));
    let sender = {
        let (a, pd, cq, stop) = (a.clone(), pd.clone(), send_cq.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut buf = CompletionBuf::new(32);
            let mut sent = 0usize;
            let deadline = Instant::now() + TIMEOUT * 6;
            let mut pool: Vec<MemoryRegion> = Vec::new();
            while sent < N && !stop.load(Ordering::Relaxed) {
                assert!(Instant::now() < deadline, "sender stuck at {sent}");
                for wc in &cq.poll(&mut buf).unwrap() {
                    wc.status().unwrap();
                    for mut r in a.reclaim(wc) {
                        pool.push(r.take().unwrap());
                    }
                }
                let mr = match pool.pop() {
                    Some(m) => m,
                    None if a.in_flight().0 < 32 => {
                        pd.reg_mr(64, AccessFlags::LOCAL_WRITE).unwrap()
                    }
                    None => continue,
                };
                match a.post_send(SendRequest::send(mr, 0..8).unwrap()) {
                    Ok(_) => sent += 1,
                    Err(e) if e.error.is_queue_full() => {
                        pool.push(e.unposted.into_buffers().take().unwrap())
                    }
                    Err(e) => panic!("{e}"),
                }
            }
            sent
        })
    };

    // Receiver: event mode only (never busy-polls on an empty CQ).
    let mut buf = CompletionBuf::new(16);
    let mut got = 0usize;
    let mut wakeups = 0usize;
    let deadline = Instant::now() + TIMEOUT * 6;
    while got < N {
        if Instant::now() > deadline {
            stop.store(true, Ordering::Relaxed);
            panic!("received {got} of {N}");
        }
        let polled = recv_cq
            .wait_and_poll(&mut buf, Some(Duration::from_secs(5)))
            .unwrap();
        if polled.is_empty() {
            stop.store(true, Ordering::Relaxed);
            panic!("no completion event within 5 s after {got} of {N} (lost wakeup)");
        }
        wakeups += 1;
        let mut repost = Vec::new();
        for wc in &polled {
            wc.status().unwrap();
            got += 1;
            let mut back = b.reclaim(wc);
            repost.push(RecvRequest::new(back[0].take::<MemoryRegion>().unwrap(), ..).unwrap());
        }
        b.post_recv_batch(repost).unwrap();
    }
    assert_eq!(sender.join().unwrap(), N);
    assert_eq!(got, N);
    assert!(wakeups > 0);
    recv_cq.ack_events();
    // Nothing more arrives: the count is exact.
    let extra = recv_cq
        .wait_and_poll(&mut buf, Some(Duration::from_millis(200)))
        .unwrap();
    assert!(extra.is_empty());
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn get_event_times_out_and_needs_a_channel() {
    let ctx = open();
    let cq = ctx
        .create_cq(8, Some(ctx.create_comp_channel().unwrap()))
        .unwrap();
    cq.req_notify(false).unwrap();
    let t = Instant::now();
    assert!(!cq.get_event(Some(Duration::from_millis(100))).unwrap());
    assert!(t.elapsed() >= Duration::from_millis(90));
    let plain = ctx.create_cq(8, None).unwrap();
    assert!(matches!(
        plain.get_event(Some(Duration::ZERO)),
        Err(verbs::Error::GetCqEvent(_))
    ));
}

/// Posts `n` receives on `p.b` and `n` sends of one distinct byte each from `p.a`.
fn send_n(p: &crate::support::Pair, n: u8) {
    for _ in 0..n {
        let rx = p.pd.reg_mr(64, AccessFlags::LOCAL_WRITE).unwrap();
        p.b.post_recv(RecvRequest::new(rx, ..).unwrap()).unwrap();
    }
    for i in 0..n {
        let mut mr = p.pd.reg_mr(64, AccessFlags::LOCAL_WRITE).unwrap();
        mr.as_mut_slice()[0] = i;
        p.a.post_send(SendRequest::send(mr, 0..1).unwrap()).unwrap();
    }
}

/// The first byte of each received message, in completion order, reclaiming every buffer.
fn received(qp: &verbs::Qp, wcs: &[verbs::WorkCompletion]) -> Vec<u8> {
    wcs.iter()
        .map(|wc| {
            wc.status().unwrap();
            let mr: MemoryRegion = qp.reclaim(wc)[0].take().unwrap();
            mr.as_slice()[0]
        })
        .collect()
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn wait_n_takes_exactly_n_and_leaves_the_rest_in_the_cq() {
    if crate::support::lacks(testkit::test_name!(), verbs::Capability::ManualConnect) {
        return;
    }
    let p = crate::support::Pair::rc();
    send_n(&p, 5);
    let mut buf = CompletionBuf::new(16);
    // Five completions are (or will be) in the CQ; asking for two gives exactly two.
    let first = p.cq_b.wait_n(&mut buf, 2, TIMEOUT).unwrap();
    assert_eq!(first.len(), 2);
    let mut got = received(&p.b, &first);
    // The other three were not polled: they are still there, in order.
    let rest = p.cq_b.wait_n(&mut buf, 3, TIMEOUT).unwrap();
    assert_eq!(rest.len(), 3);
    got.extend(received(&p.b, &rest));
    assert_eq!(got, [0, 1, 2, 3, 4]);
    assert_eq!(p.b.in_flight(), (0, 0));

    // Nothing more: a bounded wait returns what came (none) after the timeout.
    let t = Instant::now();
    let none = p
        .cq_b
        .wait_n(&mut buf, 1, Duration::from_millis(100))
        .unwrap();
    assert!(none.is_empty());
    assert!(t.elapsed() >= Duration::from_millis(100));
    // More than the buffer holds is refused, naming the size needed.
    let e = p.cq_b.wait_n(&mut buf, 17, TIMEOUT).unwrap_err();
    assert!(
        matches!(
            e,
            verbs::Error::CompletionBufTooSmall {
                wanted: 17,
                capacity: 16
            }
        ),
        "{e:?}"
    );
    assert!(e.to_string().contains("CompletionBuf::new(17)"), "{e}");

    // The sender's completions, one at a time.
    for _ in 0..5 {
        let wc = p.cq_a.wait_one(TIMEOUT).unwrap();
        wc.status().unwrap();
        assert_eq!(wc.opcode(), Some(verbs::WcOpcode::Send));
        assert_eq!(p.a.reclaim(&wc).len(), 1);
    }
    assert_eq!(p.a.in_flight(), (0, 0));
    let e = p.cq_a.wait_one(Duration::from_millis(50)).unwrap_err();
    assert!(
        matches!(
            e,
            verbs::Error::CompletionTimeout {
                wanted: 1,
                got: 0,
                ..
            }
        ),
        "{e:?}"
    );
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn wait_n_and_wait_one_sleep_on_a_completion_channel() {
    if crate::support::lacks(testkit::test_name!(), verbs::Capability::ManualConnect) {
        return;
    }
    let ctx = open();
    let pd = ctx.alloc_pd().unwrap();
    let send_cq = ctx.create_cq(16, None).unwrap();
    let recv_cq = ctx
        .create_cq(16, Some(ctx.create_comp_channel().unwrap()))
        .unwrap();
    let a = pd
        .create_qp(&QpInitAttr::new(QpType::Rc, &send_cq, &send_cq))
        .unwrap();
    let b = pd
        .create_qp(&QpInitAttr::new(QpType::Rc, &send_cq, &recv_cq))
        .unwrap();
    connect(&ctx, &a, &b);
    let p = crate::support::Pair {
        pd,
        cq_a: send_cq,
        cq_b: recv_cq,
        a,
        b,
    };
    // Sends come from another thread a little later, so the wait has to sleep and wake.
    for _ in 0..4 {
        let rx = p.pd.reg_mr(64, AccessFlags::LOCAL_WRITE).unwrap();
        p.b.post_recv(RecvRequest::new(rx, ..).unwrap()).unwrap();
    }
    let sender = {
        let (a, pd) = (p.a.clone(), p.pd.clone());
        std::thread::spawn(move || {
            for i in 0..4u8 {
                std::thread::sleep(Duration::from_millis(20));
                let mut mr = pd.reg_mr(64, AccessFlags::LOCAL_WRITE).unwrap();
                mr.as_mut_slice()[0] = i;
                a.post_send(SendRequest::send(mr, 0..1).unwrap()).unwrap();
            }
        })
    };
    let mut buf = CompletionBuf::new(4);
    let three = p.cq_b.wait_n(&mut buf, 3, TIMEOUT).unwrap();
    assert_eq!(three.len(), 3);
    let mut got = received(&p.b, &three);
    let last = p.cq_b.wait_one(TIMEOUT).unwrap();
    got.extend(received(&p.b, std::slice::from_ref(&last)));
    assert_eq!(got, [0, 1, 2, 3]);
    sender.join().unwrap();
    let e = p.cq_b.wait_one(Duration::from_millis(50)).unwrap_err();
    assert!(matches!(e, verbs::Error::CompletionTimeout { .. }), "{e:?}");
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn taking_the_wrong_buffer_type_names_both_types() {
    if crate::support::lacks(testkit::test_name!(), verbs::Capability::ManualConnect) {
        return;
    }
    let p = crate::support::Pair::rc();
    send_n(&p, 1);
    let wc = p.cq_b.wait_one(TIMEOUT).unwrap();
    wc.status().unwrap();
    let mut back = p.b.reclaim(&wc);
    assert_eq!(back.len(), 1);
    // A receive of a MemoryRegion taken as a shared region: a typed error, the buffer stays.
    let e = back[0].take::<Arc<MemoryRegion>>().unwrap_err();
    match &e {
        verbs::Error::WrongBufferType {
            wr_id,
            expected,
            held,
        } => {
            assert_eq!(*wr_id, wc.wr_id());
            assert!(expected.contains("Arc<") && expected.contains("MemoryRegion"));
            assert_eq!(held.len(), 1);
            assert!(held[0].ends_with("MemoryRegion") && !held[0].contains("Arc"));
        }
        other => panic!("expected WrongBufferType, got {other:?}"),
    }
    let text = e.to_string();
    assert!(text.contains("holds no buffer of type") && text.contains("MemoryRegion"));
    let mr: MemoryRegion = back[0].take().unwrap();
    assert_eq!(mr.as_slice()[0], 0);
    // Taken already: asking again is the same error, now naming nothing held.
    let again = back[0].take::<MemoryRegion>().unwrap_err();
    assert!(matches!(&again, verbs::Error::WrongBufferType { held, .. } if held.is_empty()));
    let wc = p.cq_a.wait_one(TIMEOUT).unwrap();
    assert_eq!(p.a.reclaim(&wc).len(), 1);
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn outstanding_lists_requests_whose_completion_was_not_reclaimed() {
    if crate::support::lacks(testkit::test_name!(), verbs::Capability::ManualConnect) {
        return;
    }
    let p = crate::support::Pair::rc();
    let rx = p.pd.reg_mr(64, AccessFlags::LOCAL_WRITE).unwrap();
    let rid =
        p.b.post_recv(RecvRequest::new(rx, ..).unwrap().tag(7))
            .unwrap();
    let out = p.b.outstanding();
    assert_eq!(out.len(), 1);
    assert_eq!((out[0].wr_id, out[0].tag, out[0].recv), (rid, 7, true));
    assert_eq!(out[0].to_string(), format!("recv {rid:#x} (tag 7)"));
    let mr = p.pd.reg_mr(64, AccessFlags::LOCAL_WRITE).unwrap();
    let sid = p.a.post_send(SendRequest::send(mr, 0..1).unwrap()).unwrap();
    // Polled but not reclaimed: still outstanding.
    let wc = p.cq_a.wait_one(TIMEOUT).unwrap();
    assert_eq!(wc.wr_id(), sid);
    let out = p.a.outstanding();
    assert_eq!(out.len(), 1);
    assert_eq!((out[0].wr_id, out[0].recv, out[0].buffers), (sid, false, 1));
    p.a.reclaim(&wc);
    assert!(p.a.outstanding().is_empty());
    let wc = p.cq_b.wait_one(TIMEOUT).unwrap();
    p.b.reclaim(&wc);
    assert!(p.b.outstanding().is_empty());
}
