//! One connection inside the engine: its queue pair, its protocol state, and the driver that
//! carries out the protocol's actions (posting sends and READs, delivering messages, waking
//! waiters).

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use memory::Buffer;
use parking_lot::{Condvar, Mutex};
use verbs::Qp;

use super::chunks::Chunks;
use super::one_sided_ops::OneSidedOps;
use super::send_queue::{SendQueue, SqOp};
use super::user::{UserQueues, Wakers};
use super::Shared;
use crate::proto::{self, Action, ConnError, PeerGone, ReadId, RemoteChunk};

/// What carrying out one action of the protocol did, beyond the action itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Carried {
    Done,
    /// A message went into the inbox: its receivers are to be woken.
    Delivered,
    /// The protocol has more to send (a refused request's answer): drive it.
    Queued,
}

/// Frame buffers a connection keeps after posting them inline (the device copied them, so
/// they are free at once), for its next small sends: a send then takes no buffer from the
/// pool and gives none back. One serves a sender that sends and posts in turn; the second
/// a frame queued behind one being posted.
const SPARE_FRAMES: usize = 2;

/// How long a gracefully closed connection waits for its last frames (its CLOSE) to complete
/// before teardown moves its QP to error, which would flush them unsent.
pub(crate) const CLOSE_FLUSH: std::time::Duration = std::time::Duration::from_secs(1);

/// How long a connection being torn down waits for the flush completions of its queue before
/// it is forgotten although unsignaled frames that finished without a completion remain.
const FLUSH_GRACE: std::time::Duration = std::time::Duration::from_millis(50);

/// How long a connection being torn down waits for the flush completions of its queue at
/// most, whatever remains. A device flushes what its QP holds when it moves to error, but siw
/// never completes a request posted after the kernel moved the QP to error itself (its TCP
/// connection closed) and before the connection learned of it. Forgetting the connection
/// destroys its QP, which hands back what such requests hold.
const FLUSH_BOUND: std::time::Duration = std::time::Duration::from_secs(1);

/// The lock of a connection's state, held.
pub(crate) type StateGuard<'a> = parking_lot::MutexGuard<'a, ConnState>;

/// Mutable state of a connection, behind its mutex.
#[derive(Debug)]
pub(crate) struct ConnState {
    /// The protocol; `None` on the active side until the peer's accept data arrived.
    pub proto: Option<proto::Connection<Buffer>>,
    /// Frames that arrived before the protocol existed, replayed in order.
    pub early: Vec<(Buffer, usize, Option<u32>)>,
    /// The requests of the send queue that may still complete.
    pub sq: SendQueue,
    /// What was delivered and not yet taken.
    pub user: UserQueues,
    /// READs the pool had no buffer for yet.
    pub deferred_reads: VecDeque<(ReadId, RemoteChunk, u32)>,
    /// On iWARP, the buffer each READ in flight is copied into from its sink (see
    /// `Resources::read_sinks`), taken before the READ is posted.
    pub read_targets: Vec<(ReadId, Buffer)>,
    /// Set once the protocol ended: `Some(None)` graceful end of stream, else the failure.
    pub end: Option<Option<ConnError>>,
    /// When the protocol ended (set by the first tick that sees `end`).
    pub ended_at: Option<Instant>,
    /// When teardown began (QP to error, disconnect sent).
    pub teardown: Option<Instant>,
    /// One-sided operations in flight, and finished ones by number.
    pub one_sided: OneSidedOps<Buffer>,
    /// The async tasks waiting on the connection.
    pub wakers: Wakers,
    /// Small frame buffers kept for the next sends (see [`SPARE_FRAMES`]).
    pub spare_frames: Vec<Buffer>,
    /// The rests of rendezvous messages whose senders stopped waiting, finished by the
    /// engine (see [`ConnShared::finish_later`]).
    pub rests: VecDeque<Chunks<'static>>,
    /// When the async wait under way began (a task that found nothing, spun and registered
    /// its waker): when a poll finds what it waited for, the frame's arrival tunes the
    /// adaptive spin, as a blocking wait's does.
    pub async_wait: Option<Instant>,
    /// Its counters went into the endpoint's totals (it is being removed).
    pub counted: bool,
    /// A byte stream's end waits to be queued (its write half went while the queue was
    /// full): the tick queues it ([`ConnShared::queue_end_of_stream`]).
    pub end_of_stream_due: bool,
}

