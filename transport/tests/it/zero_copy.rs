//! Buffers sent without a copy (`Conn::alloc`, `Conn::send_buf`): up to the eager limit in one
//! frame, longer as one rendezvous chunk the peer reads with one READ; each arrives intact in
//! one piece and every buffer comes back to its pool. A buffer longer than the pool gives is
//! refused up front, and a chunk longer than the peer can read fails the connection with an
//! error that names it.
use std::time::Instant;

use memory::{Pool, PoolConfig};
use transport::{ConnError, Endpoint, Error, ProtocolError};

use crate::support::*;

/// Waits (bounded) until `pool` has no more buffers in use than `baseline`.
fn back_to(pool: &Pool, baseline: usize, what: &str) {
    let deadline = Instant::now() + TIMEOUT;
    while pool.stats().buffers_in_use() > baseline && Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let in_use = pool.stats().buffers_in_use();
    assert!(
        in_use <= baseline,
        "{what}: {in_use} buffers in use, {baseline} before"
    );
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn zero_copy_buffers_arrive_intact_in_one_piece_and_come_back_to_the_pool() {
    let (listener, client) = endpoints(config(), config());
    let addr = addr_of(&listener);
    let server_ep = listener.endpoint().clone();
    let accept = std::thread::spawn(move || listener.accept_timeout(TIMEOUT).unwrap());
    let c = client.connect(addr).unwrap();
    let s = accept.join().unwrap();
    let eager = c.eager_limit();
    let max = c.max_buf();
    assert_eq!(
        max,
        client.pool().max_buffer_size(),
        "the pool's largest buffer"
    );
    let (sent_base, recv_base) = (
        client.pool().stats().buffers_in_use(),
        server_ep.pool().stats().buffers_in_use(),
    );
    for (k, len) in [0, 100, eager, eager + 1, 200_000, max]
        .into_iter()
        .enumerate()
    {
        let data = pattern(300 + k as u64, len);
        let mut buf = c.alloc(len).unwrap();
        assert_eq!(buf.len(), len);
        buf.copy_from_slice(&data);
        c.send_buf(buf).unwrap();
        let m = s.recv(TIMEOUT).unwrap();
        assert_eq!(m.len(), len, "message {k}");
        // One frame, or one chunk read by one READ: the bytes lie in one buffer.
        assert!(
            m.chunks().count() <= 1,
            "message {k} of {len} bytes in pieces"
        );
        assert!(m.bytes() == &data[..], "message {k} of {len} bytes differs");
    }
    let r = c.alloc(max + 1);
    assert!(
        matches!(r, Err(Error::TooLarge { limit, .. }) if limit == max as u64),
        "{r:?}"
    );
    // The connection goes on.
    c.send(b"after").unwrap();
    assert_eq!(&s.recv(TIMEOUT).unwrap().bytes()[..], b"after");
    // Once it is closed (a connection keeps a frame buffer or two for its next small sends
    // while it lives), every buffer is back.
    c.close(TIMEOUT).unwrap();
    back_to(client.pool(), sent_base, "the sender's pool");
    back_to(server_ep.pool(), recv_base, "the receiver's pool");
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn a_chunk_longer_than_the_peer_reads_fails_the_connection_and_names_why() {
    // The receiver's pool holds buffers of at most 256 KiB.
    let (server, _pool) = endpoint_on_own_pool(
        peer_ip(),
        config(),
        PoolConfig::new()
            .class_sizes([4096, 65536, 262_144])
            .cap_bytes(32 << 20),
    );
    let listener = server.listen(0).unwrap();
    let addr = addr_of(&listener);
    let client = Endpoint::with_config(local_ip(), config()).unwrap();
    let accept = std::thread::spawn(move || listener.accept_timeout(TIMEOUT).unwrap());
    let c = client.connect(addr).unwrap();
    let s = accept.join().unwrap();
    // Within the receiver's buffers: read whole.
    let mut fits = c.alloc(262_144).unwrap();
    fits.fill(3);
    c.send_buf(fits).unwrap();
    assert!(s.recv(TIMEOUT).unwrap().bytes().iter().all(|&b| b == 3));
    // Longer: the receiver fails the connection, saying why.
    let mut long = c.alloc(1 << 20).unwrap();
    long.fill(4);
    c.send_buf(long).unwrap();
    match s.recv(TIMEOUT) {
        Err(Error::Closed {
            cause: Some(ConnError::Protocol(ProtocolError::ChunkTooLarge { len, max, .. })),
        }) => {
            assert_eq!((len, max), (1 << 20, 262_144));
        }
        other => panic!("expected the chunk refused, got {other:?}"),
    }
    // The sender learns the connection is gone.
    let deadline = Instant::now() + TIMEOUT;
    while !c.is_closed() && Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert!(c.is_closed(), "the sender's side still open");
}
