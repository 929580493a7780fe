//! Failures are typed and bounded: nothing listening, a peer of another protocol version, a
//! peer process killed mid-transfer in either role (the survivor's operations fail within the
//! keepalive bound, its pool returns to baseline, other connections keep working).
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::Stdio;
use std::time::{Duration, Instant};

use transport::proto::{ConnectInfo, HandshakeError};
use transport::{Endpoint, Error};

use crate::support::*;

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn connect_to_a_port_nobody_listens_on_is_refused() {
    let client = Endpoint::with_config(local_ip(), config()).unwrap();
    let started = Instant::now();
    let r = client.connect_timeout(SocketAddr::new(peer_ip(), 7999), Duration::from_secs(5));
    assert!(
        matches!(
            r,
            Err(Error::Cm(
                cm::Error::Rejected { .. } | cm::Error::Unreachable { .. }
            ))
        ),
        "{r:?}"
    );
    assert!(started.elapsed() < Duration::from_secs(7));
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn a_peer_of_another_version_is_refused_both_ways() {
    // Our client against a listener that answers with the next version.
    let listener =
        cm::Listener::bind(SocketAddr::new(peer_ip(), 0), cm::ConnOptions::new()).unwrap();
    let addr = listener.local_addr().unwrap();
    let next = ConnectInfo::VERSION + 1;
    let newer = ConnectInfo {
        version: next,
        ..transport::proto::Config::default().connect_info()
    };
    let refuse = std::thread::spawn(move || {
        let req = listener.get_request(TIMEOUT).unwrap();
        // What our client sent is our version.
        let theirs = ConnectInfo::decode(req.private_data()).unwrap();
        assert_eq!(theirs.version, ConnectInfo::VERSION);
        req.reject(&newer.encode()).unwrap();
    });
    let client = Endpoint::with_config(local_ip(), config()).unwrap();
    let r = client.connect_timeout(addr, TIMEOUT);
    assert!(
        matches!(
            r,
            Err(Error::Handshake(HandshakeError::VersionMismatch {
                ours: ConnectInfo::VERSION,
                theirs
            })) if theirs == next
        ),
        "{r:?}"
    );
    refuse.join().unwrap();

    // A client of the next version against our listener: rejected with our connect data.
    let (listener, _client) = endpoints(config(), config());
    let addr = addr_of(&listener);
    let serving = std::thread::spawn(move || listener.accept_timeout(Duration::from_secs(3)));
    let attempt = cm::Connector::new(addr)
        .src(local_ip())
        .private_data(&newer.encode())
        .unwrap()
        .timeout(TIMEOUT)
        .connect();
    match attempt {
        Err(cm::Error::Rejected { private_data, .. }) => {
            let ours = ConnectInfo::decode(&private_data).unwrap();
            assert_eq!(ours.version, ConnectInfo::VERSION);
        }
        other => panic!("expected a rejection, got {other:?}"),
    }
    // The listener kept waiting after refusing, and timed out.
    let r = serving.join().unwrap();
    assert!(matches!(r, Err(Error::TimedOut { .. })), "{r:?}");
}

pub fn peer_program(args: &[&str]) -> (testkit::ChildGuard, std::sync::mpsc::Receiver<String>) {
    let mut cmd = testkit::peer().command(env!("CARGO_BIN_EXE_transport-test-peer"));
    cmd.args(args).stdout(Stdio::piped());
    let mut child = testkit::ChildGuard::spawn(cmd).expect("spawn peer");
    let out = child.take_stdout().expect("stdout");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    (child, rx)
}

pub fn wait_line(rx: &std::sync::mpsc::Receiver<String>, want: &str) {
    let deadline = Instant::now() + TIMEOUT;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(l) if l == want => return,
            Ok(_) => continue,
            Err(_) => panic!("peer never printed {want:?}"),
        }
    }
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn a_server_killed_mid_transfer_fails_the_client_within_the_keepalive_bound() {
    let client = Endpoint::with_config(local_ip(), config()).unwrap();
    let baseline = client.pool().stats().buffers_in_use();
    // A healthy connection to an in-process server, which must keep working.
    let (listener, _) = endpoints(config(), config());
    let healthy_addr = addr_of(&listener);
    let healthy_server = std::thread::spawn(move || {
        let c = listener.accept_timeout(TIMEOUT).unwrap();
        for _ in 0..2 {
            let m = c.recv(TIMEOUT).unwrap();
            c.send(&m.to_vec()).unwrap();
        }
        c
    });
    let healthy = client.connect(healthy_addr).unwrap();

    let port = 23000;
    let addr = SocketAddr::new(peer_ip(), port);
    let (mut peer, lines) = peer_program(&["server", "--addr", &addr.to_string()]);
    wait_line(&lines, "listening");
    let conn = client.connect(addr).unwrap();
    wait_line(&lines, "accepted");
    healthy.send(b"before").unwrap();
    assert_eq!(&healthy.recv(TIMEOUT).unwrap().bytes()[..], b"before");

    let sender = {
        let conn = conn.clone();
        std::thread::spawn(move || {
            let data = pattern(1, 2 << 20);
            loop {
                if let Err(e) = conn.send(&data) {
                    return e;
                }
            }
        })
    };
    std::thread::sleep(Duration::from_millis(300));
    peer.kill();
    let killed = Instant::now();
    let err = sender.join().unwrap();
    let took = killed.elapsed();
    eprintln!("sender failed after {took:?}: {err}");
    assert!(matches!(err, Error::Closed { cause: Some(_) }), "{err}");
    let bound = client.config().proto().keepalive_timeout() + Duration::from_secs(2);
    assert!(took < bound, "noticed after {took:?}, bound {bound:?}");
    let r = conn.recv(Duration::from_secs(1));
    assert!(matches!(r, Err(Error::Closed { cause: Some(_) })), "{r:?}");
    drop(conn);

    // The other connection is unaffected.
    healthy.send(b"after").unwrap();
    assert_eq!(&healthy.recv(TIMEOUT).unwrap().bytes()[..], b"after");
    drop(healthy_server.join().unwrap());
    drop(healthy);
    // Every buffer of the dead connection comes back.
    let deadline = Instant::now() + TIMEOUT;
    while client.pool().stats().buffers_in_use() > baseline && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        client.pool().stats().buffers_in_use() <= baseline,
        "{:?}",
        client.pool().stats()
    );
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn a_client_killed_mid_transfer_fails_the_server_side_and_it_keeps_serving() {
    let (listener, _client_ep) = endpoints(config(), config());
    let addr = addr_of(&listener);
    let src = local_ip().to_string();
    let (mut peer, lines) = peer_program(&["client", "--src", &src, "--addr", &addr.to_string()]);
    let conn = listener.accept_timeout(TIMEOUT).unwrap();
    wait_line(&lines, "connected");
    for _ in 0..3 {
        assert_eq!(conn.recv(TIMEOUT).unwrap().len(), 1 << 20);
    }
    peer.kill();
    let killed = Instant::now();
    let err = loop {
        match conn.recv(TIMEOUT) {
            Ok(_) => continue,
            Err(e) => break e,
        }
    };
    eprintln!("receiver failed after {:?}: {err}", killed.elapsed());
    assert!(matches!(err, Error::Closed { cause: Some(_) }), "{err}");
    // The listener still serves.
    let ep2 = Endpoint::with_config(local_ip(), config()).unwrap();
    let t = std::thread::spawn(move || {
        let c = ep2.connect(addr).unwrap();
        c.send(b"next").unwrap();
        c.close(TIMEOUT).unwrap();
    });
    let next = listener.accept_timeout(TIMEOUT).unwrap();
    assert_eq!(&next.recv(TIMEOUT).unwrap().bytes()[..], b"next");
    t.join().unwrap();
}
