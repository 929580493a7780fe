//! Connecting and moving data: in-process loopback on this host's device, and between hosts.
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use cm::{Connector, Listener};

use crate::support::*;

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn loopback_connect_send_recv_and_disconnect() {
    let listener = Listener::bind(SocketAddr::new(local_ip(), 0), options()).unwrap();
    let addr = listener.local_addr().expect("bound address");
    assert_ne!(addr.port(), 0);
    let server = std::thread::spawn(move || {
        let req = listener.get_request(TIMEOUT).unwrap();
        assert!(req.private_data().starts_with(b"from client"));
        post_recv(req.qp(), req.pd(), 64);
        let conn = req.accept(b"from server", TIMEOUT).unwrap();
        let wc = wait_one(&conn);
        wc.status.unwrap();
        let mr = wc.mr.unwrap();
        assert_eq!(&mr.as_slice()[..wc.byte_len as usize], b"ping");
        conn.wait_disconnect(TIMEOUT).unwrap();
    });
    let started = Instant::now();
    let conn = Connector::new(addr)
        .src(local_ip())
        .private_data(b"from client")
        .unwrap()
        .timeout(TIMEOUT)
        .connect()
        .unwrap();
    eprintln!("loopback connect took {:?}", started.elapsed());
    assert!(conn.private_data().starts_with(b"from server"));
    assert!(conn.private_data()[11..].iter().all(|&b| b == 0));
    send(&conn, b"ping");
    wait_one(&conn).status.unwrap();
    conn.disconnect(Duration::from_secs(5)).unwrap();
    server.join().unwrap();
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn two_hosts_private_data_send_recv_write_read() {
    let port = port(1);
    let peer = spawn_peer_server(port, &["--count", "1"]);
    let started = Instant::now();
    let conn = connect_retry(SocketAddr::new(peer_ip(), port), b"two hosts", TIMEOUT);
    eprintln!("connected to the peer in {:?}", started.elapsed());
    // The peer echoes our private data after its region.
    assert_eq!(&conn.private_data()[16..25], b"two hosts");
    assert_eq!(conn.peer_addr().map(|a| a.ip()), Some(peer_ip()));
    write_then_read(&conn, 7);
    echo(&conn, b"over the wire");
    echo(&conn, &[0xab; 200]);
    conn.disconnect(TIMEOUT).unwrap();
    let out = finish_peer(peer);
    assert!(
        out.contains("accepted") && out.contains("disconnected"),
        "{out}"
    );
    assert!(out.contains("served 1"), "{out}");
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn ids_bind_in_both_port_spaces_and_share_the_device_context() {
    for ps in [cm::PortSpace::Tcp, cm::PortSpace::Udp] {
        let id = cm::CmId::with_own_channel(ps).unwrap();
        assert!(matches!(id.context(), Err(cm::Error::NoDevice)));
        id.bind_addr(SocketAddr::new(local_ip(), 0)).unwrap();
        let local = id.local_addr().unwrap();
        assert_eq!(local.ip(), local_ip());
        assert_ne!(local.port(), 0);
        assert_eq!(id.port_num(), 1);
        let ctx = id.context().unwrap();
        assert!(ctx.is_borrowed());
        assert_eq!(ctx.name(), testkit::device().name);
        // Verbs objects on the shared context outlive the id handle safely.
        let pd = ctx.alloc_pd().unwrap();
        drop(id);
        let mr = pd.reg_mr(64, verbs::AccessFlags::LOCAL_WRITE).unwrap();
        drop((mr, pd, ctx));
    }
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn inline_room_beyond_the_device_gets_what_the_device_allows() {
    let asked = 1 << 20;
    let generous = || {
        options().cap(verbs::QpCap {
            max_inline_data: asked,
            ..verbs::QpCap::default()
        })
    };
    let listener = Listener::bind(SocketAddr::new(local_ip(), 0), generous()).unwrap();
    let addr = listener.local_addr().expect("bound address");
    let server = std::thread::spawn(move || {
        let req = listener.get_request(TIMEOUT).unwrap();
        let granted = req.qp().cap().max_inline_data;
        post_recv(req.qp(), req.pd(), 1024);
        let conn = req.accept(b"", TIMEOUT).unwrap();
        let got = wait_recv(&conn).unwrap();
        conn.wait_disconnect(TIMEOUT).unwrap();
        (granted, got)
    });
    let conn = Connector::new(addr)
        .src(local_ip())
        .options(generous())
        .timeout(TIMEOUT)
        .connect()
        .unwrap();
    let granted = conn.qp().cap().max_inline_data;
    assert!(
        granted > 0 && granted < asked,
        "granted {granted} of {asked} inline bytes"
    );
    // The room granted is real: a send of that many bytes goes inline.
    let data: Vec<u8> = (0..granted.min(1024)).map(|i| i as u8).collect();
    conn.qp()
        .post_send_inline(
            verbs::WrOp::Send,
            &[std::io::IoSlice::new(&data)],
            verbs::SendFlags::SIGNALED,
            None,
        )
        .unwrap();
    wait_one(&conn).status.unwrap();
    conn.disconnect(Duration::from_secs(5)).unwrap();
    let (server_granted, got) = server.join().unwrap();
    assert!(server_granted > 0 && server_granted < asked);
    assert_eq!(got, data);
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn both_queue_pairs_get_the_ack_timeout_and_retry_count_asked_for() {
    // 10 ms rounds up to 4.096 µs × 2^12 (16.8 ms); the CM alone derives more from the path.
    let asked = Duration::from_millis(10);
    let opts = || {
        options()
            .ack_timeout(asked)
            .param(cm::ConnParam::new().retry_count(5))
    };
    let listener = Listener::bind(SocketAddr::new(local_ip(), 0), opts()).unwrap();
    let addr = listener.local_addr().expect("bound address");
    let server = std::thread::spawn(move || {
        let conn = listener.accept(TIMEOUT).unwrap();
        let q = conn.qp().query().unwrap();
        conn.wait_disconnect(TIMEOUT).unwrap();
        (q.timeout(), q.retry_cnt())
    });
    let conn = Connector::new(addr)
        .src(local_ip())
        .options(opts())
        .timeout(TIMEOUT)
        .connect()
        .unwrap();
    let q = conn.qp().query().unwrap();
    conn.disconnect(TIMEOUT).unwrap();
    let server = server.join().unwrap();
    if local_transport() == verbs::Transport::Iwarp {
        // An iWARP QP has neither (TCP retransmits): the options are taken and the
        // connection made, which is all there is to check.
        println!(
            "iWARP QPs report {:?} and {server:?}",
            (q.timeout(), q.retry_cnt())
        );
        return;
    }
    assert_eq!((q.timeout(), q.retry_cnt()), (12, 5), "client QP");
    assert_eq!(server, (12, 5), "server QP");
    assert_eq!(
        cm::ack_timeout_duration(12),
        Some(Duration::from_nanos(4096 << 12))
    );

    // Without the option the CM's own timeout is another (and longer) one.
    let listener = Listener::bind(SocketAddr::new(local_ip(), 0), options()).unwrap();
    let addr = listener.local_addr().expect("bound address");
    let server = std::thread::spawn(move || {
        let conn = listener.accept(TIMEOUT).unwrap();
        conn.wait_disconnect(TIMEOUT).unwrap();
    });
    let conn = Connector::new(addr)
        .src(local_ip())
        .options(options())
        .timeout(TIMEOUT)
        .connect()
        .unwrap();
    let derived = conn.qp().query().unwrap().timeout();
    conn.disconnect(TIMEOUT).unwrap();
    server.join().unwrap();
    eprintln!(
        "the CM's own ACK timeout: exponent {derived} ({:?})",
        cm::ack_timeout_duration(derived)
    );
    assert!(derived > 12, "the CM derived exponent {derived}");
}
