//! Delivery order: an eager message sent after a rendezvous message waits for it; one taken
//! straight to the wire goes only with nothing ahead of it. The time a large message last
//! moved, which a driver's waits go by.

use std::time::Duration;

use crate::proto::Class;

use super::sim::{content, Msg, Sim};
use super::small_config;

/// Messages go straight to the wire while credits and send-queue slots last; the first that
/// cannot go queues, and every later one queues behind it (a refused `send_at_once` changes
/// nothing). All arrive once, in order, intact.
#[test]
fn messages_go_at_once_until_one_waits_then_queue_behind_it_in_order() {
    // 6 credits, 1 reserved: 5 data frames before the peer returns any.
    let cfg = small_config(6, 1, 12, 2, 1);
    let mut sim = Sim::new(&cfg, &cfg);
    sim.hosts[1].lone_deliveries = true;
    let h = &mut sim.hosts[0];
    h.at_once = true;
    h.to_send = (0..9)
        .map(|k| Msg {
            len: 5 + k,
            class: Class::Message,
        })
        .collect();
    while h.send_next(0) {}
    assert_eq!(h.frames, 5, "five went at once (nothing is drained yet)");
    assert!(h.next > 5, "later messages were queued");
    let before = h.conn.stats();
    assert_eq!(h.conn.send_at_once(Class::Message, 3), None);
    assert_eq!(h.conn.stats(), before, "a refusal changes nothing");
    let deadline = std::time::Instant::now() + Duration::from_secs(1);
    assert!(
        h.conn
            .send_at_once(Class::Request { deadline }, 3)
            .is_none(),
        "a request waits behind the queue too"
    );
    sim.run_until_quiet(100_000);
    let b = &sim.hosts[1];
    assert_eq!(b.received.len(), 9);
    assert!(b.lone > 0, "some frames left only their message to deliver");
    for (k, (_, bytes)) in b.received.iter().enumerate() {
        assert_eq!(bytes, &content(0, k, 5 + k), "message {k}");
    }
    // With nothing ahead again, a request goes at once with its call id.
    let f = sim.hosts[0]
        .conn
        .send_at_once(Class::Request { deadline }, 3)
        .expect("nothing ahead");
    assert!(f.call.is_some());
}

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
