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
//! - [`Conn::send_async`]: an eager message behaves like `poll_send` (all or nothing). A
//!   rendezvous message is queued chunk by chunk: a future dropped before the message was
//!   announced sent nothing; one dropped after leaves the rest to the endpoint's engine (a
//!   copy of the bytes not yet added), so the peer never sees half a message, and no thread
//!   is started for it.
//! - [`Conn::call_async`]: dropping it forgets the call (a late response is dropped).
//! - [`Conn::close_async`]: the close is queued at the first poll; dropping the future only
//!   stops waiting for the peer's close.
//! - [`Conn::read_async`], [`Conn::write_async`]: dropping the future forgets the request in
//!   progress (the device finishes it into pool memory).
//! - [`Endpoint::connect_async`](crate::Endpoint::connect_async): the connect's CM events come
//!   to the endpoint's CM thread, which wakes the task (no thread per connect); dropping the
//!   future abandons an attempt in progress (the peer is refused) or closes the connection it
//!   made.
//! - [`Listener::accept_async`](crate::Listener::accept_async),
//!   [`Listener::poll_accept`](crate::Listener::poll_accept): the CM thread accepts into the
//!   listener's backlog and a poll takes a connection from it only when it returns it; a
//!   dropped future loses none.

use std::future::poll_fn;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use crate::engine::{ConnState, Spinning, SPIN_TURNS_PER_CLOCK};
use crate::message::{Message, Request};
use crate::proto::Class;
use crate::receive::{end_as_none, PendingCall};
use crate::send_core::Alloc;
use crate::task::{register, register_recv, register_tick};

use crate::{Conn, Error, Result};

impl Conn {
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

    /// Looks for what a task waits for with `check` (under the state lock). While it finds
    /// nothing, the task may poll the completion queue itself for a while, as a spinning
    /// caller (how long, and which tasks: [`Policy::task_spin`](crate::engine::Policy)).
    /// Then `wait` registers its waker (under the same lock) and the poll is `Pending`.
    fn poll_busy<T>(
        &self,
        cx: &mut Context<'_>,
        mut check: impl FnMut(&mut ConnState) -> Option<T>,
        wait: impl FnOnce(&mut ConnState, &mut Context<'_>),
    ) -> Poll<T> {
        let conn = &*self.inner;
        let shared = &conn.shared;
        let adaptive = shared.policy.adaptive();
        let mut st = conn.state.lock();
        if let Some(found) = check(&mut st) {
            // The end of a wait that registered its waker.
            if let Some(began) = st.async_wait.take() {
                conn.wait_slept(&st, began);
            }
            return Poll::Ready(found);
        }
        let spin = Spinning::for_task(
            shared,
            conn.spin.get(),
            || shared.conn_count() == 1,
            on_a_single_threaded_runtime,
        );
        let Some((busy, spinner)) = spin else {
            wait(&mut st, cx);
            return Poll::Pending;
        };
        drop(st);
        let start = Instant::now();
        let (mut looked, mut turns) = (start, 0u32);
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
            if turns % SPIN_TURNS_PER_CLOCK == 0 && {
                looked = Instant::now();
                looked.duration_since(start) >= busy
            } {
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
                |st| self.take_request(st).map(end_as_none),
                |st, cx| register(&self.inner.shared, st, cx),
            )
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
        let mut call = PendingCall {
            conn: self,
            id,
            taken: false,
        };
        let result = poll_fn(|cx| {
            self.poll_busy(
                cx,
                |st| self.take_response(st, id),
                // Woken by this call's end only, not by every change of a busy connection.
                |st, cx| {
                    match st.wakers.calls.get_mut(id.get()) {
                        Some(w) if w.will_wake(cx.waker()) => return,
                        Some(w) => *w = cx.waker().clone(),
                        None => st.wakers.calls.push(id.get(), cx.waker().clone()),
                    }
                    self.inner.shared.policy.wake_progress();
                },
            )
        })
        .await;
        call.taken = result.is_ok();
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
    /// [`linger`](crate::EndpointConfig::with_linger) (then [`Error::TimedOut`]; the close goes
    /// on). The close is queued at the first poll; dropping the future only stops the wait.
    pub async fn close_async(&self) -> Result<()> {
        self.inner.begin_close();
        let linger = self.inner.shared.cfg.linger;
        let deadline = Instant::now() + linger;
        poll_fn(|cx| self.poll_delivered(cx, true, "close", deadline, linger)).await
    }
}

impl Request {
    /// Sends `response` to the caller, waiting for credit without blocking the thread: the
    /// same attempt as [`respond`](Request::respond) (the request's credit travels back with
    /// the response, which goes at once when nothing is ahead of it). Dropping the future
    /// before the response went answers nothing: the call is then answered "no handler",
    /// queued without waiting, and the request's credit comes back on its own.
    pub async fn respond_async(mut self, response: &[u8]) -> Result<()> {
        let Some(call) = self.call else {
            return Ok(());
        };
        let conn = self.conn.clone();
        let request = self.message.take();
        if response.len() > conn.eager_limit() {
            drop(request);
            let class = Class::Response { call };
            let sent = conn.send_class_async(class, response).await;
            if sent.is_ok() {
                self.call = None;
            }
            return sent.map(drop);
        }
        let shared = &*conn.inner;
        let request = request.and_then(Message::into_delivery);
        let first = conn.respond_first(&mut shared.state.lock(), call, response, request.as_ref());
        // The response is copied from `response`: the request's buffer may go now.
        if let Some(d) = request {
            shared.shared.res.release_delivery(d);
        }
        if let Some(mut send) = first {
            let kind = send.kind();
            poll_fn(|cx| {
                let mut st = shared.state.lock();
                let step = send.attempt(shared, &mut st, Alloc::Now);
                conn.poll_step(cx, kind, step, st)
            })
            .await
            .map_err(|e| *e)?;
        }
        self.call = None;
        Ok(())
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
