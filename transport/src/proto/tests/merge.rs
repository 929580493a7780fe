//! Byte-stream coalescing in the protocol core: writes that come while a signaled stream
//! frame is unfinished join one waiting message, which goes when that frame completes or
//! when it is full; the bytes arrive intact and in order whatever the schedule.

use proptest::prelude::*;

use crate::proto::conn::MERGE_SIGNAL_EVERY;
use crate::proto::Received;

use super::sim::{content, messages, Sim};
use super::small_config;

/// What `side` sent as one byte sequence, and what its peer received.
fn sent_and_received(sim: &Sim, side: usize) -> (Vec<u8>, Vec<u8>) {
    let me = &sim.hosts[side];
    let mut sent: Vec<u8> = (0..me.next)
        .flat_map(|k| content(side, k, me.to_send[k].len))
        .collect();
    if me.partial > 0 {
        // A write taken in part before the connection closed: its first bytes went.
        sent.extend_from_slice(&content(side, me.next, me.to_send[me.next].len)[..me.partial]);
    }
    let peer = &sim.hosts[1 - side];
    assert!(peer
        .received
        .iter()
        .all(|(class, _)| *class == Received::Message));
    let received = peer.received.iter().flat_map(|r| r.1.clone()).collect();
    (sent, received)
}

#[test]
fn writes_behind_an_unfinished_signaled_frame_join_one_message() {
    let every = MERGE_SIGNAL_EVERY as usize;
    // Room for `every` frames unacknowledged and then some.
    let depth = every as u32 + 8;
    let cfg = small_config(depth, 2, depth, 2, 2);
    let mut sim = Sim::new(&cfg, &cfg);
    sim.hosts[0].stream = true;
    // 10-byte writes: the first `every` go at once, the last of them signaled.
    sim.hosts[0].to_send = messages(&vec![10; every + 20]);
    for _ in 0..every {
        assert!(sim.hosts[0].send_next(0));
        sim.pump();
    }
    assert_eq!((sim.hosts[0].frames, sim.hosts[0].signaled), (every, 1));
    // The next writes wait, in one message, while that frame is unfinished.
    for _ in 0..5 {
        assert!(sim.hosts[0].send_next(0));
        sim.pump();
    }
    assert_eq!(sim.hosts[0].frames, every, "nothing more sent");
    assert_eq!(sim.hosts[0].conn.stats().writes_merged, 4);
    while sim.deliver(0) {}
    sim.pump();
    // The frame completes: the waiting message goes, signaled, so the next writes wait too.
    sim.hosts[0].complete_sends();
    sim.pump();
    assert_eq!((sim.hosts[0].frames, sim.hosts[0].signaled), (every + 1, 2));
    while sim.deliver(0) {}
    sim.pump();
    let got = &sim.hosts[1].received;
    assert_eq!(got.len(), every + 1);
    assert_eq!(got[every].1.len(), 50, "five writes in one message");
    // The 64-byte eager limit fills a waiting message: six writes wait, the seventh fills it
    // (4 of its 10 bytes), and the full message goes while the frame before it is unfinished.
    for _ in 0..6 {
        assert!(sim.hosts[0].send_next(0));
        sim.pump();
    }
    assert_eq!(sim.hosts[0].frames, every + 1, "60 bytes wait");
    assert!(sim.hosts[0].send_next(0));
    sim.pump();
    assert_eq!(
        sim.hosts[0].frames,
        every + 2,
        "a full message does not wait"
    );
    assert_eq!(sim.hosts[0].partial, 4, "the write was taken in part");
    let (sent, received) = {
        sim.run_until_quiet(100_000);
        sent_and_received(&sim, 0)
    };
    assert_eq!(sim.hosts[0].next, every + 20);
    assert_eq!(received, sent);
}

#[test]
fn a_write_after_the_frames_before_it_completed_goes_at_once() {
    let cfg = small_config(16, 2, 16, 2, 2);
    let mut sim = Sim::new(&cfg, &cfg);
    sim.hosts[0].stream = true;
    let n = 3 * MERGE_SIGNAL_EVERY as usize;
    sim.hosts[0].to_send = messages(&vec![7; n]);
    // Request and answer: each write's frames completed before the next write.
    for k in 0..n {
        assert!(sim.hosts[0].send_next(0));
        sim.pump();
        assert_eq!(sim.hosts[0].frames, k + 1, "write {k} went at once");
        while sim.deliver(0) {}
        sim.hosts[0].complete_sends();
        sim.pump();
        // The reader keeps up: credit comes back.
        while sim.hosts[1].release_one() {}
        sim.pump();
        while sim.deliver(1) {}
        sim.pump();
    }
    assert_eq!(sim.hosts[0].conn.stats().writes_merged, 0);
    assert_eq!(
        sim.hosts[0].signaled, 3,
        "one frame in MERGE_SIGNAL_EVERY signaled"
    );
}

