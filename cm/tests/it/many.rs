//! Many concurrent connections to one listener.
use std::net::SocketAddr;
use std::time::Instant;

use crate::support::*;

const CLIENTS: usize = 16;

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn sixteen_clients_at_once_on_one_listener() {
    let port = port(4);
    let peer = spawn_peer_server(port, &["--count", &CLIENTS.to_string()]);
    let dst = SocketAddr::new(peer_ip(), port);
    let started = Instant::now();
    let barrier = std::sync::Arc::new(std::sync::Barrier::new(CLIENTS));
    let threads: Vec<_> = (0..CLIENTS)
        .map(|i| {
            let barrier = barrier.clone();
            std::thread::spawn(move || {
                barrier.wait();
                let tag = format!("client {i}");
                let conn = connect_retry(dst, tag.as_bytes(), TIMEOUT * 2);
                assert!(conn.private_data()[16..].starts_with(tag.as_bytes()));
                write_then_read(&conn, i as u8);
                echo(&conn, tag.as_bytes());
                conn.disconnect(TIMEOUT).unwrap();
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    eprintln!("{CLIENTS} clients done in {:?}", started.elapsed());
    let out = finish_peer(peer);
    assert_eq!(out.matches("accepted").count(), CLIENTS, "{out}");
    assert!(out.contains(&format!("served {CLIENTS}")), "{out}");
}
