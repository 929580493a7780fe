//! Messages: every size from empty through several MiB past the rendezvous threshold arrives
//! intact, in order, with its boundaries; close delivers everything, then end of stream; no
//! RNR on the wire.
use std::time::Duration;

use transport::{EndpointConfig, Error};

use crate::support::*;

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn sizes_from_empty_past_the_rendezvous_threshold_echo_intact() {
    let rnr_before = rnr_counters();
    let (server, client) = pair();
    let eager = client.eager_limit();
    let sizes = [
        0,
        1,
        100,
        eager - 1,
        eager,
        eager + 1,
        64 << 10,
        (1 << 20) - 3,
        1 << 20,
        (3 << 20) + 5,
        8 << 20,
    ];
    let echo = std::thread::spawn(move || {
        for _ in 0..sizes.len() {
            let msg = server.recv(TIMEOUT).expect("server recv");
            server.send(&msg.to_vec()).expect("echo");
        }
        server
    });
    for (i, &len) in sizes.iter().enumerate() {
        let data = pattern(i as u64, len);
        client.send(&data).unwrap();
        let back = client.recv(TIMEOUT).unwrap();
        assert_eq!(back.len(), len, "size {len}");
        assert!(
            back.to_vec() == data,
            "bytes of the {len}-byte message differ"
        );
    }
    let _server = echo.join().unwrap();
    assert_eq!(rnr_counters(), rnr_before, "RNR NAKs on the wire");
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn thousands_of_messages_keep_order_and_boundaries_then_end_of_stream() {
    let (server, client) = pair();
    let n = 3000u64;
    let sender = std::thread::spawn(move || {
        for i in 0..n {
            let len = (i as usize * 37) % 3000;
            client.send(&pattern(i, len)).unwrap();
        }
        client.close(TIMEOUT).unwrap();
    });
    for i in 0..n {
        let msg = server.recv(TIMEOUT).unwrap();
        let len = (i as usize * 37) % 3000;
        assert_eq!(msg.len(), len, "message {i}");
        assert!(msg.to_vec() == pattern(i, len), "message {i} differs");
    }
    let end = server.recv(TIMEOUT);
    assert!(matches!(end, Err(Error::Closed { cause: None })), "{end:?}");
    sender.join().unwrap();
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn both_sides_flooding_never_deadlock() {
    let (server, client) = pair();
    let n = 2000u64;
    let flood = |conn: transport::Conn, seed: u64| {
        std::thread::spawn(move || {
            let reader = {
                let conn = conn.clone();
                std::thread::spawn(move || {
                    for i in 0..n {
                        let m = conn.recv(TIMEOUT).unwrap();
                        assert!(m.to_vec() == pattern(i ^ (seed ^ 1), 512), "message {i}");
                    }
                })
            };
            for i in 0..n {
                conn.send(&pattern(i ^ seed, 512)).unwrap();
            }
            reader.join().unwrap();
        })
    };
    let a = flood(server, 0);
    let b = flood(client, 1);
    a.join().unwrap();
    b.join().unwrap();
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn a_slow_reader_is_backpressure_not_loss() {
    let (server, client) = pair();
    // The window is 32: the 33rd message cannot go until the reader frees credits.
    let mut sent = 0;
    loop {
        match client.try_send(b"x") {
            Ok(()) => sent += 1,
            Err(e) if e.is_would_block() => break,
            Err(e) => panic!("{e}"),
        }
        assert!(sent < 10_000, "no backpressure");
    }
    assert!(sent >= 30, "only {sent} sent before backpressure");
    let r = client.send_timeout(b"y", Duration::from_millis(200));
    assert!(matches!(r, Err(Error::TimedOut { .. })), "{r:?}");
    for _ in 0..sent {
        drop(server.recv(TIMEOUT).unwrap());
    }
    client.send_timeout(b"z", TIMEOUT).unwrap();
    assert_eq!(&server.recv(TIMEOUT).unwrap().bytes()[..], b"z");
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn a_one_gibibyte_message_arrives_intact() {
    const LEN: usize = 1 << 30;
    const BLOCK: usize = 1 << 20;
    // The receiver holds the whole message in its pool until it is complete.
    let server_cfg = EndpointConfig {
        pool_bytes: LEN + (64 << 20),
        ..config()
    };
    let (server, client) = pair_with(server_cfg, config());
    assert!(client.max_message() >= LEN as u64);
    // Every MiB carries its index at both ends, so a misplaced or repeated block is seen.
    let base = pattern(7, BLOCK);
    let mut data = Vec::with_capacity(LEN);
    for i in 0..(LEN / BLOCK) as u64 {
        let start = data.len();
        data.extend_from_slice(&base);
        data[start..start + 8].copy_from_slice(&i.to_le_bytes());
        data[start + BLOCK - 8..start + BLOCK].copy_from_slice(&(!i).to_le_bytes());
    }
    let big = Duration::from_secs(300);
    let sender = std::thread::spawn(move || {
        client.send_timeout(&data, big).expect("send 1 GiB");
        (client, data)
    });
    let msg = server.recv(big).expect("receive 1 GiB");
    let (_client, data) = sender.join().unwrap();
    assert_eq!(msg.len(), LEN);
    let mut offset = 0;
    for chunk in msg.chunks() {
        assert!(
            chunk == &data[offset..offset + chunk.len()],
            "bytes {offset}..{} differ",
            offset + chunk.len()
        );
        offset += chunk.len();
    }
    assert_eq!(offset, LEN);
}