impl ConnState {
    pub(crate) fn new(proto: Option<proto::Connection<Buffer>>, sq_depth: u32) -> Self {
        ConnState {
            proto,
            early: Vec::new(),
            sq: SendQueue::new(sq_depth),
            user: UserQueues::default(),
            deferred_reads: VecDeque::new(),
            read_targets: Vec::new(),
            end: None,
            ended_at: None,
            teardown: None,
            one_sided: OneSidedOps::default(),
            wakers: Wakers::default(),
            spare_frames: Vec::with_capacity(SPARE_FRAMES),
            rests: VecDeque::new(),
            async_wait: None,
            counted: false,
            end_of_stream_due: false,
        }
    }

    /// A kept frame buffer holding at least `len` bytes, set to that length, if there is one
    /// (see [`ConnShared::spare_frame`]).
    pub(super) fn take_spare_frame(&mut self, len: usize) -> Option<Buffer> {
        if self.spare_frames.last()?.capacity() < len {
            return None;
        }
        let mut buf = self.spare_frames.pop()?;
        buf.set_len(len).ok()?;
        Some(buf)
    }

    /// Keeps a frame buffer the device no longer needs for the next send, if there is room.
    pub(super) fn keep_spare_frame(&mut self, buf: Buffer) {
        if self.spare_frames.len() < SPARE_FRAMES && self.end.is_none() {
            self.spare_frames.push(buf);
        }
    }

    /// Whether an ended connection may be torn down: it failed, or it closed gracefully and
    /// its frames (the CLOSE last) completed, or they had [`CLOSE_FLUSH`] to do so.
    pub(crate) fn ready_for_teardown(&mut self, now: Instant) -> bool {
        let ended = *self.ended_at.get_or_insert(now);
        let graceful = matches!(self.end, Some(None));
        !graceful || self.sq.is_empty() || now.duration_since(ended) >= CLOSE_FLUSH
    }

    /// Whether a torn-down connection may be forgotten: nothing of its send queue can still
    /// complete. Every request completed, or only unsignaled frames that finished without a
    /// completion remain (their flush completions, if any, had the grace period to come), or
    /// the queue had [`FLUSH_BOUND`] to flush.
    pub(crate) fn drained(&self, now: Instant) -> bool {
        let torn_down_for = self
            .teardown
            .map_or(std::time::Duration::ZERO, |t| now.duration_since(t));
        self.sq.is_empty()
            || (self.sq.only_unsignaled_left() && torn_down_for >= FLUSH_GRACE)
            || torn_down_for >= FLUSH_BOUND
    }

    /// Teardown began: the READs not posted are dropped, and the buffers taken to copy READs
    /// out of their sinks go back to the pool. A READ still in flight completes flushed (or
    /// never, see [`FLUSH_BOUND`]): nothing is copied out of it any more.
    pub(crate) fn torn_down(&mut self, now: Instant) {
        self.teardown = Some(now);
        self.read_targets.clear();
        self.deferred_reads.clear();
        self.rests.clear();
    }

    /// How a wait for everything sent to reach the peer ends, if it has ended: `Ok` once the
    /// protocol says everything was [delivered](proto::Connection::delivered), and for a
    /// close (`closing`) the connection ended gracefully too; an error once the connection
    /// failed, or ended and was torn down with something not delivered (the peer went away
    /// first).
    pub(crate) fn delivery(&self, closing: bool) -> Option<crate::Result<()>> {
        let delivered = self.proto.as_ref().is_some_and(|p| p.delivered());
        match &self.end {
            Some(Some(cause)) => Some(Err(crate::Error::Closed {
                cause: Some(cause.clone()),
            })),
            Some(None) if delivered => Some(Ok(())),
            None if delivered && !closing => Some(Ok(())),
            Some(None) if self.teardown.is_some() => Some(Err(crate::Error::Closed {
                cause: Some(ConnError::PeerGone(PeerGone::Disconnected)),
            })),
            _ => None,
        }
    }

