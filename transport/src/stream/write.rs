//! [`OwnedWriteHalf`]: the writing side of a byte stream; every write becomes one message of
//! at most `max_write` bytes.

use std::io;
use std::task::{Context, Poll};
use std::time::Duration;

use super::blocking::block_on;
use super::error::to_io;
use crate::{Conn, Error};

/// Default largest message a write sends; longer writes are cut (write returns less).
pub const DEFAULT_MAX_WRITE: usize = 64 << 10;

/// The writing half of a [`Stream`](super::Stream) (from
/// [`into_split`](super::Stream::into_split)). Dropping both halves closes the connection;
/// dropping this one alone does not shut the stream down (call
/// [`shutdown`](Self::shutdown)).
#[derive(Debug)]
pub struct OwnedWriteHalf {
    pub(crate) conn: Conn,
    max_write: usize,
    shut: bool,
    pub(crate) timeout: Option<Duration>,
}

impl OwnedWriteHalf {
    pub(crate) fn new(conn: Conn) -> Self {
        let max_write = DEFAULT_MAX_WRITE.min(conn.max_whole_send());
        OwnedWriteHalf {
            conn,
            max_write,
            shut: false,
            timeout: None,
        }
    }

    /// The connection underneath.
    pub fn conn(&self) -> &Conn {
        &self.conn
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

    /// Writes up to [`max_write`](Self::max_write) bytes of `src` as one message; returns how
    /// many. Zero bytes: `Ok(0)`, nothing sent. Cancel safe: `Pending` sent nothing, and
    /// `Ready(Ok(n))` queued exactly `n` bytes. Backpressure (no credit, pool exhausted) is
    /// `Pending`. After [`shutdown`](Self::shutdown), or once the connection ended:
    /// `BrokenPipe`; peer failed: `ConnectionReset` (or `TimedOut` for a silent peer).
    pub fn poll_write(&mut self, cx: &mut Context<'_>, src: &[u8]) -> Poll<io::Result<usize>> {
        if self.shut {
            return Poll::Ready(Err(io::Error::new(
                io::ErrorKind::BrokenPipe,
                Error::ClosedLocally,
            )));
        }
        if src.is_empty() {
            return Poll::Ready(Ok(0));
        }
        let n = src.len().min(self.max_write);
        self.conn
            .poll_send(cx, &src[..n])
            .map(|r| r.map(|()| n).map_err(to_io))
    }

    /// Shuts the writing side down: everything written is still delivered, then the peer reads
    /// end of stream. Reading goes on until the peer shuts down too. Idempotent.
    pub fn shutdown(&mut self) -> io::Result<()> {
        if !self.shut {
            self.shut = true;
            let inner = &self.conn.inner;
            let mut st = inner.state.lock();
            if let Some(p) = st.proto.as_mut() {
                p.close();
            }
            inner.drive(&mut st);
        }
        Ok(())
    }

    /// Blocking write with the half's write timeout.
    pub(crate) fn write_blocking(&mut self, src: &[u8]) -> io::Result<usize> {
        let timeout = self.timeout;
        block_on("write", timeout, |cx| self.poll_write(cx, src))
    }
}

impl io::Write for OwnedWriteHalf {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.write_blocking(buf)
    }

    /// Written bytes are queued on the connection; the engine sends them without a flush.
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}
