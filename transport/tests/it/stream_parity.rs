//! The byte stream beside `tokio::net`, past the echo: each program here is written once as
//! with tokio's `TcpListener` / `TcpStream`, compiled twice (tokio's types, then the stream's
//! in their place), and both must behave alike: a client that writes and drops its write half
//! (the server reads to the end, then answers on the same connection), halves put back
//! together with `reunite` (and halves of two streams refused, handed back), the halves'
//! addresses, std's timeout setters (a zero timeout refused as std refuses it),
//! `readable` / `try_read` / `peek` and `ready` / `writable` / `try_write` through a shared
//! reference, and a zero linger that resets the connection.
use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use crate::stream::runtime;
use crate::support::{pattern, peer_ip};

/// The programs over `$listener` / `$stream`, each named as tokio names its type.
macro_rules! parity_programs {
    ($module:ident, $listener:ty, $stream:ty) => {
        mod $module {
            use tokio::io::{AsyncReadExt, AsyncWriteExt};

            type TcpListener = $listener;
            type TcpStream = $stream;

            /// Binds `addr`, says which port it got, and for each of `connections`
            /// connections reads to the end of stream, then writes back the length it read
            /// and the bytes reversed, and shuts down.
            pub async fn server(
                addr: String,
                connections: usize,
                port: tokio::sync::oneshot::Sender<u16>,
            ) -> std::io::Result<()> {
                let listener = TcpListener::bind(addr).await?;
                let _ = port.send(listener.local_addr()?.port());
                for _ in 0..connections {
                    let (mut socket, peer) = listener.accept().await?;
                    assert_eq!(socket.peer_addr()?, peer);
                    let mut got = Vec::new();
                    socket.read_to_end(&mut got).await?;
                    socket.write_all(&(got.len() as u64).to_le_bytes()).await?;
                    got.reverse();
                    socket.write_all(&got).await?;
                    socket.shutdown().await?;
                }
                Ok(())
            }

            /// Writes `data` through an owned write half and drops it (no shutdown); reads
            /// the answer through the read half; puts the halves of another connection
            /// together with this one's (refused), then each with its own.
            pub async fn client(addr: String, data: &[u8]) -> std::io::Result<Vec<u8>> {
                let stream = TcpStream::connect(addr.clone()).await?;
                let local = stream.local_addr()?;
                assert!(stream.set_read_timeout_like_std());
                let (mut rd, mut wr) = stream.into_split();
                assert_eq!(rd.local_addr()?, local);
                assert_eq!(wr.local_addr()?, local);
                assert_eq!(rd.peer_addr()?, wr.peer_addr()?);
                wr.write_all(data).await?;
                drop(wr);
                let mut len = [0u8; 8];
                rd.read_exact(&mut len).await?;
                assert_eq!(u64::from_le_bytes(len), data.len() as u64);
                let mut answer = Vec::new();
                rd.read_to_end(&mut answer).await?;
                // Another connection's halves and this one's: refused, handed back whole.
                let other = TcpStream::connect(addr).await?;
                let (ord, owr) = other.into_split();
                let (mine, theirs) = match rd.reunite(owr) {
                    Ok(_) => panic!("halves of two streams reunited"),
                    Err(e) => {
                        assert!(e.to_string().contains("not from the same"), "{e}");
                        (e.0, e.1)
                    }
                };
                let mut other = ord.reunite(theirs).expect("its own halves");
                other.shutdown().await?;
                let mut rest = Vec::new();
                other.read_to_end(&mut rest).await?;
                assert_eq!(
                    &rest[..8],
                    &0u64.to_le_bytes(),
                    "nothing written, nothing read"
                );
                drop(mine);
                Ok(answer)
            }

            /// Binds `addr`, says which port it got, accepts one connection and writes `first`,
            /// then (once the client says so with a byte) `second`, then shuts down.
            pub async fn writer(
                addr: String,
                first: Vec<u8>,
                second: Vec<u8>,
                port: tokio::sync::oneshot::Sender<u16>,
            ) -> std::io::Result<()> {
                let listener = TcpListener::bind(addr).await?;
                let _ = port.send(listener.local_addr()?.port());
                let (mut socket, _) = listener.accept().await?;
                socket.write_all(&first).await?;
                let mut go = [0u8; 1];
                socket.read_exact(&mut go).await?;
                socket.write_all(&second).await?;
                socket.shutdown().await?;
                let mut rest = Vec::new();
                socket.read_to_end(&mut rest).await?;
                Ok(())
            }

            /// Reads `first_len` bytes with `readable` and `try_read` through a shared
            /// reference (WouldBlock between arrivals), asks for the rest, peeks at it, reads
            /// it, and sees the end with `try_read`'s `Ok(0)`.
            pub async fn nonblocking_reader(
                addr: String,
                first_len: usize,
                second_len: usize,
            ) -> std::io::Result<(Vec<u8>, Vec<u8>, Vec<u8>)> {
                let mut stream = TcpStream::connect(addr).await?;
                let shared = &stream;
                let mut first = vec![0u8; first_len];
                let mut got = 0;
                while got < first_len {
                    shared.readable().await?;
                    match shared.try_read(&mut first[got..]) {
                        Ok(0) => panic!("end of stream after {got} bytes"),
                        Ok(n) => got += n,
                        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
                        Err(e) => return Err(e),
                    }
                }
                // Nothing more until asked.
                let mut none = [0u8; 16];
                let e = shared.try_read(&mut none).unwrap_err();
                assert_eq!(e.kind(), std::io::ErrorKind::WouldBlock);
                stream.write_all(b"g").await?;
                let mut peeked = vec![0u8; second_len];
                let n = stream.peek(&mut peeked).await?;
                assert!(n > 0, "peek waits for bytes");
                peeked.truncate(n);
                let mut second = vec![0u8; second_len];
                stream.read_exact(&mut second).await?;
                loop {
                    stream.readable().await?;
                    match stream.try_read(&mut none) {
                        Ok(0) => break,
                        Ok(n) => panic!("{n} bytes after the last"),
                        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
                        Err(e) => return Err(e),
                    }
                }
                stream.shutdown().await?;
                Ok((first, peeked, second))
            }

            /// Binds `addr`, says which port it got, accepts one connection, reads it to the
            /// end, answers with the length it read and shuts down.
            pub async fn counter(
                addr: String,
                port: tokio::sync::oneshot::Sender<u16>,
            ) -> std::io::Result<()> {
                let listener = TcpListener::bind(addr).await?;
                let _ = port.send(listener.local_addr()?.port());
                let (mut socket, _) = listener.accept().await?;
                let mut got = Vec::new();
                socket.read_to_end(&mut got).await?;
                socket.write_all(&(got.len() as u64).to_le_bytes()).await?;
                socket.shutdown().await?;
                Ok(())
            }

            /// Writes `data` with `writable` and `try_write` through a shared reference
            /// (`ready` says writable first), shuts down, and returns the length the peer
            /// says it read.
            pub async fn nonblocking_writer(addr: String, data: &[u8]) -> std::io::Result<u64> {
                use tokio::io::Interest;
                let mut stream = TcpStream::connect(addr).await?;
                let ready = stream
                    .ready(Interest::READABLE | Interest::WRITABLE)
                    .await?;
                assert!(ready.is_writable(), "{ready:?}");
                assert!(!ready.is_readable(), "nothing to read yet: {ready:?}");
                let shared = &stream;
                let mut at = 0;
                while at < data.len() {
                    shared.writable().await?;
                    match shared.try_write(&data[at..]) {
                        Ok(n) => at += n,
                        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
                        Err(e) => return Err(e),
                    }
                }
                stream.shutdown().await?;
                let mut len = [0u8; 8];
                stream.read_exact(&mut len).await?;
                Ok(u64::from_le_bytes(len))
            }

            /// Binds `addr`, says which port it got, accepts one connection, reads 100 bytes,
            /// answers one, and returns the error its next read gets.
            pub async fn reset_reader(
                addr: String,
                port: tokio::sync::oneshot::Sender<u16>,
            ) -> std::io::Result<std::io::ErrorKind> {
                let listener = TcpListener::bind(addr).await?;
                let _ = port.send(listener.local_addr()?.port());
                let (mut socket, _) = listener.accept().await?;
                let mut got = [0u8; 100];
                socket.read_exact(&mut got).await?;
                socket.write_all(b"k").await?;
                let mut more = [0u8; 16];
                match socket.read(&mut more).await {
                    Ok(n) => panic!("a read after the reset gave Ok({n})"),
                    Err(e) => Ok(e.kind()),
                }
            }

            /// Writes 100 bytes, reads the answer, sets a zero linger (seen through
            /// `linger`) and drops the stream.
            pub async fn aborter(addr: String) -> std::io::Result<()> {
                let mut stream = TcpStream::connect(addr).await?;
                assert_eq!(stream.linger()?, None);
                stream.write_all(&[7u8; 100]).await?;
                let mut k = [0u8; 1];
                stream.read_exact(&mut k).await?;
                stream.set_zero_linger()?;
                assert_eq!(stream.linger()?, Some(std::time::Duration::ZERO));
                drop(stream);
                Ok(())
            }

            /// std's timeout setters on a stream: a zero timeout is `InvalidInput`.
            trait TimeoutsLikeStd {
                fn set_read_timeout_like_std(&self) -> bool;
            }
            impl TimeoutsLikeStd for TcpStream {
                fn set_read_timeout_like_std(&self) -> bool {
                    super::timeouts_like_std(self)
                }
            }
        }
    };
}