    /// Whether the connection is done with: it failed, or it ended gracefully and what it
    /// sent reached the peer (or it was torn down without: nothing more will come of it).
    pub(crate) fn settled(&self) -> bool {
        match &self.end {
            None => false,
            Some(Some(_)) => true,
            Some(None) => self.teardown.is_some() || self.delivery(true).is_some(),
        }
    }

    /// The error every operation gets once the connection ended, if it has.
    pub(crate) fn ended(&self) -> Option<crate::Error> {
        self.end.as_ref().map(|cause| crate::Error::Closed {
            cause: cause.clone(),
        })
    }
}

/// A connection as the engine knows it; user handles hold an `Arc` of it.
#[derive(Debug)]
pub(crate) struct ConnShared {
    pub shared: Arc<Shared>,
    pub qp: Qp,
    pub id: cm::CmId,
    pub local_addr: Option<SocketAddr>,
    pub peer_addr: Option<SocketAddr>,
    pub state: Mutex<ConnState>,
    pub cond: Condvar,
    /// User handles (`Conn`s) alive; the last one closes the connection.
    pub handles: std::sync::atomic::AtomicUsize,
    /// The protocol's eager limit once it is set up (0 before), so a send finds it without
    /// taking the state lock.
    pub eager_limit: std::sync::atomic::AtomicUsize,
    /// How long a blocked call spins before it sleeps, under adaptive polling.
    pub spin: super::SpinBudget,
    /// Sends go on their own at once: no batches of messages, no coalescing of stream
    /// writes (`Conn::set_nodelay`).
    pub nodelay: std::sync::atomic::AtomicBool,
    /// The byte stream's linger in nanoseconds, `NO_LINGER` when none is set: read and set
    /// through [`linger`](Self::linger) and [`set_linger`](Self::set_linger).
    pub(super) linger: std::sync::atomic::AtomicU64,
    /// Its `tracing` span and events.
    pub trace: crate::trace::ConnSpan,
    /// Its place on the endpoint's queues (after `qp`: the place is free once the QP is
    /// gone).
    pub queues: super::QueueSlot,
}

impl ConnShared {
    /// A connection's record, with one user handle, its protocol set up when `proto` is
    /// given (else when the peer's connect data arrives).
    pub(crate) fn new(
        shared: Arc<Shared>,
        qp: Qp,
        id: cm::CmId,
        proto: Option<proto::Connection<Buffer>>,
        queues: super::QueueSlot,
    ) -> ConnShared {
        let polling = shared.cfg.polling;
        let trace = crate::trace::ConnSpan::new(qp.qp_num(), id.local_addr(), id.peer_addr());
        ConnShared {
            trace,
            local_addr: id.local_addr(),
            peer_addr: id.peer_addr(),
            qp,
            id,
            eager_limit: std::sync::atomic::AtomicUsize::new(
                proto.as_ref().map_or(0, |p| p.eager_limit()),
            ),
            spin: super::SpinBudget::new(match polling {
                crate::Polling::Adaptive { spin } => spin,
                _ => std::time::Duration::ZERO,
            }),
            state: Mutex::new(ConnState::new(
                proto.map(|mut p| {
                    p.set_coalescing(polling.batches_messages());
                    p
                }),
                shared.cfg.qp_send_depth(),
            )),
            cond: Condvar::new(),
            handles: std::sync::atomic::AtomicUsize::new(1),
            nodelay: std::sync::atomic::AtomicBool::new(false),
            linger: std::sync::atomic::AtomicU64::new(super::conn_close::NO_LINGER),
            shared,
            queues,
        }
    }

