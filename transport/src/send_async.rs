//! Async sends of [`Conn`]: `poll_send` (a message queued whole or not at all), byte-stream
//! writes that join a waiting message, and `send_async` for messages of any size.

use std::future::poll_fn;
use std::task::{ready, Context, Poll};

use crate::conn::StateGuard;
use crate::engine::{pool_error, remote_chunk, send_error, ConnShared, ConnState};
use crate::proto::{CallId, Class, SendError, SendErrorKind};
use crate::send_core::{joined_waiting, Alloc, Eager, EagerSend, Step};
use crate::task::{register, register_tick};
use crate::{Conn, Error, Result};

/// Why the protocol is there after [`Conn::open_state`]: it checked, under the same lock.
const OPEN: &str = "open_state found the protocol set up, under this lock";

impl Conn {
    /// Largest message [`poll_send`](Self::poll_send) queues in one step: the eager limit, or
    /// as many rendezvous chunks as may be in flight at once.
    pub fn max_whole_send(&self) -> usize {
        let p = &self.inner.shared.cfg.proto;
        self.eager_limit()
            .max(p.rndv_chunk_size as usize * p.max_chunks_in_flight as usize)
    }

    /// Queues `data` as one message if the connection can take it whole now (credit, queue
    /// room, pool buffers): `Ready(Ok(()))` means queued (it will be delivered unless the
    /// connection fails); `Pending` means nothing was queued and the task is woken when it
    /// may be retried. Longer than [`max_whole_send`](Self::max_whole_send):
    /// [`Error::TooLarge`] (use [`send_async`](Self::send_async)).
    pub fn poll_send(&self, cx: &mut Context<'_>, data: &[u8]) -> Poll<Result<()>> {
        self.poll_send_class(cx, Class::Message, data)
            .map(|r| r.map(drop))
    }

    pub(crate) fn poll_send_class(
        &self,
        cx: &mut Context<'_>,
        class: Class,
        data: &[u8],
    ) -> Poll<Result<Option<CallId>>> {
        let conn = &*self.inner;
        if data.len() <= self.eager_limit() {
            return self
                .poll_eager(cx, Eager::Message(class), data)
                .map_err(|e| *e);
        }
        let limit = self.max_whole_send();
        if data.len() > limit {
            return Poll::Ready(Err(Error::TooLarge {
                len: data.len() as u64,
                limit: limit as u64,
            }));
        }
        // Rendezvous, queued whole: every chunk copied first, then announced and added under
        // one lock, so the message is never left half announced.
        let chunk = conn.shared.cfg.proto.rndv_chunk_size as usize;
        let mut chunks = Vec::with_capacity(data.len().div_ceil(chunk));
        for (i, part) in data.chunks(chunk).enumerate() {
            let mut buf = ready!(self.poll_pool_buffer(cx, part.len()))?;
            buf.copy_from_slice(part);
            let remote = match remote_chunk(&buf) {
                Ok(r) => r,
                Err(e) => return Poll::Ready(Err(e)),
            };
            chunks.push(((i * chunk) as u64, remote, buf));
        }
        let mut st = ready!(self.open_state(cx))?;
        let p = st.proto.as_mut().expect(OPEN);
        if !p.can_take_whole(chunks.len()) {
            register(&self.inner.shared, &mut st, cx);
            return Poll::Pending;
        }
        let large = match p.send_large(class, data.len() as u64) {
            Ok(l) => l,
            Err(kind) => return self.refused(&mut st, cx, kind),
        };
        for (offset, remote, buf) in chunks {
            if let Err(SendError { kind, .. }) = p.add_chunk(large.msg, offset, remote, buf) {
                return Poll::Ready(Err(send_error(kind, &st)));
            }
        }
        conn.drive(&mut st);
        Poll::Ready(Ok(large.call))
    }

