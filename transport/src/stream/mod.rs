//! A byte stream over one transport connection, shaped like `TcpStream` / `TcpListener`:
//! [`Stream`] and [`StreamListener`], with `std::io::Read`/`Write` (blocking),
//! `futures_io::AsyncRead`/`AsyncWrite`, and with the `tokio` feature
//! `tokio::io::AsyncRead`/`AsyncWrite`, so `tokio::io::copy`, `BufReader` and codecs work on it.
//!
//! Each write becomes one message of at most [`Stream::max_write`] bytes (64 KiB by default;
//! a longer write returns less, as a socket may); a zero-byte write sends nothing. Small
//! writes that come while an earlier frame of the stream is still unacknowledged join one
//! message instead, as TCP's Nagle algorithm coalesces them, but without its delayed
//! acknowledgements ([`Stream::set_nodelay`] turns this off). Reads copy
//! out of the current message and keep the rest for the next read. Shutting the writing side
//! down sends an empty message, which the peer reads as end of stream while its own writes
//! still flow (half close); a peer that closes the whole connection is end of stream too.
//! Credits are the
//! backpressure: a write waits (`Pending`) while the peer has not read enough.
//!
//! ```no_run
//! # async fn demo() -> std::io::Result<()> {
//! use futures::{AsyncReadExt, AsyncWriteExt};
//! use transport::stream::{Stream, StreamListener};
//!
//! let listener = StreamListener::bind("10.77.0.2:7471").await?;
//! let addr = listener.local_addr()?;
//! let (client, server) = futures::join!(
//!     Stream::connect_from("10.77.0.1".parse().unwrap(), addr),
//!     listener.accept(),
//! );
//! let (mut client, (mut server, _peer)) = (client?, server?);
//! client.write_all(b"hello").await?;
//! let mut buf = [0u8; 5];
//! server.read_exact(&mut buf).await?;
//! assert_eq!(&buf, b"hello");
//! # Ok(())
//! # }
//! ```
//!
//! # Closing: nothing lost
//! A reader gets every byte written and then end of stream (`Ok(0)`), or an error, never a
//! short clean end: a writer that goes away (its process ends) before the reader got all it
//! wrote is `ConnectionReset`. [`Stream::shutdown`] (and `poll_shutdown`, `poll_close`,
//! tokio's `shutdown`) returns `Ok` only once the peer has every byte written (received, or
//! read by RDMA READ and acknowledged), so a writer may exit right after it; it gives up with
//! `TimedOut` past the endpoint's [`linger`](crate::EndpointConfig::with_linger). A stream dropped
//! without a shutdown still delivers what was written while the process lives; if the process
//! ends first, the reader gets `ConnectionReset`.
//!
//! # Endpoints
//! A stream is a connection of an [`Endpoint`] (device context, completion queues, shared
//! receive queues, pool, progress thread). [`Stream::connect`], [`Stream::connect_from`] and
//! [`StreamListener::bind`] use the process's [`shared_endpoint`] of the local address, made
//! on first use, so a process can hold thousands of streams on one device (up to the
//! endpoint's `max_connections`, 4,096 by default; its queues grow by blocks of 256
//! connections as streams come). [`Stream::connect_with`] and
//! [`StreamListener::bind_with`] take a configuration (polling mode, pool, limits; the
//! unspecified address too): streams with equal configurations share the
//! [endpoint of that configuration](shared_endpoint_with). [`Stream::connect_on`] and
//! [`StreamListener::bind_on`] take an endpoint of your own.
//!
//! Nothing blocks a runtime thread: a host name is resolved, and a shared endpoint opened
//! (the device, its queues, the pool's registration), on tokio's blocking pool inside a tokio
//! runtime (the `tokio` feature), as `tokio::net` resolves names; under another executor,
//! on the calling thread, once per endpoint.
//!
//! # Errors
//! As `io::Error` kinds: nobody listening, or a listener whose endpoint serves its
//! `max_connections` already: `ConnectionRefused` (the second says so, with the limit and the
//! setting); the peer died or reset the stream ([`Stream::set_zero_linger`]): `ConnectionReset`
//! (a silent peer, after the keepalive timeout: `TimedOut`); a write after
//! [`shutdown`](Stream::shutdown) or after the connection ended: `BrokenPipe`; a blocking call
//! past its timeout: `TimedOut` — the crate's one mapping, [`Error::io_kind`](crate::Error::io_kind),
//! which `From<transport::Error> for io::Error` gives users of [`Conn`] too. The
//! transport's [`Error`](crate::Error) is inside: `get_ref()` or `into_inner()` and a downcast
//! give it, and `source()` goes on with its cause.
//!
//! # Differences from `tokio::net`
//! - A process that exits without [`Stream::shutdown`] loses what its peer has not yet read
//!   (the kernel does not finish sending for it, as it does for TCP): the peer reads
//!   `ConnectionReset`, never a clean end. `shutdown` returns once the peer has every byte.
//! - Dropping an [`OwnedWriteHalf`] shuts the writing side down as tokio's does, without
//!   waiting: the same holds for what it wrote if the process exits right after.
//! - `peek` returns bytes of one message at most (TCP's, of what has arrived).
//! - [`Stream::set_linger`] never makes a drop wait: `Some(t)` bounds
//!   [`shutdown`](Stream::shutdown) instead; `Some(0)` aborts as TCP's reset does.
//! - [`Stream::writable`] is ready when the peer has given credit; a write may still find the
//!   pool or the send queue full (`try_write` then says `WouldBlock`, as tokio allows).
//! - Addresses are RDMA devices' addresses: `bind` and `connect` take IP addresses (a
//!   name resolves through the system resolver), and a loopback address serves nothing.
//!
//! # Cancel safety
//! A read returns bytes only from the poll that consumes them, so a read future dropped before
//! it returned leaves its data for the next read; a write is queued whole in the poll that
//! returns `Ready(Ok(n))` and not at all before. Dropping any future never lets the device
//! touch freed memory (every posted buffer belongs to the engine's pools).