    /// Bytes a frame may have to be posted inline (the device copies it during the post).
    pub(crate) fn inline_room(&self) -> usize {
        self.qp.cap().max_inline_data as usize
    }

    /// A kept frame buffer for a frame of `len` bytes (header included), set to that length:
    /// only a frame posted inline may take one, since only such a frame leaves its buffer
    /// free the moment it is posted.
    pub(crate) fn spare_frame(&self, st: &mut ConnState, len: usize) -> Option<Buffer> {
        if len > self.inline_room() {
            return None;
        }
        st.take_spare_frame(len)
    }

    /// A wait that began at `began` and handed off (slept, or registered its waker) found
    /// what it waited for: stretches the adaptive spin by when the last frame arrived, not
    /// by when the waiter woke (see [`SpinBudget::slept`](super::SpinBudget::slept)).
    pub(crate) fn wait_slept(&self, st: &ConnState, began: Instant) {
        if let Some(p) = &st.proto {
            self.spin
                .slept(p.last_frame_at().saturating_duration_since(began));
        }
    }

    /// Sets up the protocol (if it is not yet) and notes its eager limit.
    pub(crate) fn set_proto(&self, st: &mut ConnState, mut proto: proto::Connection<Buffer>) {
        if st.proto.is_none() {
            proto.set_coalescing(self.batches_messages());
            proto.set_label(self.qp.qp_num());
            self.eager_limit
                .store(proto.eager_limit(), Ordering::Release);
            self.trace.established(proto.eager_limit());
            st.proto = Some(proto);
        }
    }

    /// Carries out every action the protocol has queued, then wakes whoever waits on the
    /// connection. Call with the state locked, after every call into the protocol.
    pub(crate) fn drive(&self, st: &mut ConnState) {
        if !st.deferred_reads.is_empty() {
            self.retry_deferred_reads(st);
        }
        if !st.rests.is_empty() && self.finish_rests(st) {
            self.shared.tick_soon();
        }
        let mut delivered = false;
        while let Some(action) = st.proto.as_mut().and_then(|p| p.poll_action()) {
            delivered |= self.carry_out(st, action) == Carried::Delivered;
        }
        if let Some(p) = st.proto.as_mut().filter(|p| p.stall_unstamped()) {
            p.stamp_stall(Instant::now());
        }
        if delivered {
            st.wakers.delivered();
        }
        self.wake(st);
    }

    /// Carries out one action of the protocol; says whether it delivered a message (its
    /// receivers are woken after the batch) or gave the protocol more to send.
    fn carry_out(&self, st: &mut ConnState, action: Action<Buffer>) -> Carried {
        match action {
            Action::Send {
                header,
                body,
                signal,
            } => self.post_frame(st, header, body, signal),
            Action::Read { id, remote, len } => self.post_read(st, id, remote, len),
            Action::Probe => self.post_probe(st),
            Action::Release(buf) => drop(buf),
            Action::Deliver(d) => match d.class {
                proto::Received::Message => {
                    st.user.inbox.push_back(d);
                    return Carried::Delivered;
                }
                proto::Received::Request { call } => {
                    if self.shared.cfg.serve_requests {
                        st.user.requests.push_back(d);
                    } else {
                        drop(d);
                        self.release_one(st);
                        if let Some(p) = st.proto.as_mut() {
                            let _ = p.reject_call(call);
                        }
                        return Carried::Queued;
                    }
                }
            },
            Action::CallDone { id, result } => {
                // A call finishes once: no entry of its own yet.
                st.user.calls.push(id.get(), result);
                st.wakers.call_done(id.get());
            }
            Action::Closed { error } => {
                #[cfg(feature = "tracing")]
                if let Some(error) = &error {
                    crate::debug_event!(
                        qp = self.qp.qp_num(),
                        srq_in_flight = self.queues.queues().recv_ring.posted(),
                        srq_deficit = ?self.queues.queues().srq_deficit,
                        recv_pool = ?self.shared.res.recv_pool.stats(),
                        sq_ops = st.sq.len(),
                        inbox = st.user.inbox.len(),
                        deferred_reads = st.deferred_reads.len(),
                        in_flight = ?self.qp.in_flight(),
                        proto = ?st.proto,
                        "connection ended: {error:?}"
                    );
                }
                self.trace.ended(error.as_ref());
                st.end = Some(error);
                // Torn down at the next tick, which may be far off: bring it closer, so
                // the connection's slot is free again within a tick.
                self.shared.tick_soon();
            }
        }
        Carried::Done
    }

