//! The sends of a [`Conn`] as non-blocking attempts over its state, each written once and
//! shared by the blocking and the async calls: a byte-stream write joining the waiting
//! message ([`joined_waiting`]), an eager message or stream write of its own
//! ([`EagerSend`]), the announcement of a rendezvous message ([`announce`]), and the one
//! rendezvous send built on it and on [`Chunks`] ([`Conn::send_large`]). An attempt either
//! finishes or says what it waits for ([`Step`]); a blocking call waits around it
//! ([`Conn::wait`]), an async one registers its waker and returns `Pending`.

use std::future::poll_fn;
use std::time::Duration;

use crate::conn::StateGuard;
use crate::engine::{pool_error, remote_chunk, send_error, Chunks, ConnShared, ConnState};
use crate::proto::{CallId, Class, LargeSend, SendError, SendErrorKind, HEADER_LEN};
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

/// Announces a rendezvous message of `total` bytes if the protocol takes it now (`None`:
/// wait for progress).
pub(crate) fn announce(
    conn: &ConnShared,
    st: &mut ConnState,
    class: Class,
    total: u64,
) -> Option<Result<LargeSend>> {
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
}

/// A rendezvous message of one chunk, the whole of `buf` (a zero-copy buffer), queued whole
/// under `st` (announced and its chunk added) or not at all: `None` waits for progress (the
/// buffer kept for the next attempt), else the call id of a request or the error.
pub(crate) fn one_chunk(
    conn: &ConnShared,
    st: &mut ConnState,
    class: Class,
    buf: &mut Option<memory::Buffer>,
) -> Option<Result<Option<CallId>>> {
    if let Some(e) = st.ended() {
        return Some(Err(e));
    }
    let p = st.proto.as_mut()?;
    if !p.can_take_whole(1) {
        return None;
    }
    let whole = buf.as_ref().expect("kept until queued");
    let remote = match remote_chunk(whole) {
        Ok(r) => r,
        Err(e) => return Some(Err(e)),
    };
    let large = match p.send_large(class, whole.len() as u64) {
        Ok(l) => l,
        Err(SendErrorKind::WouldBlock) => return None,
        Err(kind) => return Some(Err(send_error(kind, st))),
    };
    let whole = buf.take().expect("kept until queued");
    if let Err(SendError { kind, .. }) = p.add_chunk(large.msg, 0, remote, whole) {
        return Some(Err(send_error(kind, st)));
    }
    conn.drive(st);
    Some(Ok(large.call))
}

impl Conn {
    /// The one rendezvous send, of both forms (a blocking send waits on it through
    /// [`block_on_future`](crate::task::block_on_future)). The first chunk is copied into the
    /// pool before the message is announced, so a sender that stops waiting before then
    /// sent nothing; then the chunks are added one by one as the message has room.
    /// `announced` is set (to the call id of a request) once the message is announced: from
    /// then on it is delivered whole, and a sender that stops waiting (a timeout, a dropped
    /// future) leaves the rest to the engine ([`ConnShared::finish_later`]), not to a thread.
    pub(crate) async fn send_large(
        &self,
        class: Class,
        data: &[u8],
        announced: &mut Option<Option<CallId>>,
    ) -> Result<Option<CallId>> {
        let conn = &*self.inner;
        let chunk = conn.shared.cfg.proto.rndv_chunk_size as usize;
        let first = poll_fn(|cx| self.poll_pool_buffer(cx, chunk.min(data.len()))).await?;
        let total = data.len() as u64;
        let large = self
            .poll_state(|conn, st| announce(conn, st, class, total))
            .await?;
        *announced = Some(large.call);
        let mut rest = Unfinished {
            conn,
            chunks: Some(Chunks::new(large.msg, data, chunk)),
        };
        let chunks = rest.chunks.as_mut().expect("taken only when dropped");
        chunks.fill(first)?;
        loop {
            self.poll_state(|conn, st| chunks.attempt(conn, st)).await?;
            let Some(len) = chunks.buffer_needed() else {
                return Ok(large.call);
            };
            let buf = poll_fn(|cx| self.poll_pool_buffer(cx, len)).await?;
            chunks.fill(buf)?;
        }
    }

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

/// The chunks of a rendezvous message its sender adds: those it did not add when it stopped
/// waiting go to the engine, so the peer gets the whole message.
struct Unfinished<'a, 'd> {
    conn: &'a ConnShared,
    chunks: Option<Chunks<'d>>,
}

impl Drop for Unfinished<'_, '_> {
    fn drop(&mut self) {
        if let Some(chunks) = self.chunks.take() {
            self.conn.finish_later(chunks);
        }
    }
}
