//! RPC over the simulated wire: responses match their calls, late responses are dropped and
//! counted, a server without handler fails the call with a typed error.

use std::time::Duration;

use crate::proto::{CallError, Class, ConnError, PeerGone, Received, HEADER_LEN};

use super::sim::{content, Msg, Sim, SimBuf};
use super::small_config;

fn reversed(side: usize, k: usize, len: usize) -> Vec<u8> {
    let mut v = content(side, k, len);
    v.reverse();
    v
}

#[test]
fn calls_get_their_own_responses_eager_and_rendezvous() {
    let cfg = small_config(8, 2, 8, 2, 2);
    let mut sim = Sim::new(&cfg, &cfg);
    let deadline = sim.now + Duration::from_secs(10);
    let lens = [0usize, 10, 64, 65, 300, 7, 1000];
    sim.hosts[0].to_send = lens
        .iter()
        .map(|&len| Msg {
            len,
            class: Class::Request { deadline },
        })
        .collect();
    sim.hosts[1].echo_requests = true;
    sim.run_until_quiet(1_000_000);
    let a = &sim.hosts[0];
    assert_eq!(a.calls.len(), lens.len());
    assert_eq!(a.calls_done.len(), lens.len());
    for (id, result) in &a.calls_done {
        let &(_, k) = a.calls.iter().find(|c| c.0 == *id).expect("a call we made");
        assert_eq!(
            result.as_ref().unwrap(),
            &reversed(0, k, lens[k]),
            "call {k} got its own response"
        );
    }
    let ids: Vec<_> = a.calls.iter().map(|c| c.0).collect();
    assert!(
        ids.windows(2).all(|w| w[0] < w[1]),
        "call ids are increasing, never reused"
    );
    assert!(sim.hosts[1]
        .received
        .iter()
        .all(|(c, _)| matches!(c, Received::Request { .. })));
    assert_eq!(a.conn.pending_calls(), 0);
    assert_eq!(a.conn.stats().late_responses, 0);
}

#[test]
fn late_responses_are_dropped_never_delivered_to_another_call() {
    let cfg = small_config(8, 2, 8, 2, 2);
    let mut sim = Sim::new(&cfg, &cfg);
    sim.hosts[1].echo_requests = true;
    let deadline = sim.now + Duration::from_millis(10);
    sim.hosts[0].to_send = vec![
        Msg {
            len: 5,
            class: Class::Request { deadline },
        },
        Msg {
            len: 200,
            class: Class::Request { deadline },
        },
    ];
    assert!(sim.hosts[0].send_next(0) && sim.hosts[0].send_next(0));
    sim.pump();
    // the requests sit on the wire past their deadline
    sim.tick(Duration::from_millis(10));
    sim.pump();
    let a = &sim.hosts[0];
    assert_eq!(a.calls_done.len(), 2);
    assert!(a
        .calls_done
        .iter()
        .all(|(_, r)| r == &Err(CallError::TimedOut)));
    // now the server answers both; a new call is made meanwhile
    let later = sim.now + Duration::from_secs(10);
    sim.hosts[0].to_send.push(Msg {
        len: 9,
        class: Class::Request { deadline: later },
    });
    sim.run_until_quiet(100_000);
    let a = &sim.hosts[0];
    assert_eq!(a.conn.stats().late_responses, 2);
    assert_eq!(
        a.calls_done.len(),
        3,
        "one CallDone per call, none for late responses"
    );
    let (id, r) = &a.calls_done[2];
    assert_eq!(*id, a.calls[2].0);
    assert_eq!(
        r.as_ref().unwrap(),
        &reversed(0, 2, 9),
        "the new call gets its own response"
    );
    assert_eq!(
        a.posted.get(),
        8,
        "dropped responses gave their receive back"
    );
}

#[test]
fn cancelled_call_response_is_dropped() {
    let cfg = small_config(8, 2, 8, 2, 2);
    let mut sim = Sim::new(&cfg, &cfg);
    sim.hosts[1].echo_requests = true;
    let deadline = sim.now + Duration::from_secs(10);
    sim.hosts[0].to_send = vec![Msg {
        len: 5,
        class: Class::Request { deadline },
    }];
    assert!(sim.hosts[0].send_next(0));
    let id = sim.hosts[0].calls[0].0;
    sim.hosts[0].conn.cancel_call(id);
    sim.run_until_quiet(100_000);
    assert!(sim.hosts[0].calls_done.is_empty());
    assert_eq!(sim.hosts[0].conn.stats().late_responses, 1);
}

#[test]
fn server_without_handler_fails_the_call_with_no_handler() {
    let cfg = small_config(8, 2, 8, 2, 2);
    let mut sim = Sim::new(&cfg, &cfg);
    let deadline = sim.now + Duration::from_secs(10);
    sim.hosts[0].to_send = vec![
        Msg {
            len: 5,
            class: Class::Request { deadline },
        },
        Msg {
            len: 500,
            class: Class::Request { deadline },
        },
    ];
    sim.run_until_quiet(100_000);
    let requests: Vec<_> = sim.hosts[1]
        .received
        .iter()
        .map(|(c, _)| match c {
            Received::Request { call } => *call,
            Received::Message => panic!("a request was expected"),
        })
        .collect();
    assert_eq!(requests.len(), 2);
    for call in requests {
        sim.hosts[1].conn.reject_call(call).unwrap();
    }
    sim.run_until_quiet(100_000);
    let a = &sim.hosts[0];
    assert_eq!(a.calls_done.len(), 2);
    for (_, r) in &a.calls_done {
        let e = r.as_ref().unwrap_err();
        assert_eq!(e, &CallError::NoHandler);
        assert!(e.to_string().contains("register one"), "{e}");
    }
}