    /// Wakes blocked threads and async tasks waiting on this connection (receivers only when
    /// it ended: a delivery wakes them in [`drive`](Self::drive)). Inlined: it runs after every
    /// batch of actions, and its body costs less than a call and return under emulation.
    #[inline(always)]
    pub(crate) fn wake(&self, st: &mut ConnState) {
        self.cond.notify_all();
        st.wakers.changed(st.end.is_some());
    }

    /// Drives the connection if a release made something due (a credit update; see
    /// [`proto::Connection::release_needs_poll`]): most releases have nothing to drive.
    pub(crate) fn drive_if_release_due(&self, st: &mut ConnState) {
        if st.proto.as_ref().is_some_and(|p| p.release_needs_poll()) {
            self.drive(st);
        }
    }

    /// Reports one received message released (its buffer dropped already).
    pub(crate) fn release_one(&self, st: &mut ConnState) {
        if let Some(p) = st.proto.as_mut() {
            p.on_release();
        }
    }

    pub(super) fn fail(&self, st: &mut ConnState, why: PeerGone) {
        if let Some(p) = st.proto.as_mut() {
            p.on_peer_gone(why);
        } else if st.end.is_none() {
            st.end = Some(Some(ConnError::PeerGone(why)));
        }
    }

    /// A send-queue completion of this connection, for request `wr_id`, with what it hands
    /// back: the buffers of the tracked requests it finishes, oldest first (inline frames are
    /// not tracked and hand back nothing). It finishes its request and every one posted before
    /// it (the send queue completes in order); only its own can have failed. A completion
    /// that finishes nothing of ours is stale (a flush of an earlier QP with this number) and
    /// ignored.
    pub(crate) fn on_send_completion(
        &self,
        st: &mut ConnState,
        wr_id: u64,
        status: Result<(), verbs::WcError>,
        finished: impl Iterator<Item = verbs::Reclaimed>,
    ) {
        let mut finished = finished.peekable();
        let mut frames = 0;
        // A SEND's or WRITE's completion says the peer's device took it, except on iWARP,
        // where it says only that it was sent.
        let acknowledged = !self.shared.cfg.write_completes_when_sent;
        while let Some((id, op)) = st.sq.finish_through(wr_id) {
            let status = if id == wr_id { status } else { Ok(()) };
            let buf = finished
                .next_if(|r| r.wr_id == id)
                .and_then(|mut r| r.take::<Buffer>().ok());
            match (op, status) {
                (SqOp::Frame, Ok(())) => {
                    drop(buf);
                    frames += 1;
                }
                (SqOp::Probe, status) => match (status, st.proto.as_mut()) {
                    (Ok(()), Some(p)) if acknowledged => p.on_peer_acknowledged(Instant::now()),
                    (Ok(()), _) => {}
                    (Err(_), _) => self.fail(st, PeerGone::QueuePairError),
                },
                (SqOp::Read(id), Ok(())) => {
                    let buf = buf.map(|sink| Self::copied_out(st, id, sink));
                    if let (Some(p), Some(buf)) = (st.proto.as_mut(), buf) {
                        // The peer's device answered the READ: a sign of life too.
                        p.on_peer_acknowledged(Instant::now());
                        p.on_read_complete(id, buf);
                    }
                }
                (SqOp::FencedWrite(op), status) => {
                    let failed = status.is_err();
                    let result = match (status, buf) {
                        (Ok(()), Some(buf)) => Ok(buf),
                        (Ok(()), None) => Err("the operation's buffer did not come back".into()),
                        (Err(e), _) => Err(e.to_string()),
                    };
                    st.one_sided.written(op, result);
                    if failed {
                        self.fail(st, PeerGone::QueuePairError);
                    }
                }
                (SqOp::OneSided(op), status) => {
                    let failed = status.is_err();
                    let result = st
                        .one_sided
                        .outcome(op, status.map(|()| buf).map_err(|e| e.to_string()));
                    st.one_sided.finish(op, result);
                    if failed {
                        // RC moves the QP to error on any failed request: the connection is
                        // gone.
                        self.fail(st, PeerGone::QueuePairError);
                    }
                }
                (_, Err(_)) => self.fail(st, PeerGone::QueuePairError),
            }
        }
        if frames > 0 {
            if let Some(p) = st.proto.as_mut() {
                p.on_send_complete(frames);
                if acknowledged {
                    p.on_peer_acknowledged(Instant::now());
                }
            }
        }
        self.drive(st);
    }

