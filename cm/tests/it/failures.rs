//! Failures are typed and bounded: no listener, unreachable address, a listener dropped while
//! clients connect, a peer killed mid-connection.
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cm::{Connector, Error, Listener, UdConnector, UdEndpoint, UdListener};
use testkit::ChildGuard;

use crate::support::*;

const SHORT: Duration = Duration::from_secs(3);
/// Slack on top of a timeout for the work around it (event delivery, teardown).
const SLACK: Duration = Duration::from_secs(2);

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn connect_without_listener_is_rejected_or_times_out() {
    let started = Instant::now();
    let r = Connector::new(SocketAddr::new(peer_ip(), port(8)))
        .src(local_ip())
        .timeout(SHORT)
        .connect();
    let took = started.elapsed();
    eprintln!("no listener: {r:?} after {took:?}");
    assert!(
        matches!(
            r,
            Err(Error::Rejected { .. } | Error::Unreachable { .. } | Error::Timeout { .. })
        ),
        "{r:?}"
    );
    assert!(took < SHORT + SLACK, "took {took:?}");
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn unreachable_address_times_out_within_the_timeout() {
    // An address in the peer's /24 that no host has.
    let IpAddr::V4(peer) = peer_ip() else {
        unreachable!()
    };
    let [a, b, c, _] = peer.octets();
    let nobody = Ipv4Addr::new(a, b, c, 250);
    let started = Instant::now();
    let r = Connector::new(SocketAddr::new(nobody.into(), 7174))
        .src(local_ip())
        .timeout(SHORT)
        .connect();
    let took = started.elapsed();
    eprintln!("unreachable: {r:?} after {took:?}");
    assert!(
        matches!(
            r,
            Err(Error::ResolveAddr { .. }
                | Error::ResolveRoute(_)
                | Error::Unreachable { .. }
                | Error::Timeout { .. })
        ),
        "{r:?}"
    );
    assert!(took < SHORT + SLACK, "took {took:?}");
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn listener_dropped_while_clients_connect() {
    let listener = Listener::bind(SocketAddr::new(local_ip(), 0), options()).unwrap();
    let addr = listener.local_addr().unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    // Clients keep connecting while the listener serves one and is then dropped.
    let clients: Vec<_> = (0..4)
        .map(|_| {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut outcomes = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    let started = Instant::now();
                    let r = Connector::new(addr)
                        .src(local_ip())
                        .timeout(SHORT)
                        .connect();
                    let took = started.elapsed();
                    assert!(took < SHORT + SLACK, "attempt took {took:?}: {r:?}");
                    match r {
                        Ok(_conn) => outcomes.push("connected".to_string()),
                        Err(
                            e @ (Error::Rejected { .. }
                            | Error::Unreachable { .. }
                            | Error::Timeout { .. }),
                        ) => outcomes.push(format!("{e}")),
                        Err(e) => panic!("untyped failure: {e:?}"),
                    }
                }
                outcomes
            })
        })
        .collect();
    let conn = listener.accept(TIMEOUT).unwrap();
    // Leave requests pending in the backlog, then drop the listener under them.
    std::thread::sleep(Duration::from_millis(200));
    let started = Instant::now();
    drop(listener);
    assert!(started.elapsed() < SLACK, "dropping the listener blocked");
    std::thread::sleep(Duration::from_secs(1));
    stop.store(true, Ordering::Relaxed);
    let outcomes: Vec<String> = clients
        .into_iter()
        .flat_map(|t| t.join().unwrap())
        .collect();
    eprintln!("outcomes: {outcomes:?}");
    assert!(outcomes.iter().any(|o| o != "connected"), "{outcomes:?}");
    drop(conn);
    // The port is free again.
    let again = Listener::bind(addr, options()).unwrap();
    let client = std::thread::spawn(move || {
        Connector::new(addr)
            .src(local_ip())
            .timeout(TIMEOUT)
            .connect()
    });
    let served = again.accept(TIMEOUT).unwrap();
    client.join().unwrap().unwrap();
    drop(served);
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn killed_peer_server_is_noticed_and_a_fresh_one_serves() {
    let port = port(9);
    let mut peer = spawn_peer_server(port, &["--count", "0"]);
    let dst = SocketAddr::new(peer_ip(), port);
    let conn = connect_retry(dst, b"", TIMEOUT);
    echo(&conn, b"alive");
    post_recv(conn.qp(), conn.pd(), 64);
    peer.kill();
    let started = Instant::now();
    // The survivor learns within its timeout: a disconnect event (the dead process's id is
    // destroyed by the kernel) or a failed completion.
    let noticed = conn.wait_disconnect(TIMEOUT);
    let took = started.elapsed();
    eprintln!("peer death noticed after {took:?}: {noticed:?}");
    match noticed {
        Ok(()) => {}
        Err(Error::Timeout { .. }) => {
            // No event: a send must fail instead (retries exhausted), within the timeout.
            send(&conn, b"anyone?");
            assert!(wait_recv(&conn).is_err());
        }
        Err(e) => panic!("untyped failure: {e:?}"),
    }
    drop(peer);
    let teardown = Instant::now();
    drop(conn);
    assert!(teardown.elapsed() < cm::DRAIN_TIMEOUT + SLACK);
    // A fresh peer on the same port serves us.
    let peer = spawn_peer_server(port, &["--count", "1"]);
    let conn = connect_retry(dst, b"", TIMEOUT);
    echo(&conn, b"again");
    conn.disconnect(TIMEOUT).unwrap();
    finish_peer(peer);
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn killed_peer_client_is_noticed_and_the_server_keeps_serving() {
    let listener = Listener::bind(SocketAddr::new(local_ip(), 0), options()).unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let src = testkit::peer().device.addr.to_string();
    let spawn_client = |hold: bool| {
        let mut args = vec!["client", "--addr", &addr, "--src", &src];
        if hold {
            args.push("--hold");
        }
        ChildGuard::spawn(peer_command(&args)).expect("spawn peer client")
    };
    let serve = |listener: &Listener| {
        let req = listener.get_request(TIMEOUT).unwrap();
        post_recv(req.qp(), req.pd(), 256);
        let conn = req.accept(b"", TIMEOUT).unwrap();
        let msg = wait_recv(&conn).unwrap();
        post_recv(conn.qp(), conn.pd(), 256);
        send(&conn, &msg);
        conn
    };
    let mut held = spawn_client(true);
    let first = serve(&listener);
    // The echo must reach the client before it is killed; give it a moment.
    std::thread::sleep(Duration::from_millis(300));
    held.kill();
    let started = Instant::now();
    first.wait_disconnect(TIMEOUT).unwrap();
    eprintln!("client death noticed after {:?}", started.elapsed());
    drop(held);
    drop(first);
    // The listener still serves others.
    let other = spawn_client(false);
    let second = serve(&listener);
    second.wait_disconnect(TIMEOUT).unwrap();
    let out = finish_peer(other);
    assert!(
        out.contains("echoed") && out.contains("disconnected"),
        "{out}"
    );
}

/// Nothing listens on the port: the peer's CM rejects with reason 8, and the message says so
/// in words.
#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn no_listener_is_named_in_words() {
    let r = Connector::new(SocketAddr::new(peer_ip(), port(11)))
        .src(local_ip())
        .timeout(SHORT)
        .connect();
    // InfiniBand's CM rejects with reason 8; iWARP's TCP connection is refused.
    let iwarp = local_transport() == verbs::Transport::Iwarp;
    let want = if iwarp { -libc::ECONNREFUSED } else { 8 };
    match r {
        Err(e @ Error::Rejected { status, .. }) if status == want => {
            let text = e.to_string();
            assert!(text.contains("nothing listens on that port"), "{text}");
            assert!(text.contains(&format!("reject reason {want}")), "{text}");
        }
        other => panic!("expected a reject with reason {want}, got {other:?}"),
    }
}

