//! Blocking sends of [`Conn`]: eager messages, a wait around the attempts of
//! [`crate::send_core`], and rendezvous messages, the one rendezvous send waited on; zero-copy
//! buffers; and the settings that shape sends (`nodelay`, the eager limit).

use std::time::Duration;

use crate::conn::DEFAULT_OP_TIMEOUT;
use crate::message::MessageBuf;
use crate::proto::{CallId, Class, HEADER_LEN};
use crate::send_core::{one_chunk, Eager, EagerSend};
use crate::task::block_on_future;
use crate::{Conn, Error, Result};

impl Conn {
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
            let mut buf = Some(buf.buf);
            return self
                .wait("send", DEFAULT_OP_TIMEOUT, |conn, st| {
                    one_chunk(conn, st, Class::Message, &mut buf)
                })
                .map(drop);
        }
        let st = self.inner.state.lock();
        let send = EagerSend::with_frame(Eager::Message(Class::Message), buf.buf);
        self.send_eager(send, Some(DEFAULT_OP_TIMEOUT), st)
            .map(drop)
    }
}
