//! 1,000 connections on one endpoint, spread over four queue pairs made as they came, with
//! traffic on all of them at once, every byte checked, and the receive memory registered as
//! documented (a window of receive buffers per connection, posted per pair); then all of them
//! closed, and the pool back to its baseline.
use std::time::{Duration, Instant};

use transport::{EndpointConfig, ProtocolConfig};

use crate::support::*;

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn a_thousand_connections_on_one_endpoint() {
    let n = 1000;
    let window = 8;
    let cfg = || {
        EndpointConfig::default()
            .with_pool_bytes(128 << 20)
            .with_max_connections(n as u32)
            .with_proto(
                ProtocolConfig::default()
                    .with_window(window)
                    .with_sq_depth(16)
                    // Idle connections ping each other every interval: 2,000 of them at once
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
    // Four pairs of the default 256 connections each, on both sides.
    let pairs = n.div_ceil(256);
    assert_eq!(
        (server_ep.stats().queues, client.stats().queues),
        (pairs, pairs)
    );
    // Each pair posted its connections' windows and 32 more, a frame each. Beyond those, a
    // frame per connection at most (a message each may have waited in its inbox) and the
    // pool's last chunk (it registers 2 MiB at a time).
    let frame = (ProtocolConfig::default().frame_size() as usize).next_multiple_of(64);
    let posted = pairs * (256 * window as usize + 32) * frame;
    let registered = server_ep.stats().receive_bytes_registered;
    assert!(
        (posted..=posted + n * frame + (2 << 20)).contains(&registered),
        "{registered} bytes registered for receives, {posted} posted"
    );
    eprintln!(
        "{n} connections: {} receive bytes registered per connection",
        registered / n
    );
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
