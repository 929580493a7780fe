//! Shared helpers: endpoints on the two hosts, a connected pair, patterned payloads, the
//! devices' RNR counters.
#![allow(dead_code)]
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use memory::{Pool, PoolAccess, PoolConfig};
use transport::{Conn, Endpoint, EndpointConfig, Listener};

pub const DEVICE: &str = "needs an RDMA device: cargo xtask test";
pub const TIMEOUT: Duration = Duration::from_secs(20);

pub fn local_ip() -> IpAddr {
    IpAddr::V4(testkit::device().addr)
}

pub fn peer_ip() -> IpAddr {
    IpAddr::V4(testkit::peer().device.addr)
}

/// A small configuration, so tests do not register hundreds of MiB.
pub fn config() -> EndpointConfig {
    EndpointConfig::default()
        .with_pool_bytes(64 << 20)
        .with_max_connections(8)
}

/// An endpoint at `ip` with `cfg` whose data pool is the user's own: one of `pool`'s
/// configuration, on a PD of the device, with the access the transport needs
/// (`LOCAL_WRITE | REMOTE_READ`). Returns the pool too, for its statistics.
pub fn endpoint_on_own_pool(ip: IpAddr, cfg: EndpointConfig, pool: PoolConfig) -> (Endpoint, Pool) {
    let (ctx, _) = verbs::Context::open_by_addr(ip).expect("device of the address");
    let pd = ctx.alloc_pd().expect("protection domain");
    let pool = Pool::on_pd(
        &pd,
        pool.access(PoolAccess::LOCAL_WRITE | PoolAccess::REMOTE_READ),
    )
    .expect("pool on the PD");
    let ep = Endpoint::builder(ip)
        .config(cfg)
        .pd(&pd)
        .pool(pool.clone())
        .build()
        .expect("endpoint on the PD and pool");
    (ep, pool)
}

/// A server endpoint on the peer's device listening on any port, and a client endpoint here.
pub fn endpoints(server_cfg: EndpointConfig, client_cfg: EndpointConfig) -> (Listener, Endpoint) {
    let server = Endpoint::with_config(peer_ip(), server_cfg).expect("server endpoint");
    let listener = server.listen(0).expect("listen");
    let client = Endpoint::with_config(local_ip(), client_cfg).expect("client endpoint");
    (listener, client)
}

/// A connected pair: (server side, client side).
pub fn pair_with(server_cfg: EndpointConfig, client_cfg: EndpointConfig) -> (Conn, Conn) {
    let (listener, client) = endpoints(server_cfg, client_cfg);
    let addr = listener.local_addr().unwrap();
    let accept = std::thread::spawn(move || listener.accept_timeout(TIMEOUT).expect("accept"));
    let c = client.connect(addr).expect("connect");
    let s = accept.join().unwrap();
    (s, c)
}

pub fn pair() -> (Conn, Conn) {
    pair_with(config(), config())
}

/// `len` bytes whose content depends on `seed` and position: a block of up to 64 KiB of
/// xorshift output (8 bytes a step), repeated, each block after the first starting with its
/// index (mixed with the seed), so a byte, a word or a whole block out of place shows. A
/// shorter pattern of a seed is a prefix of a longer one. Built by copies past the first
/// block: the device tests run unoptimized, under emulation.
pub fn pattern(seed: u64, len: usize) -> Vec<u8> {
    const BLOCK: usize = 64 << 10;
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let mut block = Vec::with_capacity(BLOCK.min(len) + 8);
    while block.len() < BLOCK.min(len) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        block.extend_from_slice(&x.to_le_bytes());
    }
    let mut v = Vec::with_capacity(len);
    let mut index = 0u64;
    while v.len() < len {
        let start = v.len();
        v.extend_from_slice(&block[..(len - start).min(BLOCK)]);
        if index > 0 {
            let n = (len - start).min(8);
            v[start..start + n].copy_from_slice(&(index ^ x).to_le_bytes()[..n]);
        }
        index += 1;
    }
    v
}

#[test]
fn patterns_differ_by_seed_and_block_and_extend_their_prefixes() {
    let long = pattern(7, 3 * (64 << 10) + 5);
    assert_eq!(long.len(), 3 * (64 << 10) + 5);
    assert_eq!(pattern(7, 100), long[..100]);
    assert_eq!(pattern(7, (64 << 10) + 3), long[..(64 << 10) + 3]);
    assert_ne!(pattern(8, 100), long[..100]);
    let block = |k: usize| &long[k * (64 << 10)..(k + 1) * (64 << 10)];
    assert_ne!(block(0), block(1));
    assert_ne!(block(1), block(2));
    assert_eq!(block(1)[8..], block(2)[8..]);
}

/// RNR error counters of this host's and the peer's device (sent and received NAKs). A
/// device without them gives none: iWARP has no RNR (a SEND that finds no receive posted
/// ends the connection, which the test then sees), so there the connection's survival is
/// the check.
pub fn rnr_counters() -> Vec<(String, u64)> {
    let mut out = Vec::new();
    for dev in [testkit::device().name, testkit::peer().device.name] {
        let counters = verbs::Context::open(&dev)
            .and_then(|ctx| ctx.port_counters(1))
            .unwrap_or_else(|e| panic!("{dev}: {e}"));
        if counters.is_empty() {
            continue;
        }
        for counter in ["rcvd_rnr_err", "send_rnr_err"] {
            let v = counters
                .get(counter)
                .unwrap_or_else(|| panic!("{dev} port 1 has no {counter}: {counters:?}"));
            out.push((format!("{dev}/{counter}"), v));
        }
    }
    out
}

pub fn addr_of(l: &Listener) -> SocketAddr {
    l.local_addr().unwrap()
}
