//! [`OwnedReadHalf`]: the reading side of a byte stream; reads copy out of the current message
//! and keep the rest for the next read. Besides reads through `&mut self`, as tokio's
//! `TcpStream` through `&self`: [`try_read`](OwnedReadHalf::try_read),
//! [`readable`](OwnedReadHalf::readable), [`peek`](OwnedReadHalf::peek).

use std::future::poll_fn;
use std::io;
use std::net::SocketAddr;
use std::task::{ready, Context, Poll};

use parking_lot::Mutex;

use super::error::{block_on_io, to_io, BlockingTimeout};
use super::{OwnedWriteHalf, ReuniteError, Stream};
use crate::{Conn, Error, Message};

/// The reading half of a [`Stream`](super::Stream) (from
/// [`into_split`](super::Stream::into_split)). Dropping both halves closes the connection.
#[derive(Debug)]
pub struct OwnedReadHalf {
    pub(crate) conn: Conn,
    /// What was received and not yet read. A lock only for the `&self` calls: reads through
    /// `&mut self` reach it without one.
    state: Mutex<ReadState>,
    pub(crate) timeout: BlockingTimeout,
}

/// The message being read and how much of it was read; whether the end came.
#[derive(Debug, Default)]
struct ReadState {
    cur: Option<(Message, usize)>,
    eof: bool,
}

impl ReadState {
    /// Copies into `dst` from the current message (consuming what it copies when `consume`),
    /// taking the next message from `next` when there is none; `Ok(0)` at the end.
    fn read(
        &mut self,
        dst: &mut [u8],
        consume: bool,
        mut next: impl FnMut() -> Poll<crate::Result<Option<Message>>>,
    ) -> Poll<io::Result<usize>> {
        if dst.is_empty() {
            return Poll::Ready(Ok(0));
        }
        loop {
            if let Some((msg, at)) = &mut self.cur {
                let n = copy_at(msg, *at, dst);
                if consume {
                    *at += n;
                    if *at >= msg.len() {
                        // Read whole: its buffers (and credit) go back now.
                        self.cur = None;
                    }
                }
                if n > 0 {
                    return Poll::Ready(Ok(n));
                }
            }
            if self.eof {
                return Poll::Ready(Ok(0));
            }
            ready!(self.keep(next()))?;
        }
    }

    /// Keeps what `next` gave: a message to read, or the end.
    fn keep(&mut self, next: Poll<crate::Result<Option<Message>>>) -> Poll<io::Result<()>> {
        match next {
            Poll::Pending => Poll::Pending,
            Poll::Ready(Ok(Some(m))) if !m.is_empty() => {
                self.cur = Some((m, 0));
                Poll::Ready(Ok(()))
            }
            // An empty message is the peer's shutdown (a write never sends one); `None` the
            // connection's end.
            Poll::Ready(Ok(_)) => {
                self.eof = true;
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(to_io(e))),
        }
    }
}

/// The next message if one is there, without waiting (`Pending`: none yet).
fn try_next(conn: &Conn) -> Poll<crate::Result<Option<Message>>> {
    match conn.try_recv() {
        Ok(m) => Poll::Ready(Ok(Some(m))),
        Err(Error::WouldBlock) => Poll::Pending,
        Err(Error::Closed { cause: None }) => Poll::Ready(Ok(None)),
        Err(e) => Poll::Ready(Err(e)),
    }
}

impl OwnedReadHalf {
    pub(crate) fn new(conn: Conn) -> Self {
        OwnedReadHalf {
            conn,
            state: Mutex::new(ReadState::default()),
            timeout: BlockingTimeout::default(),
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

    /// Puts the halves of one stream back together (as tokio's `OwnedReadHalf::reunite`);
    /// halves of two streams are handed back in the error.
    // Shaped as tokio's: the halves come back by value in the error.
    #[allow(clippy::result_large_err)]
    pub fn reunite(self, other: OwnedWriteHalf) -> Result<Stream, ReuniteError> {
        Stream::reunite(self, other)
    }

    /// Reads into `dst`: bytes of the current message first, else of the next one. `Ok(0)` at
    /// end of stream (the peer closed and everything it sent was read). Cancel safe: bytes are
    /// consumed only when this returns `Ready(Ok(n))`.
    pub fn poll_read(&mut self, cx: &mut Context<'_>, dst: &mut [u8]) -> Poll<io::Result<usize>> {
        let conn = &self.conn;
        self.state.get_mut().read(dst, true, || conn.poll_recv(cx))
    }

    /// Reads what is there without waiting, as tokio's `TcpStream::try_read`: `Ok(n)` bytes,
    /// `Ok(0)` at end of stream, `WouldBlock` when nothing has arrived (wait with
    /// [`readable`](Self::readable)).
    pub fn try_read(&self, dst: &mut [u8]) -> io::Result<usize> {
        match self.state.lock().read(dst, true, || try_next(&self.conn)) {
            Poll::Ready(r) => r,
            Poll::Pending => Err(io::ErrorKind::WouldBlock.into()),
        }
    }

    /// Ready once a read would not wait: bytes arrived, or the end (or an error) did.
    pub fn poll_read_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let mut st = self.state.lock();
        if st.cur.is_some() || st.eof {
            return Poll::Ready(Ok(()));
        }
        st.keep(self.conn.poll_recv(cx))
    }

    /// Waits until a read would not wait, as tokio's `readable` (then
    /// [`try_read`](Self::try_read) reads). Cancel safe.
    pub async fn readable(&self) -> io::Result<()> {
        poll_fn(|cx| self.poll_read_ready(cx)).await
    }

    /// Copies the next bytes into `dst` without consuming them (the next read returns them
    /// again), waiting for some as a read does: as tokio's `peek`, at most the bytes of one
    /// message. `Ok(0)` at end of stream. Cancel safe.
    pub async fn peek(&self, dst: &mut [u8]) -> io::Result<usize> {
        poll_fn(|cx| {
            let conn = &self.conn;
            self.state.lock().read(dst, false, || conn.poll_recv(cx))
        })
        .await
    }

    /// Bytes received and not yet read from the current message.
    pub fn buffered(&self) -> usize {
        let st = self.state.lock();
        st.cur.as_ref().map_or(0, |(m, at)| m.len() - at)
    }

    /// Blocking read with the half's read timeout.
    pub(crate) fn read_blocking(&mut self, dst: &mut [u8]) -> io::Result<usize> {
        let timeout = self.timeout.get();
        block_on_io("read", timeout, |cx| self.poll_read(cx, dst))
    }
}

/// Copies the bytes of `msg` from `at` into `dst`; returns how many.
fn copy_at(msg: &Message, at: usize, dst: &mut [u8]) -> usize {
    let mut skip = at;
    let mut n = 0;
    for c in msg.chunks() {
        if skip >= c.len() {
            skip -= c.len();
            continue;
        }
        let c = &c[skip..];
        skip = 0;
        let k = c.len().min(dst.len() - n);
        dst[n..n + k].copy_from_slice(&c[..k]);
        n += k;
        if n == dst.len() {
            break;
        }
    }
    n
}
