//! Blocking sends of [`Conn`]: plain messages (batched, at once, or in a frame from the pool),
//! rendezvous messages chunk by chunk, zero-copy buffers, and the settings that shape them
//! (`nodelay`, the eager limit).

use std::ops::ControlFlow;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::conn::{StateGuard, DEFAULT_OP_TIMEOUT};
use crate::engine::{frame_from, ConnShared, ConnState};
use crate::message::MessageBuf;
use crate::proto::{CallId, Class, MsgId, RemoteChunk, SendError, SendErrorKind, HEADER_LEN};
use crate::{Conn, Error, Result};

impl Conn {
    /// Queues an eager frame: waiting up to `timeout` for room, or (`None`) only if it can go now.
    pub(crate) fn send_frame(
        &self,
        class: Class,
        frame: memory::Buffer,
        timeout: Option<Duration>,
    ) -> Result<Option<CallId>> {
        self.send_frame_held(class, frame, timeout, None)
    }

    /// [`send_frame`](Self::send_frame); `held`: the state lock, when the caller holds it
    /// already.
    pub(crate) fn send_frame_held(
        &self,
        class: Class,
        frame: memory::Buffer,
        timeout: Option<Duration>,
        held: Option<StateGuard<'_>>,
    ) -> Result<Option<CallId>> {
        let mut frame = Some(frame);
        let mut waits = false;
        let mut attempt =
            |conn: &ConnShared, st: &mut ConnState| -> Option<Result<Option<CallId>>> {
                if let Some(e) = st.ended() {
                    return Some(Err(e));
                }
                let p = st.proto.as_mut()?;
                match p.send(class, frame.take().expect("frame until sent")) {
                    Ok(id) => {
                        conn.drive(st);
                        waits = st.waits_for_completion();
                        Some(Ok(id))
                    }
                    Err(SendError {
                        kind: SendErrorKind::WouldBlock,
                        payload,
                    }) => {
                        frame = Some(payload);
                        None
                    }
                    Err(SendError { kind, .. }) => Some(Err(send_error(kind, st))),
                }
            };
        let sent = match (timeout, held) {
            (Some(t), Some(st)) => self.wait_held("send", t, st, attempt),
            (Some(t), None) => self.wait("send", t, attempt),
            (None, held) => {
                let conn = &*self.inner;
                let mut st = held.unwrap_or_else(|| conn.state.lock());
                attempt(conn, &mut st).unwrap_or(Err(Error::WouldBlock))
            }
        };
        // A sender handles what came back itself (see `ConnShared::after_send`). Not after a
        // request or a response: their senders poll next anyway, waiting for the response or
        // the next request.
        if matches!(class, Class::Message) {
            self.inner.after_send(waits);
        }
        sent
    }

    /// Sends a rendezvous message: the peer reads it with RDMA READ, chunk by chunk, while
    /// this side copies the next chunks into the pool. All or nothing: the first chunk is
    /// copied into the pool before the message is announced, so a timeout while waiting for
    /// it or for room sends nothing. Once announced, the message is finished whatever the
    /// timeout: chunks that cannot be added in time are copied and added in the background
    /// (a half-announced message would hold back every later message of the connection).
    pub(crate) fn send_large(
        &self,
        class: Class,
        data: &[u8],
        timeout: Duration,
    ) -> Result<Option<CallId>> {
        let deadline = Instant::now() + timeout;
        let left = || deadline.saturating_duration_since(Instant::now());
        let total = data.len() as u64;
        let chunk = self.inner.shared.cfg.proto.rndv_chunk_size as usize;
        let first = chunk.min(data.len());
        let mut buf = self.inner.shared.alloc(first, left())?;
        buf.copy_from_slice(&data[..first]);
        let large = self.wait("send", left(), |conn, st| {
            if let Some(e) = st.ended() {
                return Some(Err(e));
            }
            let p = st.proto.as_mut()?;
            match p.send_large(class, total) {
                Ok(l) => {
                    conn.drive(st);
                    Some(Ok(l))
                }
                Err(SendErrorKind::WouldBlock) => None,
                Err(kind) => Some(Err(send_error(kind, st))),
            }
        })?;
        let mut next = Some(buf);
        for (i, part) in data.chunks(chunk).enumerate() {
            let offset = i * chunk;
            let added = match next.take() {
                Some(buf) => self.add_chunk_buf(large.msg, offset, buf, left()),
                None => self.add_chunk_blocking(large.msg, offset, part, left()),
            };
            match added {
                Ok(()) => {}
                Err(Error::TimedOut { .. }) => {
                    self.finish_in_background(large.msg, offset, data[offset..].to_vec());
                    break;
                }
                Err(e) => return Err(e),
            }
        }
        Ok(large.call)
    }

