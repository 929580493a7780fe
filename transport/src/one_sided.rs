//! One-sided access to a peer's exposed [`Region`](crate::Region): [`Conn::read`] /
//! [`Conn::write`] and their async forms. Each request is one [`OneSided`] attempt over the
//! connection's state (post when a slot is free, then take the completion); the blocking call
//! waits around it, the async one registers its waker. No thread of its own either way.

use std::future::poll_fn;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use verbs::{RemoteSlice, SendRequest};

use crate::engine::{pool_error, ConnShared, ConnState, SqOp};
use crate::region::Token;
use crate::task::{register, register_tick};
use crate::{Conn, Error, Result};

/// Largest piece of a one-sided access one request moves (through a pool buffer).
const PIECE: usize = 1 << 20;

/// One one-sided request on a pool buffer: posted when the connection has a free one-sided
/// slot, finished when its completion came back. Dropped unfinished (timed out, cancelled),
/// it forgets the request: its buffer is dropped with the completion's entry.
struct OneSided<'a, F> {
    conn: &'a ConnShared,
    op: &'static str,
    make: F,
    buf: Option<memory::Buffer>,
    /// The request's number once posted, until its completion is taken.
    posted: Option<u64>,
}

impl<'a, F: FnMut(memory::Buffer) -> verbs::Result<SendRequest>> OneSided<'a, F> {
    fn new(conn: &'a ConnShared, op: &'static str, make: F, buf: memory::Buffer) -> Self {
        OneSided {
            conn,
            op,
            make,
            buf: Some(buf),
            posted: None,
        }
    }

    /// One attempt with the state locked: posts if not yet posted and a slot is free; gives
    /// the buffer back once the request completed, or the connection's end; `None`: wait.
    fn attempt(&mut self, st: &mut ConnState) -> Option<Result<memory::Buffer>> {
        if self.posted.is_none() {
            if let Some(e) = st.ended() {
                return Some(Err(e));
            }
            if st.one_sided_in_flight >= self.conn.shared.cfg.max_one_sided {
                return None;
            }
            let id = st.next_one_sided;
            st.next_one_sided += 1;
            st.one_sided_in_flight += 1;
            let buf = self.buf.take().expect("posted once");
            self.conn.post(st, (self.make)(buf), SqOp::OneSided(id));
            self.posted = Some(id);
        }
        let id = self.posted?;
        if let Some(r) = st.one_sided_done.remove(&id) {
            self.posted = None;
            let op = self.op;
            return Some(r.map_err(|status| Error::Completion { op, status }));
        }
        st.ended().map(Err)
    }
}

impl<F> Drop for OneSided<'_, F> {
    fn drop(&mut self) {
        if let Some(id) = self.posted {
            // Completed meanwhile: drop the buffer now, else with its entry when it comes.
            self.conn.state.lock().one_sided_done.remove(&id);
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

/// Where one piece of an access goes: the peer's `addr` (checked against the token),
/// `len` bytes.
fn remote(token: &Token, addr: u64, len: usize) -> RemoteSlice {
    RemoteSlice {
        addr,
        len: len as u32,
        rkey: token.rkey,
    }
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
        let addr = token.check("read", offset, dst.len() as u64)?;
        let deadline = Deadline::after(timeout);
        for (i, out) in dst.chunks_mut(PIECE).enumerate() {
            let n = out.len();
            let at = remote(token, addr + (i * PIECE) as u64, n);
            let buf = self.alloc_until(n, deadline)?;
            let read = |b| SendRequest::rdma_read(b, 0..n, at);
            let buf = self.one_sided(OneSided::new(&self.inner, "read", read, buf), deadline)?;
            out.copy_from_slice(&buf[..n]);
        }
        Ok(())
    }

    /// Writes `src` at `offset` of the peer's region named by `token` (RDMA WRITE), waiting up
    /// to `timeout`. Out of range or not writable: refused here, nothing sent.
    pub fn write(&self, token: &Token, offset: u64, src: &[u8], timeout: Duration) -> Result<()> {
        let addr = token.check("write", offset, src.len() as u64)?;
        let deadline = Deadline::after(timeout);
        for (i, part) in src.chunks(PIECE).enumerate() {
            let n = part.len();
            let at = remote(token, addr + (i * PIECE) as u64, n);
            let mut buf = self.alloc_until(n, deadline)?;
            buf.copy_from_slice(part);
            let write = |b| SendRequest::rdma_write(b, 0..n, at);
            self.one_sided(OneSided::new(&self.inner, "write", write, buf), deadline)?;
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
        let addr = token.check("read", offset, dst.len() as u64)?;
        let deadline = Deadline::after(timeout);
        for (i, out) in dst.chunks_mut(PIECE).enumerate() {
            let n = out.len();
            let at = remote(token, addr + (i * PIECE) as u64, n);
            let buf = poll_fn(|cx| self.poll_alloc(cx, n, deadline)).await?;
            let mut read = OneSided::new(
                &self.inner,
                "read",
                |b| SendRequest::rdma_read(b, 0..n, at),
                buf,
            );
            let buf = poll_fn(|cx| self.poll_one_sided(cx, &mut read, deadline)).await?;
            out.copy_from_slice(&buf[..n]);
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
        let addr = token.check("write", offset, src.len() as u64)?;
        let deadline = Deadline::after(timeout);
        for (i, part) in src.chunks(PIECE).enumerate() {
            let n = part.len();
            let at = remote(token, addr + (i * PIECE) as u64, n);
            let mut buf = poll_fn(|cx| self.poll_alloc(cx, n, deadline)).await?;
            buf.copy_from_slice(part);
            let mut write = OneSided::new(
                &self.inner,
                "write",
                |b| SendRequest::rdma_write(b, 0..n, at),
                buf,
            );
            poll_fn(|cx| self.poll_one_sided(cx, &mut write, deadline)).await?;
        }
        Ok(())
    }

    /// A pool buffer of `len` bytes, waiting for one until `deadline`.
    fn alloc_until(&self, len: usize, deadline: Deadline) -> Result<memory::Buffer> {
        self.inner.shared.alloc(len, deadline.left())
    }

    /// Blocks until `request` finished, or `deadline`.
    fn one_sided<F: FnMut(memory::Buffer) -> verbs::Result<SendRequest>>(
        &self,
        mut request: OneSided<'_, F>,
        deadline: Deadline,
    ) -> Result<memory::Buffer> {
        let (op, Deadline { at, timeout }) = (request.op, deadline);
        self.wait_until(op, timeout, Some(at), |_, st| request.attempt(st))
    }

    /// Polls `request`: `Pending` until it finished, woken by the engine (and by its ticks,
    /// to notice `deadline`).
    fn poll_one_sided<F: FnMut(memory::Buffer) -> verbs::Result<SendRequest>>(
        &self,
        cx: &mut Context<'_>,
        request: &mut OneSided<'_, F>,
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

    /// Polls for a pool buffer of `len` bytes: `Pending` while the pool is exhausted (woken
    /// by the engine's ticks), [`Error::TimedOut`] past `deadline`.
    fn poll_alloc(
        &self,
        cx: &mut Context<'_>,
        len: usize,
        deadline: Deadline,
    ) -> Poll<Result<memory::Buffer>> {
        match self.inner.shared.pool.try_alloc(len) {
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
