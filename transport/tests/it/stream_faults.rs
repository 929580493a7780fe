//! The byte stream under faults and cancellation: nobody listening, a port in use, an address
//! of this host without RDMA, a zero-byte write, a write after shutdown, half close, the peer
//! killed mid-stream, and thousands of reads and writes cancelled by `select!` with the byte
//! stream verified after.
use std::io::ErrorKind;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use transport::stream::Stream;

use crate::failures::{peer_program, wait_line};
use crate::stream::{connect_pair, runtime, stream_endpoints};
use crate::support::*;

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn connecting_where_nobody_listens_is_connection_refused() {
    let rt = runtime();
    let client = transport::Endpoint::with_config(local_ip(), config()).unwrap();
    let started = Instant::now();
    let r = rt.block_on(Stream::connect_on(
        &client,
        SocketAddr::new(peer_ip(), 7998),
    ));
    let e = r.expect_err("connected to nobody");
    assert_eq!(e.kind(), ErrorKind::ConnectionRefused, "{e}");
    assert!(started.elapsed() < Duration::from_secs(15));
}

/// Binding a port another listener holds fails as a socket's bind does (`AddrInUse`), with
/// the OS error as its source and the address in its message; the first listener keeps
/// working.
#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn binding_a_port_in_use_is_addr_in_use() {
    let rt = runtime();
    let (listener, client) = stream_endpoints();
    let port = listener.local_addr().unwrap().port();
    let server = transport::Endpoint::with_config(peer_ip(), config()).unwrap();
    let e = transport::stream::StreamListener::bind_on(&server, port).expect_err("port in use");
    assert_eq!(e.kind(), ErrorKind::AddrInUse, "{e}");
    assert!(e.to_string().contains(&port.to_string()), "{e}");
    rt.block_on(async {
        let (mut c, mut s) = connect_pair(&listener, &client).await;
        c.write_all(b"still").await.unwrap();
        let mut b = [0u8; 5];
        s.read_exact(&mut b).await.unwrap();
        assert_eq!(&b, b"still");
    });
}

