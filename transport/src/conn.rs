//! [`Conn`]: a reliable connection to a peer: messages (copied or zero-copy), RPC calls and
//! answers, one-sided reads and writes of exposed regions, graceful close.

use std::net::SocketAddr;
use std::ops::ControlFlow;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::engine::{frame_from, ConnShared, ConnState, Engine, Spinning};
use crate::message::{Message, MessageBuf, Request};
use crate::proto::{
    CallId, Class, MsgId, Received, RemoteChunk, SendError, SendErrorKind, HEADER_LEN,
};
use crate::{Error, Polling, Result};

/// The lock of a connection's state, held.
pub(crate) type StateGuard<'a> = parking_lot::MutexGuard<'a, ConnState>;

/// Default bound of blocking calls that take no timeout (`send`, `respond`).
pub const DEFAULT_OP_TIMEOUT: Duration = Duration::from_secs(30);

/// A connection. Send and receive from any thread (`&Conn` is enough); every blocking call has
/// a bound. Dropping it closes the connection gracefully in the background (what was sent is
/// still delivered).
#[derive(Debug)]
pub struct Conn {
    pub(crate) inner: Arc<ConnShared>,
    pub(crate) engine: Arc<Engine>,
}

/// Turns of a spinning wait per look at the clock.
///
/// A spinning turn has no `spin_loop` hint (PAUSE): each turn already polls the completion
/// queue, and under emulation (qemu's TCG) a PAUSE leaves the translated code, making every
/// turn longer and the completion's discovery later. perftest's and rsocket's polling
/// loops have none either.
pub(crate) const SPIN_TURNS_PER_CLOCK: u32 = 8;

impl Clone for Conn {
    /// Another handle to the same connection (the connection closes when the last is dropped).
    fn clone(&self) -> Self {
        self.inner
            .handles
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Conn {
            inner: self.inner.clone(),
            engine: self.engine.clone(),
        }
    }
}

impl Conn {
    /// The endpoint the connection belongs to.
    pub fn endpoint(&self) -> crate::Endpoint {
        crate::Endpoint {
            engine: self.engine.clone(),
        }
    }

    /// The local address.
    pub fn local_addr(&self) -> Result<SocketAddr> {
        self.inner.local_addr.ok_or(Error::NoAddress {
            what: "the local end",
        })
    }

    /// The peer's address.
    pub fn peer_addr(&self) -> Result<SocketAddr> {
        self.inner
            .peer_addr
            .ok_or(Error::NoAddress { what: "the peer" })
    }

    /// Waits (up to `timeout`) until `check` gives a result, driving progress meanwhile.
    pub(crate) fn wait<T>(
        &self,
        op: &'static str,
        timeout: Duration,
        check: impl FnMut(&ConnShared, &mut ConnState) -> Option<Result<T>>,
    ) -> Result<T> {
        self.wait_until(op, timeout, None, check)
    }

    /// [`wait`](Self::wait), the first look taken under `st`, a lock the caller holds
    /// already (a send that took its frame under it then needs no second lock).
    fn wait_held<T>(
        &self,
        op: &'static str,
        timeout: Duration,
        mut st: StateGuard<'_>,
        mut check: impl FnMut(&ConnShared, &mut ConnState) -> Option<Result<T>>,
    ) -> Result<T> {
        if let Some(r) = check(&self.inner, &mut st) {
            return r;
        }
        drop(st);
        self.wait_until(op, timeout, None, check)
    }

    /// [`wait`](Self::wait) until `deadline` when given (a caller that read the clock
    /// already), else until `timeout` after the first look at the clock. A `check` that
    /// succeeds at once costs no look at the clock: most sends find room, most receives a
    /// message.
    pub(crate) fn wait_until<T>(
        &self,
        op: &'static str,
        timeout: Duration,
        deadline: Option<Instant>,
        mut check: impl FnMut(&ConnShared, &mut ConnState) -> Option<Result<T>>,
    ) -> Result<T> {
        let conn = &*self.inner;
        if let Some(r) = check(conn, &mut conn.state.lock()) {
            return r;
        }
        self.wait_blocked((op, timeout, deadline), check)
    }