mod addrs;
mod error;
#[cfg(feature = "grpc")]
pub mod grpc;
mod io_impls;
mod listener;
mod read;
mod shared;
mod write;

use std::io;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::task::{Context, Poll};
use std::time::Duration;

pub use addrs::ToSocketAddrs;
pub(crate) use addrs::{off_runtime, resolve};
pub use listener::StreamListener;
pub use read::OwnedReadHalf;
pub use shared::{shared_endpoint, shared_endpoint_with};
pub use write::{OwnedWriteHalf, DEFAULT_MAX_WRITE};

use crate::{Conn, Endpoint, EndpointConfig};

/// A byte stream over a transport connection. See the [module docs](self).
#[derive(Debug)]
pub struct Stream {
    read: OwnedReadHalf,
    write: OwnedWriteHalf,
}

impl Stream {
    /// Connects to `addr` (a `SocketAddr`, a string such as `"10.77.0.2:7471"`, or an
    /// `(ip, port)` pair, as `TcpStream::connect` takes: [`ToSocketAddrs`]; a host name is
    /// resolved off the runtime's threads, and each of its addresses is tried in turn) from
    /// the local address the kernel routes it through, on that address's
    /// [shared endpoint](shared_endpoint) (opened on first use, off the runtime's threads too).
    /// Where that route is not the RDMA device to use (several devices, or both ends on one
    /// host), use [`connect_from`](Self::connect_from).
    pub async fn connect(addr: impl ToSocketAddrs) -> io::Result<Stream> {
        Self::connect_with(addr, EndpointConfig::default()).await
    }

    /// [`connect`](Self::connect) with a configuration of its own: the stream is a connection
    /// of the [shared endpoint](shared_endpoint_with) of the local address and `config`
    /// (streams connected with equal configurations share one).
    pub async fn connect_with(
        addr: impl ToSocketAddrs,
        config: EndpointConfig,
    ) -> io::Result<Stream> {
        let mut last = None;
        for addr in resolve(&addr).await? {
            let connected = match route_source(addr) {
                Ok(src) => Self::connect_from_with(src, addr, &config).await,
                Err(e) => Err(e),
            };
            match connected {
                Ok(stream) => return Ok(stream),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| no_address("connect to")))
    }