/// std's timeouts on `tokio::net::TcpStream` (through its std socket) and on the stream:
/// the same results for a zero, a bounded and no timeout.
trait BlockingTimeouts {
    fn set_read(&self, t: Option<Duration>) -> std::io::Result<()>;
    fn read(&self) -> std::io::Result<Option<Duration>>;
}

impl BlockingTimeouts for tokio::net::TcpStream {
    fn set_read(&self, t: Option<Duration>) -> std::io::Result<()> {
        socket2_like(self).set_read_timeout(t)
    }
    fn read(&self) -> std::io::Result<Option<Duration>> {
        socket2_like(self).read_timeout()
    }
}

impl BlockingTimeouts for transport::stream::Stream {
    fn set_read(&self, t: Option<Duration>) -> std::io::Result<()> {
        self.set_read_timeout(t)
    }
    fn read(&self) -> std::io::Result<Option<Duration>> {
        self.read_timeout()
    }
}

/// A std `TcpStream` on the same socket as `s` (a duplicate descriptor).
fn socket2_like(s: &tokio::net::TcpStream) -> std::net::TcpStream {
    use std::os::fd::AsFd;
    let fd = s.as_fd().try_clone_to_owned().expect("dup");
    std::net::TcpStream::from(fd)
}

fn timeouts_like_std(s: &impl BlockingTimeouts) -> bool {
    let zero = s.set_read(Some(Duration::ZERO)).unwrap_err();
    assert_eq!(zero.kind(), std::io::ErrorKind::InvalidInput, "{zero}");
    s.set_read(Some(Duration::from_secs(5))).unwrap();
    assert_eq!(s.read().unwrap(), Some(Duration::from_secs(5)));
    s.set_read(None).unwrap();
    s.read().unwrap().is_none()
}

