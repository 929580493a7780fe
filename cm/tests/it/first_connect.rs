//! The first connection to a host whose neighbour entry is not cached: the kernel resolves the
//! address only when librdmacm's timer runs out, so a single long resolution used to take the
//! whole connect timeout. With the neighbour tables flushed, a connection in either direction
//! must come up well within the default timeout.
use std::net::{IpAddr, SocketAddr};
use std::process::Command;
use std::time::{Duration, Instant};

use cm::{Connector, Listener, DEFAULT_CONNECT_TIMEOUT};

use crate::support::*;

/// Forgets every neighbour (ARP) entry of the host.
fn flush_neighbours() {
    let out = testkit::run_with_timeout(
        {
            let mut c = Command::new("ip");
            c.args(["neigh", "flush", "all"]);
            c
        },
        Duration::from_secs(5),
    );
    testkit::assert_success("ip neigh flush all", &out);
}

/// Listens on `server`, connects from `client` with the default timeout right after the
/// neighbour tables were flushed, and exchanges a message.
fn first_connect(server: IpAddr, client: IpAddr, port: u16) {
    let listener = Listener::bind(SocketAddr::new(server, port), options()).unwrap();
    let dst = listener.local_addr().unwrap();
    let serve = std::thread::spawn(move || {
        let req = listener
            .get_request(DEFAULT_CONNECT_TIMEOUT + TIMEOUT)
            .unwrap();
        post_recv(req.qp(), req.pd(), 64);
        let conn = req.accept(b"", TIMEOUT).unwrap();
        let msg = wait_recv(&conn).unwrap();
        conn.disconnect(TIMEOUT).ok();
        msg
    });
    flush_neighbours();
    let started = Instant::now();
    let conn = Connector::new(dst)
        .src(client)
        .options(options())
        .connect()
        .unwrap_or_else(|e| panic!("first connect {client} -> {dst} failed: {e}"));
    eprintln!(
        "first connect {client} -> {dst} took {:?}",
        started.elapsed()
    );
    send(&conn, b"first");
    assert_eq!(serve.join().unwrap(), b"first");
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn first_connect_to_the_peer_after_a_neighbour_flush() {
    first_connect(peer_ip(), local_ip(), port(40));
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn first_connect_from_the_peer_after_a_neighbour_flush() {
    first_connect(local_ip(), peer_ip(), port(41));
}
