//! The link between the hosts goes away mid-transfer, then comes back: netem drops every packet
//! on both ends of the veth pair, as a cable pulled somewhere between the hosts (neither host's
//! stack notices; the devices only see their packets go unanswered). A short outage must be
//! survived with nothing lost; a long one must end the connection with a typed error within the
//! configured bound, and a new connection must work once the link is back.
//!
//! Not here: taking an interface administratively down (`ip link set DEV down`). On the rxe
//! of the kernels we test on, a device whose interface is down fails every transmission
//! locally, so a queue pair that sends (data or only acknowledgements) during the outage goes
//! to the error state at once instead of retrying, and the device's connection management
//! stayed unable to connect for tens of seconds after the interface came back.
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use transport::{Conn, EndpointConfig, Error, ProtocolConfig};

use super::*;

/// Messages of one run; the outage starts after `OUTAGE_AFTER` have arrived.
const MESSAGES: u64 = 300;
const OUTAGE_AFTER: u64 = 50;
/// Bound of every wait of the traffic: a short outage only delays it.
const WAIT: Duration = Duration::from_secs(60);
/// The keepalive of the long-outage connections, the configured bound on detecting a dead link.
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(1);
const KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(5);
/// How long after the bound a detection still counts (progress thread, scheduling on 2 vCPUs).
const DETECT_SLACK: Duration = Duration::from_secs(2);
/// A long outage: well past the keepalive timeout and the queue pair's retry budget.
const LONG_OUTAGE: Duration = Duration::from_secs(15);

/// What the receiving side saw: bytes intact, bytes corrupted, messages in order, and the
/// error that ended it (with when), if one did.
struct Received {
    bytes: u64,
    corrupted: u64,
    messages: u64,
    ended: Option<(Error, Instant)>,
}

/// One run of traffic through an outage: the tally, what each side saw, when the outage
/// started, and the connections (server, client).
struct Run {
    tally: Tally,
    received: Received,
    sender_error: Option<(Error, Instant)>,
    started: Instant,
    conns: (Conn, Conn),
}

