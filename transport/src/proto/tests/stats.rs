//! The connection's counters against what the simulated users did: messages and bytes each
//! way (eager, batched, stream, rendezvous), calls, timeouts, credit stalls and their time,
//! keepalive PINGs, misses and probes, and the round-trip estimate from PINGs.

use std::time::Duration;

use crate::proto::{Class, Stats};

use super::sim::{messages, Msg, Sim};
use super::small_config;

/// Lengths on both sides of the 64-byte eager limit: 3 rendezvous messages of 65 + 300 +
/// 1,000 bytes, 4 eager ones of 0 + 10 + 64 + 7.
const LENS: [usize; 7] = [0, 10, 64, 65, 300, 7, 1000];
const LARGE_BYTES: u64 = 65 + 300 + 1000;

fn total(lens: &[usize]) -> u64 {
    lens.iter().map(|&l| l as u64).sum()
}

/// Runs `LENS` from host 0 to host 1 with `setup` applied to host 0; both ends' counters.
fn run(setup: impl Fn(&mut Sim)) -> (Stats, Stats) {
    let cfg = small_config(8, 2, 8, 2, 2);
    let mut sim = Sim::new(&cfg, &cfg);
    sim.hosts[0].to_send = messages(&LENS);
    setup(&mut sim);
    sim.run_until_quiet(1_000_000);
    let received: usize = sim.hosts[1].received.iter().map(|r| r.1.len()).sum();
    assert_eq!(received as u64, total(&LENS));
    (sim.hosts[0].conn.stats(), sim.hosts[1].conn.stats())
}

#[test]
fn messages_and_bytes_count_once_each_way_whatever_carries_them() {
    for (name, setup) in [
        ("queued", (|_: &mut Sim| {}) as fn(&mut Sim)),
        ("at once", |s| s.hosts[0].at_once = true),
        ("batched", |s| s.hosts[0].batch = true),
    ] {
        let (a, b) = run(setup);
        assert_eq!(a.messages_sent, LENS.len() as u64, "{name}");
        assert_eq!(a.bytes_sent, total(&LENS), "{name}");
        assert_eq!(a.rendezvous_sent, 3, "{name}");
        assert_eq!(b.messages_received, LENS.len() as u64, "{name}");
        assert_eq!(b.bytes_received, total(&LENS), "{name}");
        assert_eq!(b.rendezvous_received, 3, "{name}");
        assert_eq!(b.read_bytes, LARGE_BYTES, "{name}");
        assert_eq!((a.messages_received, a.bytes_received), (0, 0), "{name}");
        assert_eq!((b.messages_sent, b.bytes_sent), (0, 0), "{name}");
        assert_eq!((a.calls, b.requests_received), (0, 0), "{name}");
    }
}

#[test]
fn stream_writes_count_their_bytes_once_merged_or_not() {
    let (a, b) = run(|s| s.hosts[0].stream = true);
    assert_eq!(a.bytes_sent, total(&LENS));
    assert_eq!(b.bytes_received, total(&LENS));
    assert_eq!(a.messages_sent, b.messages_received);
}

#[test]
fn calls_count_at_both_ends() {
    let cfg = small_config(8, 2, 8, 2, 2);
    let mut sim = Sim::new(&cfg, &cfg);
    sim.hosts[1].echo_requests = true;
    let deadline = sim.now + Duration::from_secs(10);
    let lens = [10usize, 64, 300];
    sim.hosts[0].to_send = lens
        .iter()
        .map(|&len| Msg {
            len,
            class: Class::Request { deadline },
        })
        .collect();
    sim.run_until_quiet(1_000_000);
    let (a, b) = (sim.hosts[0].conn.stats(), sim.hosts[1].conn.stats());
    let n = lens.len() as u64;
    assert_eq!(sim.hosts[0].calls_done.len() as u64, n);
    assert_eq!((a.calls, a.responses_received, a.call_timeouts), (n, n, 0));
    assert_eq!((a.messages_sent, a.bytes_sent), (n, 374));
    assert_eq!((a.messages_received, a.bytes_received), (n, 374));
    assert_eq!((b.requests_received, b.responses_sent), (n, n));
    assert_eq!((b.messages_received, b.messages_sent), (n, n));
    assert_eq!((a.rendezvous_sent, b.rendezvous_sent), (1, 1));
}

