//! Graceful close: everything sent before CLOSE is delivered, then end of stream; sends after
//! it are refused. A peer that goes away after its CLOSE ends the connection gracefully only
//! when nothing it sent is missing; a close is complete once the peer has everything.

use crate::proto::{Class, ConnError, PeerGone, SendErrorKind};

use super::sim::{content, messages, Msg, Sim, SimBuf};
use super::small_config;

#[test]
fn close_delivers_everything_sent_before_then_end_of_stream() {
    let cfg = small_config(6, 2, 6, 2, 1);
    let mut sim = Sim::new(&cfg, &cfg);
    let lens = [3usize, 400, 64, 65, 0, 1000, 12];
    sim.hosts[0].to_send = messages(&lens);
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

/// Host 0 sends `lens` (with the small config: over 64 bytes by rendezvous, 50-byte chunks)
/// and closes; every frame it sends reaches host 1, whose READs complete only if `read`;
/// nothing of host 1 reaches host 0 (the window and send queue hold every frame).
fn closed_one_way(lens: &[usize], read: bool) -> Sim {
    let cfg = small_config(16, 2, 16, 2, 2);
    let mut sim = Sim::new(&cfg, &cfg);
    sim.hosts[0].to_send = messages(lens);
    while sim.hosts[0].send_next(0) {}
    sim.hosts[0].conn.close();
    for _ in 0..1000 {
        let mut any = sim.pump();
        any |= sim.deliver(0);
        if read {
            any |= sim.complete_read(1);
        }
        if !any {
            break;
        }
    }
    assert!(
        sim.wires[0].is_empty(),
        "host 0 sent everything, CLOSE last"
    );
    sim
}

#[test]
fn a_disconnect_after_close_before_the_chunks_were_read_is_an_error_not_the_end() {
    // The writer's CLOSE came after it announced the message; it went away before the
    // reader pulled it (its process ended): the reader must not see a clean end.
    let mut sim = closed_one_way(&[30, 100], false);
    sim.hosts[1].conn.on_peer_gone(PeerGone::Disconnected);
    sim.pump();
    let b = &sim.hosts[1];
    assert_eq!(
        b.received.len(),
        1,
        "the eager message before the large one"
    );
    assert_eq!(
        b.closed,
        vec![Some(ConnError::PeerGone(PeerGone::Disconnected))]
    );
    assert!(
        !sim.hosts[0].conn.delivered(),
        "the writer's close is not complete"
    );
}

#[test]
fn a_disconnect_after_close_and_everything_read_is_the_end_of_stream() {
    let mut sim = closed_one_way(&[30, 100, 7], true);
    sim.hosts[1].conn.on_peer_gone(PeerGone::Disconnected);
    sim.pump();
    let b = &sim.hosts[1];
    assert_eq!(b.received.len(), 3);
    for (k, (_, bytes)) in b.received.iter().enumerate() {
        assert_eq!(bytes, &content(0, k, [30, 100, 7][k]));
    }
    assert_eq!(b.closed, vec![None], "everything arrived: end of stream");
    // The writer never heard the acknowledgements: for it the close did not complete.
    assert!(!sim.hosts[0].conn.delivered());
}

#[test]
fn a_disconnect_with_our_own_messages_unsent_is_an_error_even_after_the_peers_close() {
    let cfg = small_config(6, 2, 6, 2, 1);
    let mut sim = Sim::new(&cfg, &cfg);
    // Host 0 queues more messages than its credit lets go; none of its frames arrive.
    sim.hosts[0].to_send = messages(&[40; 6]);
    while sim.hosts[0].send_next(0) {}
    sim.pump();
    assert!(sim.hosts[0].next > 0);
    // Host 1 closes; its CLOSE reaches host 0, then host 1 goes away.
    sim.hosts[1].conn.close();
    sim.pump();
    while sim.deliver(1) {
        sim.pump();
    }
    sim.hosts[0].conn.on_peer_gone(PeerGone::Disconnected);
    sim.pump();
    assert_eq!(
        sim.hosts[0].closed,
        vec![Some(ConnError::PeerGone(PeerGone::Disconnected))],
        "host 0's messages were lost"
    );
}

#[test]
fn a_close_is_complete_only_once_the_peer_read_everything_and_its_device_acknowledged() {
    let cfg = small_config(16, 2, 64, 2, 1);
    let mut sim = Sim::new(&cfg, &cfg);
    sim.hosts[0].to_send = [20usize, 300, 5]
        .iter()
        .map(|&len| Msg {
            len,
            class: Class::Message,
        })
        .collect();
    assert!(sim.hosts[0].conn.delivered(), "nothing sent yet");
    while sim.hosts[0].send_next(0) {}
    assert!(!sim.hosts[0].conn.delivered());
    sim.hosts[0].conn.close();
    // Everything travels and is read, but no send completion is reported to host 0.
    for _ in 0..100_000 {
        let mut any = sim.pump();
        for side in 0..2 {
            any |= sim.deliver(side);
            any |= sim.complete_read(side);
            any |= sim.hosts[side].release_one();
        }
        any |= sim.hosts[1].complete_sends();
        if !any {
            break;
        }
    }
    assert_eq!(sim.hosts[1].received.len(), 3);
    assert_eq!(sim.hosts[0].closed, vec![None], "both CLOSEs went");
    assert!(
        !sim.hosts[0].conn.delivered(),
        "its last DATA frame is not acknowledged by the peer's device yet"
    );
    sim.hosts[0].complete_sends();
    assert!(sim.hosts[0].conn.delivered());
}