    /// Connects to `addr` from the RDMA device that has the local address `src`, on that
    /// address's [shared endpoint](shared_endpoint) (opened on first use, off the runtime's
    /// threads; every stream from `src` shares it). For an endpoint of your own, use
    /// [`connect_on`](Self::connect_on).
    pub async fn connect_from(src: IpAddr, addr: SocketAddr) -> io::Result<Stream> {
        Self::connect_from_with(src, addr, &EndpointConfig::default()).await
    }

    async fn connect_from_with(
        src: IpAddr,
        addr: SocketAddr,
        config: &EndpointConfig,
    ) -> io::Result<Stream> {
        let endpoint = shared::open(src, config).await?;
        Self::connect_on(&endpoint, addr).await
    }

    /// Connects to `addr` through `endpoint`.
    pub async fn connect_on(endpoint: &Endpoint, addr: SocketAddr) -> io::Result<Stream> {
        endpoint
            .connect_async(addr)
            .await
            .map(Stream::from_conn)
            .map_err(error::to_io)
    }

    /// Connects to `addr` through `endpoint`, blocking (within the endpoint's connect timeout).
    pub fn connect_blocking(endpoint: &Endpoint, addr: SocketAddr) -> io::Result<Stream> {
        endpoint
            .connect(addr)
            .map(Stream::from_conn)
            .map_err(error::to_io)
    }

    /// A stream over an established connection (it should carry nothing else).
    pub fn from_conn(conn: Conn) -> Stream {
        let mut write = OwnedWriteHalf::new(conn.clone());
        write.whole = true;
        Stream {
            read: OwnedReadHalf::new(conn),
            write,
        }
    }

    /// The connection underneath.
    pub fn conn(&self) -> &Conn {
        &self.write.conn
    }

    /// The connection's counters ([`Conn::stats`]): bytes each way, stalls, round-trip time.
    pub fn stats(&self) -> crate::Stats {
        self.write.conn.stats()
    }

