//! One connection's protocol state: events in (user requests, frames, completions, time),
//! actions out.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::config::{
    Config, ConnectInfo, MAX_LARGE_MESSAGES, MAX_OUTSTANDING_CHUNKS, SQ_CONTROL_RESERVE,
};
use super::credit::Credits;
use super::error::{
    CallError, ConfigError, ConnError, PeerGone, ProtocolError, SendError, SendErrorKind,
};
use super::frame::{
    compact_imm, decode_compact, decode_head, encode_body, BatchEntries, FrameBody, Header, Kind,
    RemoteChunk, COMPACT_LIMIT_BITS, FLAG_BATCH, FLAG_NO_HANDLER, FLAG_REQUEST, FLAG_RESPONSE,
    HEADER_LEN, MAX_HEAD,
};
use super::rndv::{ChunkOut, InClass, LargeIn, LargeOut};
use super::rpc::{CallId, Calls};
use super::{Action, Body, Chunk, Class, Delivery, MsgId, Parts, Payload, ReadId, Received};

/// A DATA frame [`Connection::send_at_once`] took straight to the wire: the driver posts
/// `header` followed by the message, now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameAtOnce {
    /// The encoded frame header.
    pub header: [u8; HEADER_LEN],
    /// Signal it, as [`Action::Send`]'s `signal` says.
    pub signal: bool,
    /// The call id when the message is a request.
    pub call: Option<CallId>,
}

/// The id (and call id, for a request) of a large message started by
/// [`Connection::send_large`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LargeSend {
    /// Pass it to `add_chunk`.
    pub msg: MsgId,
    /// The call id when the message is a request.
    pub call: Option<CallId>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Open,
    Closed,
    Failed,
}

/// A message waiting to be sent, in send order.
#[derive(Debug)]
enum Out<B> {
    Eager {
        flags: u8,
        tag: u64,
        payload: B,
        /// A byte-stream message: later writes may be appended to it, and it may be held
        /// back behind an unfinished frame (see [`Merging`]).
        mergeable: bool,
        /// It was held back at least once.
        held: bool,
        /// A batch of messages ([`Connection::send_batch`]): sent with `FLAG_BATCH`.
        batch: bool,
    },
    Large(MsgId),
    Reject(CallId),
}

/// A message received, waiting for delivery in order.
#[derive(Debug)]
enum In<B> {
    Eager {
        class: InClass,
        buf: B,
        len: usize,
        /// It came in a compact DATA frame: the message starts at the buffer's offset 0.
        bare: bool,
    },
    /// A message of a batch frame (see [`Parts::Part`]).
    Part {
        frame: Arc<B>,
        offset: usize,
        len: usize,
    },
    NoHandler(CallId),
    Large(LargeIn<B>),
}

#[derive(Debug, Clone, Copy)]
struct ReadReq {
    msg: MsgId,
    offset: u64,
    remote: RemoteChunk,
}

#[derive(Debug, Clone, Copy)]
struct InflightRead {
    id: ReadId,
    msg: MsgId,
    offset: u64,
    len: u32,
}

