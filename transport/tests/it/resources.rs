//! Endpoints on resources of the user's own: a protection domain and a data pool given to the
//! builder serve messages of every size; resources that cannot work are refused up front. A
//! message over the configured maximum is refused before anything is sent. Connections
//! spread over queue pairs made as they come, places reused.
use memory::{Pool, PoolConfig};
use transport::{ConfigError, Endpoint, Error, ProtocolConfig};

use crate::support::*;

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn an_endpoint_on_the_users_pd_and_pool() {
    let (client, pool) =
        endpoint_on_own_pool(local_ip(), config(), PoolConfig::new().cap_bytes(32 << 20));
    let server = Endpoint::with_config(peer_ip(), config()).unwrap();
    let listener = server.listen(0).unwrap();
    let addr = addr_of(&listener);
    let accept = std::thread::spawn(move || listener.accept_timeout(TIMEOUT).unwrap());
    let c = client.connect(addr).unwrap();
    let s = accept.join().unwrap();
    for (i, len) in [10usize, 5000, 3 << 20].into_iter().enumerate() {
        let data = pattern(i as u64, len);
        c.send(&data).unwrap();
        assert!(s.recv(TIMEOUT).unwrap().to_vec() == data, "{len} bytes");
    }
    // The copies went through the user's pool.
    assert!(pool.stats().bytes_registered > 0);
    c.close(TIMEOUT).unwrap();
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn resources_that_cannot_work_are_refused() {
    // A PD of the other device.
    let (other, _) = verbs::Context::open_by_addr(peer_ip()).unwrap();
    let foreign = other.alloc_pd().unwrap();
    let r = Endpoint::builder(local_ip())
        .config(config())
        .pd(&foreign)
        .build();
    assert!(
        matches!(r, Err(Error::Config(ConfigError::PdOnOtherDevice { .. }))),
        "{r:?}"
    );
    // A pool peers cannot read.
    let (ctx, _) = verbs::Context::open_by_addr(local_ip()).unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let local_only = Pool::on_pd(&pd, PoolConfig::new().cap_bytes(32 << 20)).unwrap();
    let r = Endpoint::builder(local_ip())
        .config(config())
        .pd(&pd)
        .pool(local_only)
        .build();
    assert!(
        matches!(r, Err(Error::Config(ConfigError::PoolAccess { .. }))),
        "{r:?}"
    );
    // An address no RDMA device has.
    let r = Endpoint::with_config("127.0.0.1".parse().unwrap(), config());
    assert!(matches!(r, Err(Error::NoDevice { .. })), "{r:?}");
    // Queues larger than the device's: the error names the setting to lower.
    let huge = config()
        .with_max_connections(1 << 20)
        .with_connections_per_queue(1 << 20);
    let r = Endpoint::with_config(local_ip(), huge);
    assert!(
        matches!(
            &r,
            Err(Error::Config(ConfigError::DeviceLimits {
                connections_per_queue,
                ..
            })) if *connections_per_queue == 1 << 20
        ),
        "{r:?}"
    );
    let e = r.unwrap_err().to_string();
    assert!(e.contains("connections_per_queue"), "{e}");
}

/// Connections spread over queue pairs made as they come (two connections per pair here):
/// every connection carries messages and calls both ways, intact, whichever pair it is on;
/// a place freed by a closed connection serves a new one without another pair; past the
/// maximum, a connect is refused as before.
#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn connections_spread_over_queue_pairs_made_as_they_come() {
    const MAX: usize = 7;
    let cfg = || {
        config()
            .with_max_connections(MAX as u32)
            .with_connections_per_queue(2)
    };
    let (listener, client) = endpoints(cfg(), cfg());
    let server = listener.endpoint().clone();
    assert_eq!(server.stats().queues, 1, "one pair at open");
    let addr = addr_of(&listener);
    let serving = std::thread::spawn(move || {
        let mut served = Vec::new();
        // The first MAX connections, then MAX - 4 after four closed: served as they come.
        for _ in 0..MAX + 4 {
            let c = listener.accept_timeout(TIMEOUT).unwrap();
            served.push(std::thread::spawn(move || {
                // Echo messages until the peer closes; answer calls as they come.
                loop {
                    match c.recv(TIMEOUT) {
                        Ok(m) => c.send(&m.to_vec()).unwrap(),
                        Err(Error::Closed { cause: None }) => return,
                        Err(e) => panic!("server recv: {e}"),
                    }
                    let req = c.recv_request(TIMEOUT).unwrap();
                    let answer = req.message().to_vec();
                    req.respond(&answer).unwrap();
                }
            }));
        }
        for t in served {
            t.join().unwrap();
        }
    });
    let exchange = |c: &transport::Conn, i: usize| {
        for round in 0..3u64 {
            let data = pattern(round * 100 + i as u64, 64 + 1000 * i);
            c.send(&data).unwrap();
            assert_eq!(c.recv(TIMEOUT).unwrap().to_vec(), data, "echo on {i}");
            let call = pattern(round * 100 + i as u64 + 50, 100);
            assert_eq!(
                c.call(&call, TIMEOUT).unwrap().to_vec(),
                call,
                "call on {i}"
            );
        }
    };
    let mut conns: Vec<_> = (0..MAX).map(|_| client.connect(addr).unwrap()).collect();
    assert_eq!(client.stats().queues, MAX.div_ceil(2));
    for (i, c) in conns.iter().enumerate() {
        exchange(c, i);
    }
    // Full: refused locally, and the server made no pair beyond what its maximum needs.
    let r = client.connect(addr);
    assert!(
        matches!(r, Err(Error::TooManyConnections { max }) if max == MAX as u32),
        "{r:?}"
    );
    let pairs = MAX.div_ceil(2);
    assert_eq!(server.stats().queues, pairs);
    // Each pair's receives are posted: two connections' windows and the slack, a frame each.
    let window = config().proto().window() as usize;
    let frame = (config().proto().frame_size() as usize).next_multiple_of(64);
    let registered = server.stats().receive_bytes_registered;
    assert!(
        registered >= pairs * (2 * window + 32) * frame,
        "{registered} bytes registered for receives"
    );
    // Four close (from different pairs); four new ones take their places.
    for i in [5, 3, 2, 0] {
        conns.remove(i).close(TIMEOUT).unwrap();
    }
    let deadline = std::time::Instant::now() + TIMEOUT;
    while client.connections() > MAX - 4 || server.connections() > MAX - 4 {
        assert!(
            std::time::Instant::now() < deadline,
            "closed connections linger"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    conns.extend((0..4).map(|_| client.connect(addr).unwrap()));
    for (i, c) in conns.iter().enumerate() {
        exchange(c, i);
    }
    assert_eq!(client.stats().queues, pairs, "places reused");
    assert_eq!(server.stats().queues, pairs, "places reused");
    for c in conns {
        c.close(TIMEOUT).unwrap();
    }
    serving.join().unwrap();
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn a_message_over_the_maximum_is_refused_locally() {
    let cfg = config().with_proto(ProtocolConfig::default().with_max_message(1 << 20));
    let (server, client) = pair_with(cfg.clone(), cfg);
    let r = client.send(&vec![1u8; (1 << 20) + 1]);
    assert!(
        matches!(r, Err(Error::TooLarge { limit, .. }) if limit == 1 << 20),
        "{r:?}"
    );
    client.send(b"still fine").unwrap();
    assert_eq!(&server.recv(TIMEOUT).unwrap().bytes()[..], b"still fine");
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn connections_beyond_the_maximum_are_refused_and_the_rest_keep_working() {
    let small = config().with_max_connections(1);
    let server = Endpoint::with_config(peer_ip(), small.clone()).unwrap();
    let listener = server.listen(0).unwrap();
    let addr = addr_of(&listener);
    let serving = std::thread::spawn(move || {
        let first = listener.accept_timeout(TIMEOUT).unwrap();
        // A second peer is refused while the first is open; the wait then times out.
        let second = listener.accept_timeout(std::time::Duration::from_secs(3));
        assert!(matches!(second, Err(Error::TimedOut { .. })), "{second:?}");
        let m = first.recv(TIMEOUT).unwrap();
        first.send(&m.to_vec()).unwrap();
        first
    });
    let client = Endpoint::with_config(local_ip(), small).unwrap();
    let c = client.connect(addr).unwrap();
    // The client endpoint is full too: refused locally.
    let r = client.connect(addr);
    assert!(
        matches!(r, Err(Error::TooManyConnections { max: 1 })),
        "{r:?}"
    );
    // Another client endpoint is refused by the full server, which says why: the peer's
    // limit, `ConnectionRefused`, the setting named.
    let other = Endpoint::with_config(local_ip(), config()).unwrap();
    let r = other.connect(addr);
    assert!(matches!(r, Err(Error::PeerFull { max: 1 })), "{r:?}");
    let e = r.unwrap_err();
    assert_eq!(e.io_kind(), std::io::ErrorKind::ConnectionRefused);
    assert!(e.to_string().contains("max_connections"), "{e}");
    c.send(b"first").unwrap();
    assert_eq!(&c.recv(TIMEOUT).unwrap().bytes()[..], b"first");
    drop(serving.join().unwrap());
}

/// Frames posted unsignaled keep their pool buffers until a later signaled request of their
/// connection completes. Connections that each sent a few messages and then went quiet hold
/// the whole pool that way; a send that then waits for a buffer gets one (the engine asks
/// those frames back), well before any keepalive would, and everything arrives intact.
#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn a_pool_held_by_quiet_connections_unsignaled_frames_is_given_back_to_a_waiting_send() {
    const MAX_CONNS: usize = 64;
    let quiet = || {
        config().with_max_connections(MAX_CONNS as u32).with_proto(
            ProtocolConfig::default()
                // Signaled one frame in 16: each connection sends fewer than that after its
                // first, and then nothing.
                .with_sq_depth(64)
                // No keepalive probe comes to the rescue within the test.
                .with_keepalive_interval(std::time::Duration::from_secs(300))
                .with_keepalive_timeout(std::time::Duration::from_secs(900)),
        )
    };
    // The sender's pool: 128 buffers of 8 KiB, each a 4 KiB message's frame.
    let (client, _pool) = endpoint_on_own_pool(
        local_ip(),
        quiet(),
        PoolConfig::new()
            .classes([memory::ClassConfig::new(8 << 10).chunk_size(1 << 20)])
            .cap_bytes(1 << 20),
    );
    let listener = Endpoint::with_config(peer_ip(), quiet())
        .unwrap()
        .listen(0)
        .unwrap();
    let addr = addr_of(&listener);
    // Connection after connection, up to 15 messages of 4 KiB (too long to go inline) on
    // each, until the pool is out of buffers.
    let (mut conns, mut server, mut sent) = (Vec::new(), Vec::new(), Vec::new());
    let exhausted = 'fill: {
        for i in 0..MAX_CONNS {
            let c = client.connect(addr).unwrap();
            server.push(listener.accept_timeout(TIMEOUT).unwrap());
            sent.push(Vec::new());
            for k in 0..15u64 {
                let data = pattern((i as u64) << 8 | k, 4096);
                match c.try_send(&data) {
                    Ok(()) => sent[i].push(data),
                    Err(Error::WouldBlock) => {
                        conns.push(c);
                        break 'fill true;
                    }
                    Err(e) => panic!("connection {i} message {k}: {e}"),
                }
            }
            conns.push(c);
        }
        false
    };
    assert!(exhausted, "the pool held every message: make it smaller");
    // A send that waits for a buffer gets one.
    let last = pattern(999, 4096);
    let c = conns.last().unwrap();
    c.send_timeout(&last, std::time::Duration::from_secs(10))
        .expect("a buffer within the wait");
    sent.last_mut().unwrap().push(last);
    for (i, (s, expected)) in server.iter().zip(&sent).enumerate() {
        for (k, data) in expected.iter().enumerate() {
            let m = s.recv(TIMEOUT).unwrap();
            assert!(m.to_vec() == *data, "connection {i} message {k} differs");
        }
    }
}