#[test]
fn plain_messages_sent_on_their_own_never_wait_and_signal_only_while_coalescing() {
    let n = 3 * MERGE_SIGNAL_EVERY as usize;
    for coalescing in [true, false] {
        let cfg = small_config(n as u32 + 8, 2, n as u32 + 8, 2, 2);
        let mut sim = Sim::new(&cfg, &cfg);
        sim.hosts[0].conn.set_coalescing(coalescing);
        sim.hosts[0].to_send = messages(&vec![10; n]);
        while sim.hosts[0].send_next(0) {}
        sim.pump();
        assert_eq!(sim.hosts[0].frames, n, "nothing waits");
        let signaled = if coalescing { 3 } else { 0 };
        assert_eq!(sim.hosts[0].signaled, signaled);
        assert_eq!(sim.hosts[0].conn.stats().writes_merged, 0);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    /// Both ends write streams (small writes merge, large ones go by rendezvous) under random
    /// schedules: every byte arrives once, in order; nobody sends without a posted receive;
    /// nothing waits forever.
    #[test]
    fn random_stream_schedules_deliver_every_byte_in_order(
        lens_a in proptest::collection::vec(prop_oneof![0usize..=64, 65usize..300], 0..40),
        lens_b in proptest::collection::vec(prop_oneof![0usize..=64, 65usize..300], 0..40),
        ops in proptest::collection::vec(0u8..12, 0..600),
        window in 6u32..12,
        sq_depth in 4u32..10,
        close in any::<bool>(),
        at_once in any::<bool>(),
    ) {
        let cfg = small_config(window, 2, sq_depth, 2, 2);
        let mut sim = Sim::new(&cfg, &cfg);
        sim.hosts[0].to_send = messages(&lens_a);
        sim.hosts[1].to_send = messages(&lens_b);
        for h in &mut sim.hosts {
            h.stream = true;
            h.at_once = at_once;
            h.lone_deliveries = at_once;
        }
        sim.hosts[0].close_when_done = close;
        for op in ops {
            sim.step(op);
        }
        sim.run_until_quiet(1_000_000);
        for side in 0..2 {
            prop_assert!(sim.hosts[side].all_sent(), "host {} could not write everything", side);
            let (sent, received) = sent_and_received(&sim, side);
            prop_assert_eq!(received, sent, "the bytes of host {}", side);
            prop_assert!(sim.hosts[side].closed.iter().all(|e| e.is_none()));
            prop_assert_eq!(sim.hosts[side].posted.get(), window, "every receive came back");
        }
    }
}

#[test]
fn a_write_that_answers_the_peer_neither_waits_nor_is_signaled() {
    let every = MERGE_SIGNAL_EVERY as usize;
    let cfg = small_config(every as u32 + 8, 2, every as u32 + 40, 2, 2);
    let mut sim = Sim::new(&cfg, &cfg);
    sim.hosts[0].stream = true;
    sim.hosts[1].stream = true;
    sim.hosts[0].to_send = messages(&[9; 12]);
    sim.hosts[1].to_send = messages(&[9; 12]);
    // Ping-pong of writes, no completion ever reported: every write answers the peer's.
    for k in 0..12 {
        for side in 0..2 {
            assert!(sim.hosts[side].send_next(side));
            sim.pump();
            assert_eq!(
                sim.hosts[side].frames,
                k + 1,
                "host {side}'s write {k} went at once"
            );
            while sim.deliver(side) {}
            sim.pump();
            while sim.hosts[1 - side].release_one() {}
            sim.pump();
        }
    }
    // Host 0's first write answered nothing: it alone counts towards a signal.
    assert_eq!(sim.hosts[0].signaled + sim.hosts[1].signaled, 0);
    assert_eq!(sim.hosts[0].conn.stats().writes_merged, 0);
    // Without an answer in between, the writes wait again.
    for h in &mut sim.hosts {
        h.complete_sends();
    }
    sim.pump();
    let before = sim.hosts[0].frames;
    sim.hosts[0].to_send.extend(messages(&vec![9; every + 4]));
    for _ in 0..every + 4 {
        assert!(sim.hosts[0].send_next(0));
        sim.pump();
    }
    // The first answers host 1's last write; `every - 1` more go, the last of them signaled
    // (with host 0's very first write, which answered nothing, that makes
    // MERGE_SIGNAL_EVERY); the other four wait in one message.
    assert_eq!(sim.hosts[0].frames - before, every);
    assert_eq!(sim.hosts[0].signaled, 1);
    assert_eq!(sim.hosts[0].conn.stats().writes_merged, 3);
    sim.run_until_quiet(100_000);
    for side in 0..2 {
        let (sent, received) = sent_and_received(&sim, side);
        assert_eq!(received, sent);
    }
}

#[test]
fn messages_behind_an_unfinished_signaled_frame_travel_in_one_batch() {
    let every = MERGE_SIGNAL_EVERY as usize;
    let cfg = small_config(every as u32 + 8, 2, every as u32 + 8, 2, 2);
    let mut sim = Sim::new(&cfg, &cfg);
    sim.hosts[0].batch = true;
    // Five 8-byte messages fill 60 of a batch's 64 bytes (each has a 4-byte length first).
    sim.hosts[0].to_send = messages(&vec![8; every + 7]);
    for _ in 0..every + 5 {
        assert!(sim.hosts[0].send_next(0));
        sim.pump();
    }
    // The first frames went on their own, the last of them signaled; five wait in one batch.
    assert_eq!((sim.hosts[0].frames, sim.hosts[0].signaled), (every, 1));
    assert_eq!(sim.hosts[0].conn.stats().messages_batched, 4);
    while sim.deliver(0) {}
    sim.hosts[0].complete_sends();
    sim.pump();
    assert_eq!((sim.hosts[0].frames, sim.hosts[0].signaled), (every + 1, 2));
    while sim.deliver(0) {}
    sim.pump();
    let got = &sim.hosts[1].received;
    assert_eq!(got.len(), every + 5, "each message of the batch on its own");
    for (k, (class, bytes)) in got.iter().enumerate() {
        assert_eq!(*class, Received::Message);
        assert_eq!(bytes, &content(0, k, 8), "message {k}");
    }
    // The batch's receive buffer comes back with the last of its messages, not before.
    let window = cfg.window();
    for _ in 0..every {
        assert!(sim.hosts[1].release_one());
    }
    assert_eq!(
        sim.hosts[1].posted.get(),
        window - 1,
        "only the batch's buffer is out"
    );
    for _ in 0..4 {
        assert!(sim.hosts[1].release_one());
        assert_eq!(
            sim.hosts[1].posted.get(),
            window - 1,
            "the batch is still read"
        );
    }
    assert!(sim.hosts[1].release_one());
    assert_eq!(sim.hosts[1].posted.get(), window);
    sim.run_until_quiet(100_000);
    assert_eq!(sim.hosts[1].received.len(), every + 7);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    /// One end sends plain messages in batches (small ones; large ones by rendezvous between
    /// them) under random schedules, the other releases them at random: every message arrives
    /// once, on its own, in order, intact; every receive buffer comes back.
    #[test]
    fn random_batch_schedules_deliver_every_message_once_in_order(
        lens in proptest::collection::vec(prop_oneof![0usize..=60, 61usize..200], 0..60),
        ops in proptest::collection::vec(0u8..12, 0..800),
        window in 6u32..12,
        sq_depth in 4u32..10,
    ) {
        let cfg = small_config(window, 2, sq_depth, 2, 2);
        let mut sim = Sim::new(&cfg, &cfg);
        sim.hosts[0].to_send = messages(&lens);
        sim.hosts[0].batch = true;
        for op in ops {
            sim.step(op);
        }
        sim.run_until_quiet(1_000_000);
        prop_assert!(sim.hosts[0].all_sent());
        let got = &sim.hosts[1].received;
        prop_assert_eq!(got.len(), lens.len());
        for (k, (class, bytes)) in got.iter().enumerate() {
            prop_assert_eq!(*class, Received::Message);
            prop_assert_eq!(bytes, &content(0, k, lens[k]), "message {}", k);
        }
        for h in &sim.hosts {
            prop_assert!(h.closed.is_empty());
            prop_assert_eq!(h.posted.get(), window, "every receive came back");
        }
    }
}