    /// Adds the rest of rendezvous message `msg` (`rest`, from byte `offset`) on a thread of
    /// its own (on this one if no thread can be started), so the peer gets the whole
    /// message. Gives up only when the connection ends.
    pub(crate) fn finish_in_background(&self, msg: MsgId, offset: usize, rest: Vec<u8>) {
        let rest = Arc::new(rest);
        let (conn, mine) = (self.clone(), rest.clone());
        let spawned = std::thread::Builder::new()
            .name("transport-send-rest".into())
            .spawn(move || conn.finish_rest(msg, offset, &mine));
        if spawned.is_err() {
            self.finish_rest(msg, offset, &rest);
        }
    }

    pub(crate) fn finish_rest(&self, msg: MsgId, offset: usize, rest: &[u8]) {
        let chunk = self.inner.shared.cfg.proto.rndv_chunk_size as usize;
        let mut at = 0;
        while at < rest.len() {
            let part = &rest[at..rest.len().min(at + chunk)];
            match self.add_chunk_blocking(msg, offset + at, part, DEFAULT_OP_TIMEOUT) {
                Ok(()) => at += part.len(),
                Err(Error::TimedOut { .. }) if !self.is_closed() => {}
                Err(_) => return,
            }
        }
    }

    /// Copies `part` (bytes `offset..` of rendezvous message `msg`) into the pool and adds it
    /// to the message, waiting up to `timeout` for a buffer and for room.
    pub(crate) fn add_chunk_blocking(
        &self,
        msg: MsgId,
        offset: usize,
        part: &[u8],
        timeout: Duration,
    ) -> Result<()> {
        let deadline = Instant::now() + timeout;
        let mut buf = self.inner.shared.alloc(part.len(), timeout)?;
        buf.copy_from_slice(part);
        self.add_chunk_buf(
            msg,
            offset,
            buf,
            deadline.saturating_duration_since(Instant::now()),
        )
    }

    /// Adds `buf` (bytes `offset..` of rendezvous message `msg`, already copied) to the
    /// message, waiting up to `timeout` for room.
    pub(crate) fn add_chunk_buf(
        &self,
        msg: MsgId,
        offset: usize,
        buf: memory::Buffer,
        timeout: Duration,
    ) -> Result<()> {
        let chunk = remote_chunk(&buf)?;
        let mut buf = Some(buf);
        self.wait("send", timeout, |conn, st| {
            if let Some(e) = st.ended() {
                return Some(Err(e));
            }
            let p = st.proto.as_mut()?;
            if !p.can_add_chunk(msg) {
                return None;
            }
            match p.add_chunk(msg, offset as u64, chunk, buf.take().expect("once")) {
                Ok(()) => {
                    conn.drive(st);
                    Some(Ok(()))
                }
                Err(SendError {
                    kind: SendErrorKind::WouldBlock,
                    payload,
                }) => {
                    buf = Some(payload);
                    None
                }
                Err(SendError { kind, .. }) => Some(Err(send_error(kind, st))),
            }
        })
    }

    pub(crate) fn send_class(
        &self,
        class: Class,
        data: &[u8],
        timeout: Duration,
    ) -> Result<Option<CallId>> {
        let eager = self.eager_limit();
        if data.len() > eager {
            return self.send_large(class, data, timeout);
        }
        // One lock for the batch, the frame and the send when they can go at once.
        let conn = &*self.inner;
        let mut st = conn.state.lock();
        if class == Class::Message && conn.batches_messages() {
            match self.batch_in(st, data) {
                ControlFlow::Break(r) => return r.map(|()| None),
                ControlFlow::Continue(held) => st = held,
            }
        }
        let st = match self.send_at_once(st, class, data) {
            Ok(id) => return Ok(id),
            Err(st) => st,
        };
        let (frame, held) = self.eager_frame_in(st, data, Some(timeout))?;
        self.send_frame_held(class, frame, Some(timeout), held)
    }