    /// Queues the first bytes of `data` (at most the eager limit) as byte-stream data: appended
    /// to the stream's message still waiting to go if there is one, else as a new message
    /// that later writes may join (see [`crate::proto::Connection::send_mergeable`]). Returns
    /// how many bytes were queued (at least one, for non-empty `data`); `Pending` queued
    /// nothing and the task is woken when it may retry. Cancel safe as
    /// [`poll_send`](Self::poll_send).
    pub(crate) fn poll_write_merging(
        &self,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<Result<usize>> {
        let conn = &*self.inner;
        let data = &data[..data.len().min(self.eager_limit())];
        let mut st = conn.state.lock();
        // Most small writes join the waiting message: no send is built for them.
        if let Some(len) = joined_waiting(conn, &mut st, data) {
            return Poll::Ready(Ok(len));
        }
        let mut send = EagerSend::new(Eager::StreamWrite, data);
        let step = send.attempt(conn, &mut st, Alloc::Now);
        self.poll_step(cx, Eager::StreamWrite, step, st)
            .map(|r| r.map(|_| data.len()).map_err(|e| *e))
    }

    /// One attempt of an eager send of `data` as `kind` ([`EagerSend::attempt`]), taking a
    /// pool buffer only if one is free: `Pending` (the task registered) while it waits for
    /// progress or a buffer (the send kept nothing: a retry starts anew). Inlined into each
    /// async send, as `send_eager` is into each blocking one: a call of its own costs every
    /// send a frame and a copy of its result. The send is built under the lock, so its
    /// attempt reads its kind and bytes as written.
    #[inline(always)]
    fn poll_eager(
        &self,
        cx: &mut Context<'_>,
        kind: Eager,
        data: &[u8],
    ) -> Poll<std::result::Result<Option<CallId>, Box<Error>>> {
        let conn = &*self.inner;
        let mut st = conn.state.lock();
        let mut send = EagerSend::new(kind, data);
        let step = send.attempt(conn, &mut st, Alloc::Now);
        self.poll_step(cx, kind, step, st)
    }

    /// What the `step` of an attempt of a send of `kind`, taken under `st`, means to a task:
    /// sent (as this call, if a request; the sender's poll run), failed, or `Pending` with
    /// the task registered for what it waits for. The kind comes as the caller knows it, not
    /// read back from the send.
    #[inline(always)]
    pub(crate) fn poll_step(
        &self,
        cx: &mut Context<'_>,
        kind: Eager,
        step: Step,
        mut st: StateGuard<'_>,
    ) -> Poll<std::result::Result<Option<CallId>, Box<Error>>> {
        let conn = &*self.inner;
        match step {
            Step::Went(call) => {
                let poll = kind.poll_due(&st);
                drop(st);
                if let Some(waits) = poll {
                    conn.after_send(waits);
                }
                Poll::Ready(Ok(call))
            }
            Step::Failed(e) => Poll::Ready(Err(e)),
            Step::Progress => {
                register(&conn.shared, &mut st, cx);
                Poll::Pending
            }
            Step::Pool => {
                drop(st);
                self.pool_pending(cx)
            }
        }
    }

    /// A send the protocol refused: backpressure (`WouldBlock`) waits for this connection's
    /// progress, anything else is the error.
    pub(crate) fn refused<T>(
        &self,
        st: &mut ConnState,
        cx: &mut Context<'_>,
        kind: SendErrorKind,
    ) -> Poll<Result<T>> {
        if matches!(kind, SendErrorKind::WouldBlock) {
            register(&self.inner.shared, st, cx);
            return Poll::Pending;
        }
        Poll::Ready(Err(send_error(kind, st)))
    }

    /// The connection's state, locked, once its protocol is set up: the connection's end as
    /// the error, or `Pending` (the task registered) while it is still being set up.
    pub(crate) fn open_state(&self, cx: &mut Context<'_>) -> Poll<Result<StateGuard<'_>>> {
        let mut st = self.inner.state.lock();
        if let Some(e) = st.ended() {
            return Poll::Ready(Err(e));
        }
        if st.proto.is_none() {
            register(&self.inner.shared, &mut st, cx);
            return Poll::Pending;
        }
        Poll::Ready(Ok(st))
    }

    /// A pool buffer of `len` bytes: `Pending` while the pool is exhausted (see
    /// [`pool_pending`](Self::pool_pending)).
    pub(crate) fn poll_pool_buffer(
        &self,
        cx: &mut Context<'_>,
        len: usize,
    ) -> Poll<Result<memory::Buffer>> {
        match self.inner.shared.res.pool.try_alloc(len) {
            Ok(b) => Poll::Ready(Ok(b)),
            Err(memory::Error::Exhausted { .. }) => self.pool_pending(cx),
            Err(e) => Poll::Ready(Err(pool_error(e))),
        }
    }

    /// The pool is exhausted: retry when this connection makes progress or at the next tick.
    pub(crate) fn pool_pending<T>(&self, cx: &mut Context<'_>) -> Poll<T> {
        register(&self.inner.shared, &mut self.inner.state.lock(), cx);
        register_tick(&self.inner.shared, cx);
        Poll::Pending
    }

    /// Sends `data` as one message, of any size. Cancel safe: an eager message is queued
    /// whole or not at all; a rendezvous message (longer than the eager limit) sends nothing
    /// if the future is dropped before it was announced, and is delivered whole if it is
    /// dropped after (the endpoint's engine adds the rest; no thread is started). Waits for
    /// credit as long as the peer is alive (bound it with your executor's timeout).
    pub async fn send_async(&self, data: &[u8]) -> Result<()> {
        self.send_class_async(Class::Message, data).await.map(drop)
    }

    pub(crate) async fn send_class_async(
        &self,
        class: Class,
        data: &[u8],
    ) -> Result<Option<CallId>> {
        if data.len() <= self.eager_limit() {
            return poll_fn(|cx| self.poll_eager(cx, Eager::Message(class), data))
                .await
                .map_err(|e| *e);
        }
        // Boxed: a future holds the state of its longest path, and the rendezvous send's is
        // long; every eager send's future (a call's too) would carry it, and be copied with
        // it wherever it moves.
        Box::pin(self.send_large(class, data, &mut None)).await
    }

    /// Waits until `check` gives a result (it runs with the state locked, and says itself
    /// when the connection ended, as the attempts of [`crate::send_core`] do).
    pub(crate) async fn poll_state<T>(
        &self,
        mut check: impl FnMut(&ConnShared, &mut ConnState) -> Option<Result<T>>,
    ) -> Result<T> {
        poll_fn(|cx| {
            let conn = &*self.inner;
            let mut st = conn.state.lock();
            match check(conn, &mut st) {
                Some(r) => Poll::Ready(r),
                None => {
                    register(&self.inner.shared, &mut st, cx);
                    Poll::Pending
                }
            }
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use crate::Conn;

    /// The size of what `f` returns.
    fn size_of_ret<A, B, F>(_: fn(A, B) -> F) -> usize {
        std::mem::size_of::<F>()
    }

    fn size_of_ret3<A, B, C, F>(_: fn(A, B, C) -> F) -> usize {
        std::mem::size_of::<F>()
    }

    #[test]
    fn an_eager_sends_future_carries_no_rendezvous_state() {
        // The rendezvous send's state is boxed when needed: a send's or a call's future stays
        // small, and cheap to move (into an executor's task, a `FuturesUnordered`).
        let send = size_of_ret::<&'static Conn, &'static [u8], _>(Conn::send_async);
        let call = size_of_ret3::<&'static Conn, &'static [u8], Duration, _>(Conn::call_async);
        assert!(send <= 256, "send_async's future is {send} bytes");
        assert!(call <= 256, "call_async's future is {call} bytes");
    }
}