/// 127.0.0.1 is an address of this host no RDMA device serves: a connection from an RDMA
/// address is refused at once, saying so, instead of waiting out the connect timeout.
#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn connecting_to_an_address_of_this_host_without_rdma_is_refused_at_once() {
    let rt = runtime();
    let client = transport::Endpoint::with_config(local_ip(), config()).unwrap();
    let started = Instant::now();
    let r = rt.block_on(Stream::connect_on(
        &client,
        SocketAddr::from(([127, 0, 0, 1], 7999)),
    ));
    let e = r.expect_err("connected to loopback");
    assert_eq!(e.kind(), ErrorKind::ConnectionRefused, "{e}");
    assert!(e.to_string().contains("no RDMA device serves"), "{e}");
    // Refused before anything was sent: far inside the 10 s connect timeout.
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "took {:?}",
        started.elapsed()
    );
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn zero_byte_writes_send_nothing_shutdown_is_a_half_close_and_later_writes_break() {
    let rt = runtime();
    rt.block_on(async {
        let (listener, client) = stream_endpoints();
        let (mut c, mut s) = connect_pair(&listener, &client).await;
        assert_eq!(c.write(&[]).await.unwrap(), 0);
        c.write_all(b"abc").await.unwrap();
        c.shutdown().await.unwrap();
        let e = c.write(b"more").await.expect_err("write after shutdown");
        assert_eq!(e.kind(), ErrorKind::BrokenPipe, "{e}");
        // The zero-byte write was no end of stream: the server reads abc, then the end.
        let mut got = Vec::new();
        s.read_to_end(&mut got).await.unwrap();
        assert_eq!(got, b"abc");
        assert_eq!(
            s.read(&mut [0u8; 8]).await.unwrap(),
            0,
            "end of stream again"
        );
        // Half close: the server still writes, the client still reads.
        s.write_all(b"reply").await.unwrap();
        s.shutdown().await.unwrap();
        let mut back = Vec::new();
        c.read_to_end(&mut back).await.unwrap();
        assert_eq!(back, b"reply");
    });
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn a_peer_killed_mid_stream_gives_typed_errors_within_the_keepalive_bound() {
    let rt = runtime();
    let client = transport::Endpoint::with_config(local_ip(), config()).unwrap();
    let addr = SocketAddr::new(peer_ip(), 23010);
    let (mut peer, lines) = peer_program(&["server", "--addr", &addr.to_string()]);
    wait_line(&lines, "listening");
    rt.block_on(async {
        let s = Stream::connect_on(&client, addr).await.unwrap();
        wait_line(&lines, "accepted");
        let (mut r, mut w) = s.into_split();
        w.write_all(b"ping").await.unwrap();
        let mut b = [0u8; 4];
        r.read_exact(&mut b).await.unwrap();
        assert_eq!(&b, b"ping");
        peer.kill();
        let killed = Instant::now();
        let block = pattern(3, 64 << 10);
        let writing = async {
            loop {
                if let Err(e) = w.write(&block).await {
                    return e;
                }
            }
        };
        let reading = async {
            let mut buf = vec![0u8; 64 << 10];
            loop {
                match r.read(&mut buf).await {
                    Ok(0) => panic!("end of stream from a killed peer"),
                    Ok(_) => continue,
                    Err(e) => return e,
                }
            }
        };
        let bound = Duration::from_secs(15);
        let (we, re) = tokio::time::timeout(bound, async { tokio::join!(writing, reading) })
            .await
            .expect("errors within the bound");
        eprintln!("after {:?}: write: {we}; read: {re}", killed.elapsed());
        for e in [&we, &re] {
            assert!(
                matches!(e.kind(), ErrorKind::ConnectionReset | ErrorKind::TimedOut),
                "{:?}: {e}",
                e.kind()
            );
        }
    });
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn ten_thousand_cancelled_reads_and_writes_lose_and_duplicate_nothing() {
    let rt = runtime();
    rt.block_on(async {
        let (listener, client) = stream_endpoints();
        let addr = listener.local_addr().unwrap();
        let server = tokio::spawn(async move {
            let (s, _) = listener.accept().await.unwrap();
            let (mut r, mut w) = s.into_split();
            tokio::io::copy(&mut r, &mut w).await.unwrap();
            w.shutdown().await.unwrap();
        });
        let s = Stream::connect_on(&client, addr).await.unwrap();
        let (mut r, mut w) = s.into_split();
        // Less than the rounds write on average (about 2 KB each): the last few thousand
        // rounds only read, and a read that finds nothing left is cancelled by the timer.
        let data = pattern(11, 4 << 20);
        let (mut sent, mut got) = (0usize, Vec::with_capacity(data.len()));
        let mut buf = vec![0u8; 5000];
        let (mut reads, mut writes, mut cancelled) = (0, 0, 0);
        for i in 0..10_000usize {
            let k = 1 + (i * 7919) % 4000;
            let end = (sent + k).min(data.len());
            tokio::select! {
                r = r.read(&mut buf[..1 + i % 4999]) => {
                    let n = r.unwrap();
                    assert!(n > 0, "end of stream before the end");
                    let at = got.len();
                    got.extend_from_slice(&buf[..n]);
                    // What came is what follows what came before.
                    assert!(got[at..] == data[at..got.len()], "stream differs after iteration {i}");
                    reads += 1;
                }
                n = w.write(&data[sent..end]), if sent < data.len() => {
                    sent += n.unwrap();
                    writes += 1;
                }
                _ = tokio::time::sleep(Duration::from_micros(1 + (i % 50) as u64)) => cancelled += 1,
            }
        }
        eprintln!("{reads} reads, {writes} writes, {cancelled} rounds cancelled both");
        assert!(
            cancelled > 100 && reads > 100 && writes > 100,
            "too few rounds of a kind"
        );
        w.shutdown().await.unwrap();
        tokio::time::timeout(TIMEOUT, r.read_to_end(&mut got))
            .await
            .expect("the rest within the timeout")
            .unwrap();
        assert_eq!(got.len(), sent, "bytes echoed");
        assert!(got[..] == data[..sent], "echoed stream differs");
        server.await.unwrap();
    });
}