    /// The bytes of READ `id`'s sink in a buffer the program may read: on iWARP, copied into
    /// the buffer taken for it when the READ was posted; elsewhere the sink itself.
    fn copied_out(st: &mut ConnState, id: ReadId, sink: Buffer) -> Buffer {
        let Some(i) = st.read_targets.iter().position(|(r, _)| *r == id) else {
            return sink;
        };
        let (_, mut target) = st.read_targets.swap_remove(i);
        let len = sink.len().min(target.len());
        sink.read(0, &mut target[..len])
            .expect("a sink's bytes within its length");
        target
    }

    /// A frame received for this connection at `now` (`len` bytes in `buf`, with immediate
    /// data `imm` if it is a compact DATA frame). Only its head (header and control body) is
    /// copied for the protocol; a DATA frame's message stays in `buf`, which is delivered
    /// without a copy.
    pub(crate) fn on_frame(
        &self,
        st: &mut ConnState,
        buf: Buffer,
        len: usize,
        imm: Option<u32>,
        now: Instant,
    ) {
        let Some(proto) = st.proto.as_mut() else {
            st.early.push((buf, len, imm));
            return;
        };
        if let Some(imm) = imm {
            let _ = proto.on_receive_compact(imm, len, buf, now);
            return self.after_frame(st);
        }
        // A copy of fixed size is a few moves in place, not a call to `memcpy` (which an
        // emulated CPU runs slowly); the bytes past the frame are not looked at. A receive
        // buffer holds a whole frame, at least `MAX_HEAD` bytes (`frame_size` is checked): a
        // shorter one passes an empty head, which the protocol refuses as malformed.
        let (head, n) = match buf.first_chunk::<{ proto::MAX_HEAD }>() {
            Some(whole) => (*whole, len.min(proto::MAX_HEAD)),
            None => ([0; proto::MAX_HEAD], 0),
        };
        let _ = proto.on_receive_head(&head[..n], len, buf, now);
        self.after_frame(st);
    }

    /// Carries out what a frame left to do. Most frames deliver one message or finish one
    /// call and leave nothing else: that goes to its waiter at once, without a pass over what
    /// the protocol could send.
    fn after_frame(&self, st: &mut ConnState) {
        let lone = match st.proto.as_mut() {
            Some(p) if st.deferred_reads.is_empty() => p.take_lone_delivery(),
            _ => None,
        };
        if let Some(action) = lone {
            match self.carry_out(st, action) {
                Carried::Delivered => st.wakers.delivered(),
                Carried::Done => {}
                // What it queued (a refused request's answer) goes out with the drive.
                Carried::Queued => return self.drive(st),
            }
            self.wake(st);
            return;
        }
        self.drive(st);
    }

    /// Replays frames that arrived before the protocol was set up.
    pub(crate) fn replay_early(&self, st: &mut ConnState) {
        for (buf, len, imm) in std::mem::take(&mut st.early) {
            self.on_frame(st, buf, len, imm, Instant::now());
        }
    }
}

#[cfg(test)]
#[path = "conn_tests.rs"]
mod tests;
