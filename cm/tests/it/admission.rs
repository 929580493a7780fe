//! Connection admission: the listener's hook turns requests away before anything is created
//! for them; a flood of garbage requests leaves memory flat and a good client is served.
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use cm::{Admission, Connector, Error, Listener};

use crate::support::*;

const FLOOD: usize = 500;
/// Requests before the first measurement, so allocator and library caches are warm.
const WARMUP: usize = 50;
/// How much the process's resident memory may grow over the flood.
const RSS_BOUND_KIB: u64 = 8 << 10;
const HELLO: &[u8] = b"GOOD client";

/// VmRSS of this process, in KiB.
fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .expect("VmRSS in /proc/self/status");
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// One client whose private data the hook refuses: it is turned away with the hook's data.
fn garbage_client(addr: SocketAddr, i: usize) {
    let junk: Vec<u8> = (0..56).map(|k| (i * 31 + k * 7) as u8 | 0x80).collect();
    let r = Connector::new(addr)
        .src(local_ip())
        .private_data(&junk)
        .unwrap()
        .timeout(TIMEOUT)
        .connect();
    match r {
        Err(Error::Rejected { private_data, .. }) => {
            assert!(private_data.starts_with(b"go away"), "{private_data:?}")
        }
        other => panic!("request {i}: expected a rejection, got {other:?}"),
    }
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn a_flood_of_garbage_requests_is_rejected_without_growing_memory() {
    let seen = Arc::new(AtomicUsize::new(0));
    let s = seen.clone();
    let me = local_ip();
    let opts = options().admit(move |req| {
        s.fetch_add(1, Ordering::Relaxed);
        assert_eq!(req.peer_addr().map(|a| a.ip()), Some(me));
        if req.private_data().starts_with(b"GOOD") {
            Admission::Accept
        } else {
            Admission::Reject(b"go away".to_vec())
        }
    });
    let listener = Arc::new(Listener::bind(SocketAddr::new(local_ip(), 0), opts).unwrap());
    let addr = listener.local_addr().unwrap();
    // The server waits for one admitted request; rejections happen inside that wait.
    let l = listener.clone();
    let server = std::thread::spawn(move || {
        let req = l.get_request(Duration::from_secs(300)).unwrap();
        assert!(req.private_data().starts_with(HELLO));
        post_recv(req.qp(), req.pd(), 256);
        let conn = req.accept(b"welcome", TIMEOUT).unwrap();
        let got = wait_recv(&conn).unwrap();
        send(&conn, &got);
        wait_one(&conn).status.unwrap();
        conn
    });

    for i in 0..WARMUP {
        garbage_client(addr, i);
    }
    let before = rss_kib();
    for i in WARMUP..WARMUP + FLOOD {
        garbage_client(addr, i);
    }
    let after = rss_kib();
    assert_eq!(listener.rejected(), (WARMUP + FLOOD) as u64);
    eprintln!("VmRSS over {FLOOD} rejected requests: {before} KiB -> {after} KiB");
    assert!(
        after.saturating_sub(before) <= RSS_BOUND_KIB,
        "resident memory grew by {} KiB over {FLOOD} rejected requests",
        after - before
    );

    // A good client is served: the hook admits it and it gets its message echoed.
    let conn = Connector::new(addr)
        .src(local_ip())
        .private_data(HELLO)
        .unwrap()
        .timeout(TIMEOUT)
        .connect()
        .unwrap();
    assert!(conn.private_data().starts_with(b"welcome"));
    echo(&conn, b"still serving");
    let server_conn = server.join().unwrap();
    assert_eq!(seen.load(Ordering::Relaxed), WARMUP + FLOOD + 1);
    // Both ends go (each drop disconnects, with a bounded drain).
    drop(conn);
    drop(server_conn);
}