    /// The local address.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.conn().local_addr().map_err(error::to_io)
    }

    /// The peer's address.
    pub fn peer_addr(&self) -> io::Result<SocketAddr> {
        self.conn().peer_addr().map_err(error::to_io)
    }

    /// Largest message one write sends.
    pub fn max_write(&self) -> usize {
        self.write.max_write()
    }

    /// Sets the largest message one write sends (clamped to 1..=[`Conn::max_whole_send`]).
    pub fn set_max_write(&mut self, n: usize) {
        self.write.set_max_write(n);
    }

    /// Whether small writes go at once, each as a message of its own (false by default:
    /// see [`OwnedWriteHalf::set_nodelay`]). Never fails; `io::Result` as `TcpStream`'s.
    pub fn nodelay(&self) -> io::Result<bool> {
        Ok(self.write.nodelay())
    }

    /// Turns coalescing of small writes off (`true`) or on, as `TCP_NODELAY` does for a
    /// socket (see [`OwnedWriteHalf::set_nodelay`]). Never fails; `io::Result` as
    /// `TcpStream`'s.
    pub fn set_nodelay(&self, nodelay: bool) -> io::Result<()> {
        self.write.set_nodelay(nodelay);
        Ok(())
    }

    /// Timeout of blocking reads (`std::io::Read`), as `TcpStream::set_read_timeout`:
    /// `None` (the default) waits until data arrives or the connection ends (a dead peer
    /// within the keepalive timeout); a zero duration is `InvalidInput`. Past it, a read is
    /// `TimedOut`.
    pub fn set_read_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        self.read.timeout.set(timeout)
    }

    /// The timeout of blocking reads ([`set_read_timeout`](Self::set_read_timeout)).
    pub fn read_timeout(&self) -> io::Result<Option<Duration>> {
        Ok(self.read.timeout.get())
    }

    /// Timeout of blocking writes (`std::io::Write`) waiting for credit, as
    /// `TcpStream::set_write_timeout`: `None` (the default) waits while the peer is alive; a
    /// zero duration is `InvalidInput`.
    pub fn set_write_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        self.write.timeout.set(timeout)
    }

    /// The timeout of blocking writes ([`set_write_timeout`](Self::set_write_timeout)).
    pub fn write_timeout(&self) -> io::Result<Option<Duration>> {
        Ok(self.write.timeout.get())
    }

    /// Shuts the writing side down (like `TcpStream::shutdown(Shutdown::Write)`): what was
    /// written is delivered, then the peer reads end of stream; later writes fail with
    /// `BrokenPipe`. Reading goes on until the peer shuts down too. Waits for credit like a
    /// write, then until the peer has every byte written (see
    /// [`OwnedWriteHalf::poll_shutdown`]): after `Ok` the process may exit without losing
    /// anything. Past the endpoint's [`linger`](crate::EndpointConfig::with_linger): `TimedOut`.
    /// Cancel safe: dropped, it sent the end of stream or nothing.
    pub async fn shutdown(&mut self) -> io::Result<()> {
        std::future::poll_fn(|cx| self.write.poll_shutdown(cx)).await
    }

    /// [`shutdown`](Self::shutdown) from blocking code, within the write timeout.
    pub fn shutdown_blocking(&mut self) -> io::Result<()> {
        self.write.shutdown_blocking()
    }

    /// Splits into halves that can move to different tasks or threads (dropping the write
    /// half shuts the writing side down; [`OwnedReadHalf::reunite`] puts them back).
    pub fn into_split(mut self) -> (OwnedReadHalf, OwnedWriteHalf) {
        self.write.whole = false;
        (self.read, self.write)
    }

    /// The halves of one stream, put back together.
    // Shaped as tokio's: the halves come back by value in the error.
    #[allow(clippy::result_large_err)]
    fn reunite(read: OwnedReadHalf, write: OwnedWriteHalf) -> Result<Stream, ReuniteError> {
        if std::sync::Arc::ptr_eq(&read.conn.inner, &write.conn.inner) {
            let mut write = write;
            write.whole = true;
            Ok(Stream { read, write })
        } else {
            Err(ReuniteError(read, write))
        }
    }

    /// Splits into borrowed halves, to read and write at once within one task (as
    /// `TcpStream::split`: e.g. `tokio::io::copy(&mut rd, &mut wr)`).
    pub fn split(&mut self) -> (ReadHalf<'_>, WriteHalf<'_>) {
        (ReadHalf(&mut self.read), WriteHalf(&mut self.write))
    }

    /// Reads what is there without waiting: `WouldBlock` when nothing arrived (see
    /// [`OwnedReadHalf::try_read`]).
    pub fn try_read(&self, dst: &mut [u8]) -> io::Result<usize> {
        self.read.try_read(dst)
    }

    /// Waits until a read would not wait (see [`OwnedReadHalf::readable`]).
    pub async fn readable(&self) -> io::Result<()> {
        self.read.readable().await
    }

    /// See [`OwnedReadHalf::poll_read_ready`].
    pub fn poll_read_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.read.poll_read_ready(cx)
    }

    /// The next bytes without consuming them (see [`OwnedReadHalf::peek`]).
    pub async fn peek(&self, dst: &mut [u8]) -> io::Result<usize> {
        self.read.peek(dst).await
    }

    /// Writes what can go without waiting: `WouldBlock` where a write would wait (see
    /// [`OwnedWriteHalf::try_write`]).
    pub fn try_write(&self, src: &[u8]) -> io::Result<usize> {
        self.write.try_write(src)
    }

    /// Waits until a write may go without waiting (see [`OwnedWriteHalf::writable`]).
    pub async fn writable(&self) -> io::Result<()> {
        self.write.writable().await
    }

    /// See [`OwnedWriteHalf::poll_write_ready`].
    pub fn poll_write_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.write.poll_write_ready(cx)
    }

    /// Waits until the stream is ready for any of `interest` (readable, writable) and says
    /// which, as `TcpStream::ready`: for use with [`try_read`](Self::try_read) and
    /// [`try_write`](Self::try_write), which may still say `WouldBlock` (then wait again).
    /// A read side at its end or failed is readable (the read says how), a write side shut
    /// or failed writable.
    #[cfg(feature = "tokio")]
    pub async fn ready(&self, interest: tokio::io::Interest) -> io::Result<tokio::io::Ready> {
        use tokio::io::Ready;
        std::future::poll_fn(|cx| {
            let mut ready = Ready::EMPTY;
            if interest.is_readable() && self.read.poll_read_ready(cx).is_ready() {
                ready |= Ready::READABLE;
            }
            if interest.is_writable() && self.write.poll_write_ready(cx).is_ready() {
                ready |= Ready::WRITABLE;
            }
            if ready.is_empty() {
                Poll::Pending
            } else {
                Poll::Ready(Ok(ready))
            }
        })
        .await
    }

    /// What closing the stream does, as `TcpStream::set_linger` sets `SO_LINGER`:
    /// - `None` (the default): dropping the stream closes it gracefully in the background
    ///   (what was written is delivered while the process lives), and
    ///   [`shutdown`](Self::shutdown) waits up to the endpoint's
    ///   [`linger`](crate::EndpointConfig::with_linger).
    /// - `Some(Duration::ZERO)`: dropping the stream aborts the connection, as TCP's reset:
    ///   no end of stream is sent, what was not yet delivered either way is dropped, and the
    ///   peer's next read or write is `ConnectionReset`. Of split halves, a write half dropped
    ///   first still ends the stream (as tokio's does), and the last half's drop aborts.
    /// - `Some(t)`: [`shutdown`](Self::shutdown) waits up to `t` for the peer to have
    ///   everything. Unlike a blocking socket's close, a drop never waits.
    ///
    /// Never fails; `io::Result` as `TcpStream`'s.
    pub fn set_linger(&self, linger: Option<Duration>) -> io::Result<()> {
        self.conn().inner.set_linger(linger);
        Ok(())
    }

    /// Sets a linger of zero, as `TcpStream::set_zero_linger`: dropping the stream aborts
    /// the connection (see [`set_linger`](Self::set_linger)). Never fails.
    pub fn set_zero_linger(&self) -> io::Result<()> {
        self.set_linger(Some(Duration::ZERO))
    }

    /// The linger [`set_linger`](Self::set_linger) set (`None`: none). Never fails.
    pub fn linger(&self) -> io::Result<Option<Duration>> {
        Ok(self.conn().inner.linger())
    }

    /// See [`OwnedReadHalf::poll_read`].
    pub fn poll_read(&mut self, cx: &mut Context<'_>, dst: &mut [u8]) -> Poll<io::Result<usize>> {
        self.read.poll_read(cx, dst)
    }

    /// See [`OwnedWriteHalf::poll_write`].
    pub fn poll_write(&mut self, cx: &mut Context<'_>, src: &[u8]) -> Poll<io::Result<usize>> {
        self.write.poll_write(cx, src)
    }
}

