//! Random schedules of two peers sending to each other: every message arrives exactly once, in
//! order, intact; nobody sends without a posted receive; nothing deadlocks.

use proptest::prelude::*;

use crate::proto::{Class, Received};

use super::sim::{content, messages, Msg, Sim};
use super::small_config;

fn check_all_delivered(sim: &Sim) {
    for side in 0..2 {
        let peer = &sim.hosts[1 - side];
        let me = &sim.hosts[side];
        assert!(
            peer.all_sent(),
            "host {} could not send all its messages: deadlock",
            1 - side
        );
        assert_eq!(
            me.received.len(),
            peer.next,
            "host {side} received every message sent once"
        );
        for (k, (class, bytes)) in me.received.iter().enumerate() {
            assert_eq!(*class, Received::Message);
            assert_eq!(
                bytes,
                &content(1 - side, k, peer.to_send[k].len),
                "message {k} to host {side} intact, in order"
            );
        }
        assert_eq!(
            me.exposed_chunks(),
            0,
            "host {side}: every chunk acknowledged and released"
        );
        assert!(me.held.is_empty());
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn random_schedules_deliver_everything_in_order(
        lens_a in proptest::collection::vec(prop_oneof![0usize..=64, 65usize..400], 0..25),
        lens_b in proptest::collection::vec(prop_oneof![0usize..=64, 65usize..400], 0..25),
        ops in proptest::collection::vec(0u8..12, 0..600),
        window in 6u32..12,
        reserve in 1u32..3,
        sq_depth in 4u32..10,
        chunks in 1u32..4,
        reads in 1u32..3,
        close in any::<bool>(),
        batch in any::<bool>(),
        at_once in any::<bool>(),
        compact in any::<[bool; 2]>(),
    ) {
        let cfg = small_config(window, reserve, sq_depth, chunks, reads);
        let mut sim = Sim::new(&cfg, &cfg);
        sim.hosts[0].to_send = messages(&lens_a);
        sim.hosts[1].to_send = messages(&lens_b);
        for (h, compact) in sim.hosts.iter_mut().zip(compact) {
            h.batch = batch;
            h.at_once = at_once;
            h.lone_deliveries = at_once;
            // Each side sends plain messages as compact frames or with headers: a receiver
            // takes both, in any mix.
            h.compact = compact;
        }
        // host 0 closes once it has sent everything; host 1 then closes too
        sim.hosts[0].close_when_done = close;
        for op in ops {
            sim.step(op);
            for h in &sim.hosts {
                prop_assert!(h.closed.iter().all(|e| e.is_none()), "connection failed: {:?}", h.closed);
            }
        }
        sim.run_until_quiet(1_000_000);
        check_all_delivered(&sim);
        if !close {
            prop_assert!(sim.hosts.iter().all(|h| h.next == h.to_send.len()));
        }
        prop_assert_eq!(sim.hosts[0].next, sim.hosts[0].to_send.len(), "the side that closes first sent all");
        for h in &sim.hosts {
            prop_assert_eq!(h.posted.get(), window, "every receive buffer came back");
            if close {
                prop_assert_eq!(&h.closed, &vec![None], "graceful close on both ends");
            } else {
                prop_assert!(h.closed.is_empty());
            }
        }
    }
}

/// Both ends flood each other while their users hold every message they can: the reserve keeps
/// credit updates flowing, so neither end stalls.
#[test]
fn both_ends_flooding_never_deadlock() {
    for (batch, at_once) in [(false, false), (true, false), (false, true)] {
        both_ends_flood(batch, at_once);
    }
}

fn both_ends_flood(batch: bool, at_once: bool) {
    let cfg = small_config(6, 2, 5, 2, 1);
    let mut sim = Sim::new(&cfg, &cfg);
    let lens: Vec<usize> = (0..2000)
        .map(|i| if i % 50 == 7 { 333 } else { i % 65 })
        .collect();
    sim.hosts[0].to_send = messages(&lens);
    sim.hosts[1].to_send = messages(&lens);
    for h in &mut sim.hosts {
        h.batch = batch;
        h.at_once = at_once;
        h.lone_deliveries = at_once;
    }
    // Users release only when they hold a full window: credits run out on both sides repeatedly.
    let mut guard = 0;
    while !(sim.hosts[0].all_sent() && sim.hosts[1].all_sent())
        || sim.wires.iter().any(|w| !w.is_empty())
    {
        let mut any = false;
        for side in 0..2 {
            while sim.hosts[side].send_next(side) {
                any = true;
            }
            any |= sim.pump();
            any |= sim.deliver(side);
            any |= sim.hosts[side].complete_sends();
            any |= sim.complete_read(side);
            if sim.hosts[side].held.len() >= 6 {
                while sim.hosts[side].release_one() {}
                any = true;
            }
            any |= sim.pump();
        }
        if !any {
            // nothing moves while users hold messages: they read them (the only way out)
            for h in &mut sim.hosts {
                while h.release_one() {}
            }
            assert!(sim.pump(), "deadlock: nothing can move");
        }
        guard += 1;
        assert!(guard < 1_000_000);
    }
    sim.run_until_quiet(1_000_000);
    check_all_delivered(&sim);
    assert!(
        sim.hosts[0].conn.stats().credit_frames_sent > 0,
        "explicit credit updates were needed"
    );
}

/// While both users hold every message, keepalive probes live on the control reserve: they keep
/// both ends alive (PING and PONG return each other's credit) and never spend the last credit
/// on a frame that grants nothing, so the credits the users free later still reach the peer.
#[test]
fn probes_never_spend_the_last_credit_on_nothing() {
    let cfg =
        small_config(6, 2, 8, 2, 1).with_keepalive_timeout(std::time::Duration::from_millis(30));
    let mut sim = Sim::new(&cfg, &cfg);
    for h in &mut sim.hosts {
        h.to_send = messages(&[10; 12]);
    }
    for _ in 0..40 {
        for side in 0..2 {
            while sim.hosts[side].send_next(side) {}
        }
        sim.tick(std::time::Duration::from_millis(5));
        sim.pump();
        for side in 0..2 {
            while sim.deliver(side) {}
            sim.hosts[side].complete_sends();
        }
        sim.pump();
    }
    // let every frame in flight arrive, still without reading any message
    while sim.wires.iter().any(|w| !w.is_empty()) {
        for side in 0..2 {
            while sim.deliver(side) {}
            sim.hosts[side].complete_sends();
        }
        sim.pump();
    }
    for h in &sim.hosts {
        assert!(h.conn.stats().pings_sent > 0);
        assert!(
            h.closed.is_empty(),
            "keepalive kept working on the reserve: {:?}",
            h.closed
        );
        assert!(
            h.conn.credits_available() >= 1,
            "the last credit is kept for an update"
        );
    }
    sim.run_until_quiet(100_000);
    check_all_delivered(&sim);
}

/// A driver may skip polling for actions after a release that does not ask for it: the
/// release asks exactly when it made a credit update due (half the window unadvertised).
#[test]
fn a_release_asks_for_a_poll_only_when_it_makes_a_credit_update_due() {
    let cfg = small_config(8, 1, 16, 4, 4);
    let mut sim = Sim::new(&cfg, &cfg);
    sim.hosts[0].to_send = messages(&[10; 6]);
    while sim.hosts[0].send_next(0) {}
    sim.pump();
    while sim.deliver(0) {}
    sim.pump();
    let b = &mut sim.hosts[1];
    assert_eq!(b.held.len(), 6, "the receiver holds every message");
    let mut asked = Vec::new();
    while let Some(d) = b.held.pop_front() {
        drop(d);
        b.conn.on_release();
        let asks = b.conn.release_needs_poll();
        let action = b.conn.poll_action();
        assert_eq!(asks, action.is_some(), "release {}", asked.len() + 1);
        asked.push(asks);
        if action.is_some() {
            // The credit update: the sim's driver is not used from here on.
            break;
        }
    }
    assert_eq!(
        asked,
        [false, false, false, true],
        "an update is due at 4 of 8"
    );
}

/// Plain messages go as compact frames: the SEND carries the message alone, its header folded
/// into the immediate data, so a message of a multiple of the path MTU takes no extra packet.
/// Requests, responses and control frames keep their headers; everything arrives intact.
#[test]
fn plain_messages_travel_without_their_header() {
    let cfg = small_config(8, 2, 8, 2, 1);
    let mut sim = Sim::new(&cfg, &cfg);
    let lens = [0usize, 1, 63, 64];
    sim.hosts[0].to_send = messages(&lens);
    let deadline = sim.now + std::time::Duration::from_secs(60);
    sim.hosts[0].to_send.push(Msg {
        len: 10,
        class: Class::Request { deadline },
    });
    sim.hosts[1].echo_requests = true;
    for (k, len) in lens.into_iter().enumerate() {
        assert!(sim.hosts[0].send_next(0));
        sim.pump();
        let f = sim.wires[0].back().expect("a frame on the wire");
        assert!(f.imm.is_some(), "message {k} goes compact");
        assert_eq!(f.bytes, content(0, k, len), "the SEND is the message alone");
    }
    assert!(sim.hosts[0].send_next(0));
    sim.pump();
    let request = sim.wires[0].back().expect("the request on the wire");
    assert_eq!(request.imm, None, "a request keeps its header");
    assert_eq!(request.len(), 16 + 10);
    sim.run_until_quiet(100_000);
    assert_eq!(sim.hosts[0].compact_frames, lens.len());
    assert_eq!(
        sim.hosts[1].compact_frames, 0,
        "a response keeps its header"
    );
    assert_eq!(sim.hosts[0].calls_done.len(), 1);
    let got: Vec<Vec<u8>> = sim.hosts[1].received.iter().map(|r| r.1.clone()).collect();
    let mut want: Vec<Vec<u8>> = (0..lens.len()).map(|k| content(0, k, lens[k])).collect();
    want.push(content(0, lens.len(), 10));
    assert_eq!(got, want, "every message intact, in order");
}
