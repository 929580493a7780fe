//! The sends of a [`Conn`] as non-blocking attempts over its state, each written once and
//! shared by the blocking and the async calls: a byte-stream write joining the waiting
//! message ([`joined_waiting`]), an eager message or stream write of its own
//! ([`EagerSend`]), and the polled forms of attempts (`poll_eager`, `poll_state`, ...); the
//! rendezvous sends are in [`crate::rendezvous`]. An attempt either finishes or says what it
//! waits for ([`Step`]); a blocking call waits around it ([`Conn::wait`]), an async one
//! registers its waker and returns `Pending`.

use std::future::poll_fn;
use std::task::{Context, Poll};
use std::time::Duration;

use crate::engine::{
    pool_error, register, register_tick, send_error, ConnShared, ConnState, StateGuard,
};
use crate::proto::{CallId, Class, SendError, SendErrorKind, HEADER_LEN};
use crate::{Conn, Error, Result};

/// How an attempt ended: it went (as this call, if a request), it failed, or what it waits
/// for. Two words, returned in two registers (a call id is non-zero, so `Option<CallId>` is
/// one word): the data path moves a step through every layer of a send, and a sent one needs
/// no more than this.
pub(crate) enum Step {
    /// Sent. A plain message's or a stream write's sender then polls
    /// ([`Eager::poll_due`]).
    Went(Option<CallId>),
    /// Failed (boxed: an error is large).
    Failed(Box<Error>),
    /// Waits for this connection's progress (credit, room in the queue, the connection set
    /// up).
    Progress,
    /// Waits for a pool buffer (only when the attempt may not wait for one itself).
    Pool,
}

/// How an attempt gets a pool buffer when the device cannot copy the frame itself.
#[derive(Clone, Copy)]
pub(crate) enum Alloc {
    /// Only if one is free now ([`Step::Pool`] otherwise).
    Now,
    /// Waiting up to this long, the state's lock let go meanwhile.
    Within(Duration),
}

impl Alloc {
    /// A pool buffer of `len` bytes, taken as this says. `Err(None)`: none is free now. A
    /// wait for a buffer lets go of `st` meanwhile; a take that cannot wait keeps it (the
    /// copy that follows is at most the eager limit, and letting go and taking the lock
    /// again would cost the data path more than the copy holds it).
    fn take(
        self,
        conn: &ConnShared,
        st: &mut StateGuard<'_>,
        len: usize,
    ) -> std::result::Result<memory::Buffer, Option<Error>> {
        match self {
            Alloc::Now => conn.shared.res.pool.try_alloc(len).map_err(|e| match e {
                memory::Error::Exhausted { .. } => None,
                e => Some(pool_error(e)),
            }),
            Alloc::Within(timeout) => {
                StateGuard::unlocked(st, || conn.shared.alloc(len, timeout)).map_err(Some)
            }
        }
    }
}

/// `data` copied after the header room of `frame`, which is cut to that length. In place:
/// the frame is not moved through a result on the data path.
#[inline]
fn fill(frame: &mut memory::Buffer, data: &[u8]) -> Result<()> {
    let len = HEADER_LEN + data.len();
    frame.set_len(len).map_err(Error::Memory)?;
    frame[HEADER_LEN..].copy_from_slice(data);
    Ok(())
}

/// What an eager send is: a message of a class, or byte-stream data in a frame that later
/// writes may join (one that joined the waiting message, [`joined_waiting`], needs no send).
#[derive(Clone, Copy)]
pub(crate) enum Eager {
    Message(Class),
    StreamWrite,
}

impl Eager {
    /// The sender's poll due after a send of this kind went ([`ConnShared::after_send`], to
    /// run with the state's lock let go; `st` still locked): after a plain message or stream
    /// write (not after requests and responses: their senders poll next anyway, waiting for
    /// the response or the next request), whether the next sends wait for the frame just
    /// sent.
    #[inline(always)]
    pub(crate) fn poll_due(self, st: &ConnState) -> Option<bool> {
        matches!(self, Eager::Message(Class::Message) | Eager::StreamWrite)
            .then(|| st.waits_for_completion())
    }
}

/// One eager send, tried as often as it takes. In order: into a batch (plain messages, when
/// the connection batches them), posted inline at once with no copy, then copied into a frame
/// (the spare one of the last inline post, else a pool buffer, waited for with the lock let
/// go) and queued. A frame that found no room is kept for the next attempt. A stream write
/// first tries to join the stream's message waiting to go ([`joined_waiting`]), before a send
/// is built: most small writes do, and then build none.
pub(crate) struct EagerSend<'d> {
    kind: Eager,
    data: &'d [u8],
    frame: Option<memory::Buffer>,
    /// A response that carries a released credit back: if it cannot go at once, the credit
    /// goes on its own when due.
    pub release_due: bool,
}

