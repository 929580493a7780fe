//! The byte stream between the two hosts: echo of every size from 1 B to 16 MiB on a
//! multi-threaded tokio runtime, `tokio::io::copy` of 16 MiB with a checksum, 1,000 tasks sharing one
//! connection, one write of 24 MiB (more than the pool), and small writes coalescing (or not, with `nodelay`).
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use transport::stream::{Stream, StreamListener};
use transport::Endpoint;

use crate::support::*;

pub const SIZES: [usize; 12] = [
    1,
    100,
    4095,
    4096,
    4097,
    65535,
    65536,
    65537,
    (1 << 20) - 1,
    1 << 20,
    (4 << 20) + 7,
    16 << 20,
];

/// A stream listener on the peer's device and a client endpoint on this host's.
pub fn stream_endpoints() -> (StreamListener, Endpoint) {
    let (listener, client) = endpoints(config(), config());
    (StreamListener::from_listener(listener), client)
}

/// A connected stream (client side, server side) from `listener` and `client`, kept alive
/// by the caller.
pub async fn connect_pair(listener: &StreamListener, client: &Endpoint) -> (Stream, Stream) {
    let addr = listener.local_addr().unwrap();
    let (c, s) = tokio::join!(Stream::connect_on(client, addr), listener.accept());
    (c.unwrap(), s.unwrap().0)
}

pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// A 64-bit FNV-1a running hash.
#[derive(Clone, Copy)]
pub struct Fnv(pub u64);

impl Fnv {
    pub fn new() -> Self {
        Fnv(0xcbf2_9ce4_8422_2325)
    }
    pub fn update(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 ^ u64::from(b)).wrapping_mul(0x100_0000_01b3);
        }
    }
}

