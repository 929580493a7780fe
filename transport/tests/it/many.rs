//! 256 connections on one endpoint, spread over four queue pairs, with traffic on all of them
//! at once, every byte checked; then all of them closed, and the pool back to its baseline.
use std::time::{Duration, Instant};

use transport::{EndpointConfig, ProtocolConfig};

use crate::support::*;

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn two_hundred_fifty_six_connections_on_one_endpoint() {
    let n = 256;
    let cfg = || {
        EndpointConfig::default()
            .with_pool_bytes(128 << 20)
            .with_max_connections(n as u32)
            .with_connections_per_queue(n as u32 / 4)
            .with_proto(
                ProtocolConfig::default()
                    .with_window(8)
                    .with_sq_depth(16)
                    // Idle connections ping each other every interval: 512 of them at once
                    // are a load of their own on a software device; this test is not about
                    // dead peers.
                    .with_keepalive_interval(Duration::from_secs(5))
                    .with_keepalive_timeout(Duration::from_secs(60)),
            )
    };
    let (listener, client) = endpoints(cfg(), cfg());
    let server_ep = listener.endpoint().clone();
    let baseline = server_ep.pool().stats().buffers_in_use();
    let addr = addr_of(&listener);
    let server = std::thread::spawn(move || {
        let conns: Vec<_> = (0..n)
            .map(|_| listener.accept_timeout(TIMEOUT).unwrap())
            .collect();
        // Echo one message on every connection, in a round.
        for round in 0..4 {
            for (i, c) in conns.iter().enumerate() {
                let m = c
                    .recv(TIMEOUT)
                    .unwrap_or_else(|e| panic!("conn {i} round {round}: {e}"));
                c.send(&m.to_vec()).unwrap();
            }
        }
        conns
    });
    let started = Instant::now();
    let conns: Vec<_> = (0..n).map(|_| client.connect(addr).unwrap()).collect();
    eprintln!("{n} connections in {:?}", started.elapsed());
    for round in 0..4u64 {
        for (i, c) in conns.iter().enumerate() {
            c.send(&pattern(round << 16 | i as u64, 100 + i)).unwrap();
        }
        for (i, c) in conns.iter().enumerate() {
            let m = c.recv(TIMEOUT).unwrap();
            assert!(
                m.to_vec() == pattern(round << 16 | i as u64, 100 + i),
                "conn {i}"
            );
        }
    }
    let server_conns = server.join().unwrap();
    assert_eq!(server_ep.connections(), n);
    assert_eq!((server_ep.stats().queues, client.stats().queues), (4, 4));
    for c in &conns {
        c.close(TIMEOUT).unwrap();
    }
    drop(conns);
    drop(server_conns);
    let deadline = Instant::now() + TIMEOUT;
    while (server_ep.connections() > 0 || client.connections() > 0) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!((server_ep.connections(), client.connections()), (0, 0));
    assert!(server_ep.pool().stats().buffers_in_use() <= baseline);
}
