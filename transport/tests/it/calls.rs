//! RPC: many calls outstanding from many threads, each matched to its own response; a call
//! that times out never receives a late response; a server without a handler answers with a
//! typed error.
use std::sync::Arc;
use std::time::Duration;

use transport::proto::CallError;
use transport::Error;

use crate::support::*;

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn concurrent_calls_get_their_own_responses() {
    let (server, client) = pair();
    let serving = std::thread::spawn(move || {
        server
            .serve(|req| {
                let mut v = req.to_vec();
                v.reverse();
                v
            })
            .unwrap();
    });
    let client = Arc::new(client);
    let callers: Vec<_> = (0..8u64)
        .map(|t| {
            let client = client.clone();
            std::thread::spawn(move || {
                for i in 0..100u64 {
                    let len = ((t * 131 + i * 17) % 9000) as usize;
                    let req = pattern(t << 32 | i, len);
                    let resp = client.call(&req, TIMEOUT).unwrap();
                    let mut expected = req;
                    expected.reverse();
                    assert!(resp.to_vec() == expected, "call {t}/{i}: wrong response");
                }
            })
        })
        .collect();
    for c in callers {
        c.join().unwrap();
    }
    Arc::try_unwrap(client).unwrap().close(TIMEOUT).unwrap();
    serving.join().unwrap();
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn a_timed_out_call_never_gets_a_late_response() {
    let (server, client) = pair();
    let slow = std::thread::spawn(move || {
        let first = server.recv_request(TIMEOUT).unwrap();
        // Answer only after the caller gave up.
        std::thread::sleep(Duration::from_millis(500));
        first.respond(b"late").unwrap();
        let second = server.recv_request(TIMEOUT).unwrap();
        second.respond(b"on time").unwrap();
        server
    });
    let r = client.call(b"first", Duration::from_millis(100));
    assert!(
        matches!(
            r,
            Err(Error::Call(CallError::TimedOut) | Error::TimedOut { .. })
        ),
        "{r:?}"
    );
    std::thread::sleep(Duration::from_millis(600));
    let resp = client.call(b"second", TIMEOUT).unwrap();
    assert_eq!(&resp.bytes()[..], b"on time");
    drop(slow.join().unwrap());
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn a_server_without_handler_answers_no_handler() {
    let server_cfg = config().with_serve_requests(false);
    let (_server, client) = pair_with(server_cfg, config());
    let r = client.call(b"anyone?", TIMEOUT);
    assert!(matches!(r, Err(Error::Call(CallError::NoHandler))), "{r:?}");
    // The connection keeps working.
    let r = client.call(b"still?", TIMEOUT);
    assert!(matches!(r, Err(Error::Call(CallError::NoHandler))), "{r:?}");
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn a_dropped_request_answers_no_handler() {
    let (server, client) = pair();
    let t = std::thread::spawn(move || {
        drop(server.recv_request(TIMEOUT).unwrap());
        server
    });
    let r = client.call(b"ignored", TIMEOUT);
    assert!(matches!(r, Err(Error::Call(CallError::NoHandler))), "{r:?}");
    drop(t.join().unwrap());
}
