//! Messages on a [`Conn`]: sending (copied, or from a zero-copy buffer; eager or by
//! rendezvous) and receiving, each in both forms: the blocking one waits around the attempt
//! the async one polls (the sends' in [`crate::send_core`], the receive's `take_message`
//! here). Also the settings that shape sends (`nodelay`, the eager limit).

use std::future::poll_fn;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use crate::conn::DEFAULT_OP_TIMEOUT;
use crate::engine::{register, register_recv, remote_chunk, ConnState};

use crate::message::{Message, MessageBuf};
use crate::proto::{CallId, Class, HEADER_LEN};
use crate::rendezvous::queue_whole;
use crate::send_core::{Eager, EagerSend};
use crate::task::block_on_future;
use crate::{Conn, Error, Result};

impl Conn {
    /// Sends `data` as one message (copied into the pool), waiting up to
    /// [`DEFAULT_OP_TIMEOUT`] for credit.
    pub fn send(&self, data: &[u8]) -> Result<()> {
        self.send_timeout(data, DEFAULT_OP_TIMEOUT)
    }

    /// Sends `data`, waiting up to `timeout` for credit and buffers. All or nothing: on
    /// [`Error::TimedOut`] nothing was sent (retrying sends it once). A rendezvous message
    /// announced within the timeout is delivered whole: chunks that need longer (an
    /// exhausted pool, a slow reader) are added by the endpoint's engine, no thread waits.
    pub fn send_timeout(&self, data: &[u8], timeout: Duration) -> Result<()> {
        self.send_class(Class::Message, data, timeout).map(drop)
    }

    /// Sends `data` if it can go now: [`Error::WouldBlock`] when the peer has granted no
    /// credit, the queue is full or the pool is exhausted. Only eager-sized messages. A
    /// message that fits the inline room with nothing queued ahead of it takes no pool buffer
    /// (the device copies it from `data`), so it goes even while the pool is exhausted.
    pub fn try_send(&self, data: &[u8]) -> Result<()> {
        if data.len() > self.eager_limit() {
            return Err(Error::TooLarge {
                len: data.len() as u64,
                limit: self.eager_limit() as u64,
            });
        }
        let st = self.inner.state.lock();
        let send = EagerSend::new(Eager::Message(Class::Message), data);
        self.send_eager(send, None, st).map(drop)
    }

    pub(crate) fn send_class(
        &self,
        class: Class,
        data: &[u8],
        timeout: Duration,
    ) -> Result<Option<CallId>> {
        if data.len() > self.eager_limit() {
            let mut announced = None;
            let sent = block_on_future(Some(timeout), self.send_large(class, data, &mut announced));
            return match (sent, announced) {
                (Some(r), _) => r,
                // Announced in time: the engine adds what is left, the message goes whole.
                (None, Some(call)) => Ok(call),
                (None, None) => Err(Error::TimedOut {
                    op: "send",
                    after: timeout,
                }),
            };
        }
        let st = self.inner.state.lock();
        self.send_eager(
            EagerSend::new(Eager::Message(class), data),
            Some(timeout),
            st,
        )
    }

    /// A pool buffer for `len` bytes to fill and [`send_buf`](Self::send_buf) without a
    /// copy: up to the [eager limit](Self::eager_limit) it goes in one frame; longer (up to
    /// [`max_buf`](Self::max_buf)) by rendezvous, as one chunk the peer reads with one RDMA
    /// READ. Waits up to [`DEFAULT_OP_TIMEOUT`] for the pool.
    ///
    /// ```no_run
    /// # fn demo(conn: &transport::Conn) -> transport::Result<()> {
    /// let mut buf = conn.alloc(1 << 20)?;
    /// buf.fill(7);
    /// conn.send_buf(buf)?; // the peer's Message holds the bytes, copied by no one
    /// # Ok(())
    /// # }
    /// ```
    pub fn alloc(&self, len: usize) -> Result<MessageBuf> {
        let shared = &self.inner.shared;
        if len <= self.eager_limit() {
            let buf = shared.alloc(HEADER_LEN + len, DEFAULT_OP_TIMEOUT)?;
            return Ok(MessageBuf {
                buf,
                start: HEADER_LEN,
            });
        }
        let limit = self.max_buf();
        if len > limit {
            return Err(Error::TooLarge {
                len: len as u64,
                limit: limit as u64,
            });
        }
        let buf = shared.alloc(len, DEFAULT_OP_TIMEOUT)?;
        Ok(MessageBuf { buf, start: 0 })
    }

