//! The first connection to a host whose neighbour entry is not cached: the kernel resolves the
//! address only when librdmacm's timer runs out, so a single long resolution used to take the
//! whole connect timeout. With the neighbour tables flushed, a connection in either direction
//! must come up well within the default timeout: an RC connection, and a UD request whose
//! answer gives the client an address handle.
use std::net::{IpAddr, SocketAddr};
use std::process::Command;
use std::time::{Duration, Instant};

use cm::{Connector, Listener, UdConnector, UdListener, DEFAULT_CONNECT_TIMEOUT};
use verbs::{WcOpcode, GRH_LEN};

use crate::support::*;
use crate::ud::{pattern, post_recv_ud, send_ud, wait_one_ud};

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

/// A UD request from `client` to a listener on `server`, with the default timeout, right
/// after the neighbour tables were flushed; then a datagram through the answer's address
/// handle, verified at the server.
fn first_ud_connect(server: IpAddr, client: IpAddr, port: u16) {
    let listener = UdListener::bind(SocketAddr::new(server, port)).unwrap();
    let dst = listener.local_addr().unwrap();
    let data = pattern(500, 3);
    let expected = data.clone();
    let serve = std::thread::spawn(move || {
        let (ep, _) = listener
            .accept(DEFAULT_CONNECT_TIMEOUT + TIMEOUT, |ep| {
                post_recv_ud(ep, 1024);
                Ok(())
            })
            .unwrap();
        let (c, mr, _) = wait_one_ud(&ep);
        assert_eq!((c.status, c.opcode), (Ok(()), Some(WcOpcode::Recv)));
        assert_eq!(c.byte_len as usize, GRH_LEN + expected.len());
        let mr = mr.unwrap();
        assert_eq!(
            &mr.as_slice()[GRH_LEN..GRH_LEN + expected.len()],
            &expected[..]
        );
    });
    flush_neighbours();
    let started = Instant::now();
    let (ep, peer) = UdConnector::new(dst)
        .src(client)
        .connect()
        .unwrap_or_else(|e| panic!("first UD request {client} -> {dst} failed: {e}"));
    eprintln!(
        "first UD request {client} -> {dst} took {:?}",
        started.elapsed()
    );
    send_ud(&ep, &data, &peer.ah, peer.qp_num, peer.qkey);
    let (c, _, _) = wait_one_ud(&ep);
    assert_eq!((c.status, c.opcode), (Ok(()), Some(WcOpcode::Send)));
    serve.join().unwrap();
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn first_ud_request_to_the_peer_after_a_neighbour_flush() {
    if lacks(testkit::test_name!(), verbs::Capability::UnreliableDatagram) {
        return;
    }
    first_ud_connect(peer_ip(), local_ip(), port(43));
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn first_ud_request_from_the_peer_after_a_neighbour_flush() {
    if lacks(testkit::test_name!(), verbs::Capability::UnreliableDatagram) {
        return;
    }
    first_ud_connect(local_ip(), peer_ip(), port(44));
}
