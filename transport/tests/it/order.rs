//! Delivery order: an eager message sent after a rendezvous message waits for it. The time
//! a large message last moved, which a driver's waits go by.

use std::time::Duration;

use transport::proto::{Class, MAX_STEP_GAP};

use crate::sim::{content, Msg, Sim};
use crate::small_config;

#[test]
fn eager_message_waits_behind_an_incomplete_rendezvous() {
    let cfg = small_config(8, 2, 8, 2, 2);
    let mut sim = Sim::new(&cfg, &cfg);
    sim.hosts[0].to_send = vec![
        Msg {
            len: 120,
            class: Class::Message,
        },
        Msg {
            len: 5,
            class: Class::Message,
        },
    ];
    while sim.hosts[0].send_next(0) {}
    sim.pump();
    // START, two CHUNKs (50 + 50 of 120: at most two in flight), nothing else yet
    assert_eq!(sim.wires[0].len(), 3);
    while sim.deliver(0) {}
    sim.pump();
    sim.complete_read(1);
    sim.pump();
    assert!(
        sim.hosts[1].received.is_empty(),
        "nothing delivered while the first message is incomplete"
    );
    // the ACK frees a chunk slot: the third chunk and then the eager message follow
    while sim.deliver(1) {}
    sim.pump();
    assert_eq!(sim.wires[0].len(), 2, "last CHUNK, then DATA");
    while sim.deliver(0) {}
    sim.pump();
    assert!(
        sim.hosts[1].received.is_empty(),
        "the eager message waits behind the rendezvous"
    );
    while sim.complete_read(1) {
        sim.pump();
    }
    let got: Vec<_> = sim.hosts[1].received.iter().map(|r| r.1.clone()).collect();
    assert_eq!(got, vec![content(0, 0, 120), content(0, 1, 5)]);
}

#[test]
fn a_large_message_stamps_each_step_and_its_pace_and_an_eager_one_neither() {
    let cfg = small_config(8, 2, 8, 2, 2);
    let mut sim = Sim::new(&cfg, &cfg);
    let msg = |len| Msg {
        len,
        class: Class::Message,
    };
    const MS: Duration = Duration::from_millis(1);
    sim.hosts[0].to_send = vec![msg(5)];
    sim.hosts[0].send_next(0);
    sim.pump();
    while sim.deliver(0) {}
    sim.pump();
    assert_eq!(sim.hosts[1].received.len(), 1);
    assert_eq!(sim.hosts[1].conn.last_transfer_step(), None, "eager: none");
    assert_eq!(sim.hosts[0].conn.last_transfer_step(), None);

    sim.hosts[0].to_send.push(msg(120));
    while sim.hosts[0].send_next(0) {}
    sim.pump();
    sim.tick(MS);
    let started = sim.now;
    // START and the first CHUNKs, back to back: no gap yet.
    while sim.deliver(0) {}
    sim.pump();
    let step = |sim: &Sim, side: usize| sim.hosts[side].conn.last_transfer_step();
    assert_eq!(step(&sim, 1), Some((started, Duration::ZERO)), "START");
    assert_eq!(step(&sim, 0), None);
    sim.tick(MS);
    sim.complete_read(1);
    sim.pump();
    let read = sim.now;
    assert_eq!(
        step(&sim, 1),
        Some((read, MS)),
        "READ done, a millisecond on"
    );
    sim.tick(MS);
    while sim.deliver(1) {}
    assert_eq!(
        step(&sim, 0),
        Some((sim.now, Duration::ZERO)),
        "the peer's ACK"
    );
    sim.run_until_quiet(10_000);
    assert_eq!(sim.hosts[1].received.len(), 2);
    let (done, gap) = step(&sim, 1).unwrap();
    assert!(done > read, "the last READ");
    // Steps at once after it take the gap down by an eighth each, never at once to zero.
    assert!(gap > Duration::ZERO && gap <= MS, "{gap:?}");
    // The stamp stays after the message is through: a driver's waits tell by its age.
    sim.tick(5 * MS);
    assert_eq!(step(&sim, 1), Some((done, gap)));

    // A pause longer than MAX_STEP_GAP between two messages is no step's gap.
    sim.tick(MAX_STEP_GAP);
    sim.hosts[0].to_send.push(msg(120));
    while sim.hosts[0].send_next(0) {}
    sim.pump();
    // Frames up to the START (a credit update may come first).
    while step(&sim, 1).unwrap().0 < sim.now {
        assert!(sim.deliver(0), "no START");
    }
    assert_eq!(step(&sim, 1), Some((sim.now, gap)), "the pause left out");
}
