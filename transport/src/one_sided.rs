//! One-sided access to a peer's exposed [`Region`](crate::Region): [`Conn::read`] /
//! [`Conn::write`] and their async forms. Each request is one [`OneSided`] attempt over the
//! connection's state (post when a slot is free, then take the completion); the blocking call
//! waits around it, the async one registers its waker. No thread of its own either way.

use std::future::poll_fn;
use std::ops::Range;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use verbs::{RemoteSlice, SendRequest};

use crate::engine::{pool_error, register, register_tick, ConnShared, ConnState, SqOp};
use crate::region::Token;
use crate::{Conn, Error, Result};

/// Largest piece of a one-sided access one request moves (through a pool buffer).
const PIECE: usize = 1 << 20;

/// One one-sided request on a pool buffer: posted when the connection has a free one-sided
/// slot, finished when its completion came back. Dropped unfinished (timed out, cancelled),
/// it forgets the request: its buffer is dropped with the completion's entry.
struct OneSided<'a> {
    conn: &'a ConnShared,
    /// "read" (RDMA READ into `buf`) or "write" (RDMA WRITE from `buf`).
    op: &'static str,
    /// Where at the peer.
    at: RemoteSlice,
    buf: Option<memory::Buffer>,
    /// A write's fence on iWARP: the sink of the zero-length READ posted behind the WRITE
    /// (see [`attempt`](Self::attempt)).
    fence: Option<memory::Buffer>,
    /// The request's number once posted, until its completion is taken.
    posted: Option<u64>,
}

impl<'a> OneSided<'a> {
    fn new(conn: &'a ConnShared, op: &'static str, at: RemoteSlice, buf: memory::Buffer) -> Self {
        OneSided {
            conn,
            op,
            at,
            buf: Some(buf),
            fence: None,
            posted: None,
        }
    }

    /// Whether this is a write that needs a fence: on a device whose WRITE completes once
    /// sent (iWARP).
    fn needs_fence(&self) -> bool {
        self.op == "write" && self.conn.shared.cfg.write_completes_when_sent
    }

    /// The work request of this operation on `buf`.
    fn request(&self, buf: memory::Buffer) -> verbs::Result<SendRequest> {
        let n = buf.len();
        match self.op {
            "read" => SendRequest::rdma_read(buf, 0..n, self.at),
            _ => SendRequest::rdma_write(buf, 0..n, self.at),
        }
    }

    /// One attempt with the state locked: posts if not yet posted and a slot is free; gives
    /// the buffer back once the request completed, or the connection's end; `None`: wait.
    fn attempt(&mut self, st: &mut ConnState) -> Option<Result<memory::Buffer>> {
        if self.posted.is_none() {
            if let Some(e) = st.ended() {
                return Some(Err(e));
            }
            let id = st.one_sided.start(self.conn.shared.cfg.max_one_sided)?;
            let buf = self.buf.take().expect("posted once");
            if let Some(sink) = self.fence.take() {
                // On iWARP a WRITE completes once sent. A zero-length READ behind it completes
                // only after the peer placed the WRITE (or fails with the connection, if the
                // peer's device refused it): the write is done when the READ is. The READ
                // names a zero-length entry of a sink of its own: siw takes the length it
                // expects back from the request's first entry, present or not.
                self.conn.post(st, self.request(buf), SqOp::FencedWrite(id));
                let at = RemoteSlice { len: 0, ..self.at };
                self.conn.post(
                    st,
                    SendRequest::rdma_read(sink, 0..0, at),
                    SqOp::OneSided(id),
                );
            } else {
                self.conn.post(st, self.request(buf), SqOp::OneSided(id));
            }
            self.posted = Some(id);
        }
        let id = self.posted?;
        if let Some(r) = st.one_sided.take(id) {
            self.posted = None;
            let op = self.op;
            return Some(r.map_err(|status| Error::Completion { op, status }));
        }
        st.ended().map(Err)
    }
}

impl Drop for OneSided<'_> {
    fn drop(&mut self) {
        if let Some(id) = self.posted {
            // Its buffer is dropped now if it completed, else when it does.
            self.conn.state.lock().one_sided.forget(id);
        }
    }
}

/// The bound of a one-sided access: when it ends, and the timeout it came from (for the
/// error).
#[derive(Clone, Copy)]
struct Deadline {
    at: Instant,
    timeout: Duration,
}

impl Deadline {
    fn after(timeout: Duration) -> Self {
        Deadline {
            at: Instant::now() + timeout,
            timeout,
        }
    }

    fn left(self) -> Duration {
        self.at.saturating_duration_since(Instant::now())
    }

    fn timed_out(self, op: &'static str) -> Error {
        Error::TimedOut {
            op,
            after: self.timeout,
        }
    }
}

/// The pieces of an access of `len` bytes at `offset` of the region `token` names (checked
/// for `op` first): each piece's range in the local bytes and where it goes at the peer.
fn pieces(
    token: &Token,
    op: &'static str,
    offset: u64,
    len: usize,
) -> Result<impl Iterator<Item = (Range<usize>, RemoteSlice)>> {
    let (addr, rkey) = (token.check(op, offset, len as u64)?, token.rkey);
    Ok((0..len).step_by(PIECE).map(move |start| {
        let end = len.min(start + PIECE);
        let at = RemoteSlice {
            addr: addr + start as u64,
            len: (end - start) as u32,
            rkey,
        };
        (start..end, at)
    }))
}

