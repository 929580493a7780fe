//! [`StreamListener`]: accepts byte streams, like `TcpListener`.

use std::io;
use std::net::SocketAddr;
use std::task::{Context, Poll};
use std::time::Duration;

use super::error::to_io;
use super::Stream;
use crate::{Endpoint, Listener};

/// Accepts [`Stream`]s on an address of an RDMA device.
#[derive(Debug)]
pub struct StreamListener {
    inner: Listener,
}

impl StreamListener {
    /// Listens on `addr` (port 0: any free port) on the [shared endpoint](super::shared_endpoint)
    /// of `addr`'s IP (made on first use; the streams it accepts share it). Nothing is awaited
    /// once that endpoint exists; `async` keeps the shape of `TcpListener::bind`. For an
    /// endpoint of your own, use [`bind_on`](Self::bind_on).
    pub async fn bind(addr: SocketAddr) -> io::Result<StreamListener> {
        Self::bind_blocking(addr)
    }

    /// [`bind`](Self::bind), from blocking code.
    pub fn bind_blocking(addr: SocketAddr) -> io::Result<StreamListener> {
        let endpoint = super::shared_endpoint(addr.ip())?;
        Self::bind_on(&endpoint, addr.port())
    }

    /// Listens on `port` of an endpoint of your own (its address; its configuration).
    pub fn bind_on(endpoint: &Endpoint, port: u16) -> io::Result<StreamListener> {
        endpoint
            .listen(port)
            .map(Self::from_listener)
            .map_err(to_io)
    }

    /// A stream listener over a transport listener.
    pub fn from_listener(inner: Listener) -> StreamListener {
        StreamListener { inner }
    }

    /// The address it listens on.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.inner
            .local_addr()
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotConnected, "not bound"))
    }

    /// The endpoint of the accepted streams.
    pub fn endpoint(&self) -> &Endpoint {
        self.inner.endpoint()
    }

    /// Polls for a stream (see [`Listener::poll_accept`]: cancel safe).
    pub fn poll_accept(&self, cx: &mut Context<'_>) -> Poll<io::Result<(Stream, SocketAddr)>> {
        self.inner
            .poll_accept(cx)
            .map(|r| r.map_err(to_io).and_then(accepted))
    }

    /// Accepts the next stream and the peer's address. Cancel safe.
    pub async fn accept(&self) -> io::Result<(Stream, SocketAddr)> {
        std::future::poll_fn(|cx| self.poll_accept(cx)).await
    }

    /// Accepts the next stream, blocking up to `timeout` (do not mix with
    /// [`accept`](Self::accept) on one listener).
    pub fn accept_blocking(&self, timeout: Duration) -> io::Result<(Stream, SocketAddr)> {
        self.inner.accept(timeout).map_err(to_io).and_then(accepted)
    }
}

fn accepted(conn: crate::Conn) -> io::Result<(Stream, SocketAddr)> {
    let stream = Stream::from_conn(conn);
    let peer = stream.peer_addr()?;
    Ok((stream, peer))
}