#[test]
fn a_rejection_is_taken_with_the_send_queue_full_and_reaches_the_caller_after_it() {
    let cfg = small_config(8, 2, 8, 2, 2);
    let mut sim = Sim::new(&cfg, &cfg);
    let deadline = sim.now + Duration::from_secs(10);
    sim.hosts[0].to_send = vec![Msg {
        len: 5,
        class: Class::Request { deadline },
    }];
    sim.run_until_quiet(100_000);
    let call = match sim.hosts[1].received.as_slice() {
        [(Received::Request { call }, _)] => *call,
        other => panic!("one request was expected, got {other:?}"),
    };
    // The server's queue fills with messages that have not gone yet.
    let server = &mut sim.hosts[1].conn;
    let mut queued = 0;
    while !server.queue_full() {
        let mut frame = vec![0u8; HEADER_LEN];
        frame.extend_from_slice(&[7u8; 10]);
        server.send(Class::Message, SimBuf::plain(frame)).unwrap();
        queued += 1;
    }
    server.reject_call(call).unwrap();
    sim.run_until_quiet(100_000);
    let a = &sim.hosts[0];
    let messages = a
        .received
        .iter()
        .filter(|(c, b)| matches!(c, Received::Message) && b == &[7u8; 10])
        .count();
    assert_eq!(messages, queued, "every queued message arrives");
    assert_eq!(a.calls_done.len(), 1);
    assert_eq!(a.calls_done[0].1, Err(CallError::NoHandler));
}

#[test]
fn peer_gone_fails_pending_calls_and_releases_buffers() {
    let cfg = small_config(8, 2, 8, 2, 2);
    let mut sim = Sim::new(&cfg, &cfg);
    let deadline = sim.now + Duration::from_secs(10);
    sim.hosts[0].to_send = vec![
        Msg {
            len: 5,
            class: Class::Request { deadline },
        },
        Msg {
            len: 500,
            class: Class::Request { deadline },
        },
    ];
    while sim.hosts[0].send_next(0) {}
    sim.pump();
    sim.hosts[0].conn.on_peer_gone(PeerGone::Disconnected);
    sim.pump();
    let a = &sim.hosts[0];
    let gone = ConnError::PeerGone(PeerGone::Disconnected);
    assert_eq!(a.calls_done.len(), 2);
    assert!(a
        .calls_done
        .iter()
        .all(|(_, r)| r == &Err(CallError::Failed(gone.clone()))));
    assert_eq!(a.closed, vec![Some(gone)]);
    assert_eq!(
        a.exposed_chunks(),
        0,
        "announced chunks came back as Release"
    );
    assert!(a.conn.poll_timeout().is_none());
    let e = sim.hosts[0]
        .conn
        .send(Class::Message, super::sim::SimBuf::plain(vec![0; 20]))
        .unwrap_err();
    assert_eq!(e.kind, crate::proto::SendErrorKind::Closed);
    assert_eq!(e.payload.data.len(), 20, "the payload is handed back");
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(200))]

    /// Random schedules of calls with random deadlines: every call ends exactly once; a
    /// response is its own call's; every response to a timed-out call is dropped and counted.
    #[test]
    fn random_calls_end_once_with_their_own_response(
        calls in proptest::collection::vec((0usize..300, 1u64..60), 1..20),
        ops in proptest::collection::vec(0u8..12, 0..400),
        at_once in proptest::prelude::any::<bool>(),
    ) {
        let cfg = small_config(8, 2, 8, 2, 2);
        let mut sim = Sim::new(&cfg, &cfg);
        let start = sim.now;
        sim.hosts[1].echo_requests = true;
        for h in &mut sim.hosts {
            h.at_once = at_once;
            h.lone_deliveries = at_once;
        }
        sim.hosts[0].to_send = calls
            .iter()
            .map(|&(len, ms)| Msg { len, class: Class::Request { deadline: start + Duration::from_millis(ms) } })
            .collect();
        for op in ops {
            sim.step(op);
        }
        // let every deadline pass, then settle
        sim.tick(Duration::from_millis(60));
        sim.run_until_quiet(1_000_000);
        let a = &sim.hosts[0];
        proptest::prop_assert_eq!(a.calls.len(), calls.len());
        proptest::prop_assert_eq!(a.calls_done.len(), calls.len(), "each call ends exactly once");
        let mut timed_out = 0;
        for (id, result) in &a.calls_done {
            let &(_, k) = a.calls.iter().find(|c| c.0 == *id).unwrap();
            match result {
                Ok(bytes) => proptest::prop_assert_eq!(bytes, &reversed(0, k, calls[k].0)),
                Err(CallError::TimedOut) => timed_out += 1,
                Err(e) => proptest::prop_assert!(false, "unexpected {}", e),
            }
        }
        proptest::prop_assert_eq!(a.conn.stats().late_responses, timed_out);
        proptest::prop_assert_eq!(a.conn.pending_calls(), 0);
        proptest::prop_assert!(a.closed.is_empty() && sim.hosts[1].closed.is_empty());
    }
}