/// The protocol state of one connection (see the [module docs](super)).
#[derive(Debug)]
pub struct Connection<B: Payload> {
    state: State,
    credits: Credits,
    sq_free: u32,
    sq_depth: u32,
    send_eager_limit: usize,
    recv_frame_size: usize,
    max_send: u64,
    max_recv: u64,
    /// The longest rendezvous chunk this side reads ([`Config`]'s `max_read_chunk`).
    max_read_chunk: u32,
    max_chunks: usize,
    max_reads: usize,
    keepalive_interval: Duration,
    keepalive_timeout: Duration,
    out_cap: usize,
    outq: VecDeque<Out<B>>,
    large_out: VecDeque<LargeOut<B>>,
    next_msg: u64,
    chunks_out: usize,
    calls: Calls,
    inq: VecDeque<In<B>>,
    large_in: usize,
    read_wait: VecDeque<ReadReq>,
    reads: VecDeque<InflightRead>,
    acks: VecDeque<(MsgId, u64)>,
    next_read: u64,
    actions: VecDeque<Action<B>>,
    pong_due: bool,
    ping_due: bool,
    close_queued: bool,
    close_sent: bool,
    close_received: bool,
    /// Frames the peer's device acknowledged ([`on_send_complete`](Self::on_send_complete)).
    frames_done: u64,
    /// The count of frames sent when the last one carrying a message (DATA, RNDV_START,
    /// RNDV_CHUNK) went: everything sent has arrived once `frames_done` reaches it.
    last_data_frame: u64,
    last_recv: Instant,
    /// The last sign of life: a frame received, or one of ours acknowledged by the peer's
    /// device ([`on_peer_acknowledged`](Self::on_peer_acknowledged)).
    last_heard: Instant,
    last_ping: Option<Instant>,
    last_probe: Option<Instant>,
    /// Where the keepalive grid starts (see [`KEEPALIVE_GRID`]).
    timer_epoch: Instant,
    held: u32,
    merging: Merging,
    /// Plain messages may go as compact frames: both devices have immediate data.
    compact_frames: bool,
    stats: Stats,
    stall: Stall,
    /// A PING went and no PONG answered it yet.
    ping_unanswered: bool,
    /// What names the connection in its `tracing` events ([`set_label`](Self::set_label)).
    label: u32,
    /// The smoothed round-trip time, in nanoseconds ([`Stats::rtt`]).
    srtt_ns: u64,
}

mod merge;
mod output;
mod receive;
mod send;
mod stats;

use merge::Merging;
use stats::Stall;
pub use stats::{Ends, Stats};

/// Points of the keepalive grid per keepalive interval (see `Connection::on_grid`): an idle
/// endpoint's keepalive timers fall due at most this many times per interval, whatever its
/// number of connections, and each PING or probe goes at most an interval / this late.
const KEEPALIVE_GRID: u32 = 2;
// The host tests count signaled frames by it.
#[cfg(test)]
pub(crate) use merge::MERGE_SIGNAL_EVERY;

impl<B: Payload> Connection<B> {
    /// A connection with local limits `config` and the peer's connect data `peer` (from
    /// [`ConnectInfo::decode`]), established at `now`.
    pub fn new(config: &Config, peer: &ConnectInfo, now: Instant) -> Result<Self, ConfigError> {
        config.validate()?;
        let window = config.window as usize;
        Ok(Connection {
            state: State::Open,
            credits: Credits::new(config.window, config.reserved_credits, peer.window),
            sq_free: config.sq_depth,
            sq_depth: config.sq_depth,
            send_eager_limit: config
                .eager_limit()
                .min((peer.frame_size as usize).saturating_sub(HEADER_LEN)),
            recv_frame_size: config.frame_size as usize,
            max_send: config.max_message.min(peer.max_message),
            max_recv: config.max_message,
            max_read_chunk: config.max_read_chunk,
            max_chunks: config.max_chunks_in_flight as usize,
            max_reads: config.max_reads_in_flight as usize,
            keepalive_interval: config.keepalive_interval,
            keepalive_timeout: config.keepalive_timeout,
            out_cap: window,
            outq: VecDeque::with_capacity(window),
            large_out: VecDeque::new(),
            next_msg: 1,
            chunks_out: 0,
            calls: Calls::new(window),
            inq: VecDeque::with_capacity(window + 4),
            large_in: 0,
            read_wait: VecDeque::new(),
            reads: VecDeque::with_capacity(config.max_reads_in_flight as usize),
            acks: VecDeque::new(),
            next_read: 1,
            actions: VecDeque::with_capacity(2 * window + 8),
            pong_due: false,
            ping_due: false,
            close_queued: false,
            close_sent: false,
            close_received: false,
            frames_done: 0,
            last_data_frame: 0,
            last_recv: now,
            last_heard: now,
            last_probe: None,
            last_ping: None,
            timer_epoch: config.timer_epoch.unwrap_or(now),
            held: 0,
            merging: Merging::default(),
            compact_frames: config.immediate_data
                && peer.flags & ConnectInfo::FLAG_NO_IMMEDIATE == 0,
            stats: Stats::default(),
            stall: Stall::None,
            ping_unanswered: false,
            label: 0,
            srtt_ns: 0,
        })
    }