    /// The longest buffer [`alloc`](Self::alloc) gives: the pool's largest buffer (1 MiB by
    /// default), at most the connection's [`max_message`](Self::max_message). The peer must
    /// be able to read it whole: its pool needs a buffer as long (the default pools do).
    pub fn max_buf(&self) -> usize {
        let pool = self.inner.shared.res.pool.max_buffer_size();
        let max = usize::try_from(self.max_message()).unwrap_or(usize::MAX);
        pool.min(max).min(u32::MAX as usize)
    }

    /// Sends a buffer from [`alloc`](Self::alloc) without copying it, waiting up to
    /// [`DEFAULT_OP_TIMEOUT`] for credit and room. A rendezvous buffer is queued whole in one
    /// step (announced with its one chunk) or not at all; it goes back to the pool once the
    /// peer has read it.
    pub fn send_buf(&self, buf: MessageBuf) -> Result<()> {
        if buf.is_rendezvous() {
            let message = (Class::Message, buf.buf.len() as u64);
            let mut whole = Some([(0, remote_chunk(&buf.buf)?, buf.buf)]);
            return self
                .wait("send", DEFAULT_OP_TIMEOUT, |conn, st| {
                    queue_whole(conn, st, message, 1, &mut whole)
                })
                .map(drop);
        }
        let st = self.inner.state.lock();
        let send = EagerSend::with_frame(Eager::Message(Class::Message), buf.buf);
        self.send_eager(send, Some(DEFAULT_OP_TIMEOUT), st)
            .map(drop)
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
        let (count, mut chunks) = (chunks.len(), Some(chunks));
        let mut st = conn.state.lock();
        let message = (class, data.len() as u64);
        match queue_whole(conn, &mut st, message, count, &mut chunks) {
            Some(r) => Poll::Ready(r),
            None => {
                register(&conn.shared, &mut st, cx);
                Poll::Pending
            }
        }
    }

    /// Largest message [`poll_send`](Self::poll_send) queues in one step: the eager limit, or
    /// as many rendezvous chunks as may be in flight at once.
    pub fn max_whole_send(&self) -> usize {
        let p = &self.inner.shared.cfg.proto;
        self.eager_limit()
            .max(p.rndv_chunk_size as usize * p.max_chunks_in_flight as usize)
    }

    /// Receives the next message, waiting up to `timeout`. After the peer closed and every
    /// message was received: [`Error::Closed`] with no cause (end of stream).
    pub fn recv(&self, timeout: Duration) -> Result<Message> {
        self.wait("recv", timeout, |_, st| self.take_message(st))
    }

    /// Receives a message if one is there: [`Error::WouldBlock`] if not.
    pub fn try_recv(&self) -> Result<Message> {
        self.inner.shared.progress();
        let taken = self.take_message(&mut self.inner.state.lock());
        taken.unwrap_or(Err(Error::WouldBlock))
    }

    /// Receives the next message: `Ok(None)` once the peer closed and every message was
    /// taken (`while let Some(m) = conn.recv_async().await? { ... }`). Cancel safe: dropping
    /// the future loses no message. Bound it with your executor's timeout; a dead peer ends it
    /// with [`Error::Closed`] within the keepalive timeout.
    pub async fn recv_async(&self) -> Result<Option<Message>> {
        poll_fn(|cx| self.poll_recv(cx)).await
    }