/// Writes `data` and reads its echo at the same time (halves of one stream), checking it.
async fn echo_once(stream: Stream, data: Arc<Vec<u8>>) -> Stream {
    let (mut r, mut w) = stream.into_split();
    let d = data.clone();
    let writer = tokio::spawn(async move {
        w.write_all(&d).await.expect("write_all");
        w
    });
    let mut back = vec![0u8; data.len()];
    r.read_exact(&mut back)
        .await
        .expect("read_exact of the echo");
    assert!(back == *data, "echo of {} bytes differs", data.len());
    let w = writer.await.unwrap();
    // Put back together: dropping the write half would end the stream.
    r.reunite(w).expect("the halves of one stream")
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn tokio_echo_of_every_size_from_1_byte_to_16_mib() {
    let rt = runtime();
    rt.block_on(async {
        let (listener, client) = stream_endpoints();
        let addr = listener.local_addr().unwrap();
        let server = tokio::spawn(async move {
            // Accept in a loop, a task per connection, as a server does.
            for _ in 0..2 {
                let (mut s, peer) = listener.accept().await.expect("accept");
                assert_eq!(peer.ip(), local_ip());
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 64 << 10];
                    loop {
                        let n = s.read(&mut buf).await.expect("server read");
                        if n == 0 {
                            s.shutdown().await.unwrap();
                            return;
                        }
                        s.write_all(&buf[..n]).await.expect("server write");
                    }
                });
            }
        });
        let work = async {
            let mut streams = Vec::new();
            for _ in 0..2 {
                streams.push(Stream::connect_on(&client, addr).await.expect("connect"));
            }
            assert_eq!(streams[0].peer_addr().unwrap(), addr);
            let tasks: Vec<_> = streams
                .into_iter()
                .enumerate()
                .map(|(c, mut s)| {
                    tokio::spawn(async move {
                        for (i, &len) in SIZES.iter().enumerate() {
                            s = echo_once(s, Arc::new(pattern((c * 100 + i) as u64, len))).await;
                        }
                        s.shutdown().await.unwrap();
                        let mut rest = Vec::new();
                        s.read_to_end(&mut rest).await.unwrap();
                        assert!(rest.is_empty(), "bytes after the last echo");
                    })
                })
                .collect();
            for t in tasks {
                t.await.unwrap();
            }
        };
        tokio::time::timeout(Duration::from_secs(120), work)
            .await
            .expect("echo within 120 s");
        server.await.unwrap();
    });
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn tokio_io_copy_of_16_mib_arrives_with_the_same_checksum() {
    const TOTAL: usize = 16 << 20;
    let rt = runtime();
    rt.block_on(async {
        let (listener, client) = stream_endpoints();
        let addr = listener.local_addr().unwrap();
        let server = tokio::spawn(async move {
            let (s, _) = listener.accept().await.unwrap();
            let (mut r, mut w) = s.into_split();
            // The echo is tokio::io::copy from the read half to the write half.
            let n = tokio::io::copy(&mut r, &mut w).await.expect("copy");
            w.shutdown().await.unwrap();
            n
        });
        let s = Stream::connect_on(&client, addr).await.unwrap();
        let (mut r, mut w) = s.into_split();
        let writer = tokio::spawn(async move {
            let mut sum = Fnv::new();
            let block = pattern(7, 1 << 20);
            for i in 0..TOTAL / block.len() {
                let mut b = block.clone();
                b[..8].copy_from_slice(&(i as u64).to_le_bytes());
                sum.update(&b);
                w.write_all(&b).await.unwrap();
            }
            w.shutdown().await.unwrap();
            sum.0
        });
        let reader = async {
            let mut sum = Fnv::new();
            let mut total = 0usize;
            let mut buf = vec![0u8; 256 << 10];
            loop {
                let n = r.read(&mut buf).await.unwrap();
                if n == 0 {
                    break;
                }
                sum.update(&buf[..n]);
                total += n;
            }
            (total, sum.0)
        };
        let (total, got) = tokio::time::timeout(Duration::from_secs(120), reader)
            .await
            .expect("copy within 120 s");
        let sent = writer.await.unwrap();
        assert_eq!(total, TOTAL);
        assert_eq!(got, sent, "checksum of the copied bytes");
        assert_eq!(server.await.unwrap(), TOTAL as u64);
    });
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn a_thousand_tasks_share_one_connection() {
    let rt = runtime();
    rt.block_on(async {
        let (listener, client) = endpoints(config(), config());
        let addr = addr_of(&listener);
        let server = tokio::spawn(async move {
            let conn = Arc::new(listener.accept_async().await.unwrap());
            let messages = {
                let conn = conn.clone();
                tokio::spawn(async move {
                    let mut seen = vec![false; 1000];
                    loop {
                        match conn.recv_async().await {
                            Ok(Some(m)) => {
                                let i = u64::from_le_bytes(m.bytes()[..].try_into().unwrap());
                                assert!(!seen[i as usize], "message {i} twice");
                                seen[i as usize] = true;
                            }
                            Ok(None) => return seen.iter().filter(|s| **s).count(),
                            Err(e) => panic!("{e}"),
                        }
                    }
                })
            };
            let mut served = 0;
            loop {
                match conn.recv_request_async().await {
                    Ok(Some(req)) => {
                        let mut answer = req.message().to_vec();
                        answer.reverse();
                        req.respond_async(&answer).await.unwrap();
                        served += 1;
                    }
                    Ok(None) => break,
                    Err(e) => panic!("{e}"),
                }
            }
            (served, messages.await.unwrap())
        });
        let conn = Arc::new(client.connect_async(addr).await.unwrap());
        let tasks: Vec<_> = (0..1000u64)
            .map(|i| {
                let conn = conn.clone();
                tokio::spawn(async move {
                    let req = pattern(i, 1 + (i as usize * 13) % 3000);
                    let resp = conn
                        .call_async(&req, Duration::from_secs(90))
                        .await
                        .expect("call");
                    let mut want = req;
                    want.reverse();
                    assert!(resp.to_vec() == want, "response of call {i}");
                    // A response holds a receive credit: give it back before waiting to send.
                    drop(resp);
                    // Messages too: every task sends one, a task reads them all.
                    conn.send_async(&i.to_le_bytes()).await.unwrap();
                })
            })
            .collect();
        for t in tasks {
            tokio::time::timeout(Duration::from_secs(120), t)
                .await
                .expect("tasks within 120 s")
                .unwrap();
        }
        conn.close_async().await.unwrap();
        assert_eq!(server.await.unwrap(), (1000, 1000));
    });
}

/// One `write_all` of 24 MiB, half as much again as either endpoint's pool (16 MiB): the
/// write half cuts it into messages and the reader gets every byte once, in order, nothing
/// held whole. Each 4 KiB page carries its offset (checked on arrival: a lost, repeated or
/// misplaced piece moves the stamps); the rest of the page is a fixed pattern, compared whole.
#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn a_write_larger_than_the_pool_arrives_intact() {
    const POOL: usize = 16 << 20;
    const TOTAL: usize = POOL / 2 * 3;
    const PAGE: usize = 4096;
    let fill = pattern(9, PAGE);
    let rt = runtime();
    rt.block_on(async {
        let small_pool = || config().with_pool_bytes(POOL);
        let (listener, client) = endpoints(small_pool(), small_pool());
        let (listener, client) = (StreamListener::from_listener(listener), client);
        let (mut c, mut s) = connect_pair(&listener, &client).await;
        let data = {
            let fill = fill.clone();
            move || {
                let mut data = vec![0u8; TOTAL];
                for (i, page) in data.chunks_mut(PAGE).enumerate() {
                    page.copy_from_slice(&fill);
                    page[..8].copy_from_slice(&((i * PAGE) as u64).to_le_bytes());
                }
                data
            }
        };
        let writer = tokio::spawn(async move {
            let data = tokio::task::spawn_blocking(data).await.unwrap();
            c.write_all(&data).await.expect("the 24 MiB write");
            c.shutdown().await.unwrap();
        });
        let reader = async {
            let mut buf = vec![0u8; 1 << 20];
            let mut at = 0usize;
            while at < TOTAL {
                s.read_exact(&mut buf)
                    .await
                    .expect("read a MiB of the write");
                for (i, page) in buf.chunks(PAGE).enumerate() {
                    let offset = (at + i * PAGE) as u64;
                    assert_eq!(page[..8], offset.to_le_bytes(), "page at {offset}");
                    assert!(page[8..] == fill[8..], "page at {offset} differs");
                }
                at += buf.len();
            }
            assert_eq!(
                s.read(&mut buf).await.unwrap(),
                0,
                "end of stream after 24 MiB"
            );
        };
        tokio::time::timeout(Duration::from_secs(600), reader)
            .await
            .expect("24 MiB within 600 s");
        writer.await.unwrap();
    });
}

