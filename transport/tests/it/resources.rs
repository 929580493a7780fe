//! Endpoints on resources of the user's own: a protection domain and a data pool given to the
//! builder serve messages of every size; resources that cannot work are refused up front. A
//! message over the configured maximum is refused before anything is sent.
use memory::{Pool, PoolAccess, PoolConfig};
use transport::{ConfigError, Endpoint, Error, ProtocolConfig};

use crate::support::*;

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn an_endpoint_on_the_users_pd_and_pool() {
    let (ctx, _addr) = verbs::Context::open_by_addr(local_ip()).unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let pool = Pool::on_pd(
        &pd,
        PoolConfig::new()
            .cap_bytes(32 << 20)
            .access(PoolAccess::LOCAL_WRITE | PoolAccess::REMOTE_READ),
    )
    .unwrap();
    let client = Endpoint::builder(local_ip())
        .config(config())
        .pd(&pd)
        .pool(pool.clone())
        .build()
        .unwrap();
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
