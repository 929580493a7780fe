//! Async forms of [`Conn`]'s operations: futures and `poll_*` functions woken by the progress
//! engine through [`std::task::Waker`]s, on any executor (no runtime dependency).
//!
//! # Cancel safety
//!
//! Every buffer the device may touch is a pool buffer owned by the engine from the moment it
//! is posted until its completion, so dropping a future never lets the device touch freed
//! memory. Per method:
//!
//! - [`Conn::poll_recv`], [`Conn::recv_async`], [`Conn::recv_request_async`]: a message is
//!   taken from the connection only when the poll returns it; a dropped future loses nothing.
//! - [`Conn::poll_send`]: the message is queued whole in the poll that returns `Ready(Ok)`, or
//!   not at all; `Pending` queued nothing.
//! - [`Conn::send_async`]: messages up to [`Conn::max_whole_send`] behave like `poll_send`
//!   (all or nothing). A larger message is queued chunk by chunk; a future dropped after it
//!   started copies the rest and finishes sending it on a thread, so the peer never sees half
//!   a message.
//! - [`Conn::call_async`]: dropping it forgets the call (a late response is dropped).
//! - [`Conn::close_async`]: the close is queued at the first poll; dropping the future only
//!   stops waiting for the peer's close.
//! - [`Conn::read_async`], [`Conn::write_async`]: dropping the future forgets the request in
//!   progress (the device finishes it into pool memory).
//! - [`Endpoint::connect_async`](crate::Endpoint::connect_async): the connect runs on a thread
//!   of its own; dropping the future lets it finish and closes the connection it made.

use std::future::poll_fn;
use std::sync::atomic::Ordering;
use std::task::{ready, Context, Poll};
use std::time::{Duration, Instant};

use crate::conn::{remote_chunk, send_error, StateGuard, SPIN_TURNS_PER_CLOCK};
use crate::engine::{pool_error, ConnShared, ConnState, Spinning, TASK_WAKES};
use crate::message::{Message, Request};
use crate::proto::{CallId, Class, Received, SendError, SendErrorKind, HEADER_LEN};
use crate::task::{register, register_recv, register_tick};
use crate::{Conn, Error, Polling, Result};

/// How an async receive reports a connection's end: the peer's close as the end of the
/// messages (`Ok(None)`), anything else as the error it is.
fn end_or_error<T>(end: Error) -> Result<Option<T>> {
    match end {
        Error::Closed { cause: None } => Ok(None),
        e => Err(e),
    }
}

/// Why the protocol is there after [`Conn::open_state`]: it checked, under the same lock.
const OPEN: &str = "open_state found the protocol set up, under this lock";

impl Conn {
    /// Polls for the next message: `Ready(Ok(Some))` takes it from the connection; once the
    /// peer closed and every message was taken, `Ready(Ok(None))`, the end (as a channel's
    /// receiver ends); a failed connection (or one closed by this side) is `Ready(Err)`.
    /// `Pending` takes nothing and wakes the task when something changes. With
    /// [`busy_read`](crate::EndpointConfig::busy_read), it first polls the completion queue
    /// for up to that long.
    pub fn poll_recv(&self, cx: &mut Context<'_>) -> Poll<Result<Option<Message>>> {
        self.inner.shared.progress();
        self.poll_busy(
            cx,
            |st| {
                if let Some(d) = st.inbox.pop_front() {
                    return Some(Ok(Some(Message::new(self.inner.clone(), d))));
                }
                st.ended().map(end_or_error)
            },
            |st, cx| register_recv(&self.inner.shared, st, cx),
        )
    }

