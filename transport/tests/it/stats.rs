//! Statistics on the device: a connection counts exactly the messages, bytes, calls and
//! rendezvous transfers that crossed it, each side its own way; the endpoint sums its
//! connections, the open and the ended, and says how they ended; a receiver that stops
//! reading shows as credit stalls at its peer; an idle endpoint runs its timers rarely.
use std::time::{Duration, Instant};

use transport::{Conn, Endpoint, EndpointStats, Error};

use crate::support::*;

/// A server endpoint on the peer's device and a client here, with one connection.
fn connected() -> (Endpoint, Conn, Endpoint, Conn) {
    let server = Endpoint::with_config(peer_ip(), config()).expect("server endpoint");
    let listener = server.listen(0).expect("listen");
    let client = Endpoint::with_config(local_ip(), config()).expect("client endpoint");
    let addr = listener.local_addr().unwrap();
    let accept = std::thread::spawn(move || listener.accept_timeout(TIMEOUT).expect("accept"));
    let c = client.connect(addr).expect("connect");
    let s = accept.join().unwrap();
    (server, s, client, c)
}

/// Waits (within [`TIMEOUT`]) until `ep`'s statistics satisfy `done`.
fn stats_when(ep: &Endpoint, done: impl Fn(&EndpointStats) -> bool) -> EndpointStats {
    let until = Instant::now() + TIMEOUT;
    loop {
        let s = ep.stats();
        if done(&s) {
            return s;
        }
        assert!(Instant::now() < until, "statistics never got there: {s:#?}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn counts_are_exact_for_messages_bytes_calls_and_rendezvous() {
    let (server_ep, server, client_ep, client) = connected();
    let lens = [0usize, 1, 100, 4000, 9000, 70_000, 1 << 20];
    let eager = client.eager_limit();
    let large = lens.iter().filter(|&&l| l > eager).count() as u64;
    let large_bytes: u64 = lens.iter().filter(|&&l| l > eager).map(|&l| l as u64).sum();
    let bytes: u64 = lens.iter().map(|&l| l as u64).sum();
    assert!(
        large >= 2,
        "the sizes cross the eager limit ({eager} bytes)"
    );
    for (i, &len) in lens.iter().enumerate() {
        client.send(&pattern(i as u64, len)).unwrap();
    }
    for (i, &len) in lens.iter().enumerate() {
        let m = server.recv(TIMEOUT).unwrap();
        assert!(m.to_vec() == pattern(i as u64, len), "message {i}");
    }
    // Calls of 10 and 20,000 bytes, answered with twice their length.
    let serving = std::thread::spawn(move || {
        for _ in 0..2 {
            let req = server.recv_request(TIMEOUT).unwrap();
            let answer = vec![7u8; 2 * req.message().len()];
            req.respond(&answer).unwrap();
        }
        server
    });
    for len in [10usize, 20_000] {
        let r = client.call(&vec![1u8; len], TIMEOUT).unwrap();
        assert_eq!(r.len(), 2 * len);
    }
    let server = serving.join().unwrap();
    let n = lens.len() as u64;
    let call_bytes = 10 + 20_000;
    let c = client.stats();
    assert_eq!((c.messages_sent, c.bytes_sent), (n + 2, bytes + call_bytes));
    assert_eq!((c.messages_received, c.bytes_received), (2, 2 * call_bytes));
    assert_eq!((c.calls, c.responses_received, c.call_timeouts), (2, 2, 0));
    assert_eq!((c.requests_received, c.responses_sent), (0, 0));
    assert_eq!(c.rendezvous_sent, large + 1, "the 20,000-byte request too");
    assert_eq!(c.rendezvous_received, 1, "the 40,000-byte response");
    assert_eq!(c.read_bytes, 40_000);
    let s = server.stats();
    assert_eq!(
        (s.messages_received, s.bytes_received),
        (n + 2, bytes + call_bytes)
    );
    assert_eq!((s.messages_sent, s.bytes_sent), (2, 2 * call_bytes));
    assert_eq!((s.requests_received, s.responses_sent, s.calls), (2, 2, 0));
    assert_eq!(s.rendezvous_received, large + 1);
    assert_eq!(s.read_bytes, large_bytes + 20_000);

    // The endpoints sum their one connection; once it closed, they keep its counters.
    let e = client_ep.stats();
    assert_eq!((e.connections, e.opened, e.ends.total()), (1, 1, 0));
    assert_eq!(e.totals.messages_sent, c.messages_sent);
    assert_eq!(e.totals.bytes_received, c.bytes_received);
    let closing = std::thread::spawn(move || {
        let end = server.recv(TIMEOUT);
        assert!(matches!(end, Err(Error::Closed { .. })), "{end:?}");
        server.close(TIMEOUT).unwrap();
    });
    client.close(TIMEOUT).unwrap();
    closing.join().unwrap();
    for (ep, bytes_received) in [
        (&client_ep, 2 * call_bytes),
        (&server_ep, bytes + call_bytes),
    ] {
        let e = stats_when(ep, |e| e.connections == 0 && ep.connections() == 0);
        assert_eq!(
            (e.opened, e.ends.closed, e.ends.failed()),
            (1, 1, 0),
            "{e:#?}"
        );
        assert_eq!(e.totals.bytes_received, bytes_received);
    }
    assert_eq!(client_ep.stats().totals.messages_sent, n + 2);
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn a_receiver_that_stops_reading_shows_as_credit_stalls_at_its_peer() {
    let (_server_ep, server, _client_ep, client) = connected();
    // The receiver reads nothing: the sender fills the peer's window, then its own queue.
    let mut sent = 0u64;
    let until = Instant::now() + TIMEOUT;
    loop {
        match client.try_send(&[5u8; 32]) {
            Ok(()) => sent += 1,
            Err(Error::WouldBlock) => break,
            Err(e) => panic!("{e}"),
        }
        assert!(Instant::now() < until, "the sender never blocked");
    }
    let stalled = client.stats();
    assert!(stalled.credit_stalls >= 1, "{stalled:#?}");
    for i in 0..sent {
        let m = server.recv(TIMEOUT).unwrap();
        assert_eq!(m.len(), 32, "message {i}");
    }
    let after = client.stats();
    assert_eq!(after.messages_sent, sent);
    assert!(
        after.credit_stall_time > Duration::ZERO,
        "the stall ended and was timed: {after:#?}"
    );
    assert_eq!(server.stats().messages_received, sent);
}

/// An endpoint with no connection, listening, runs its timers about once a second (nothing
/// of its own can fall due), not every 100 ms; a connection made after the quiet spell
/// carries a message as any other.
#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn an_idle_endpoint_runs_its_timers_about_once_a_second() {
    const QUIET: Duration = Duration::from_secs(3);
    let server = Endpoint::with_config(peer_ip(), config()).expect("server endpoint");
    let listener = server.listen(0).expect("listen");
    let client = Endpoint::with_config(local_ip(), config()).expect("client endpoint");
    std::thread::sleep(Duration::from_millis(200));
    let before = [server.stats().timer_runs, client.stats().timer_runs];
    std::thread::sleep(QUIET);
    let after = [server.stats().timer_runs, client.stats().timer_runs];
    for (side, (b, a)) in ["server", "client"]
        .iter()
        .zip(before.into_iter().zip(after))
    {
        eprintln!("{side}: {} timer runs in {QUIET:?} idle", a - b);
        // At most one a second, and one the clock's rounding may add; a busy host only
        // delays them. Every 100 ms would be 30.
        assert!(
            a - b <= QUIET.as_secs() + 2,
            "{side}: {} timer runs in {QUIET:?} with no connection",
            a - b
        );
    }
    let addr = listener.local_addr().unwrap();
    let accept = std::thread::spawn(move || listener.accept_timeout(TIMEOUT).expect("accept"));
    let c = client.connect(addr).expect("connect after the quiet spell");
    let s = accept.join().unwrap();
    c.send(b"after the quiet").unwrap();
    assert_eq!(&*s.recv(TIMEOUT).unwrap().bytes(), b"after the quiet");
}