impl<'d> EagerSend<'d> {
    /// A send of `data`, at most the eager limit long.
    pub(crate) fn new(kind: Eager, data: &'d [u8]) -> Self {
        EagerSend {
            kind,
            data,
            frame: None,
            release_due: false,
        }
    }

    /// What the send is.
    pub(crate) fn kind(&self) -> Eager {
        self.kind
    }

    /// A send of `frame`, filled already after its header room: queued as it is.
    pub(crate) fn with_frame(kind: Eager, frame: memory::Buffer) -> Self {
        EagerSend {
            kind,
            data: &[],
            frame: Some(frame),
            release_due: false,
        }
    }

    /// One attempt under `st`, the connection's state locked; after [`Step::Went`], take
    /// [`Eager::poll_due`] under the lock and run it once the lock is let go.
    /// Inlined, as far as the steps that copy nothing: most sends of a request-and-reply
    /// exchange end at the post at once, and then cost no call of their own and no step
    /// returned through memory. The copy into a frame and its queueing are a call
    /// ([`copied`](Self::copied)).
    #[inline(always)]
    pub(crate) fn attempt(
        &mut self,
        conn: &ConnShared,
        st: &mut StateGuard<'_>,
        alloc: Alloc,
    ) -> Step {
        if self.frame.is_none() {
            if let Some(step) = self.without_copy(conn, st) {
                return step;
            }
        }
        self.copied(conn, st, alloc)
    }

    /// The steps of an attempt that copy nothing: into a batch (plain messages, when the
    /// connection batches them), or posted inline at once. `None`: neither took the send.
    #[inline(always)]
    fn without_copy(&self, conn: &ConnShared, st: &mut ConnState) -> Option<Step> {
        let data = self.data;
        if matches!(self.kind, Eager::Message(Class::Message)) && conn.batches_messages() {
            if let Some(r) = conn.try_batch(st, data) {
                return Some(match r {
                    Ok(()) => Step::Went(None),
                    Err(e) => failed(e),
                });
            }
        }
        if let Some(e) = st.ended() {
            return Some(failed(e));
        }
        // As most sends of a request-and-reply exchange go: at once, when nothing is ahead
        // of it (so the queue is not full either; with no protocol yet, nothing goes).
        let at_once = match self.kind {
            Eager::Message(class) => conn.send_inline_at_once(st, class, data),
            Eager::StreamWrite => conn.write_inline_at_once(st, data).then_some(None),
        };
        at_once.map(Step::Went)
    }

    /// The steps of an attempt that queue a frame: the one copied by an earlier attempt, or
    /// `data` copied into one now.
    fn copied(&mut self, conn: &ConnShared, st: &mut StateGuard<'_>, alloc: Alloc) -> Step {
        match self.frame.take() {
            Some(frame) => self.queue(conn, st, frame),
            None => self.copy(conn, st, alloc),
        }
    }

    /// Queues `frame`, filled: the last step of an attempt. Inlined into both of its
    /// callers: a call of its own costs every copied frame a call frame and a move of the
    /// frame.
    #[inline(always)]
    fn queue(&mut self, conn: &ConnShared, st: &mut ConnState, frame: memory::Buffer) -> Step {
        // Copied by an earlier attempt, or after a wait for a buffer that let go of the lock:
        // the connection may have ended since.
        if let Some(e) = st.ended() {
            return failed(e);
        }
        let Some(p) = st.proto.as_mut() else {
            self.frame = Some(frame);
            return Step::Progress;
        };
        let sent = match self.kind {
            Eager::Message(class) => p.send(class, frame),
            Eager::StreamWrite => p.send_mergeable(frame).map(|()| None),
        };
        match sent {
            Ok(call) => {
                conn.drive(st);
                Step::Went(call)
            }
            Err(SendError {
                kind: SendErrorKind::WouldBlock,
                payload,
            }) => {
                self.frame = Some(payload);
                Step::Progress
            }
            Err(SendError { kind, .. }) => failed(send_error(kind, st)),
        }
    }

