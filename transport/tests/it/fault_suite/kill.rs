//! The peer process is SIGKILLed mid-transfer, in each role, while another connection of the
//! same endpoint carries verified traffic. The survivor's operations on the dead connection fail
//! with a typed error within the keepalive bound, what arrived before the kill is an intact,
//! in-order prefix, the other connection's traffic goes on untouched, and the endpoint's pool
//! is back to its baseline once the connections are gone (nothing registered leaks).
//!
//! For the killed connection, bytes in flight at the kill are reported to the survivor as the
//! error and are not counted as sent; the figures count the intact prefix and the other
//! connection's traffic.
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use transport::{Endpoint, Error};

use super::*;
use crate::failures::{peer_program, wait_line};

/// Size of the killed connection's messages.
const MESSAGE: usize = 64 << 10;
/// Messages of the other connection before the kill, and again after it.
const BYSTANDER_MESSAGES: u64 = 20;
/// Messages of the killed connection received before the kill.
const KILL_AFTER: u64 = 30;
/// How long after the keepalive timeout a detection still counts.
const DETECT_SLACK: Duration = Duration::from_secs(2);

/// Message `n` as `transport-test-peer client` numbers them.
fn numbered(n: u64, len: usize) -> Vec<u8> {
    let mut v: Vec<u8> = (0..len.max(8))
        .map(|i| (n as u8).wrapping_add(i as u8))
        .collect();
    v[..8].copy_from_slice(&n.to_le_bytes());
    v
}

