//! The tokio echo (bind, an accept loop, a task per connection, `read` / `write_all`; a client
//! that connects, writes and reads back), written once as with `tokio::net` and compiled twice:
//! with tokio's `TcpListener` / `TcpStream` and with the byte stream's two types in their
//! place. Both run; the stream's must behave as tokio's does.
use std::io;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use transport::stream::{Stream, StreamListener};

use crate::stream::runtime;
use crate::support::{local_ip, pattern, peer_ip};

/// The echo program over `$listener` / `$stream`, each named as tokio names its type.
macro_rules! echo_program {
    ($module:ident, $listener:ty, $stream:ty) => {
        mod $module {
            use tokio::io::{AsyncReadExt, AsyncWriteExt};

            type TcpListener = $listener;
            type TcpStream = $stream;

            /// Binds `addr`, says which port it got, and echoes every connection on a task of
            /// its own, until it is aborted.
            pub async fn server(
                addr: String,
                port: tokio::sync::oneshot::Sender<u16>,
            ) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
                let listener = TcpListener::bind(addr).await?;
                let _ = port.send(listener.local_addr()?.port());
                loop {
                    let (mut socket, _) = listener.accept().await?;
                    tokio::spawn(async move {
                        let mut buf = [0; 1024];
                        loop {
                            let n = match socket.read(&mut buf).await {
                                Ok(0) => return,
                                Ok(n) => n,
                                Err(e) => {
                                    eprintln!("failed to read from socket; err = {:?}", e);
                                    return;
                                }
                            };
                            if let Err(e) = socket.write_all(&buf[0..n]).await {
                                eprintln!("failed to write to socket; err = {:?}", e);
                                return;
                            }
                        }
                    });
                }
            }

            /// Connects to `addr`, writes `data` while reading the echo back through the two
            /// borrowed halves, and returns what came back.
            pub async fn client(addr: String, data: &[u8]) -> std::io::Result<Vec<u8>> {
                let mut stream = TcpStream::connect(addr).await?;
                stream.set_nodelay(true)?;
                stream.write_all(b"hello world!").await?;
                let mut hello = [0; 12];
                stream.read_exact(&mut hello).await?;
                assert_eq!(&hello, b"hello world!");
                let mut echo = vec![0; data.len()];
                let (mut rd, mut wr) = stream.split();
                tokio::try_join!(wr.write_all(data), rd.read_exact(&mut echo))?;
                stream.shutdown().await?;
                Ok(echo)
            }
        }
    };
}

echo_program!(over_tcp, tokio::net::TcpListener, tokio::net::TcpStream);
echo_program!(
    over_rdma,
    transport::stream::StreamListener,
    transport::stream::Stream
);

/// Runs the server on `bind` and the client against `host`, and checks the echo.
macro_rules! run_echo {
    ($module:ident, $bind:expr, $host:expr) => {{
        let (tx, rx) = tokio::sync::oneshot::channel();
        let server = tokio::spawn($module::server($bind.to_string(), tx));
        let port = tokio::time::timeout(Duration::from_secs(20), rx)
            .await
            .expect("the server binds within 20 s")
            .expect("the server binds");
        let data = pattern(7, 200_000);
        let echo = tokio::time::timeout(
            Duration::from_secs(60),
            $module::client(format!("{}:{port}", $host), &data),
        )
        .await
        .expect("the echo ends within 60 s")
        .expect("the client's echo");
        assert!(echo == data, "the echo differs from what was written");
        server.abort();
    }};
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn the_tokio_echo_runs_unchanged_with_the_stream_in_place_of_tokio_net() {
    runtime().block_on(async {
        run_echo!(over_tcp, "127.0.0.1:0", Ipv4Addr::LOCALHOST);
        // The unspecified address listens on every RDMA device; the client connects by string.
        run_echo!(over_rdma, "0.0.0.0:0", peer_ip());
    });
}

/// A listener bound to the unspecified address accepts on every device's address, on one
/// port; the same port bound again is `AddrInUse`, an address no device has
/// `AddrNotAvailable`, and an `(ip, port)` pair binds as a `SocketAddr` does.
#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn the_unspecified_address_listens_on_every_device_on_one_port() {
    runtime().block_on(async {
        let listener = StreamListener::bind("0.0.0.0:0").await.unwrap();
        let local = listener.local_addr().unwrap();
        assert!(local.ip().is_unspecified(), "{local}");
        let port = local.port();
        assert_ne!(port, 0);
        for (from, to) in [(local_ip(), peer_ip()), (peer_ip(), local_ip())] {
            let dst = SocketAddr::new(to, port);
            let (c, s) = tokio::join!(Stream::connect_from(from, dst), listener.accept());
            let (c, (s, peer)) = (c.unwrap(), s.unwrap());
            assert_eq!(c.local_addr().unwrap().ip(), from);
            assert_eq!(s.local_addr().unwrap(), dst, "accepted on {to}");
            assert_eq!(peer, c.local_addr().unwrap());
        }
        let again = StreamListener::bind(("0.0.0.0", port)).await.unwrap_err();
        assert_eq!(again.kind(), io::ErrorKind::AddrInUse, "{again}");
        let on_one = StreamListener::bind((peer_ip(), port)).await.unwrap_err();
        assert_eq!(on_one.kind(), io::ErrorKind::AddrInUse, "{on_one}");
        let nobody = IpAddr::V4(Ipv4Addr::new(10, 99, 0, 1));
        let none = StreamListener::bind((nobody, 0)).await.unwrap_err();
        assert_eq!(none.kind(), io::ErrorKind::AddrNotAvailable, "{none}");
        drop(listener);
        // Once dropped, the port is free on every address again, at once.
        StreamListener::bind(("0.0.0.0", port))
            .await
            .unwrap_or_else(|e| panic!("rebinding {port}: {e}"));
    });
}