#[test]
fn a_call_past_its_deadline_counts_as_a_timeout_and_its_answer_as_late() {
    // No PING in the 10 ms: its answer would be a sample.
    let cfg = small_config(8, 2, 8, 2, 2).with_keepalive_interval(Duration::from_secs(1));
    let mut sim = Sim::new(&cfg, &cfg);
    sim.hosts[1].echo_requests = true;
    sim.hosts[0].to_send = vec![Msg {
        len: 5,
        class: Class::Request {
            deadline: sim.now + Duration::from_millis(10),
        },
    }];
    assert!(sim.hosts[0].send_next(0));
    sim.pump();
    sim.tick(Duration::from_millis(10));
    sim.run_until_quiet(100_000);
    let a = sim.hosts[0].conn.stats();
    assert_eq!((a.calls, a.call_timeouts), (1, 1));
    assert_eq!((a.responses_received, a.late_responses), (0, 1));
    assert_eq!(
        (a.rtt, a.rtt_samples),
        (None, 0),
        "a late answer is never taken"
    );
    assert_eq!(a.messages_received, 0, "a late answer is not delivered");
}

#[test]
fn a_full_receive_window_is_one_credit_stall_timed_until_credit_returns() {
    // 4 credits, 1 reserved for control frames: 3 messages go, the rest wait.
    let cfg = small_config(4, 1, 8, 2, 2);
    let mut sim = Sim::new(&cfg, &cfg);
    sim.hosts[0].to_send = messages(&[8; 6]);
    while sim.hosts[0].send_next(0) {}
    sim.pump();
    let a = sim.hosts[0].conn.stats();
    assert_eq!(a.credit_stalls, 1, "one stall however often it is seen");
    assert!(sim.hosts[0].conn.stall_unstamped());
    let start = sim.now;
    sim.hosts[0].conn.stamp_stall(start);
    assert!(!sim.hosts[0].conn.stall_unstamped());
    // The receiver holds what arrived; 5 ms later it releases it and credit goes back.
    while sim.deliver(0) {}
    sim.pump();
    sim.now += Duration::from_millis(5);
    while sim.hosts[1].release_one() {}
    sim.pump();
    while sim.deliver(1) {}
    sim.pump();
    let a = sim.hosts[0].conn.stats();
    assert_eq!(a.credit_stalls, 1);
    assert_eq!(a.credit_stall_time, Duration::from_millis(5));
    sim.run_until_quiet(100_000);
    assert_eq!(sim.hosts[1].received.len(), 6);
    let a = sim.hosts[0].conn.stats();
    assert_eq!(a.messages_sent, 6);
    assert_eq!(a.send_queue_stalls, 0);
}

#[test]
fn pings_answered_give_samples_and_unanswered_ones_count_as_misses() {
    let cfg = small_config(8, 2, 8, 2, 2)
        .with_keepalive_interval(Duration::from_millis(100))
        .with_keepalive_timeout(Duration::from_secs(10));
    let mut sim = Sim::new(&cfg, &cfg);
    // Host 1 is silent and hears nothing for 350 ms: PINGs at 100, 200 and 300 ms, the last
    // two finding the one before unanswered.
    for _ in 0..350 {
        sim.now += Duration::from_millis(1);
        let now = sim.now;
        sim.hosts[0].conn.on_timeout(now);
        sim.pump();
        sim.wires[0].clear();
        sim.hosts[0].complete_sends();
    }
    let a = sim.hosts[0].conn.stats();
    assert_eq!((a.pings_sent, a.keepalive_misses), (3, 2));
    assert_eq!(a.probes_sent, 3, "a probe per silent interval");
    assert_eq!(a.rtt, None);
    // Now the peer answers the next PING 4 ms after it goes.
    loop {
        sim.now += Duration::from_millis(1);
        let now = sim.now;
        sim.hosts[0].conn.on_timeout(now);
        sim.pump();
        if !sim.wires[0].is_empty() {
            break;
        }
    }
    while sim.deliver(0) {}
    sim.pump();
    sim.now += Duration::from_millis(4);
    while sim.deliver(1) {}
    sim.pump();
    let a = sim.hosts[0].conn.stats();
    assert_eq!((a.pings_sent, a.keepalive_misses), (4, 3));
    assert_eq!(a.rtt, Some(Duration::from_millis(4)));
}