/// Waits (bounded) until the endpoint's pool has no more buffers lent out than `baseline`.
fn pool_back_to(ep: &Endpoint, baseline: usize) -> bool {
    let deadline = Instant::now() + TIMEOUT;
    while ep.pool().stats().buffers_in_use() > baseline {
        if Instant::now() > deadline {
            eprintln!(
                "pool not back to {baseline} ({} connections left): {:?}",
                ep.connections(),
                ep.pool().stats()
            );
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    true
}

/// Receives numbered messages on `victim`, kills the peer program after `KILL_AFTER` (once
/// the bystander has delivered some too), and goes on until the error. Returns the bytes of the
/// intact prefix, the bytes corrupted, the error with when it came, and when the peer was
/// killed.
fn read_then_kill(
    victim: &transport::Conn,
    bystander: &Bystander,
    peer: &mut testkit::ChildGuard,
) -> (u64, u64, (Error, Instant), Instant) {
    let (mut prefix, mut corrupted, mut n) = (0u64, 0u64, 0u64);
    let mut killed = None;
    let error = loop {
        match victim.recv(TIMEOUT) {
            Ok(m) if m.to_vec() == numbered(n, MESSAGE) => prefix += MESSAGE as u64,
            Ok(m) => corrupted += m.len() as u64,
            Err(e) => break (e, Instant::now()),
        }
        n += 1;
        if n == KILL_AFTER {
            bystander.wait_for(BYSTANDER_MESSAGES);
            peer.kill();
            killed = Some(Instant::now());
        }
    };
    let killed = killed.unwrap_or_else(|| panic!("fewer than {KILL_AFTER} messages: {error:?}"));
    (prefix, corrupted, error, killed)
}

fn typed(e: &Error) -> bool {
    matches!(e, Error::Closed { cause: Some(_) })
}

/// The peer runs the server (it echoes); this host's client sends numbered messages on that
/// connection and checks the echoes, and also runs a healthy connection on the same endpoint.
#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn a_killed_server_fails_the_client_in_the_keepalive_bound_and_leaks_nothing() {
    let counters = DeviceCounters::read();
    let ep = Endpoint::with_config(local_ip(), config()).expect("client endpoint");
    let baseline = ep.pool().stats().buffers_in_use();
    let server = Endpoint::with_config(peer_ip(), config()).expect("healthy server endpoint");
    let listener = server.listen(0).expect("listen");
    let addr = addr_of(&listener);
    let accepted = std::thread::spawn(move || listener.accept_timeout(TIMEOUT).expect("accept"));
    let healthy_client = ep.connect(addr).expect("connect healthy");
    let healthy = Bystander::start(accepted.join().unwrap(), healthy_client);

    let addr = SocketAddr::new(peer_ip(), 23100);
    let (mut peer, lines) = peer_program(&["server", "--addr", &addr.to_string()]);
    wait_line(&lines, "listening");
    let victim = ep.connect(addr).expect("connect to the peer program");
    wait_line(&lines, "accepted");
    let sender = {
        let victim = victim.clone();
        std::thread::spawn(move || {
            for n in 0u64.. {
                if let Err(e) = victim.send_timeout(&numbered(n, MESSAGE), TIMEOUT) {
                    return (e, Instant::now());
                }
            }
            unreachable!()
        })
    };
    // Read echoes until some have come back, then kill the peer and read on until the error.
    let (prefix, corrupted, receiver_error, killed) = read_then_kill(&victim, &healthy, &mut peer);
    let (sender_error, sender_at) = sender.join().expect("sender");
    let delivered_at_kill = healthy.delivered();
    healthy.wait_for(BYSTANDER_MESSAGES);
    drop(victim);
    let (healthy_tally, healthy_messages) = healthy.finish();
    let detect = receiver_error.1.max(sender_at) - killed;
    let bound = ep.config().proto().keepalive_timeout() + DETECT_SLACK;

    let tally = Tally {
        sent: healthy_tally.sent + 2 * prefix,
        received: healthy_tally.received + 2 * prefix,
        corrupted: healthy_tally.corrupted + corrupted,
        secs: healthy_tally.secs,
    };
    let mut figures = Figures::new("peer killed: server", "echo 64 KiB + bystander msgs", tally);
    figures.detect_ms = Some(detect.as_secs_f64() * 1e3);
    figures.checks = vec![
        ("sender failed with a typed error", typed(&sender_error)),
        (
            "receiver failed with a typed error",
            typed(&receiver_error.0),
        ),
        ("both within the keepalive bound", detect <= bound),
        ("pool back to its baseline", pool_back_to(&ep, baseline)),
    ];
    // The other connection delivered its messages after the kill (`wait_for` checked).
    figures.kept_serving = true;
    figures.extra = serde_json::json!({
        "bound_ms": bound.as_millis() as u64,
        "killed_connection_prefix_bytes": prefix,
        "bystander_messages": healthy_messages,
        "bystander_messages_at_kill": delivered_at_kill,
        "sender_error": sender_error.to_string(),
        "receiver_error": receiver_error.0.to_string(),
    });
    figures.counters_before = Some(counters);
    figures.record();
}

/// The peer runs a client sending numbered messages to this host's listener, whose endpoint
/// also serves a healthy connection; the listener accepts again after the kill.
#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn a_killed_client_fails_the_server_in_the_keepalive_bound_and_leaks_nothing() {
    let counters = DeviceCounters::read();
    let ep = Endpoint::with_config(local_ip(), config()).expect("server endpoint");
    let baseline = ep.pool().stats().buffers_in_use();
    let listener = ep.listen(0).expect("listen");
    let addr = addr_of(&listener);
    let healthy_ep = Endpoint::with_config(peer_ip(), config()).expect("healthy client endpoint");
    let healthy_client = {
        let ep = healthy_ep.clone();
        std::thread::spawn(move || ep.connect(addr).expect("connect healthy"))
    };
    let healthy_server = listener.accept_timeout(TIMEOUT).expect("accept healthy");
    // The healthy connection's server side is on the endpoint under test.
    let healthy = Bystander::start(healthy_client.join().unwrap(), healthy_server);

    let src = peer_ip().to_string();
    let size = MESSAGE.to_string();
    let (mut peer, lines) = peer_program(&[
        "client",
        "--src",
        &src,
        "--addr",
        &addr.to_string(),
        "--size",
        &size,
    ]);
    let victim = listener
        .accept_timeout(TIMEOUT)
        .expect("accept the peer program");
    wait_line(&lines, "connected");
    let (prefix, corrupted, error, killed) = read_then_kill(&victim, &healthy, &mut peer);
    let delivered_at_kill = healthy.delivered();
    healthy.wait_for(BYSTANDER_MESSAGES);
    drop(victim);
    // The listener still accepts.
    let next = {
        let ep = healthy_ep.clone();
        std::thread::spawn(move || {
            let c = ep.connect(addr)?;
            c.send(b"next")?;
            c.close(TIMEOUT)
        })
    };
    let accepts_again = listener
        .accept_timeout(TIMEOUT)
        .is_ok_and(|c| c.recv(TIMEOUT).is_ok_and(|m| &m.bytes()[..] == b"next"))
        && next.join().unwrap().is_ok();
    let (healthy_tally, healthy_messages) = healthy.finish();
    let detect = error.1 - killed;
    let bound = ep.config().proto().keepalive_timeout() + DETECT_SLACK;

    let tally = Tally {
        sent: healthy_tally.sent + prefix,
        received: healthy_tally.received + prefix,
        corrupted: healthy_tally.corrupted + corrupted,
        secs: healthy_tally.secs,
    };
    let mut figures = Figures::new("peer killed: client", "64 KiB msgs + bystander msgs", tally);
    figures.detect_ms = Some(detect.as_secs_f64() * 1e3);
    drop(listener);
    figures.checks = vec![
        ("receiver failed with a typed error", typed(&error.0)),
        ("within the keepalive bound", detect <= bound),
        ("pool back to its baseline", pool_back_to(&ep, baseline)),
    ];
    figures.kept_serving = accepts_again;
    figures.extra = serde_json::json!({
        "bound_ms": bound.as_millis() as u64,
        "killed_connection_prefix_bytes": prefix,
        "bystander_messages": healthy_messages,
        "bystander_messages_at_kill": delivered_at_kill,
        "receiver_error": error.0.to_string(),
    });
    figures.counters_before = Some(counters);
    figures.record();
}
