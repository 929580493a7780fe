//! The crate's `tracing` events (target `cm`), captured by a subscriber of the test's own: the
//! CM events of a connect and a disconnect, with their addresses, and the calls made.
use std::net::SocketAddr;

use testkit::tracing_capture::capture;
use tracing::Level;

use crate::support::*;

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn connect_and_disconnect_are_events() {
    let port = port(46);
    let peer = spawn_peer_server(port, &["--count", "1"]);
    let dst = SocketAddr::new(peer_ip(), port);
    let (local, events) = capture("cm", || {
        let conn = connect_retry(dst, b"", TIMEOUT);
        echo(&conn, b"traced");
        let local = conn.local_addr().expect("a connected id has its address");
        conn.disconnect(TIMEOUT).unwrap();
        local
    });
    let out = finish_peer(peer);
    assert!(out.contains("disconnected"), "{out}");

    let cm_events: Vec<_> = events.iter().filter(|e| e.message == "CM event").collect();
    let kinds: Vec<_> = cm_events.iter().filter_map(|e| e.field("event")).collect();
    for kind in ["AddrResolved", "RouteResolved", "Disconnected"] {
        assert!(kinds.contains(&kind), "no {kind} in {events:#?}");
    }
    assert!(
        kinds.contains(&"Established") || kinds.contains(&"ConnectResponse"),
        "{events:#?}"
    );
    // The last connect's events (an earlier attempt may have met no listener yet).
    let disconnected = cm_events
        .iter()
        .find(|e| e.field("event") == Some("Disconnected"))
        .unwrap();
    assert_eq!(disconnected.level, Level::DEBUG);
    assert_eq!(disconnected.field("status"), Some("0"));
    assert_eq!(disconnected.field("peer"), Some(dst.to_string().as_str()));
    assert_eq!(
        disconnected.field("local"),
        Some(local.to_string().as_str())
    );

    let call = |op: &str| {
        events
            .iter()
            .rev()
            .find(|e| e.message == op)
            .unwrap_or_else(|| panic!("no {op} in {events:#?}"))
    };
    let connect = call("connect");
    assert_eq!(connect.level, Level::DEBUG);
    assert_eq!(connect.field("peer"), Some(dst.to_string().as_str()));
    assert!(connect.field("qp_num").is_some(), "{connect:?}");
    assert_eq!(call("disconnect").level, Level::DEBUG);
}