    /// Polls for the next message: `Ready(Ok(Some))` takes it from the connection; once the
    /// peer closed and every message was taken, `Ready(Ok(None))`, the end (as a channel's
    /// receiver ends); a failed connection (or one closed by this side) is `Ready(Err)`.
    /// `Pending` takes nothing and wakes the task when something changes. With
    /// [`busy_read`](crate::EndpointConfig::with_busy_read), it first polls the completion queue
    /// for up to that long.
    pub fn poll_recv(&self, cx: &mut Context<'_>) -> Poll<Result<Option<Message>>> {
        self.inner.shared.progress();
        self.poll_busy(
            cx,
            |st| self.take_message(st).map(end_as_none),
            |st, cx| register_recv(&self.inner.shared, st, cx),
        )
    }

    /// Takes the next message. Once the peer closed and every message was taken:
    /// [`Error::Closed`] with no cause.
    #[inline]
    pub(crate) fn take_message(&self, st: &mut ConnState) -> Option<Result<Message>> {
        if let Some(d) = st.user.inbox.pop_front() {
            return Some(Ok(Message::new(self.inner.clone(), d)));
        }
        st.ended().map(Err)
    }
}

/// The settings that shape a connection's sends.
impl Conn {
    /// Whether messages and stream writes go on their own at once (see
    /// [`set_nodelay`](Self::set_nodelay)).
    pub fn nodelay(&self) -> bool {
        self.inner.nodelay()
    }

    /// Turns coalescing of small sends off (`true`) or on (the default), as `TCP_NODELAY`
    /// does for a socket. With coalescing, a plain message (not a call or a response) up to
    /// the eager limit that finds an earlier frame of the connection unacknowledged by the
    /// peer's device waits in a batch frame, which the messages after it join, until that
    /// frame is acknowledged or the batch is full; the peer receives each message on its
    /// own, in order, and the batch's receive credit comes back when the last of them is
    /// dropped. Messages are batched under busy and reactor polling only (see
    /// [`Polling`](crate::Polling): under adaptive and event polling batches measured slower
    /// than a frame per message). Byte-stream writes coalesce the same way under every mode
    /// ([`crate::stream`]). A send that answers data from the peer, or finds nothing
    /// unacknowledged, goes at once, so request-and-reply exchanges never wait, and a wait
    /// lasts about one device round trip.
    /// Many small one-way messages then cost the device few frames: their rate is many times
    /// that of a frame per message. Set `nodelay` for a sender of a few small messages in a
    /// row whose latency counts more than its rate. Applies to sends from now on.
    pub fn set_nodelay(&self, nodelay: bool) {
        let conn = &*self.inner;
        let mut st = conn.state.lock();
        conn.nodelay
            .store(nodelay, std::sync::atomic::Ordering::Relaxed);
        let batches = conn.batches_messages();
        if let Some(p) = st.proto.as_mut() {
            p.set_coalescing(batches);
        }
    }

    /// Largest message sent in one frame; longer ones go by rendezvous (0 until the
    /// connection is set up).
    pub fn eager_limit(&self) -> usize {
        self.inner
            .eager_limit
            .load(std::sync::atomic::Ordering::Acquire)
    }

    /// Largest message this connection may send: the smaller of both sides'
    /// [`max_message`](crate::ProtocolConfig::with_max_message).
    pub fn max_message(&self) -> u64 {
        self.inner
            .state
            .lock()
            .proto
            .as_ref()
            .map_or(0, |p| p.max_send())
    }
}

/// The end of a connection as an async receive reports it: the peer's close as the end of
/// what comes (`Ok(None)`, as a channel's receiver ends), anything else as the error it is.
pub(crate) fn end_as_none<T>(taken: Result<T>) -> Result<Option<T>> {
    match taken {
        Ok(t) => Ok(Some(t)),
        Err(Error::Closed { cause: None }) => Ok(None),
        Err(e) => Err(e),
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