    /// The rest of [`wait_until`](Self::wait_until) once its first look found nothing: the
    /// wait itself (spinning, sleeping, driving progress). A function of its own, so that a
    /// profile (the cost bench) can tell waiting from work.
    #[inline(never)]
    fn wait_blocked<T>(
        &self,
        (op, timeout, deadline): (&'static str, Duration, Option<Instant>),
        mut check: impl FnMut(&ConnShared, &mut ConnState) -> Option<Result<T>>,
    ) -> Result<T> {
        let start = Instant::now();
        let conn = &*self.inner;
        let deadline = deadline.unwrap_or(start + timeout);
        // How long this thread polls the queue itself before it sleeps until the progress
        // thread wakes it: no handoff between threads while it spins.
        let adaptive = matches!(conn.shared.cfg.polling, Polling::Adaptive { .. });
        let spin_until = match conn.shared.cfg.polling {
            Polling::Busy => deadline,
            Polling::Adaptive { .. } => start + conn.spin.get(),
            Polling::Event | Polling::Reactor { .. } => start,
        };
        let mut spinning = (start < spin_until).then(|| Spinning::new(&conn.shared));
        let mut turns = 0u32;
        // The last look at the clock, and whether the wait slept: how it ended tunes the
        // adaptive spin.
        let (mut looked, mut slept) = (start, false);
        let ended = |r: Result<T>, st: &ConnState, looked: Instant, slept: bool| {
            if adaptive {
                if slept {
                    conn.wait_slept(st, start);
                } else {
                    conn.spin.spun(looked.duration_since(start));
                }
            }
            r
        };
        loop {
            let polled = match &spinning {
                Some(s) => s.poll(),
                None => conn.shared.progress(),
            };
            // While spinning, look at the clock (deadline, spin time) only every few turns:
            // a shorter turn sees a completion sooner.
            turns = turns.wrapping_add(1);
            if polled > 0 || (spinning.is_some() && turns % SPIN_TURNS_PER_CLOCK != 0) {
                let mut st = conn.state.lock();
                if let Some(r) = check(conn, &mut st) {
                    return ended(r, &st, looked, slept);
                }
                // No spin hint: see `SPIN_TURNS_PER_CLOCK`.
                drop(st);
                continue;
            }
            let mut st = conn.state.lock();
            if let Some(r) = check(conn, &mut st) {
                return ended(r, &st, looked, slept);
            }
            let now = Instant::now();
            looked = now;
            if now >= deadline {
                crate::debug_event!(
                    qp = conn.qp.qp_num(),
                    sq_ops = st.sq_ops.len(),
                    unsignaled = st.unsignaled,
                    in_flight = ?conn.qp.in_flight(),
                    ended = ?st.end,
                    proto = ?st.proto,
                    "{op} timed out"
                );
                return Err(Error::TimedOut { op, after: timeout });
            }
            if now < spin_until || conn.spins_through_transfer(&st, now) {
                drop(st);
                spinning.get_or_insert_with(|| Spinning::new(&conn.shared));
                continue;
            }
            // Hand polling back to the progress thread before sleeping.
            spinning = None;
            slept = true;
            conn.shared.wake_progress();
            let nap = deadline.min(now + Duration::from_millis(2));
            conn.cond.wait_until(&mut st, nap);
        }
    }

    /// Queues an eager frame: waiting up to `timeout` for room, or (`None`) only if it can go now.
    fn send_frame(
        &self,
        class: Class,
        frame: memory::Buffer,
        timeout: Option<Duration>,
    ) -> Result<Option<CallId>> {
        self.send_frame_held(class, frame, timeout, None)
    }

    /// [`send_frame`](Self::send_frame); `held`: the state lock, when the caller holds it
    /// already.
    fn send_frame_held(
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
    fn send_large(&self, class: Class, data: &[u8], timeout: Duration) -> Result<Option<CallId>> {
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

    fn finish_rest(&self, msg: MsgId, offset: usize, rest: &[u8]) {
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
    fn add_chunk_buf(
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

    fn send_class(&self, class: Class, data: &[u8], timeout: Duration) -> Result<Option<CallId>> {
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
    fn send_at_once<'a>(
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
    fn batch_in<'a>(
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
    /// [`max_message`](crate::proto::Config::max_message).
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
    fn eager_frame_in<'a>(
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

    /// Receives the next message, waiting up to `timeout`. After the peer closed and every
    /// message was received: [`Error::Closed`] with no cause (end of stream).
    pub fn recv(&self, timeout: Duration) -> Result<Message> {
        self.wait("recv", timeout, |_, st| {
            if let Some(d) = st.inbox.pop_front() {
                return Some(Ok(Message::new(self.inner.clone(), d)));
            }
            st.ended().map(Err)
        })
    }

    /// Receives a message if one is there: [`Error::WouldBlock`] if not.
    pub fn try_recv(&self) -> Result<Message> {
        self.inner.shared.progress();
        let mut st = self.inner.state.lock();
        if let Some(d) = st.inbox.pop_front() {
            return Ok(Message::new(self.inner.clone(), d));
        }
        Err(st.ended().unwrap_or(Error::WouldBlock))
    }

    /// Calls the peer: sends `request` and waits up to `timeout` for its response. Many calls
    /// may be outstanding at once (from several threads); each gets its own response. A call
    /// that times out is forgotten: a late response is dropped.
    pub fn call(&self, request: &[u8], timeout: Duration) -> Result<Message> {
        let deadline = Instant::now() + timeout;
        let id = self
            .send_class(Class::Request { deadline }, request, timeout)?
            .expect("a request has a call id");
        // A little past the call's deadline: the protocol fails the call at the deadline.
        let wait_deadline = deadline + Duration::from_millis(50);
        let result = self.wait_until("call", timeout, Some(wait_deadline), |_, st| {
            if let Some(r) = st.calls.remove(id.0) {
                return Some(match r {
                    Ok(d) => Ok(Message::new(self.inner.clone(), d)),
                    Err(e) => Err(Error::Call(e)),
                });
            }
            st.ended().map(Err)
        });
        if result.is_err() {
            let mut st = self.inner.state.lock();
            if let Some(p) = st.proto.as_mut() {
                p.cancel_call(id);
            }
            st.calls.remove(id.0);
        }
        result
    }

    /// Receives the next RPC request, waiting up to `timeout`; answer it with
    /// [`Request::respond`].
    pub fn recv_request(&self, timeout: Duration) -> Result<Request> {
        self.wait("recv_request", timeout, |_, st| {
            if let Some(d) = st.requests.pop_front() {
                let Received::Request { call } = d.class else {
                    unreachable!("only requests are queued here")
                };
                return Some(Ok(Request {
                    message: Some(Message::new(self.inner.clone(), d)),
                    call,
                    conn: self.clone(),
                }));
            }
            st.ended().map(Err)
        })
    }

    /// Serves requests with `handler` on this thread until the connection ends (returns
    /// `Ok` after a graceful close) or an error. Each response is a new `Vec`; see
    /// [`serve_with`](Self::serve_with) for a server that allocates nothing per request.
    pub fn serve(&self, mut handler: impl FnMut(&Message) -> Vec<u8>) -> Result<()> {
        self.serve_with(|request, response| *response = handler(request))
    }

    /// [`serve`](Self::serve), with `handler` writing each response into a buffer this call
    /// keeps (empty at each request, its capacity kept from the last): in steady state a
    /// server allocates nothing per request.
    ///
    /// ```no_run
    /// # fn demo(conn: &transport::Conn) -> transport::Result<()> {
    /// // An echo server.
    /// conn.serve_with(|request, response| response.extend_from_slice(&request.bytes()))
    /// # }
    /// ```
    pub fn serve_with(&self, mut handler: impl FnMut(&Message, &mut Vec<u8>)) -> Result<()> {
        let mut response = Vec::new();
        loop {
            match self.recv_request(Duration::from_millis(200)) {
                Ok(req) => {
                    response.clear();
                    handler(req.message(), &mut response);
                    req.respond(&response)?;
                }
                Err(Error::TimedOut { .. }) => continue,
                Err(Error::Closed { cause: None }) => return Ok(()),
                Err(e) => return Err(e),
            }
        }
    }

    /// Answers call `call` with `response`, releasing `request` (the call's message). An
    /// eager response carries the request's credit back in its header, and the request's
    /// buffer goes back to the pool after the response is on its way.
    pub(crate) fn respond(
        &self,
        call: CallId,
        response: &[u8],
        request: Option<Message>,
    ) -> Result<()> {
        let class = Class::Response { call };
        if response.len() > self.eager_limit() {
            drop(request);
            return self
                .send_class(class, response, DEFAULT_OP_TIMEOUT)
                .map(drop);
        }
        let conn = &*self.inner;
        let request = request.and_then(Message::into_delivery);
        let mut st = conn.state.lock();
        let credit = request.as_ref().is_some_and(|d| d.holds_credit());
        if credit {
            conn.release_one(&mut st);
        }
        if conn.send_inline_at_once(&mut st, class, response).is_some() {
            drop(st);
            if let Some(d) = request {
                conn.shared.release_delivery(d);
            }
            return Ok(());
        }
        // The response waits: the credit goes back on its own if it is due.
        if credit {
            conn.drive_if_release_due(&mut st);
        }
        let sent = self
            .eager_frame_in(st, response, Some(DEFAULT_OP_TIMEOUT))
            .and_then(|(frame, held)| {
                self.send_frame_held(class, frame, Some(DEFAULT_OP_TIMEOUT), held)
            });
        if let Some(d) = request {
            conn.shared.release_delivery(d);
        }
        sent.map(drop)
    }

    pub(crate) fn reject(&self, call: CallId) {
        let _ = self.wait("reject", DEFAULT_OP_TIMEOUT, |conn, st| {
            if st.ended().is_some() {
                return Some(Ok(()));
            }
            let p = st.proto.as_mut()?;
            match p.reject_call(call) {
                Err(SendErrorKind::WouldBlock) => None,
                _ => {
                    conn.drive(st);
                    Some(Ok(()))
                }
            }
        });
    }

    /// Closes gracefully and waits until the peer has everything: every message sent so far
    /// received (a rendezvous message read by the peer and acknowledged), then the peer
    /// closed too, and reads end of stream. Once this returns `Ok` the process may exit
    /// without losing anything. Past `timeout`: [`Error::TimedOut`] (the close goes on, and
    /// the connection lingers while the endpoint lives); if the peer went away first or the
    /// connection failed: [`Error::Closed`] with the cause. See
    /// [`EndpointConfig::linger`](crate::EndpointConfig::linger) for the bound
    /// [`close_async`](Self::close_async) uses.
    pub fn close(&self, timeout: Duration) -> Result<()> {
        {
            let mut st = self.inner.state.lock();
            if let Some(p) = st.proto.as_mut() {
                p.close();
            }
            self.inner.drive(&mut st);
        }
        self.wait("close", timeout, |_, st| st.delivery(true))
    }

    /// Whether the connection ended (closed by either side, or failed).
    pub fn is_closed(&self) -> bool {
        self.inner.state.lock().end.is_some()
    }

    /// Protocol counters of the connection.
    pub fn stats(&self) -> Option<crate::proto::Stats> {
        self.inner.state.lock().proto.as_ref().map(|p| p.stats())
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        if self
            .inner
            .handles
            .fetch_sub(1, std::sync::atomic::Ordering::AcqRel)
            != 1
        {
            return;
        }
        let mut st = self.inner.state.lock();
        if let Some(p) = st.proto.as_mut() {
            p.close();
        }
        self.inner.drive(&mut st);
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