/// Halves of two streams given to `reunite` (as tokio's `ReuniteError`): they come back.
#[derive(Debug)]
pub struct ReuniteError(pub OwnedReadHalf, pub OwnedWriteHalf);

impl std::fmt::Display for ReuniteError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("tried to reunite halves that are not from the same stream")
    }
}

impl std::error::Error for ReuniteError {}

/// The borrowed reading half of a [`Stream`] (from [`Stream::split`]).
#[derive(Debug)]
pub struct ReadHalf<'a>(&'a mut OwnedReadHalf);

/// The borrowed writing half of a [`Stream`] (from [`Stream::split`]).
#[derive(Debug)]
pub struct WriteHalf<'a>(&'a mut OwnedWriteHalf);

/// What `connect` and `bind` give when the addresses they were given resolve to none.
fn no_address(to: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, format!("no address to {to}"))
}

/// The local address the kernel would send to `addr` from (no packet is sent).
fn route_source(addr: SocketAddr) -> io::Result<IpAddr> {
    let any: SocketAddr = match addr {
        SocketAddr::V4(_) => "0.0.0.0:0".parse().expect("literal"),
        SocketAddr::V6(_) => "[::]:0".parse().expect("literal"),
    };
    let probe = UdpSocket::bind(any)?;
    probe.connect(addr)?;
    Ok(probe.local_addr()?.ip())
}
