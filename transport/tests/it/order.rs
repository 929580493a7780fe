//! Delivery order: an eager message sent after a rendezvous message waits for it.

use transport::proto::Class;

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