/// A netdev with an address but no RDMA device, removed again when dropped.
struct PlainNetdev(&'static str);

impl PlainNetdev {
    fn add(name: &'static str, cidr: &str) -> PlainNetdev {
        let ip = |args: &[&str]| {
            let out = std::process::Command::new("ip")
                .args(args)
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "ip {args:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        };
        let _ = std::process::Command::new("ip")
            .args(["link", "del", name])
            .output();
        ip(&["link", "add", name, "type", "dummy"]);
        let dev = PlainNetdev(name);
        ip(&["addr", "add", cidr, "dev", name]);
        ip(&["link", "set", name, "up"]);
        dev
    }
}

impl Drop for PlainNetdev {
    fn drop(&mut self) {
        let _ = std::process::Command::new("ip")
            .args(["link", "del", self.0])
            .output();
    }
}

/// `e` is [`Error::NotRdmaAddress`] for `plain`, listing this host's RDMA address and device.
fn assert_not_rdma_address(plain: IpAddr, e: Error) {
    match &e {
        Error::NotRdmaAddress { addr, served, .. } => {
            assert_eq!(*addr, plain);
            assert!(served.contains(&local_ip().to_string()), "{served}");
        }
        other => panic!("expected NotRdmaAddress, got {other:?}"),
    }
    let text = e.to_string();
    assert!(
        text.contains(&format!("{plain} is not an address of an RDMA device"))
            && text.contains(&testkit::device().name),
        "{text}"
    );
}

/// Binding or connecting from an address that is not on an RDMA netdev: the error says so and
/// lists the addresses that are.
#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn a_source_address_without_rdma_device_is_named() {
    let _dev = PlainNetdev::add("nordma0", "10.77.9.1/24");
    let plain: IpAddr = "10.77.9.1".parse().unwrap();
    let check = |e: Error| assert_not_rdma_address(plain, e);
    let started = Instant::now();
    let r = Connector::new(SocketAddr::new(peer_ip(), port(12)))
        .src(plain)
        .timeout(SHORT)
        .connect();
    eprintln!("non-RDMA source: {r:?} after {:?}", started.elapsed());
    check(r.unwrap_err());
    let r = Listener::bind(SocketAddr::new(plain, port(12)), cm::ConnOptions::new());
    eprintln!("non-RDMA bind: {r:?}");
    check(r.unwrap_err());
}

/// The same for UD: a request from, or a listener or endpoint on, an address without RDMA
/// device is named as such, and the request fails at once instead of retrying until its
/// timeout.
#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn a_ud_source_address_without_rdma_device_is_named() {
    let _dev = PlainNetdev::add("nordma0", "10.77.9.1/24");
    let plain: IpAddr = "10.77.9.1".parse().unwrap();
    let timeout = Duration::from_secs(30);
    let started = Instant::now();
    let r = UdConnector::new(SocketAddr::new(peer_ip(), port(12)))
        .src(plain)
        .timeout(timeout)
        .connect();
    let took = started.elapsed();
    eprintln!("non-RDMA UD source: {r:?} after {took:?}");
    assert_not_rdma_address(plain, r.unwrap_err());
    assert!(
        took < timeout,
        "a final error was retried until the timeout"
    );
    let r = UdListener::bind(SocketAddr::new(plain, port(12)));
    eprintln!("non-RDMA UD bind: {r:?}");
    assert_not_rdma_address(plain, r.unwrap_err());
    let r = UdEndpoint::bind(plain, verbs::QpCap::default(), 16);
    eprintln!("non-RDMA UD endpoint: {r:?}");
    assert_not_rdma_address(plain, r.unwrap_err());
}

/// Without a source address, a route through a netdev without RDMA device: the error says
/// so, names the source address the route picks, and lists the RDMA addresses.
#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn a_route_without_rdma_device_is_named() {
    let _dev = PlainNetdev::add("nordma0", "10.77.9.1/24");
    let dst = SocketAddr::new("10.77.9.2".parse().unwrap(), port(12));
    let e = Connector::new(dst).timeout(SHORT).connect().unwrap_err();
    match &e {
        Error::NoRdmaRoute {
            dst: d,
            src,
            served,
            ..
        } => {
            assert_eq!(*d, dst);
            assert_eq!(*src, Some("10.77.9.1".parse().unwrap()));
            assert!(served.contains(&local_ip().to_string()), "{served}");
        }
        other => panic!("expected NoRdmaRoute, got {other:?}"),
    }
    let text = e.to_string();
    assert!(
        text.contains("no RDMA device on the route to 10.77.9.2")
            && text.contains("it leaves from 10.77.9.1")
            && text.contains("Connector::src"),
        "{text}"
    );
}