impl Conn {
    /// Reads `dst.len()` bytes at `offset` of the peer's region named by `token` (RDMA READ),
    /// waiting up to `timeout`. Out of range or not readable: refused here, nothing sent.
    pub fn read(
        &self,
        token: &Token,
        offset: u64,
        dst: &mut [u8],
        timeout: Duration,
    ) -> Result<()> {
        let deadline = Deadline::after(timeout);
        for (range, at) in pieces(token, "read", offset, dst.len())? {
            let buf =
                self.alloc_until(self.inner.shared.read_sink_pool(), range.len(), deadline)?;
            let buf = self.one_sided(OneSided::new(&self.inner, "read", at, buf), deadline)?;
            // A copy, not a slice: on iWARP the sink is remotely writable.
            buf.read(0, &mut dst[range.clone()]).map_err(pool_error)?;
        }
        Ok(())
    }

    /// Writes `src` at `offset` of the peer's region named by `token` (RDMA WRITE), waiting up
    /// to `timeout`. Out of range or not writable: refused here, nothing sent.
    pub fn write(&self, token: &Token, offset: u64, src: &[u8], timeout: Duration) -> Result<()> {
        let deadline = Deadline::after(timeout);
        for (range, at) in pieces(token, "write", offset, src.len())? {
            let mut buf = self.alloc_until(&self.inner.shared.res.pool, range.len(), deadline)?;
            buf.copy_from_slice(&src[range]);
            let mut write = OneSided::new(&self.inner, "write", at, buf);
            if write.needs_fence() {
                let sinks = self.inner.shared.read_sink_pool();
                write.fence = Some(self.alloc_until(sinks, 1, deadline)?);
            }
            self.one_sided(write, deadline)?;
        }
        Ok(())
    }

    /// [`read`](Self::read), as a future woken by the engine. Dropping it forgets the read
    /// (the device finishes it into pool memory); `dst` may then hold part of the bytes.
    pub async fn read_async(
        &self,
        token: &Token,
        offset: u64,
        dst: &mut [u8],
        timeout: Duration,
    ) -> Result<()> {
        let deadline = Deadline::after(timeout);
        for (range, at) in pieces(token, "read", offset, dst.len())? {
            let sinks = self.inner.shared.read_sink_pool();
            let buf = poll_fn(|cx| self.poll_alloc(cx, sinks, range.len(), deadline)).await?;
            let mut read = OneSided::new(&self.inner, "read", at, buf);
            let buf = poll_fn(|cx| self.poll_one_sided(cx, &mut read, deadline)).await?;
            // A copy, not a slice: on iWARP the sink is remotely writable.
            buf.read(0, &mut dst[range.clone()]).map_err(pool_error)?;
        }
        Ok(())
    }

    /// [`write`](Self::write), as a future woken by the engine. Dropping it forgets the write
    /// in progress (the device may still finish it); the pieces before it were written.
    pub async fn write_async(
        &self,
        token: &Token,
        offset: u64,
        src: &[u8],
        timeout: Duration,
    ) -> Result<()> {
        let deadline = Deadline::after(timeout);
        for (range, at) in pieces(token, "write", offset, src.len())? {
            let pool = &self.inner.shared.res.pool;
            let mut buf = poll_fn(|cx| self.poll_alloc(cx, pool, range.len(), deadline)).await?;
            buf.copy_from_slice(&src[range]);
            let mut write = OneSided::new(&self.inner, "write", at, buf);
            if write.needs_fence() {
                let sinks = self.inner.shared.read_sink_pool();
                write.fence = Some(poll_fn(|cx| self.poll_alloc(cx, sinks, 1, deadline)).await?);
            }
            poll_fn(|cx| self.poll_one_sided(cx, &mut write, deadline)).await?;
        }
        Ok(())
    }

    /// A buffer of `len` bytes from `pool`, waiting for one until `deadline`.
    fn alloc_until(
        &self,
        pool: &memory::Pool,
        len: usize,
        deadline: Deadline,
    ) -> Result<memory::Buffer> {
        self.inner.shared.alloc_in(pool, len, deadline.left())
    }

    /// Blocks until `request` finished, or `deadline`.
    fn one_sided(&self, mut request: OneSided<'_>, deadline: Deadline) -> Result<memory::Buffer> {
        let (op, Deadline { at, timeout }) = (request.op, deadline);
        self.wait_until(op, timeout, Some(at), |_, st| request.attempt(st))
    }

    /// Polls `request`: `Pending` until it finished, woken by the engine (and by its ticks,
    /// to notice `deadline`).
    fn poll_one_sided(
        &self,
        cx: &mut Context<'_>,
        request: &mut OneSided<'_>,
        deadline: Deadline,
    ) -> Poll<Result<memory::Buffer>> {
        let mut st = self.inner.state.lock();
        if let Some(r) = request.attempt(&mut st) {
            return Poll::Ready(r);
        }
        if Instant::now() >= deadline.at {
            return Poll::Ready(Err(deadline.timed_out(request.op)));
        }
        register(&self.inner.shared, &mut st, cx);
        drop(st);
        register_tick(&self.inner.shared, cx);
        Poll::Pending
    }

    /// Polls for a buffer of `len` bytes from `pool`: `Pending` while the pool is exhausted
    /// (woken by the engine's ticks), [`Error::TimedOut`] past `deadline`.
    fn poll_alloc(
        &self,
        cx: &mut Context<'_>,
        pool: &memory::Pool,
        len: usize,
        deadline: Deadline,
    ) -> Poll<Result<memory::Buffer>> {
        match pool.try_alloc(len) {
            Ok(b) => Poll::Ready(Ok(b)),
            Err(memory::Error::Exhausted { .. }) if Instant::now() < deadline.at => {
                register_tick(&self.inner.shared, cx);
                Poll::Pending
            }
            Err(memory::Error::Exhausted { .. }) => {
                Poll::Ready(Err(deadline.timed_out("waiting for pool memory")))
            }
            Err(e) => Poll::Ready(Err(pool_error(e))),
        }
    }
}