/// `bind_with` and `connect_with` take a configuration, the unspecified address included:
/// the streams live on the shared endpoints of that configuration (one per address and
/// configuration: equal configurations share one, the default's is another), whose
/// `max_connections` is the limit a further connect meets: refused by the full listener with
/// `ConnectionRefused`, the limit and the setting named.
#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn bind_with_and_connect_with_use_the_shared_endpoint_of_their_configuration() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use transport::stream::{shared_endpoint, shared_endpoint_with};
    use transport::EndpointConfig;

    let steps = async {
        let listening = EndpointConfig::default()
            .with_max_connections(2)
            .with_pool_bytes(16 << 20);
        let connecting = EndpointConfig::default()
            .with_max_connections(4)
            .with_pool_bytes(16 << 20);
        let listener = StreamListener::bind_with("0.0.0.0:0", listening.clone())
            .await
            .unwrap();
        assert!(listener.local_addr().unwrap().ip().is_unspecified());
        let port = listener.local_addr().unwrap().port();
        for ep in listener.endpoints() {
            assert_eq!(ep.config().max_connections(), 2);
        }
        let server_ep = shared_endpoint_with(peer_ip(), &listening).unwrap();
        let dst = format!("{}:{port}", peer_ip());
        let opened = |ip| shared_endpoint(ip).unwrap().stats().opened;
        let default_before = [opened(local_ip()), opened(peer_ip())];
        let mut streams = Vec::new();
        for i in 0..2u8 {
            // Connected first: the listener's endpoint takes it into its backlog.
            let mut c = Stream::connect_with(dst.as_str(), connecting.clone())
                .await
                .unwrap();
            let (mut s, _) = listener.accept().await.unwrap();
            c.write_all(&[i; 100]).await.unwrap();
            let mut got = [0u8; 100];
            s.read_exact(&mut got).await.unwrap();
            assert_eq!(got, [i; 100]);
            streams.push((c, s));
        }
        // The connector's streams are on the shared endpoint of their source address and
        // configuration; the default configuration's endpoint carried none of them.
        let src = streams[0].0.local_addr().unwrap().ip();
        let client_ep = shared_endpoint_with(src, &connecting).unwrap();
        assert_eq!(client_ep.stats().connections, 2, "the connector's streams");
        assert_eq!(server_ep.stats().connections, 2, "the listener's streams");
        assert_eq!(
            [opened(local_ip()), opened(peer_ip())],
            default_before,
            "no stream on the default configuration's endpoints"
        );
        assert!(src == local_ip() || src == peer_ip(), "{src}");
        // The listener's endpoint is full: refused, and told why.
        let refused = Stream::connect_with(dst.as_str(), connecting.clone())
            .await
            .unwrap_err();
        assert_eq!(
            refused.kind(),
            io::ErrorKind::ConnectionRefused,
            "{refused}"
        );
        assert!(
            refused.to_string().contains("maximum of 2 connections")
                && refused.to_string().contains("max_connections"),
            "{refused}"
        );
        // Closed, they make room again.
        for (mut c, _s) in streams.drain(..) {
            c.shutdown().await.unwrap();
        }
        while server_ep.stats().connections > 0 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Stream::connect_with(dst.as_str(), connecting.clone())
            .await
            .unwrap();
        listener.accept().await.unwrap();
    };
    runtime().block_on(async {
        tokio::time::timeout(Duration::from_secs(120), steps)
            .await
            .expect("every step within 120 s");
    });
}
