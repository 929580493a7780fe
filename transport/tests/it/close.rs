//! Graceful close: everything sent before CLOSE is delivered, then end of stream; sends after
//! it are refused.

use transport::proto::{Class, SendErrorKind};

use crate::sim::{content, Msg, Sim, SimBuf};
use crate::small_config;

#[test]
fn close_delivers_everything_sent_before_then_end_of_stream() {
    let cfg = small_config(6, 2, 6, 2, 1);
    let mut sim = Sim::new(&cfg, &cfg);
    let lens = [3usize, 400, 64, 65, 0, 1000, 12];
    sim.hosts[0].to_send = lens
        .iter()
        .map(|&len| Msg {
            len,
            class: Class::Message,
        })
        .collect();
    while sim.hosts[0].send_next(0) {}
    let queued = sim.hosts[0].next;
    sim.hosts[0].conn.close();
    let e = sim.hosts[0]
        .conn
        .send(Class::Message, SimBuf::plain(vec![0; 16]))
        .unwrap_err();
    assert_eq!(e.kind, SendErrorKind::Closed);
    assert_eq!(
        sim.hosts[0]
            .conn
            .send_large(Class::Message, 1000)
            .unwrap_err(),
        SendErrorKind::Closed
    );
    sim.run_until_quiet(100_000);
    let b = &sim.hosts[1];
    assert_eq!(b.received.len(), queued);
    for (k, (_, bytes)) in b.received.iter().enumerate() {
        assert_eq!(bytes, &content(0, k, lens[k]));
    }
    assert_eq!(b.closed, vec![None], "end of stream after the messages");
    assert_eq!(sim.hosts[0].closed, vec![None]);
    assert!(sim
        .hosts
        .iter()
        .all(|h| h.conn.is_closed() && h.exposed_chunks() == 0));
}

#[test]
fn peer_close_while_both_send_flushes_both_directions() {
    let cfg = small_config(6, 2, 6, 2, 1);
    let mut sim = Sim::new(&cfg, &cfg);
    for side in 0..2 {
        sim.hosts[side].to_send = (0..30)
            .map(|i| Msg {
                len: (i * 37) % 200,
                class: Class::Message,
            })
            .collect();
    }
    sim.hosts[0].close_when_done = true;
    sim.run_until_quiet(1_000_000);
    for side in 0..2 {
        assert_eq!(
            sim.hosts[side].received.len(),
            30,
            "host {side} got everything"
        );
        assert_eq!(sim.hosts[side].closed, vec![None]);
    }
}
