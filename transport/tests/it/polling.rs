//! Every polling mode (busy, event, adaptive) carries messages and calls both ways, and a
//! mix of modes on the two ends works too.
use std::time::Duration;

use transport::{EndpointConfig, Polling};

use crate::support::*;

fn with(polling: Polling) -> EndpointConfig {
    EndpointConfig {
        polling,
        ..config()
    }
}

fn exchange(server_mode: Polling, client_mode: Polling) {
    let (server, client) = pair_with(with(server_mode), with(client_mode));
    let serving = std::thread::spawn(move || {
        for i in 0..50u64 {
            let m = server.recv(TIMEOUT).unwrap();
            assert!(m.to_vec() == pattern(i, 300), "message {i}");
        }
        server.serve(|req| req.to_vec()).unwrap();
    });
    for i in 0..50u64 {
        client.send(&pattern(i, 300)).unwrap();
    }
    for i in 0..50u64 {
        let req = pattern(1000 + i, 100 + i as usize);
        assert!(
            client.call(&req, TIMEOUT).unwrap().to_vec() == req,
            "call {i}"
        );
    }
    client.close(TIMEOUT).unwrap();
    serving.join().unwrap();
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn busy_polling_both_ends() {
    exchange(Polling::Busy, Polling::Busy);
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn event_mode_both_ends() {
    exchange(Polling::Event, Polling::Event);
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn adaptive_against_event_mode() {
    exchange(
        Polling::Adaptive {
            spin: Duration::from_micros(20),
        },
        Polling::Event,
    );
}
