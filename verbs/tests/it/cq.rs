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