    /// Largest message this side may send: the smaller of both sides' `max_message`.
    pub fn max_send(&self) -> u64 {
        self.max_send
    }

    /// The largest message [`send`](Self::send) takes (longer ones go through
    /// [`send_large`](Self::send_large)).
    pub fn eager_limit(&self) -> usize {
        self.send_eager_limit
    }

    /// Credits left towards the peer.
    pub fn credits_available(&self) -> u32 {
        self.credits.available()
    }

    /// Free send-queue slots.
    pub fn sq_free(&self) -> u32 {
        self.sq_free
    }

    /// Whether the connection ended (gracefully or not).
    pub fn is_closed(&self) -> bool {
        self.state != State::Open
    }

    /// RPC calls waiting for their response.
    pub fn pending_calls(&self) -> usize {
        self.calls.len()
    }

    fn accepting(&self) -> bool {
        self.state == State::Open && !self.close_queued
    }

    /// `count` SENDs completed (their slots are free again).
    pub fn on_send_complete(&mut self, count: u32) {
        // READs in flight keep their slots until on_read_complete
        let cap = self.sq_depth - self.reads.len() as u32;
        self.sq_free = self.sq_free.saturating_add(count).min(cap);
        self.frames_done += u64::from(count);
        self.merging.on_frames_done(count);
    }

    /// The user dropped one delivered message that [`holds_credit`](Delivery::holds_credit):
    /// its receive is free, so the peer gets the credit back.
    pub fn on_release(&mut self) {
        if self.held > 0 {
            self.held -= 1;
            self.credits.release();
        }
    }

    /// When the last frame arrived (as given to [`on_receive`](Self::on_receive); the
    /// connection's start before any).
    pub fn last_frame_at(&self) -> Instant {
        self.last_recv
    }

    /// Whether [`poll_action`](Self::poll_action) may have something now that it had not at
    /// the last call that returned `None`, after [`on_release`](Self::on_release) (the only
    /// call that can make a credit update due without queueing an action): a driver may skip
    /// polling for actions after a release when this is false.
    pub fn release_needs_poll(&self) -> bool {
        !self.actions.is_empty() || self.credits.update_due()
    }

    /// The peer's device acknowledged a frame of ours (a send completed successfully): its
    /// queue pair is alive even if its frames to us are held back (behind a long READ in its
    /// send queue, say), so the keepalive timeout counts from now. Each keepalive interval
    /// without a frame from the peer asks for one such acknowledgement ([`Action::Probe`]).
    pub fn on_peer_acknowledged(&mut self, now: Instant) {
        if now > self.last_heard {
            self.last_heard = now;
        }
    }

    /// Time passed: expires calls, sends PING when the peer was silent for the keepalive
    /// interval, fails the connection when there was no sign of life from it (no frame, no
    /// acknowledged frame of ours) for the keepalive timeout.
    pub fn on_timeout(&mut self, now: Instant) {
        if self.state != State::Open {
            return;
        }
        let silent = now.saturating_duration_since(self.last_heard);
        if silent >= self.keepalive_timeout {
            self.fail(ConnError::PeerDead { silent_for: silent });
            return;
        }
        while let Some(id) = self.calls.pop_expired(now) {
            self.stats.call_timeouts += 1;
            self.actions.push_back(Action::CallDone {
                id,
                result: Err(CallError::TimedOut),
            });
        }
        if !self.ping_due && now >= self.next_ping() {
            if self.ping_unanswered {
                self.stats.keepalive_misses += 1;
                crate::trace::keepalive_miss(self.label, self.stats.keepalive_misses);
            }
            self.ping_due = true;
            self.last_ping = Some(now);
        }
        if now >= self.next_probe() {
            self.last_probe = Some(now);
            self.stats.probes_sent += 1;
            self.actions.push_back(Action::Probe);
        }
    }

