//! The byte stream at scale and with tokio's tools: 300 streams on the process's shared
//! endpoints (past the 256 one pair of queues serves: the endpoints grow), each served by a
//! task of its own; a `tokio_util` length-delimited `Framed`
//! round trip; 24 MiB (more than the pool) copied with `tokio::io::copy_buf` from a generator into the stream and
//! with `tokio::io::copy` out of it into a checksumming sink (nothing held whole).
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use futures::{SinkExt, StreamExt};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio_util::codec::{Framed, LengthDelimitedCodec};
use transport::stream::{shared_endpoint, Stream, StreamListener};

use crate::stream::{runtime, stream_endpoints};
use crate::support::*;

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn three_hundred_streams_on_the_shared_endpoints_each_served_by_its_own_task() {
    const N: usize = 300;
    const MESSAGES: u64 = 5;
    let rt = runtime();
    rt.block_on(async {
        // No endpoint of our own on either side: bind and connect_from use the shared ones.
        let listener = StreamListener::bind(SocketAddr::new(peer_ip(), 0))
            .await
            .expect("bind");
        let addr = listener.local_addr().unwrap();
        let server = tokio::spawn(async move {
            let mut served = Vec::with_capacity(N);
            for _ in 0..N {
                let (mut s, _) = listener.accept().await.expect("accept");
                served.push(tokio::spawn(async move {
                    let mut buf = vec![0u8; 4096];
                    let mut echoed = 0usize;
                    loop {
                        let n = s.read(&mut buf).await.expect("server read");
                        if n == 0 {
                            s.shutdown().await.expect("server shutdown");
                            return echoed;
                        }
                        s.write_all(&buf[..n]).await.expect("server write");
                        echoed += n;
                    }
                }));
            }
            let mut total = 0;
            for t in served {
                total += t.await.unwrap();
            }
            total
        });
        // Connects a few at a time (as a client pool would), all of them open at once.
        let connecting = Arc::new(tokio::sync::Semaphore::new(16));
        let all_open = Arc::new(tokio::sync::Barrier::new(N));
        let started = Instant::now();
        let clients: Vec<_> = (0..N)
            .map(|c| {
                let (connecting, all_open) = (connecting.clone(), all_open.clone());
                tokio::spawn(async move {
                    let permit = connecting.acquire().await.unwrap();
                    let mut s = Stream::connect_from(local_ip(), addr)
                        .await
                        .unwrap_or_else(|e| panic!("connection {c}: {e}"));
                    drop(permit);
                    if all_open.wait().await.is_leader() {
                        let here = shared_endpoint(local_ip()).unwrap().connections();
                        let there = shared_endpoint(peer_ip()).unwrap().connections();
                        eprintln!("{N} streams open after {:?}", started.elapsed());
                        assert!(
                            here >= N && there >= N,
                            "{here} and {there} on the endpoints"
                        );
                        // More than one pair of queues serves them, on each side.
                        for ip in [local_ip(), peer_ip()] {
                            let queues = shared_endpoint(ip).unwrap().stats().queues;
                            assert!(queues >= 2, "{queues} queue pairs on {ip}");
                        }
                    }
                    let mut sent = 0;
                    for m in 0..MESSAGES {
                        let data =
                            pattern((c as u64) << 20 | m, 1 + (c * 37 + m as usize * 401) % 3000);
                        s.write_all(&data).await.unwrap();
                        let mut back = vec![0u8; data.len()];
                        s.read_exact(&mut back).await.unwrap();
                        assert!(back == data, "connection {c} message {m} differs");
                        sent += data.len();
                    }
                    s.shutdown().await.unwrap();
                    let mut rest = Vec::new();
                    s.read_to_end(&mut rest).await.unwrap();
                    assert!(rest.is_empty(), "connection {c}: bytes after the last echo");
                    sent
                })
            })
            .collect();
        let work = async {
            let mut sent = 0;
            for t in clients {
                sent += t.await.unwrap();
            }
            sent
        };
        let sent = tokio::time::timeout(Duration::from_secs(120), work)
            .await
            .expect("300 streams within 120 s");
        assert_eq!(server.await.unwrap(), sent, "bytes echoed");
    });
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn a_length_delimited_framed_codec_round_trips_over_the_stream() {
    let rt = runtime();
    rt.block_on(async {
        let (listener, client) = stream_endpoints();
        let addr = listener.local_addr().unwrap();
        let server = tokio::spawn(async move {
            let (s, _) = listener.accept().await.unwrap();
            let mut framed = Framed::new(s, LengthDelimitedCodec::new());
            let mut frames = 0;
            // Answers every frame with its bytes reversed, until the client's end of stream.
            while let Some(frame) = framed.next().await {
                let mut frame = frame.expect("server frame");
                frame.reverse();
                framed.send(frame.freeze()).await.expect("server send");
                frames += 1;
            }
            framed.get_mut().shutdown().await.unwrap();
            frames
        });
        let s = Stream::connect_on(&client, addr).await.unwrap();
        let mut framed = Framed::new(s, LengthDelimitedCodec::new());
        let sizes = [0usize, 1, 100, 4095, 70_000, 1 << 20, 3];
        for (i, &len) in sizes.iter().enumerate() {
            let data = pattern(i as u64, len);
            framed.send(&data[..]).await.expect("send frame");
            let back = tokio::time::timeout(TIMEOUT, framed.next())
                .await
                .expect("answer within the timeout")
                .expect("a frame, not the end")
                .expect("frame");
            let mut want = data;
            want.reverse();
            assert!(back[..] == want[..], "frame {i} of {len} bytes");
        }
        framed.get_mut().shutdown().await.unwrap();
        assert!(
            framed.next().await.is_none(),
            "end of stream after shutdown"
        );
        assert_eq!(server.await.unwrap(), sizes.len());
    });
}

/// Produces `left` bytes: 1 MiB blocks of one pattern, each starting with its number; `sum`
/// checksums what it produced.
struct Source {
    block: Vec<u8>,
    at: usize,
    index: u64,
    left: usize,
    sum: Sum,
}

impl AsyncRead for Source {
    fn poll_read(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let me = self.get_mut();
        if me.at == me.block.len() {
            me.at = 0;
            me.index += 1;
            me.block[..8].copy_from_slice(&me.index.to_le_bytes());
        }
        let n = buf.remaining().min(me.block.len() - me.at).min(me.left);
        buf.put_slice(&me.block[me.at..me.at + n]);
        me.sum.update(&me.block[me.at..me.at + n]);
        me.at += n;
        me.left -= n;
        Poll::Ready(Ok(()))
    }
}

/// A 64-bit checksum over 8-byte words (fast enough for hundreds of MiB in a debug build),
/// fed in any split: bytes that do not yet fill a word wait for the next call.
#[derive(Default)]
struct Sum {
    hash: u64,
    partial: [u8; 8],
    fill: usize,
    total: usize,
}

impl Sum {
    fn update(&mut self, mut bytes: &[u8]) {
        self.total += bytes.len();
        while self.fill > 0 && !bytes.is_empty() {
            self.partial[self.fill] = bytes[0];
            self.fill = (self.fill + 1) % 8;
            bytes = &bytes[1..];
            if self.fill == 0 {
                self.word(u64::from_le_bytes(self.partial));
            }
        }
        let mut words = bytes.chunks_exact(8);
        for w in &mut words {
            self.word(u64::from_le_bytes(w.try_into().unwrap()));
        }
        for &b in words.remainder() {
            self.partial[self.fill] = b;
            self.fill += 1;
        }
    }

    fn word(&mut self, w: u64) {
        self.hash = (self.hash ^ w)
            .wrapping_mul(0x9e37_79b9_7f4a_7c15)
            .rotate_left(29);
    }

    fn finish(mut self) -> (usize, u64) {
        let tail = self.fill;
        if tail > 0 {
            self.partial[tail..].fill(0);
            self.word(u64::from_le_bytes(self.partial) ^ tail as u64);
        }
        (self.total, self.hash)
    }
}

/// An `AsyncWrite` that only checksums what it is given.
#[derive(Default)]
struct Sink(Sum);

impl AsyncWrite for Sink {
    fn poll_write(self: Pin<&mut Self>, _: &mut Context<'_>, b: &[u8]) -> Poll<io::Result<usize>> {
        self.get_mut().0.update(b);
        Poll::Ready(Ok(b.len()))
    }
    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn tokio_io_copy_larger_than_the_pool_arrives_with_the_same_checksum() {
    // Half as much again as either endpoint's pool (16 MiB): nothing can be held whole.
    const POOL: usize = 16 << 20;
    const TOTAL: usize = POOL / 2 * 3;
    let rt = runtime();
    rt.block_on(async {
        let small_pool = || config().with_pool_bytes(POOL);
        let (listener, client) = endpoints(small_pool(), small_pool());
        let listener = StreamListener::from_listener(listener);
        let addr = listener.local_addr().unwrap();
        let server = tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.unwrap();
            let mut sink = Sink::default();
            let n = tokio::io::copy(&mut s, &mut sink).await.expect("copy out");
            (n, sink.0.finish())
        });
        let mut s = Stream::connect_on(&client, addr).await.unwrap();
        let mut source = Source {
            block: pattern(5, 1 << 20),
            at: 0,
            index: 0,
            left: TOTAL,
            sum: Sum::default(),
        };
        source.block[..8].copy_from_slice(&0u64.to_le_bytes());
        // Large writes (up to the stream's max_write), as a file copy would make.
        let mut source = tokio::io::BufReader::with_capacity(1 << 20, source);
        let started = Instant::now();
        let copy = async {
            let n = tokio::io::copy_buf(&mut source, &mut s)
                .await
                .expect("copy in");
            s.shutdown().await.unwrap();
            n
        };
        // Bounded generously: rxe under emulation moves about 10 MB/s, and this build
        // checksums every word unoptimized on both sides.
        let sent = tokio::time::timeout(Duration::from_secs(600), copy)
            .await
            .expect("24 MiB within 600 s");
        let want = std::mem::take(&mut source.get_mut().sum);
        let (got, sum) = tokio::time::timeout(Duration::from_secs(60), server)
            .await
            .expect("the server's copy ends")
            .unwrap();
        eprintln!("24 MiB copied in {:?}", started.elapsed());
        assert_eq!((sent, got), (TOTAL as u64, TOTAL as u64));
        assert_eq!(sum, want.finish(), "checksum of the copied bytes");
    });
}
