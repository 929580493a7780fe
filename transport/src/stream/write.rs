//! [`OwnedWriteHalf`]: the writing side of a byte stream. A write becomes one message of at
//! most `max_write` bytes, or, while an earlier frame of the stream is unacknowledged, joins
//! the stream's message waiting to go (coalescing, like TCP's Nagle algorithm; see
//! [`OwnedWriteHalf::set_nodelay`]).

use std::io;
use std::net::SocketAddr;
use std::task::{ready, Context, Poll};
use std::time::Instant;

use super::error::{block_on_io, to_io, BlockingTimeout};
use super::{OwnedReadHalf, ReuniteError, Stream};
use crate::{Conn, Error};

/// Default largest message a write sends; longer writes are cut (write returns less).
pub const DEFAULT_MAX_WRITE: usize = 64 << 10;

/// Writes shorter than this go as eager frames (cut at the eager limit); longer ones as one
/// rendezvous message, read by the peer with RDMA READ.
const RENDEZVOUS_FROM: usize = 32 << 10;

/// The writing half of a [`Stream`](super::Stream) (from
/// [`into_split`](super::Stream::into_split)). Dropping it shuts the writing side down, as
/// tokio's `OwnedWriteHalf` does: what was written is delivered, then the peer reads end of
/// stream, while this side may still read (the end is queued without waiting; without room
/// now, the endpoint queues it as soon as there is). Unlike
/// [`poll_shutdown`](Self::poll_shutdown), the drop does not wait for the peer to have
/// everything: a process that exits right after it may lose what was not yet delivered (the
/// peer then reads `ConnectionReset`, never a clean end). Dropping both halves closes the
/// connection.
#[derive(Debug)]
pub struct OwnedWriteHalf {
    pub(crate) conn: Conn,
    max_write: usize,
    eager: usize,
    shut: bool,
    /// The end of stream went out (the shutdown then waits for the peer to have
    /// everything), and until when that wait may take.
    shutdown_deadline: Option<Instant>,
    /// The shutdown is complete: the peer has everything.
    shut_down: bool,
    pub(crate) timeout: BlockingTimeout,
    /// Part of a whole [`Stream`] (not split): dropped with a zero linger, it leaves the
    /// connection to be aborted, sending no end of stream first (as a socket closed with
    /// `SO_LINGER` zero sends a reset and no FIN).
    pub(crate) whole: bool,
}

impl OwnedWriteHalf {
    pub(crate) fn new(conn: Conn) -> Self {
        let max_write = DEFAULT_MAX_WRITE.min(conn.max_whole_send());
        let eager = conn.eager_limit().max(1);
        OwnedWriteHalf {
            conn,
            max_write,
            eager,
            shut: false,
            shutdown_deadline: None,
            shut_down: false,
            timeout: BlockingTimeout::default(),
            whole: false,
        }
    }

    /// The connection underneath.
    pub fn conn(&self) -> &Conn {
        &self.conn
    }