#[test]
fn sums_add_every_counter_and_weigh_the_round_trip_estimates() {
    let mut a = Stats {
        messages_sent: 2,
        bytes_sent: 10,
        rtt: Some(Duration::from_millis(2)),
        rtt_samples: 1,
        ..Stats::default()
    };
    let b = Stats {
        messages_sent: 3,
        credit_stall_time: Duration::from_millis(4),
        rtt: Some(Duration::from_millis(6)),
        rtt_samples: 3,
        ..Stats::default()
    };
    a += b;
    assert_eq!((a.messages_sent, a.bytes_sent), (5, 10));
    assert_eq!(a.credit_stall_time, Duration::from_millis(4));
    assert_eq!((a.rtt, a.rtt_samples), (Some(Duration::from_millis(5)), 4));
    a += Stats::default();
    assert_eq!(a.rtt, Some(Duration::from_millis(5)), "nothing to weigh");
}

/// The events of what the counters count (feature `tracing`): a keepalive miss, and a credit
/// stall past `STALL_REPORTED` (a shorter one raises none), named by the connection's label.
#[cfg(feature = "tracing")]
#[test]
fn misses_and_long_stalls_are_events_of_the_labelled_connection() {
    use testkit::tracing_capture::capture;

    let cfg = small_config(4, 1, 8, 2, 2)
        .with_keepalive_interval(Duration::from_millis(100))
        .with_keepalive_timeout(Duration::from_secs(10));
    let mut sim = Sim::new(&cfg, &cfg);
    sim.hosts[0].conn.set_label(42);
    let ((), events) = capture("transport", || {
        // Two credit stalls: 5 ms (not reported), then 12 ms.
        for wait_ms in [5, 12] {
            sim.hosts[0].to_send.extend(messages(&[8; 6]));
            while sim.hosts[0].send_next(0) {}
            sim.pump();
            sim.hosts[0].conn.stamp_stall(sim.now);
            while sim.deliver(0) {}
            sim.pump();
            sim.now += Duration::from_millis(wait_ms);
            while sim.hosts[1].release_one() {}
            sim.pump();
            while sim.deliver(1) || sim.deliver(0) {}
            sim.pump();
            sim.hosts[0].complete_sends();
            sim.hosts[1].complete_sends();
            while sim.hosts[1].release_one() {}
            sim.pump();
            while sim.deliver(1) || sim.deliver(0) {}
            sim.pump();
        }
        // Silence past two keepalive intervals: the second PING finds the first unanswered.
        for _ in 0..250 {
            sim.now += Duration::from_millis(1);
            let now = sim.now;
            sim.hosts[0].conn.on_timeout(now);
            sim.pump();
            sim.wires[0].clear();
            sim.hosts[0].complete_sends();
        }
    });
    let stalls: Vec<_> = events
        .iter()
        .filter(|e| e.message.starts_with("stalled for credit"))
        .collect();
    assert_eq!(stalls.len(), 1, "only the 12 ms stall: {events:#?}");
    assert_eq!(stalls[0].field("stalled"), Some("12ms"));
    assert_eq!(stalls[0].field("qp"), Some("42"));
    let misses: Vec<_> = events
        .iter()
        .filter(|e| e.message == "keepalive PING unanswered")
        .collect();
    assert_eq!(misses.len(), 1, "{events:#?}");
    assert_eq!(misses[0].field("qp"), Some("42"));
    assert_eq!(sim.hosts[0].conn.stats().credit_stalls, 2);
}
