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
    // The peer hangs up once told that its echo arrived.
    send(&conn, b"got it");
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

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn drain_timeout_names_the_requests_still_outstanding() {
    let port = port(10);
    let peer = spawn_peer_server(port, &["--count", "1"]);
    let conn = connect_retry(SocketAddr::new(peer_ip(), port), b"", TIMEOUT);
    post_recv(conn.qp(), conn.pd(), 256);
    let mut mr = conn
        .pd()
        .reg_mr(8, verbs::AccessFlags::LOCAL_WRITE)
        .unwrap();
    mr.as_mut_slice().copy_from_slice(b"lost wc!");
    let sid = conn
        .qp()
        .post_send(SendRequest::send(mr, ..).unwrap().tag(42))
        .unwrap();
    // Both completions are polled, but only the receive (the echo) is reclaimed: the send's
    // buffer stays in the in-flight table, as in a program that handles one of a batch.
    let mut send_wc = None;
    for _ in 0..2 {
        let wc = conn.cq().wait_one(TIMEOUT).unwrap();
        wc.status().unwrap();
        if wc.wr_id() == sid {
            send_wc = Some(wc);
        } else {
            assert_eq!(conn.qp().reclaim(&wc).len(), 1);
        }
    }
    let send_wc = send_wc.expect("the send completed");

    let started = Instant::now();
    let e = conn.drain(Duration::from_millis(300)).unwrap_err();
    assert!(started.elapsed() >= Duration::from_millis(300));
    match &e {
        Error::DrainTimeout { outstanding, .. } => {
            assert_eq!(outstanding.len(), 1, "{outstanding:?}");
            assert_eq!(
                (
                    outstanding[0].wr_id,
                    outstanding[0].tag,
                    outstanding[0].recv
                ),
                (sid, 42, false)
            );
        }
        other => panic!("expected DrainTimeout, got {other:?}"),
    }
    assert!(e.is_timeout());
    let text = e.to_string();
    for needle in [
        "1 send and 0 receive requests outstanding".to_owned(),
        format!("send {sid:#x} (tag 42)"),
        "Qp::reclaim".to_owned(),
    ] {
        assert!(text.contains(&needle), "{text:?} lacks {needle:?}");
    }
    // Once reclaimed, the connection tears down cleanly.
    assert_eq!(conn.qp().reclaim(&send_wc).len(), 1);
    conn.disconnect(TIMEOUT).unwrap();
    assert_eq!(conn.qp().in_flight(), (0, 0));
    let out = finish_peer(peer);
    assert!(out.contains("disconnected"), "{out}");
}