    /// `data` copied into a frame (the spare one of the last inline post, else a pool
    /// buffer) and queued, once neither a batch nor the post at once took it.
    fn copy(&mut self, conn: &ConnShared, st: &mut StateGuard<'_>, alloc: Alloc) -> Step {
        let data = self.data;
        let Some(p) = st.proto.as_mut() else {
            return Step::Progress;
        };
        // Waits without copying while the queue is full (many tasks may be waiting).
        if p.queue_full() {
            return Step::Progress;
        }
        if self.release_due {
            conn.drive_if_release_due(st);
        }
        // A stream's message that will wait gets room for the writes that follow.
        let room = match self.kind {
            Eager::StreamWrite if st.proto.as_ref().is_some_and(|p| p.would_hold()) => {
                conn.eager_limit.load(std::sync::atomic::Ordering::Acquire)
            }
            _ => data.len(),
        };
        let mut frame = match conn.spare_frame(st, HEADER_LEN + room) {
            Some(spare) => spare,
            None => match alloc.take(conn, st, HEADER_LEN + room) {
                Ok(frame) => frame,
                Err(None) => return Step::Pool,
                Err(Some(e)) => return failed(e),
            },
        };
        if let Err(e) = fill(&mut frame, data) {
            return failed(e);
        }
        self.queue(conn, st, frame)
    }
}

/// A failed step (its error boxed: an error is large).
fn failed(e: Error) -> Step {
    Step::Failed(Box::new(e))
}

/// Stream write `data` appended to the stream's message waiting to go, under `st`: how many
/// bytes were (all of it or a first part), if any. No frame went for it, so no sender's poll
/// is due. Inlined into each stream write.
#[inline(always)]
pub(crate) fn joined_waiting(conn: &ConnShared, st: &mut ConnState, data: &[u8]) -> Option<usize> {
    if st.end.is_some() {
        return None;
    }
    let p = st.proto.as_mut()?;
    let appended = p.append(data);
    if appended == 0 {
        return None;
    }
    if appended < data.len() {
        // The waiting message is full: it goes unless credit or the queue stop it.
        conn.drive(st);
    }
    Some(appended)
}

impl Conn {
    /// Sends `send`, the first attempt under `st`, waiting up to `timeout` for room and for
    /// a buffer (`None`: only if it can go now, else [`Error::WouldBlock`]); the call id of a
    /// request. Inlined into each blocking send (the cost bench counts a call frame and a
    /// copy of the result per message otherwise). Build `send` once `st` is locked, just
    /// before this call: its first attempt then reads its kind and bytes as the caller wrote
    /// them, not from memory that the lock or writes to the state might have changed.
    #[inline(always)]
    pub(crate) fn send_eager(
        &self,
        mut send: EagerSend<'_>,
        timeout: Option<Duration>,
        mut st: StateGuard<'_>,
    ) -> Result<Option<CallId>> {
        let conn = &*self.inner;
        let kind = send.kind;
        let alloc = timeout.map_or(Alloc::Now, Alloc::Within);
        let went = match send.attempt(conn, &mut st, alloc) {
            Step::Went(call) => {
                let poll = kind.poll_due(&st);
                drop(st);
                (call, poll)
            }
            Step::Failed(e) => return Err(*e),
            Step::Progress | Step::Pool => {
                drop(st);
                let Some(t) = timeout else {
                    return Err(Error::WouldBlock);
                };
                self.wait("send", t, |conn, st| match send.attempt(conn, st, alloc) {
                    Step::Went(call) => Some(Ok((call, kind.poll_due(st)))),
                    Step::Failed(e) => Some(Err(*e)),
                    Step::Progress | Step::Pool => None,
                })?
            }
        };
        if let (_, Some(waits)) = went {
            conn.after_send(waits);
        }
        Ok(went.0)
    }
}

/// The attempts polled: what an async send (and the byte stream's write) does with a step,
/// and the waits it registers for.
impl Conn {
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
    pub(crate) fn poll_eager(
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

    /// `Ready` when a send would not wait for credit: the peer gave some, the stream has a
    /// message waiting to go that a write may join, or the connection ended (the send then
    /// says how). Otherwise the task is registered for the connection's progress.
    pub(crate) fn poll_write_ready(&self, cx: &mut Context<'_>) -> Poll<()> {
        let conn = &*self.inner;
        let mut st = conn.state.lock();
        let ready = st.end.is_some()
            || st
                .proto
                .as_ref()
                .is_some_and(|p| p.credits_available() > 0 || p.has_waiting_merge());
        if ready {
            return Poll::Ready(());
        }
        register(&conn.shared, &mut st, cx);
        Poll::Pending
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

    /// The pool is exhausted: retry when this connection makes progress or at the next tick
    /// (the unsignaled frames of every connection asked back meanwhile).
    pub(crate) fn pool_pending<T>(&self, cx: &mut Context<'_>) -> Poll<T> {
        self.inner.shared.release_unsignaled();
        register(&self.inner.shared, &mut self.inner.state.lock(), cx);
        register_tick(&self.inner.shared, cx);
        Poll::Pending
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