    fn next_probe(&self) -> Instant {
        let base = match self.last_probe {
            Some(p) if p > self.last_recv => p,
            _ => self.last_recv,
        };
        self.on_grid(base + self.keepalive_interval)
    }

    fn next_ping(&self) -> Instant {
        let base = match self.last_ping {
            Some(p) if p > self.last_recv => p,
            _ => self.last_recv,
        };
        self.on_grid(base + self.keepalive_interval)
    }

    /// `t` put off to the next point of the keepalive grid: a [`KEEPALIVE_GRID`]th of the
    /// interval, counted from the timer epoch. The keepalive timers of an endpoint's idle
    /// connections then fall due together, and its driver wakes a few times per interval
    /// for all of them, not once for each; a PING or probe goes at most that much later.
    fn on_grid(&self, t: Instant) -> Instant {
        let grid = self.keepalive_interval / KEEPALIVE_GRID;
        let Some(grid) = u64::try_from(grid.as_nanos()).ok().filter(|&g| g > 0) else {
            return t;
        };
        let since = t.saturating_duration_since(self.timer_epoch).as_nanos();
        let Ok(since) = u64::try_from(since) else {
            return t;
        };
        self.timer_epoch + Duration::from_nanos(since.div_ceil(grid) * grid)
    }

    /// The driver saw the peer go (CM disconnect, queue pair error). That is the graceful end
    /// only if nothing is lost by it: the peer's CLOSE arrived, every message the peer sent
    /// before it was received whole (rendezvous chunks read) and delivered, and everything of
    /// ours reached the peer ([`delivered`](Self::delivered)). Otherwise the connection fails
    /// with `reason`: a peer that sent CLOSE and then went away before its announced chunks
    /// were read (its process ended, say) lost them, and its reader must not take that for
    /// the end of stream.
    pub fn on_peer_gone(&mut self, reason: PeerGone) {
        if self.state != State::Open {
            return;
        }
        if self.close_received && self.received_all() && self.delivered() {
            self.finish();
        } else {
            self.fail(ConnError::PeerGone(reason));
        }
    }

    /// Whether every message the peer announced was received whole and delivered: nothing
    /// waits for delivery in order, no chunk waits to be read or is being read.
    fn received_all(&self) -> bool {
        self.inq.is_empty() && self.read_wait.is_empty() && self.reads.is_empty()
    }

    /// Whether every message handed to the connection went out as frames (none waits for
    /// credit or a send-queue slot; rendezvous chunks may still wait to be read).
    pub fn all_sent(&self) -> bool {
        self.outq.is_empty()
    }

    /// Whether everything handed to the connection to send has reached the peer: no message
    /// waits to go, the peer acknowledged reading every rendezvous chunk (RNDV_ACK), and the
    /// peer's device acknowledged every frame that carried a message (as reported to
    /// [`on_send_complete`](Self::on_send_complete); a driver that signals few sends must
    /// have a later request complete to learn it). False once the connection failed. A
    /// graceful close (or a byte stream's shutdown) is complete when this holds: the writer
    /// may go away then without losing anything.
    pub fn delivered(&self) -> bool {
        self.state != State::Failed
            && self.outq.is_empty()
            && self.large_out.is_empty()
            && self.frames_done >= self.last_data_frame
    }

    /// Whether our CLOSE went out (was handed to the driver as a frame): a driver that
    /// completes sends selectively should have the device report this one, since the peer
    /// must receive it before the connection is torn down.
    pub fn close_sent(&self) -> bool {
        self.close_sent
    }

    /// When [`on_timeout`](Self::on_timeout) must be called next (`None`: the connection
    /// ended).
    pub fn poll_timeout(&self) -> Option<Instant> {
        if self.state != State::Open {
            return None;
        }
        let mut t = self.last_heard + self.keepalive_timeout;
        if !self.ping_due {
            t = t.min(self.next_ping());
        }
        t = t.min(self.next_probe());
        if let Some(d) = self.calls.next_deadline() {
            t = t.min(d);
        }
        Some(t)
    }
}