    /// Looks for what a task waits for with `check` (under the state lock). While it finds
    /// nothing, the task polls the completion queue itself, as a spinning caller, for up to
    /// [`busy_read`](crate::EndpointConfig::busy_read) or, when that is zero, under
    /// [`Polling::Adaptive`] while no other task of the endpoint spins, for the connection's
    /// adaptive spin (see [`SpinBudget`](crate::engine::SpinBudget)), longer while a large
    /// message of the connection moves, unless it runs on tokio's current-thread runtime.
    /// It stops early when an endpoint wakes another task (an executor has work, maybe for
    /// its thread: the task it woke, when the wake came from its own poll). Then `wait`
    /// registers its waker (under the same lock) and the poll is `Pending`.
    fn poll_busy<T>(
        &self,
        cx: &mut Context<'_>,
        mut check: impl FnMut(&mut ConnState) -> Option<T>,
        wait: impl FnOnce(&mut ConnState, &mut Context<'_>),
    ) -> Poll<T> {
        let conn = &*self.inner;
        let shared = &conn.shared;
        let adaptive = matches!(shared.cfg.polling, Polling::Adaptive { .. });
        let mut st = conn.state.lock();
        if let Some(found) = check(&mut st) {
            // The end of a wait that registered its waker.
            if let Some(began) = st.async_wait.take() {
                conn.wait_slept(&st, began);
            }
            return Poll::Ready(found);
        }
        // How long it spins, and, while it does, the task counts as a spinning caller (the
        // progress thread stands aside for it).
        let spin = match shared.cfg.busy_read {
            d if !d.is_zero() => Some((d, Spinning::new(shared))),
            // One task of the endpoint spins at a time: it polls for every connection, and
            // the tasks it wakes run next on its thread (it stops spinning then). Several
            // would take turns holding executor threads (and cores) from each other.
            // Under a tokio driver only a lone connection's task spins: with several, the
            // driver serves them all and a spinning task would hold a runtime thread from it
            // (docs/benchmarks.md, "the tokio driver and a lone connection").
            _ if adaptive
                && (!shared.reactor_drives() || shared.conn_count() == 1)
                && !on_a_single_threaded_runtime() =>
            {
                match conn.spin.get() {
                    budget if budget.is_zero() => None,
                    budget => Spinning::task(shared).map(|spinner| (budget, spinner)),
                }
            }
            _ => None,
        };
        let Some((busy, spinner)) = spin else {
            wait(&mut st, cx);
            return Poll::Pending;
        };
        drop(st);
        let start = Instant::now();
        let (mut looked, mut turns) = (start, 0u32);
        let wakes = TASK_WAKES.load(Ordering::Relaxed);
        loop {
            spinner.poll();
            let mut st = conn.state.lock();
            if let Some(found) = check(&mut st) {
                match st.async_wait.take() {
                    // A wait woken before its frame came (or by something else), which
                    // then spun for it.
                    Some(began) => conn.wait_slept(&st, began),
                    None if adaptive => conn.spin.spun(looked.duration_since(start)),
                    None => {}
                }
                return Poll::Ready(found);
            }
            // The clock only every few turns: a shorter turn sees a completion sooner.
            turns = turns.wrapping_add(1);
            let other_work = TASK_WAKES.load(Ordering::Relaxed) != wakes;
            if other_work
                || (turns % SPIN_TURNS_PER_CLOCK == 0 && {
                    looked = Instant::now();
                    looked.duration_since(start) >= busy
                        && !conn.spins_through_transfer(&st, looked)
                })
            {
                // Stop spinning first: registering then hands polling back to the progress
                // thread (or the reactor).
                drop(spinner);
                if adaptive && st.async_wait.is_none() {
                    st.async_wait = Some(start);
                }
                wait(&mut st, cx);
                return Poll::Pending;
            }
            // No spin hint: see `SPIN_TURNS_PER_CLOCK`.
            drop(st);
        }
    }

    /// Receives the next message: `Ok(None)` once the peer closed and every message was
    /// taken (`while let Some(m) = conn.recv_async().await? { ... }`). Cancel safe: dropping
    /// the future loses no message. Bound it with your executor's timeout; a dead peer ends it
    /// with [`Error::Closed`] within the keepalive timeout.
    pub async fn recv_async(&self) -> Result<Option<Message>> {
        poll_fn(|cx| self.poll_recv(cx)).await
    }

    /// Receives the next RPC request: `Ok(None)` once the peer closed and every request was
    /// taken (cancel safe, like [`recv_async`](Self::recv_async)).
    pub async fn recv_request_async(&self) -> Result<Option<Request>> {
        poll_fn(|cx| {
            self.poll_busy(
                cx,
                |st| {
                    if let Some(d) = st.requests.pop_front() {
                        let Received::Request { call } = d.class else {
                            unreachable!("only requests are queued here")
                        };
                        return Some(Ok(Some(Request {
                            message: Some(Message::new(self.inner.clone(), d)),
                            call,
                            conn: self.clone(),
                        })));
                    }
                    st.ended().map(end_or_error)
                },
                |st, cx| register(&self.inner.shared, st, cx),
            )
        })
        .await
    }

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
        let pool = &conn.shared.pool;
        let eager = self.eager_limit();
        let frame_len = HEADER_LEN + data.len();
        if class == Class::Message {
            if let Some(r) = self.batch(data) {
                return Poll::Ready(r.map(|()| None));
            }
        }
        let spare = {
            // Wait without copying while the queue is full (many tasks may be waiting).
            let mut st = conn.state.lock();
            if let Some(e) = st.ended() {
                return Poll::Ready(Err(e));
            }
            match st.proto.as_ref() {
                Some(p) if p.queue_full() => {
                    register(&self.inner.shared, &mut st, cx);
                    return Poll::Pending;
                }
                None => {
                    register(&self.inner.shared, &mut st, cx);
                    return Poll::Pending;
                }
                Some(_) => {}
            }
            if let Some(id) = conn.send_inline_at_once(&mut st, class, data) {
                let waits = class == Class::Message && st.waits_for_completion();
                drop(st);
                conn.after_send(waits);
                return Poll::Ready(Ok(id));
            }
            // A frame the device copies while posting: the buffer of the last one serves
            // again.
            if data.len() <= eager {
                conn.spare_frame(&mut st, frame_len)
            } else {
                None
            }
        };
        if data.len() <= eager {
            let mut frame = match spare.map_or_else(|| pool.try_alloc(frame_len), Ok) {
                Ok(b) => b,
                Err(memory::Error::Exhausted { .. }) => return self.pool_pending(cx),
                Err(e) => return Poll::Ready(Err(pool_error(e))),
            };
            frame[HEADER_LEN..].copy_from_slice(data);
            let mut st = ready!(self.open_state(cx))?;
            let p = st.proto.as_mut().expect(OPEN);
            return match p.send(class, frame) {
                Ok(id) => {
                    conn.drive(&mut st);
                    let waits = class == Class::Message && st.waits_for_completion();
                    drop(st);
                    // As a blocking sender does (see `ConnShared::after_send`).
                    conn.after_send(waits);
                    Poll::Ready(Ok(id))
                }
                Err(SendError { kind, .. }) => self.refused(&mut st, cx, kind),
            };
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
            let mut buf = match pool.try_alloc(part.len()) {
                Ok(b) => b,
                Err(memory::Error::Exhausted { .. }) => return self.pool_pending(cx),
                Err(e) => return Poll::Ready(Err(pool_error(e))),
            };
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
        let mut st = ready!(self.open_state(cx))?;
        let p = st.proto.as_mut().expect(OPEN);
        let appended = p.append(data);
        if appended == data.len() {
            return Poll::Ready(Ok(appended));
        }
        if appended > 0 {
            // The waiting message is full: it goes unless credit or the send queue stop it.
            conn.drive(&mut st);
            return Poll::Ready(Ok(appended));
        }
        if p.queue_full() {
            register(&self.inner.shared, &mut st, cx);
            return Poll::Pending;
        }
        if conn.write_inline_at_once(&mut st, data) {
            let waits = st.waits_for_completion();
            drop(st);
            conn.after_send(waits);
            return Poll::Ready(Ok(data.len()));
        }
        let p = st.proto.as_mut().expect(OPEN);
        // A message that will wait gets room for the writes that follow.
        let room = if p.would_hold() {
            self.eager_limit()
        } else {
            data.len()
        };
        let spare = conn.spare_frame(&mut st, HEADER_LEN + room);
        let mut frame =
            match spare.map_or_else(|| conn.shared.pool.try_alloc(HEADER_LEN + room), Ok) {
                Ok(b) => b,
                Err(memory::Error::Exhausted { .. }) => {
                    drop(st);
                    return self.pool_pending(cx);
                }
                Err(e) => return Poll::Ready(Err(pool_error(e))),
            };
        let len = HEADER_LEN + data.len();
        if let Err(e) = frame.set_len(len) {
            return Poll::Ready(Err(Error::Memory(e)));
        }
        frame[HEADER_LEN..len].copy_from_slice(data);
        let p = st.proto.as_mut().expect(OPEN);
        match p.send_mergeable(frame) {
            Ok(()) => {
                conn.drive(&mut st);
                let waits = st.waits_for_completion();
                drop(st);
                conn.after_send(waits);
                Poll::Ready(Ok(data.len()))
            }
            Err(SendError { kind, .. }) => self.refused(&mut st, cx, kind),
        }
    }

    /// A send the protocol refused: backpressure (`WouldBlock`) waits for this connection's
    /// progress, anything else is the error.
    fn refused<T>(
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
    fn open_state(&self, cx: &mut Context<'_>) -> Poll<Result<StateGuard<'_>>> {
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

    /// The pool is exhausted: retry when this connection makes progress or at the next tick.
    fn pool_pending<T>(&self, cx: &mut Context<'_>) -> Poll<T> {
        register(&self.inner.shared, &mut self.inner.state.lock(), cx);
        register_tick(&self.inner.shared, cx);
        Poll::Pending
    }

    /// Sends `data` as one message, of any size. Cancel safe: a message up to
    /// [`max_whole_send`](Self::max_whole_send) is queued whole or not at all; a longer one,
    /// once started, is finished on a thread if the future is dropped. Waits for credit as
    /// long as the peer is alive (bound it with your executor's timeout).
    pub async fn send_async(&self, data: &[u8]) -> Result<()> {
        self.send_class_async(Class::Message, data).await.map(drop)
    }

    async fn send_class_async(&self, class: Class, data: &[u8]) -> Result<Option<CallId>> {
        if data.len() <= self.max_whole_send() {
            return poll_fn(|cx| self.poll_send_class(cx, class, data)).await;
        }
        let total = data.len() as u64;
        let large = self
            .poll_state(|conn, st| {
                let p = st.proto.as_mut()?;
                match p.send_large(class, total) {
                    Ok(l) => {
                        conn.drive(st);
                        Some(Ok(l))
                    }
                    Err(SendErrorKind::WouldBlock) => None,
                    Err(kind) => Some(Err(send_error(kind, st))),
                }
            })
            .await?;
        let mut rest = Finish {
            conn: self,
            msg: large.msg,
            data,
            offset: 0,
        };
        let chunk = self.inner.shared.cfg.proto.rndv_chunk_size as usize;
        while rest.offset < data.len() {
            let n = chunk.min(data.len() - rest.offset);
            let mut buf = poll_fn(|cx| match self.inner.shared.pool.try_alloc(n) {
                Ok(b) => Poll::Ready(Ok(b)),
                Err(memory::Error::Exhausted { .. }) => self.pool_pending(cx),
                Err(e) => Poll::Ready(Err(pool_error(e))),
            })
            .await?;
            buf.copy_from_slice(&data[rest.offset..rest.offset + n]);
            let remote = remote_chunk(&buf)?;
            let mut buf = Some(buf);
            let offset = rest.offset as u64;
            self.poll_state(|conn, st| {
                let p = st.proto.as_mut()?;
                if !p.can_add_chunk(large.msg) {
                    return None;
                }
                let b = buf.take().expect("until added");
                Some(match p.add_chunk(large.msg, offset, remote, b) {
                    Ok(()) => {
                        conn.drive(st);
                        Ok(())
                    }
                    Err(SendError { kind, .. }) => Err(send_error(kind, st)),
                })
            })
            .await?;
            rest.offset += n;
        }
        Ok(large.call)
    }

    /// Waits until `check` gives a result (it runs with the state locked; it is not called
    /// once the connection ended, which gives the end's error).
    async fn poll_state<T>(
        &self,
        mut check: impl FnMut(&ConnShared, &mut ConnState) -> Option<Result<T>>,
    ) -> Result<T> {
        poll_fn(|cx| {
            let conn = &*self.inner;
            let mut st = conn.state.lock();
            if let Some(e) = st.ended() {
                return Poll::Ready(Err(e));
            }
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

    /// Calls the peer: sends `request` and waits up to `timeout` for its response (the
    /// protocol's call timer bounds the wait, no executor timer is needed). Dropping the future
    /// forgets the call.
    pub async fn call_async(&self, request: &[u8], timeout: Duration) -> Result<Message> {
        let deadline = Instant::now() + timeout;
        let id = self
            .send_class_async(Class::Request { deadline }, request)
            .await?
            .expect("a request has a call id");
        let mut pending = ForgetCall {
            conn: self,
            id: Some(id),
        };
        let result = poll_fn(|cx| {
            self.poll_busy(
                cx,
                |st| {
                    if let Some(r) = st.calls.remove(id.0) {
                        return Some(match r {
                            Ok(d) => Ok(Message::new(self.inner.clone(), d)),
                            Err(e) => Err(Error::Call(e)),
                        });
                    }
                    st.ended().map(Err)
                },
                // Woken by this call's end only, not by every change of a busy connection.
                |st, cx| match st.call_wakers.get(&id.0) {
                    Some(w) if w.will_wake(cx.waker()) => {}
                    _ => {
                        st.call_wakers.insert(id.0, cx.waker().clone());
                        self.inner.shared.wake_progress();
                    }
                },
            )
        })
        .await;
        self.inner.state.lock().call_wakers.remove(&id.0);
        if result.is_ok() {
            pending.id = None;
        }
        result
    }

    /// Waits, up to `deadline`, until everything sent so far has reached the peer (see
    /// [`close`](Self::close)): with `closing`, also until the connection ended gracefully
    /// (a close); without, the connection stays open (a byte stream's shutdown). Past it:
    /// [`Error::TimedOut`] with `op` and `linger`.
    pub(crate) fn poll_delivered(
        &self,
        cx: &mut Context<'_>,
        closing: bool,
        op: &'static str,
        deadline: Instant,
        linger: Duration,
    ) -> Poll<Result<()>> {
        let mut st = self.inner.state.lock();
        if let Some(r) = st.delivery(closing) {
            return Poll::Ready(r);
        }
        if Instant::now() >= deadline {
            return Poll::Ready(Err(Error::TimedOut { op, after: linger }));
        }
        // A close's CLOSE is signaled: its completion acknowledges what went before it.
        if !closing {
            self.inner.request_acknowledgement(&mut st);
        }
        register(&self.inner.shared, &mut st, cx);
        // Woken at the deadline at the latest: each tick wakes it.
        register_tick(&self.inner.shared, cx);
        Poll::Pending
    }

    /// Closes gracefully (see [`close`](Self::close)) and waits until the peer has
    /// everything and closed too, up to the endpoint's
    /// [`linger`](crate::EndpointConfig::linger) (then [`Error::TimedOut`]; the close goes
    /// on). The close is queued at the first poll; dropping the future only stops the wait.
    pub async fn close_async(&self) -> Result<()> {
        {
            let mut st = self.inner.state.lock();
            if let Some(p) = st.proto.as_mut() {
                p.close();
            }
            self.inner.drive(&mut st);
        }
        let linger = self.inner.shared.cfg.linger;
        let deadline = Instant::now() + linger;
        poll_fn(|cx| self.poll_delivered(cx, true, "close", deadline, linger)).await
    }
}

/// The rest of a rendezvous message whose future was dropped mid-way: copied and finished on
/// a thread, so the peer gets the whole message.
struct Finish<'a> {
    conn: &'a Conn,
    msg: crate::proto::MsgId,
    data: &'a [u8],
    offset: usize,
}

impl Drop for Finish<'_> {
    fn drop(&mut self) {
        if self.offset >= self.data.len() || self.conn.is_closed() {
            return;
        }
        self.conn
            .finish_in_background(self.msg, self.offset, self.data[self.offset..].to_vec());
    }
}

impl Request {
    /// Sends `response` to the caller, waiting for credit without blocking the thread (see
    /// [`respond`](Request::respond)). Dropping the future before it is done answers nothing;
    /// the request is then answered "no handler" when the `Request` is dropped.
    pub async fn respond_async(mut self, response: &[u8]) -> Result<()> {
        drop(self.message.take());
        let call = self.call;
        let conn = self.conn.clone();
        let sent = conn
            .send_class_async(Class::Response { call }, response)
            .await;
        if sent.is_ok() {
            self.call = CallId(0);
        }
        sent.map(drop)
    }
}

/// Forgets a call whose future was dropped before its response.
struct ForgetCall<'a> {
    conn: &'a Conn,
    id: Option<CallId>,
}

impl Drop for ForgetCall<'_> {
    fn drop(&mut self) {
        if let Some(id) = self.id.take() {
            let mut st = self.conn.inner.state.lock();
            if let Some(p) = st.proto.as_mut() {
                p.cancel_call(id);
            }
            st.calls.remove(id.0);
            st.call_wakers.remove(&id.0);
        }
    }
}

/// Whether the task runs on tokio's current-thread runtime, whose one thread a spinning
/// task would hold from every other task (the peer's too, when both ends live there).
#[cfg(feature = "tokio")]
fn on_a_single_threaded_runtime() -> bool {
    tokio::runtime::Handle::try_current()
        .is_ok_and(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::CurrentThread)
}

#[cfg(not(feature = "tokio"))]
fn on_a_single_threaded_runtime() -> bool {
    false
}