/// Writes `count` small writes (1 to 100 bytes) on `client` as fast as it takes them while
/// the server side reads; returns (writes, bytes) after checking every byte arrived in
/// order. The writer never touches the stream after its last write: whatever waits must go
/// without it.
async fn small_writes(client: Stream, server: Stream, count: usize) -> (usize, usize) {
    let data = pattern(11, 5_000 + 100);
    let total: usize = (0..count).map(|i| i % 100 + 1).sum();
    let expected = {
        let mut sum = Fnv::new();
        let mut off = 0;
        for i in 0..count {
            let len = i % 100 + 1;
            sum.update(&data[off..off + len]);
            off = (off + len) % 5_000;
        }
        sum.0
    };
    let reader = tokio::spawn(async move {
        let mut server = server;
        let mut buf = vec![0u8; 64 << 10];
        let (mut sum, mut got) = (Fnv::new(), 0usize);
        while got < total {
            let n = server.read(&mut buf).await.expect("server read");
            assert!(n > 0, "end of stream after {got} of {total} bytes");
            sum.update(&buf[..n]);
            got += n;
        }
        (sum.0, server)
    });
    let mut client = client;
    let mut off = 0;
    for i in 0..count {
        let len = i % 100 + 1;
        client
            .write_all(&data[off..off + len])
            .await
            .expect("small write");
        off = (off + len) % 5_000;
    }
    let (got, _server) = tokio::time::timeout(Duration::from_secs(60), reader)
        .await
        .expect("every byte read within 60 s, the writer idle")
        .unwrap();
    assert_eq!(got, expected, "the bytes of {count} small writes, in order");
    let stats = client.stats();
    (stats.frames_sent as usize, stats.writes_merged as usize)
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn small_writes_coalesce_into_few_frames_and_nodelay_sends_each_alone() {
    let rt = runtime();
    rt.block_on(async {
        let (listener, client) = stream_endpoints();
        // A writer that outruns the device: writes wait behind unacknowledged frames and
        // join a waiting message (how many depends on the device's pace against the writer's;
        // 36% of them in a full suite run here). Each write either joined one or started a frame.
        let (c, s) = connect_pair(&listener, &client).await;
        assert!(!c.nodelay().unwrap(), "coalescing is on by default");
        let writes = 20_000;
        let (frames, merged) = small_writes(c, s, writes).await;
        assert!(
            merged > 0 && frames < writes && frames + merged >= writes,
            "{writes} writes went as {frames} frames ({merged} merged)"
        );
        // nodelay: a frame per write.
        let (c, s) = connect_pair(&listener, &client).await;
        c.set_nodelay(true).unwrap();
        let writes = 2_000;
        let (frames, merged) = small_writes(c, s, writes).await;
        assert_eq!(merged, 0);
        assert!(frames >= writes, "{writes} writes went as {frames} frames");
    });
}
