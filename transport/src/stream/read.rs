//! [`OwnedReadHalf`]: the reading side of a byte stream; reads copy out of the current message
//! and keep the rest for the next read.

use std::io;
use std::net::SocketAddr;
use std::task::{Context, Poll};

use super::error::{block_on_io, to_io, BlockingTimeout};
use super::{OwnedWriteHalf, ReuniteError, Stream};
use crate::{Conn, Message};

/// The reading half of a [`Stream`](super::Stream) (from
/// [`into_split`](super::Stream::into_split)). Dropping both halves closes the connection.
#[derive(Debug)]
pub struct OwnedReadHalf {
    pub(crate) conn: Conn,
    /// The message being read and how much of it was read.
    cur: Option<(Message, usize)>,
    eof: bool,
    pub(crate) timeout: BlockingTimeout,
}

impl OwnedReadHalf {
    pub(crate) fn new(conn: Conn) -> Self {
        OwnedReadHalf {
            conn,
            cur: None,
            eof: false,
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
        if dst.is_empty() {
            return Poll::Ready(Ok(0));
        }
        loop {
            if let Some((msg, at)) = &mut self.cur {
                let n = copy_at(msg, *at, dst);
                *at += n;
                if *at >= msg.len() {
                    // Read whole: its buffers (and credit) go back now.
                    self.cur = None;
                }
                if n > 0 {
                    return Poll::Ready(Ok(n));
                }
            }
            if self.eof {
                return Poll::Ready(Ok(0));
            }
            match self.conn.poll_recv(cx) {
                Poll::Pending => return Poll::Pending,
                // An empty message is the peer's shutdown (a write never sends one).
                Poll::Ready(Ok(Some(m))) if m.is_empty() => {
                    self.eof = true;
                    return Poll::Ready(Ok(0));
                }
                Poll::Ready(Ok(Some(m))) => self.cur = Some((m, 0)),
                Poll::Ready(Ok(None)) => {
                    self.eof = true;
                    return Poll::Ready(Ok(0));
                }
                Poll::Ready(Err(e)) => return Poll::Ready(Err(to_io(e))),
            }
        }
    }

    /// Bytes received and not yet read from the current message.
    pub fn buffered(&self) -> usize {
        self.cur.as_ref().map_or(0, |(m, at)| m.len() - at)
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
