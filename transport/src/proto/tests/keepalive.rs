//! Keepalive: a silent peer is declared dead exactly at the configured bound; a live one is
//! probed with PING and answers PONG; the keepalive timers of an endpoint's connections fall
//! due together, on one grid.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use crate::proto::{Config, ConnError, Connection, Kind};

use super::sim::Sim;
use super::small_config;

/// A small connection probing every 100 ms and declaring its peer dead after 350 ms of
/// silence.
fn keepalive_config() -> Config {
    small_config(8, 2, 8, 2, 2)
        .with_keepalive_interval(Duration::from_millis(100))
        .with_keepalive_timeout(Duration::from_millis(350))
}

#[test]
fn silent_peer_is_dead_at_the_keepalive_timeout() {
    let cfg = keepalive_config();
    let mut sim = Sim::new(&cfg, &cfg);
    let start = sim.now;
    // host 1 never hears anything and says nothing: host 0's frames are lost
    let mut pings = 0;
    for _ in 0..349 {
        sim.now += Duration::from_millis(1);
        let now = sim.now;
        sim.hosts[0].conn.on_timeout(now);
        sim.pump();
        pings += sim.wires[0]
            .drain(..)
            .filter(|f| f.imm.is_none() && f[0] == Kind::Ping as u8)
            .count();
        sim.hosts[0].complete_sends();
        assert!(
            sim.hosts[0].closed.is_empty(),
            "dead too early at {:?}",
            now - start
        );
    }
    assert_eq!(
        pings, 3,
        "one PING per interval of silence (100, 200, 300 ms)"
    );
    assert_eq!(
        sim.hosts[0].conn.poll_timeout(),
        Some(start + Duration::from_millis(350))
    );
    sim.now = start + Duration::from_millis(350);
    let now = sim.now;
    sim.hosts[0].conn.on_timeout(now);
    sim.pump();
    assert_eq!(
        sim.hosts[0].closed,
        vec![Some(ConnError::PeerDead {
            silent_for: Duration::from_millis(350)
        })]
    );
    assert!(sim.hosts[0].closed[0]
        .as_ref()
        .unwrap()
        .to_string()
        .contains("keepalive"));
}

#[test]
fn live_idle_peers_keep_each_other_alive() {
    let cfg = keepalive_config();
    let mut sim = Sim::new(&cfg, &cfg);
    for _ in 0..500 {
        // each end wakes exactly when asked to
        let next = sim
            .hosts
            .iter()
            .filter_map(|h| h.conn.poll_timeout())
            .min()
            .unwrap();
        assert!(next > sim.now);
        sim.now = next;
        let now = sim.now;
        for h in &mut sim.hosts {
            h.conn.on_timeout(now);
        }
        sim.run_until_quiet(10_000);
        assert!(sim.hosts.iter().all(|h| h.closed.is_empty()));
    }
    let pings = sim.hosts[0].conn.stats().pings_sent + sim.hosts[1].conn.stats().pings_sent;
    assert!(pings >= 100, "idle peers probed each other ({pings} pings)");
}

#[test]
fn acknowledged_probes_keep_a_peer_alive_whose_frames_are_held_back() {
    let cfg = keepalive_config();
    let mut sim = Sim::new(&cfg, &cfg);
    let start = sim.now;
    // Host 1's frames never arrive (held back behind a long READ in its send queue, say), so
    // host 0 soon has no credit left for PINGs; but host 1's device acknowledges every probe,
    // and host 0 must not call it dead.
    let mut last_ack = start;
    for _ in 0..1000 {
        sim.now += Duration::from_millis(1);
        let now = sim.now;
        sim.hosts[0].conn.on_timeout(now);
        let before = sim.hosts[0].probes;
        sim.pump();
        sim.wires[0].clear();
        sim.hosts[0].complete_sends();
        if sim.hosts[0].probes > before {
            sim.hosts[0].conn.on_peer_acknowledged(now);
            last_ack = now;
        }
        assert!(
            sim.hosts[0].closed.is_empty(),
            "declared dead at {:?} although its device acknowledged every probe",
            now - start
        );
    }
    assert_eq!(
        sim.hosts[0].probes, 10,
        "one probe per interval without a frame from the peer"
    );
    // The acknowledgements stop (the peer's host is gone): dead one timeout after the last.
    let dead_at = last_ack + Duration::from_millis(350);
    loop {
        let next = sim.hosts[0].conn.poll_timeout().expect("still open");
        assert!(next <= dead_at, "woken at {next:?}, past {dead_at:?}");
        sim.now = next;
        sim.hosts[0].conn.on_timeout(next);
        sim.pump();
        sim.wires[0].clear();
        if !sim.hosts[0].closed.is_empty() {
            break;
        }
    }
    assert_eq!(sim.now, dead_at);
    assert_eq!(
        sim.hosts[0].closed,
        vec![Some(ConnError::PeerDead {
            silent_for: Duration::from_millis(350)
        })]
    );
}

#[test]
fn the_keepalive_timers_of_an_endpoints_connections_fall_due_together_and_little_late() {
    let interval = Duration::from_millis(100);
    let grid = interval / 2;
    let t0 = Instant::now();
    let mut cfg = keepalive_config();
    cfg.timer_epoch = Some(t0);
    // Sixty-four connections set up at moments spread over an interval.
    let mut due = BTreeSet::new();
    for k in 0..64u32 {
        let start = t0 + interval * k / 64;
        let c: Connection<Vec<u8>> = Connection::new(&cfg, &cfg.connect_info(), start).unwrap();
        let t = c.poll_timeout().expect("an open connection has a timer");
        assert!(
            t >= start + interval,
            "connection {k}: its keepalive came early"
        );
        assert!(
            t < start + interval + grid,
            "connection {k}: its keepalive waits past the grid's step"
        );
        let since = t.duration_since(t0).as_nanos();
        assert_eq!(since % grid.as_nanos(), 0, "connection {k}: off the grid");
        due.insert(t);
    }
    // One wakeup per grid point serves them all: two per interval here, not 64.
    assert!(due.len() <= 3, "{} distinct deadlines", due.len());
}