parity_programs!(over_tcp, tokio::net::TcpListener, tokio::net::TcpStream);
parity_programs!(
    over_rdma,
    transport::stream::StreamListener,
    transport::stream::Stream
);

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn a_dropped_write_half_ends_the_stream_and_halves_reunite_as_with_tokio_net() {
    runtime().block_on(async {
        for len in [0usize, 1, 4096, 100_000, 4 << 20] {
            let data = pattern(len as u64, len);
            let mut reversed = data.clone();
            reversed.reverse();
            macro_rules! run {
                ($module:ident, $bind:expr, $host:expr) => {{
                    let (answer, ()) = exchange(
                        $bind,
                        $host,
                        |a, tx| $module::server(a, 2, tx),
                        |a| $module::client(a, &data),
                        Duration::from_secs(120),
                    )
                    .await;
                    assert!(answer == reversed, "{len} bytes: the answer differs");
                }};
            }
            run!(over_tcp, "127.0.0.1:0", Ipv4Addr::LOCALHOST);
            run!(over_rdma, "0.0.0.0:0", peer_ip());
        }
    });
}

/// Spawns `server` on `bind` (it says its port through the channel, within 20 s), runs
/// `client` against `host` at that port (within `client_within`), then waits for the server's
/// end (within 60 s): the client's result and the server's.
async fn exchange<SF, ST, CF, CT>(
    bind: &str,
    host: impl std::fmt::Display,
    server: impl FnOnce(String, tokio::sync::oneshot::Sender<u16>) -> SF,
    client: impl FnOnce(String) -> CF,
    client_within: Duration,
) -> (CT, ST)
where
    SF: std::future::Future<Output = std::io::Result<ST>> + Send + 'static,
    ST: Send + 'static,
    CF: std::future::Future<Output = std::io::Result<CT>>,
{
    let (tx, rx) = tokio::sync::oneshot::channel();
    let server = tokio::spawn(server(bind.to_owned(), tx));
    let port = tokio::time::timeout(Duration::from_secs(20), rx)
        .await
        .expect("the server binds within 20 s")
        .expect("the server binds");
    let client = tokio::time::timeout(client_within, client(format!("{host}:{port}")))
        .await
        .unwrap_or_else(|_| panic!("the client ends within {client_within:?}"))
        .expect("the client");
    let server = tokio::time::timeout(Duration::from_secs(60), server)
        .await
        .expect("the server ends within 60 s")
        .expect("the server task")
        .expect("the server");
    (client, server)
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn try_read_readable_and_peek_behave_as_with_tokio_net() {
    runtime().block_on(async {
        macro_rules! run {
            ($module:ident, $bind:expr, $host:expr) => {{
                let (first, second) = (pattern(1, 3000), pattern(2, 200));
                let ((got_first, peeked, got_second), ()) = exchange(
                    $bind,
                    $host,
                    |a, tx| $module::writer(a, first.clone(), second.clone(), tx),
                    |a| $module::nonblocking_reader(a, 3000, 200),
                    Duration::from_secs(60),
                )
                .await;
                assert!(got_first == first, "the bytes read with try_read");
                assert!(got_second == second, "the bytes read after the peek");
                assert!(
                    second.starts_with(&peeked),
                    "peek saw the next bytes ({} of them)",
                    peeked.len()
                );
            }};
        }
        run!(over_tcp, "127.0.0.1:0", Ipv4Addr::LOCALHOST);
        run!(over_rdma, "0.0.0.0:0", peer_ip());
    });
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn try_write_writable_and_ready_behave_as_with_tokio_net() {
    runtime().block_on(async {
        let data = pattern(3, 300_000);
        macro_rules! run {
            ($module:ident, $bind:expr, $host:expr) => {{
                let (read, ()) = exchange(
                    $bind,
                    $host,
                    $module::counter,
                    |a| $module::nonblocking_writer(a, &data),
                    Duration::from_secs(60),
                )
                .await;
                assert_eq!(read, data.len() as u64, "the peer read every byte");
            }};
        }
        run!(over_tcp, "127.0.0.1:0", Ipv4Addr::LOCALHOST);
        run!(over_rdma, "0.0.0.0:0", peer_ip());
    });
}

/// A stream dropped after `set_zero_linger` resets the connection: the peer's next read is
/// `ConnectionReset`, never a clean end, over TCP and over the stream alike.
#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn a_zero_linger_resets_the_connection_as_with_tokio_net() {
    runtime().block_on(async {
        for (tcp, bind, host) in [
            (true, "127.0.0.1:0", IpAddr::from(Ipv4Addr::LOCALHOST)),
            (false, "0.0.0.0:0", peer_ip()),
        ] {
            let within = Duration::from_secs(60);
            let ((), kind) = if tcp {
                exchange(
                    bind,
                    host,
                    over_tcp::reset_reader,
                    over_tcp::aborter,
                    within,
                )
                .await
            } else {
                exchange(
                    bind,
                    host,
                    over_rdma::reset_reader,
                    over_rdma::aborter,
                    within,
                )
                .await
            };
            assert_eq!(kind, std::io::ErrorKind::ConnectionReset, "over TCP: {tcp}");
        }
    });
}
