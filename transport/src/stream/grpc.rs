//! gRPC over the byte stream (feature `grpc`): tonic serves the streams a [`StreamListener`]
//! accepts ([`StreamListener::into_incoming`] for `Server::serve_with_incoming`) and calls
//! over streams a [`Connector`] opens (for `Endpoint::connect_with_connector`).
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use transport::stream::grpc::Connector;
//! let channel = tonic::transport::Endpoint::from_static("http://10.77.0.2:7500")
//!     .connect_with_connector(Connector::new("10.77.0.1".parse()?))
//!     .await?;
//! // A tonic client on `channel`; the server side:
//! // Server::builder().add_service(svc).serve_with_incoming(listener.into_incoming())
//! # drop(channel); Ok(())
//! # }
//! ```

use std::future::Future;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::task::{Context, Poll};

use hyper_util::rt::TokioIo;
use tonic::transport::server::Connected;
use tonic::transport::Uri;

use super::{Stream, StreamListener};

impl Connected for Stream {
    /// The peer's address.
    type ConnectInfo = Option<SocketAddr>;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.peer_addr().ok()
    }
}

/// The streams a listener accepts, as the incoming connections of a tonic server.
#[derive(Debug)]
pub struct Incoming {
    listener: StreamListener,
}

impl StreamListener {
    /// The accepted streams as a `futures_core::Stream`, for tonic's
    /// `Server::serve_with_incoming`.
    pub fn into_incoming(self) -> Incoming {
        Incoming { listener: self }
    }
}

impl futures_core::Stream for Incoming {
    type Item = io::Result<Stream>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.listener
            .poll_accept(cx)
            .map(|r| Some(r.map(|(stream, _peer)| stream)))
    }
}

/// Opens a [`Stream`] from the RDMA device of a local address to the host and port of a
/// URI (an IP address, e.g. `http://10.77.0.2:7500`): tonic's connector for
/// `Endpoint::connect_with_connector`.
#[derive(Debug, Clone, Copy)]
pub struct Connector {
    src: IpAddr,
}

impl Connector {
    /// Connects from the device that has `src` (on its [shared endpoint](super::shared_endpoint)).
    pub fn new(src: IpAddr) -> Connector {
        Connector { src }
    }
}

type Connecting = Pin<Box<dyn Future<Output = io::Result<TokioIo<Stream>>> + Send>>;

impl tonic::codegen::Service<Uri> for Connector {
    type Response = TokioIo<Stream>;
    type Error = io::Error;
    type Future = Connecting;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, uri: Uri) -> Connecting {
        let src = self.src;
        Box::pin(async move {
            let addr = uri_addr(&uri)?;
            Stream::connect_from(src, addr).await.map(TokioIo::new)
        })
    }
}

/// The socket address of a URI whose host is an IP address (port 80 when none is given).
fn uri_addr(uri: &Uri) -> io::Result<SocketAddr> {
    let bad = || {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{uri}: give the server as http://IP:PORT (an RDMA device's address)"),
        )
    };
    let host = uri.host().ok_or_else(bad)?;
    let ip: IpAddr = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .parse()
        .map_err(|_| bad())?;
    Ok(SocketAddr::new(ip, uri.port_u16().unwrap_or(80)))
}
