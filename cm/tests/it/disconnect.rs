//! Clean disconnects from either side.
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use cm::Error;
use verbs::SendRequest;

use crate::support::*;

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn client_disconnect_reaches_the_server() {
    let port = port(5);
    let peer = spawn_peer_server(port, &["--count", "1"]);
    let conn = connect_retry(SocketAddr::new(peer_ip(), port), b"", TIMEOUT);
    echo(&conn, b"bye soon");
    let started = Instant::now();
    conn.disconnect(TIMEOUT).unwrap();
    assert!(conn.is_disconnected());
    eprintln!("disconnect took {:?}", started.elapsed());
    let out = finish_peer(peer);
    assert!(out.contains("disconnected"), "{out}");
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn server_disconnect_reaches_the_client() {
    let port = port(6);
    let peer = spawn_peer_server(port, &["--count", "1", "--disconnect-first"]);
    let conn = connect_retry(SocketAddr::new(peer_ip(), port), b"", TIMEOUT);
    // An outstanding receive, to be flushed by our side's teardown.
    post_recv(conn.qp(), conn.pd(), 64);
    echo(&conn, b"please hang up");
    conn.wait_disconnect(TIMEOUT).unwrap();
    assert!(conn.is_disconnected());
    // Disconnecting again is fine, and flushes the receive we left posted.
    conn.disconnect(TIMEOUT).unwrap();
    assert_eq!(conn.qp().in_flight(), (0, 0));
    // Sending on the dead connection fails (posting or completing), never hangs.
    let mr = conn
        .pd()
        .reg_mr(8, verbs::AccessFlags::LOCAL_WRITE)
        .unwrap();
    if conn
        .qp()
        .post_send(SendRequest::send(mr, ..).unwrap().signaled(true))
        .is_ok()
    {
        let wc = wait_one(&conn);
        assert!(wc.status.is_err());
    }
    let out = finish_peer(peer);
    assert!(out.contains("disconnected"), "{out}");
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn wait_disconnect_times_out_while_connected() {
    let port = port(7);
    let peer = spawn_peer_server(port, &["--count", "1"]);
    let conn = connect_retry(SocketAddr::new(peer_ip(), port), b"", TIMEOUT);
    let started = Instant::now();
    let e = conn
        .wait_disconnect(Duration::from_millis(300))
        .unwrap_err();
    assert!(
        matches!(
            e,
            Error::Timeout {
                op: "disconnect",
                ..
            }
        ),
        "{e:?}"
    );
    assert!(started.elapsed() < Duration::from_secs(3));
    drop(conn); // disconnects on drop
    let out = finish_peer(peer);
    assert!(out.contains("disconnected"), "{out}");
}