    /// The local address.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.conn.local_addr().map_err(to_io)
    }

    /// The peer's address.
    pub fn peer_addr(&self) -> io::Result<SocketAddr> {
        self.conn.peer_addr().map_err(to_io)
    }

    /// Puts the halves of one stream back together (as tokio's `OwnedWriteHalf::reunite`);
    /// halves of two streams are handed back in the error.
    // Shaped as tokio's: the halves come back by value in the error.
    #[allow(clippy::result_large_err)]
    pub fn reunite(self, other: OwnedReadHalf) -> Result<Stream, ReuniteError> {
        Stream::reunite(other, self)
    }

    /// Largest message one write sends.
    pub fn max_write(&self) -> usize {
        self.max_write
    }

    /// Sets the largest message one write sends (at least 1, at most
    /// [`Conn::max_whole_send`]; clamped to those).
    pub fn set_max_write(&mut self, n: usize) {
        self.max_write = n.clamp(1, self.conn.max_whole_send());
    }

    /// Whether small writes go at once, each as a message of its own (see
    /// [`set_nodelay`](Self::set_nodelay)).
    pub fn nodelay(&self) -> bool {
        self.conn.nodelay()
    }

    /// Coalescing of small writes, on by default (`nodelay` false), as TCP's Nagle algorithm
    /// is: a write up to the eager limit that finds an earlier frame of the stream still
    /// unacknowledged by the peer's device waits, and the writes after it join it, until that
    /// frame is acknowledged or the message is full (the eager limit, 4 KiB by default). Many
    /// small writes then cost the device few messages: their throughput is many times that
    /// of a message per write. A write that finds nothing unacknowledged goes at once, so a
    /// request-and-answer exchange (write, then read the reply) never waits; unlike TCP there
    /// is no delayed acknowledgement, so a wait lasts about one device round trip at most.
    ///
    /// With `nodelay` true every write goes as a message of its own at once (as
    /// `TCP_NODELAY`), for a program that makes several small writes before it waits for an
    /// answer and cannot gather them into one. The setting is the connection's
    /// ([`Conn::set_nodelay`], which also covers plain messages).
    pub fn set_nodelay(&self, nodelay: bool) {
        self.conn.set_nodelay(nodelay);
    }

    /// Writes up to [`max_write`](Self::max_write) bytes of `src` as one message (below 32 KiB,
    /// at most the connection's eager limit, so small writes never pay a rendezvous), or
    /// appends them to the stream's message waiting to go (see
    /// [`set_nodelay`](Self::set_nodelay)); returns how many. Zero bytes: `Ok(0)`, nothing sent. Cancel safe: `Pending` sent nothing, and
    /// `Ready(Ok(n))` queued exactly `n` bytes. Backpressure (no credit, pool exhausted) is
    /// `Pending`. After [`poll_shutdown`](Self::poll_shutdown), or once the connection ended:
    /// `BrokenPipe`; peer failed: `ConnectionReset` (or `TimedOut` for a silent peer).
    pub fn poll_write(&mut self, cx: &mut Context<'_>, src: &[u8]) -> Poll<io::Result<usize>> {
        self.poll_write_shared(cx, src)
    }

    /// [`poll_write`](Self::poll_write) through a shared reference (it changes nothing of the
    /// half's own).
    fn poll_write_shared(&self, cx: &mut Context<'_>, src: &[u8]) -> Poll<io::Result<usize>> {
        if self.shut {
            return Poll::Ready(Err(io::Error::new(
                io::ErrorKind::BrokenPipe,
                Error::ClosedLocally,
            )));
        }
        if src.is_empty() {
            return Poll::Ready(Ok(0));
        }
        let mut n = src.len().min(self.max_write);
        if n < RENDEZVOUS_FROM {
            n = n.min(self.eager);
            if !self.conn.nodelay() {
                return self.conn.poll_write_merging(cx, &src[..n]).map_err(to_io);
            }
        }
        self.conn
            .poll_send(cx, &src[..n])
            .map(|r| r.map(|()| n).map_err(to_io))
    }

    /// Writes what can go without waiting, as tokio's `try_write`: as
    /// [`poll_write`](Self::poll_write) does, or `WouldBlock` where it would wait (no credit
    /// from the peer, the pool exhausted). Meant with [`writable`](Self::writable).
    pub fn try_write(&self, src: &[u8]) -> io::Result<usize> {
        let mut cx = Context::from_waker(crate::task::noop_waker());
        match self.poll_write_shared(&mut cx, src) {
            Poll::Ready(r) => r,
            Poll::Pending => Err(io::ErrorKind::WouldBlock.into()),
        }
    }

    /// `Ready` when a write may go without waiting: the connection has credit towards the
    /// peer, or it ended (the write then says how). As tokio's, it may be `Ready` and the
    /// write still find no room (the pool exhausted, the send queue full): `try_write` then
    /// says `WouldBlock`, and the caller waits again.
    pub fn poll_write_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.shut {
            return Poll::Ready(Ok(()));
        }
        self.conn.poll_write_ready(cx).map(Ok)
    }

    /// Waits until a write may go without waiting (see
    /// [`poll_write_ready`](Self::poll_write_ready)), as tokio's `writable`.
    pub async fn writable(&self) -> io::Result<()> {
        std::future::poll_fn(|cx| self.poll_write_ready(cx)).await
    }

    /// The bound of a shutdown's wait: the stream's linger when one is set, else the
    /// endpoint's.
    fn linger(&self) -> std::time::Duration {
        let conn = &self.conn.inner;
        conn.linger()
            .filter(|t| !t.is_zero())
            .unwrap_or(conn.shared.cfg.linger)
    }

    /// Shuts the writing side down: everything written is still delivered, then the peer
    /// reads end of stream; the connection stays open for the peer's writes (half close).
    /// The end of stream is an empty message, so it waits for credit like a write; then
    /// this waits until the peer has everything written (received, or read by RDMA READ
    /// and acknowledged), so a writer may exit as soon as it returns `Ok` without losing
    /// anything. Both waits together are bounded by the endpoint's
    /// [`linger`](crate::EndpointConfig::with_linger): past it, `TimedOut` (polling again waits
    /// on, within a new bound). The peer gone or the connection failed before the peer had
    /// everything: `ConnectionReset` or the error's kind. Later writes fail with
    /// `BrokenPipe`. Idempotent. A peer that answers what it reads may need this side to
    /// read its answers before it takes the rest: then read on another task (split the
    /// stream) while this waits.
    pub fn poll_shutdown(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.shut_down {
            return Poll::Ready(Ok(()));
        }
        let linger = self.linger();
        let deadline = *self
            .shutdown_deadline
            .get_or_insert_with(|| Instant::now() + linger);
        if !self.shut {
            match self.conn.poll_send(cx, &[]) {
                Poll::Pending if Instant::now() >= deadline => {
                    self.shutdown_deadline = None;
                    return Poll::Ready(Err(to_io(Error::TimedOut {
                        op: "shutdown",
                        after: linger,
                    })));
                }
                Poll::Pending => {
                    // Woken at the deadline at the latest: each tick wakes it.
                    crate::engine::register_tick(&self.conn.inner.shared, cx);
                    return Poll::Pending;
                }
                // Ended or closed already: what was sent may still be on its way.
                Poll::Ready(Ok(()) | Err(Error::Closed { cause: None } | Error::ClosedLocally)) => {
                    self.shut = true
                }
                Poll::Ready(Err(e)) => {
                    self.shut = true;
                    return Poll::Ready(Err(to_io(e)));
                }
            }
        }
        match ready!(self
            .conn
            .poll_delivered(cx, false, "shutdown", deadline, linger))
        {
            Ok(()) => {
                self.shut_down = true;
                Poll::Ready(Ok(()))
            }
            Err(e) => {
                // A new poll waits on, within a new bound.
                self.shutdown_deadline = None;
                Poll::Ready(Err(to_io(e)))
            }
        }
    }

    /// [`poll_shutdown`](Self::poll_shutdown), blocking up to the write timeout.
    pub fn shutdown_blocking(&mut self) -> io::Result<()> {
        let timeout = self.timeout.get();
        block_on_io("shutdown", timeout, |cx| self.poll_shutdown(cx))
    }

    /// Blocking write with the half's write timeout.
    pub(crate) fn write_blocking(&mut self, src: &[u8]) -> io::Result<usize> {
        let timeout = self.timeout.get();
        block_on_io("write", timeout, |cx| self.poll_write(cx, src))
    }
}

impl Drop for OwnedWriteHalf {
    /// Shuts the writing side down without waiting, unless it was (see the type's docs).
    fn drop(&mut self) {
        let conn = &self.conn.inner;
        let aborting = self.whole && conn.aborts_when_released();
        if self.shut || aborting {
            return;
        }
        let mut st = conn.state.lock();
        if !conn.queue_end_of_stream(&mut st) {
            st.end_of_stream_due = true;
            conn.shared.tick_soon();
        }
    }
}