/// `MESSAGES` messages client to server; the outage starts once `OUTAGE_AFTER` have arrived
/// and lasts `length` (or until both sides have failed, for a long one).
/// With `until_failed`, the receiver then waits for the connection's end: on a device that
/// moved every message before the outage began (siw hands them to TCP at once), the
/// keepalive must still end the idle connection within its bound.
fn traffic_through(length: Duration, server: Conn, client: Conn, until_failed: bool) -> Run {
    let arrived = Arc::new(AtomicU64::new(0));
    let receiver = {
        let arrived = arrived.clone();
        std::thread::spawn(move || {
            let mut r = Received {
                bytes: 0,
                corrupted: 0,
                messages: 0,
                ended: None,
            };
            for seq in 0..MESSAGES {
                let len = SIZES[seq as usize % SIZES.len()];
                match server.recv(WAIT) {
                    Ok(m) if m.to_vec() == payload(seq, len) => r.bytes += len as u64,
                    Ok(m) => r.corrupted += m.len() as u64,
                    Err(e) => {
                        r.ended = Some((e, Instant::now()));
                        break;
                    }
                }
                r.messages += 1;
                arrived.store(r.messages, Ordering::Release);
            }
            if until_failed && r.ended.is_none() {
                match server.recv(WAIT) {
                    Err(e) => r.ended = Some((e, Instant::now())),
                    Ok(m) => r.corrupted += m.len() as u64,
                }
            }
            (r, server)
        })
    };
    let sender = std::thread::spawn(move || {
        let mut sent = 0;
        for seq in 0..MESSAGES {
            let len = SIZES[seq as usize % SIZES.len()];
            if let Err(e) = client.send_timeout(&payload(seq, len), WAIT) {
                return (sent, Some((e, Instant::now())), client);
            }
            sent += len as u64;
        }
        (sent, None, client)
    });
    let begin = Instant::now();
    while arrived.load(Ordering::Acquire) < OUTAGE_AFTER {
        assert!(begin.elapsed() < WAIT, "traffic did not start");
        std::thread::sleep(Duration::from_millis(1));
    }
    let (started, blackhole) = {
        let blackhole = Netem::new("loss 100%");
        // From when both ends drop everything: until the second `tc` has run, packets still
        // flow one way (a busy host takes a while to start it).
        (Instant::now(), blackhole)
    };
    {
        let _blackhole = blackhole;
        let end = started + length;
        // A long outage lasts until both sides have failed (or its length has passed).
        while Instant::now() < end && !(receiver.is_finished() && sender.is_finished()) {
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    let (received, server) = receiver.join().expect("receiver");
    let (sent, sender_error, client) = sender.join().expect("sender");
    Run {
        tally: Tally {
            sent,
            received: received.bytes,
            corrupted: received.corrupted,
            secs: begin.elapsed().as_secs_f64(),
        },
        received,
        sender_error,
        started,
        conns: (server, client),
    }
}

/// A short outage: the connection lives through it, every message arrives, and it still works.
fn short_outage(name: &'static str) {
    let counters = DeviceCounters::read();
    let (server, client) = pair();
    let run = traffic_through(Duration::from_secs(1), server, client, false);
    let (server, client) = run.conns;
    let mut figures = Figures::new(name, "messages 64 B-64 KiB, link out 1 s", run.tally);
    figures.checks.push(("no error on either side", {
        run.received.ended.is_none() && run.sender_error.is_none()
    }));
    figures
        .checks
        .push(("every message arrived", run.received.messages == MESSAGES));
    // The same connection still carries a message both ways, and so does a new one.
    let data = pattern(7, 3000);
    let same = client.send(&data).is_ok()
        && server.recv(WAIT).is_ok_and(|m| m.to_vec() == data)
        && server.send(&data).is_ok()
        && client.recv(WAIT).is_ok_and(|m| m.to_vec() == data);
    figures.kept_serving = same && echo_once();
    figures.extra = serde_json::json!({
        "outage_ms": 1000,
        "receiver_error": run.received.ended.as_ref().map(|(e, _)| e.to_string()),
        "sender_error": run.sender_error.as_ref().map(|(e, _)| e.to_string()),
    });
    figures.counters_before = Some(counters);
    figures.record();
}

/// A long outage: both sides get a typed error within the keepalive bound, what arrived is an
/// intact prefix of what was sent, and a new connection works once the link is back.
fn long_outage(name: &'static str) {
    let counters = DeviceCounters::read();
    let cfg = || -> EndpointConfig {
        config().with_proto(
            ProtocolConfig::default()
                .with_keepalive_interval(KEEPALIVE_INTERVAL)
                .with_keepalive_timeout(KEEPALIVE_TIMEOUT),
        )
    };
    let (server, client) = pair_with(cfg(), cfg());
    let run = traffic_through(LONG_OUTAGE, server, client, true);
    let bound = KEEPALIVE_TIMEOUT + DETECT_SLACK;
    let detect = |side: &Option<(Error, Instant)>| {
        side.as_ref()
            .map(|(_, at)| at.saturating_duration_since(run.started))
    };
    let receiver_detect = detect(&run.received.ended);
    // The sender learns at its next send; with all messages queued before the outage ended it,
    // the next use of the connection must fail at once.
    let sender_detect = detect(&run.sender_error).or_else(|| {
        let r = run.conns.1.send_timeout(&[0; 64], WAIT);
        r.is_err()
            .then(|| run.started.elapsed())
            .filter(|_| matches!(r, Err(Error::Closed { .. })))
    });
    let typed = |side: &Option<(Error, Instant)>| {
        matches!(side, Some((Error::Closed { cause: Some(_) }, _)))
    };
    // Everything the receiver got was intact and in order: the undelivered rest is what both
    // sides were told failed, not a silent loss.
    let mut tally = run.tally;
    let undelivered = tally.sent - tally.received - tally.corrupted;
    tally.sent = tally.received + tally.corrupted;
    let mut figures = Figures::new(name, "messages 64 B-64 KiB, link out 15 s", tally);
    figures.detect_ms = receiver_detect.map(|d| d.as_secs_f64() * 1e3);
    figures.checks.push((
        "receiver ended with a typed error",
        typed(&run.received.ended),
    ));
    figures.checks.push((
        "receiver detected within the keepalive bound",
        receiver_detect.is_some_and(|d| d <= bound),
    ));
    figures.checks.push((
        "sender failed with a typed error within the keepalive bound",
        (run.sender_error.is_none() || typed(&run.sender_error))
            && sender_detect.is_some_and(|d| d <= bound),
    ));
    figures.kept_serving = echo_once();
    figures.extra = serde_json::json!({
        "outage_ms": LONG_OUTAGE.as_millis() as u64,
        "bound_ms": bound.as_millis() as u64,
        "bytes_undelivered_reported": undelivered,
        "sender_detect_ms": sender_detect.map(|d| d.as_secs_f64() * 1e3),
        "receiver_error": run.received.ended.as_ref().map(|(e, _)| e.to_string()),
        "sender_error": run.sender_error.as_ref().map(|(e, _)| e.to_string()),
    });
    figures.counters_before = Some(counters);
    figures.record();
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn a_one_second_blackhole_loses_nothing() {
    short_outage("link blackholed 1 s");
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn a_long_blackhole_ends_in_a_typed_error_within_the_keepalive_bound() {
    long_outage("link blackholed 15 s");
}