    /// Sends eager message `data` at once if it can go so
    /// ([`ConnShared::send_inline_at_once`]), under `st`, then lets go of the lock and polls as
    /// after a queued send of `class` (see `send_frame_held`). `Err`: nothing was sent,
    /// the lock handed back.
    pub(crate) fn send_at_once<'a>(
        &'a self,
        mut st: StateGuard<'a>,
        class: Class,
        data: &[u8],
    ) -> std::result::Result<Option<CallId>, StateGuard<'a>> {
        let conn = &*self.inner;
        let Some(id) = conn.send_inline_at_once(&mut st, class, data) else {
            return Err(st);
        };
        let waits = st.waits_for_completion();
        drop(st);
        if class == Class::Message {
            conn.after_send(waits);
        }
        Ok(id)
    }

    /// Queues plain message `data` in a batch if that is how it goes now (see
    /// [`ConnShared::try_batch`](crate::engine::ConnShared::try_batch)). A connection that
    /// does not batch costs an atomic load, not the state lock.
    pub(crate) fn batch(&self, data: &[u8]) -> Option<Result<()>> {
        if !self.inner.batches_messages() {
            return None;
        }
        match self.batch_in(self.inner.state.lock(), data) {
            ControlFlow::Break(r) => Some(r),
            ControlFlow::Continue(_) => None,
        }
    }

    /// [`batch`](Self::batch) under `st`, a lock the caller holds: `Break` with the outcome
    /// when the message went into a batch (the lock let go, then the sender's poll), else
    /// `Continue` with the lock, for the caller to send the message on its own.
    pub(crate) fn batch_in<'a>(
        &'a self,
        mut st: StateGuard<'a>,
        data: &[u8],
    ) -> ControlFlow<Result<()>, StateGuard<'a>> {
        let conn = &*self.inner;
        let Some(r) = conn.try_batch(&mut st, data) else {
            return ControlFlow::Continue(st);
        };
        let waits = st.waits_for_completion();
        drop(st);
        conn.after_send(waits);
        ControlFlow::Break(r)
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
    /// whose first chunk was announced within the timeout is delivered whole: chunks that
    /// need longer (an exhausted pool, a slow reader) are finished in the background.
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
        let st = match self.send_at_once(self.inner.state.lock(), Class::Message, data) {
            Ok(_) => return Ok(()),
            Err(st) => st,
        };
        let (frame, held) = self.eager_frame_in(st, data, None)?;
        self.send_frame_held(Class::Message, frame, None, held)
            .map(drop)
    }

    /// The frame of an eager message: `data` copied after the header room, into the buffer
    /// of the last frame the device copied while posting (inline) if this one is as small,
    /// with the lock `st` still held for the send; else, the lock let go first, into a
    /// buffer from the pool, waiting up to `timeout` for one (`None`: not at all).
    pub(crate) fn eager_frame_in<'a>(
        &'a self,
        mut st: StateGuard<'a>,
        data: &[u8],
        timeout: Option<Duration>,
    ) -> Result<(memory::Buffer, Option<StateGuard<'a>>)> {
        let len = HEADER_LEN + data.len();
        if let Some(mut buf) = self.inner.spare_frame(&mut st, len) {
            buf[HEADER_LEN..].copy_from_slice(data);
            return Ok((buf, Some(st)));
        }
        drop(st);
        Ok((frame_from(&self.inner.shared, data, timeout)?, None))
    }

    /// A pool buffer for `len` bytes to fill and [`send_buf`](Self::send_buf) without a copy
    /// (at most [`eager_limit`](Self::eager_limit) bytes).
    pub fn alloc(&self, len: usize) -> Result<MessageBuf> {
        if len > self.eager_limit() {
            return Err(Error::TooLarge {
                len: len as u64,
                limit: self.eager_limit() as u64,
            });
        }
        let buf = self
            .inner
            .shared
            .alloc(crate::proto::HEADER_LEN + len, DEFAULT_OP_TIMEOUT)?;
        Ok(MessageBuf { buf })
    }

    /// Sends a buffer from [`alloc`](Self::alloc) without copying it.
    pub fn send_buf(&self, buf: MessageBuf) -> Result<()> {
        self.send_frame(Class::Message, buf.buf, Some(DEFAULT_OP_TIMEOUT))
            .map(drop)
    }
}

/// The descriptor a peer reads a rendezvous chunk by: the whole of `buf`.
pub(crate) fn remote_chunk(buf: &memory::Buffer) -> Result<RemoteChunk> {
    let remote = buf.remote().ok_or(Error::Config(
        "the endpoint's pool has no remote read access".into(),
    ))?;
    Ok(RemoteChunk {
        addr: remote.addr,
        rkey: remote.rkey,
        len: buf.len() as u32,
    })
}

/// A refused send as the API's error.
pub(crate) fn send_error(kind: SendErrorKind, st: &ConnState) -> Error {
    match kind {
        SendErrorKind::WouldBlock => Error::WouldBlock,
        SendErrorKind::Closed => st.ended().unwrap_or(Error::ClosedLocally),
        SendErrorKind::TooLarge { len, limit, .. } => Error::TooLarge { len, limit },
        other => Error::Config(other.to_string()),
    }
}
