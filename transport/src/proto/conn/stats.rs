//! What one connection counts: messages and bytes each way, calls, rendezvous transfers,
//! stalls for credit or send-queue slots, keepalive, and a smoothed round-trip time.
//!
//! Counting is additions on paths that run anyway; the only times it reads are the ones
//! its events already carry (a frame's arrival, a call's start), except a credit stall's
//! start, which the driver stamps ([`Connection::stamp_stall`]) when it asks.

use std::ops::AddAssign;
use std::time::{Duration, Instant};

use super::super::error::{ConnError, PeerGone};
use super::{Connection, Payload};

/// Counters of one connection (and, summed, of an endpoint: `transport::EndpointStats`).
///
/// Messages count once each, whatever carried them (a frame of its own, a batch frame, a
/// rendezvous transfer); a byte-stream write that joined a waiting message adds its bytes
/// but no message (it counts in [`writes_merged`](Self::writes_merged)). Sent counts are
/// taken when the connection accepts a message for sending; a connection that fails may
/// lose the last of them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stats {
    /// Messages sent (every class: plain messages, requests, responses).
    pub messages_sent: u64,
    /// Their bytes (message bytes, without headers).
    pub bytes_sent: u64,
    /// Messages received and delivered (plain messages, requests, responses to pending calls).
    pub messages_received: u64,
    /// Their bytes.
    pub bytes_received: u64,
    /// Calls made (requests sent).
    pub calls: u64,
    /// Calls answered (a response, or "no handler", arrived while the call was pending).
    pub responses_received: u64,
    /// Calls that timed out.
    pub call_timeouts: u64,
    /// Requests received from the peer.
    pub requests_received: u64,
    /// Responses sent (rejections included).
    pub responses_sent: u64,
    /// Messages sent by rendezvous (the peer READs them).
    pub rendezvous_sent: u64,
    /// Messages received by rendezvous (this side READ them).
    pub rendezvous_received: u64,
    /// Bytes this side READ from the peer (rendezvous chunks).
    pub read_bytes: u64,
    /// Times data waiting to go found no credit: the peer's receive window was full.
    pub credit_stalls: u64,
    /// Time data waited for credit, over all stalls that ended (from when the driver
    /// noticed the stall to the frame that brought credit back).
    pub credit_stall_time: Duration,
    /// Times data waiting to go found the send queue full (every slot posted, not yet
    /// completed).
    pub send_queue_stalls: u64,
    /// PING frames sent (keepalive: the peer was silent for the keepalive interval).
    pub pings_sent: u64,
    /// Probes (a signaled frame to learn whether the peer's device still acknowledges).
    pub probes_sent: u64,
    /// Keepalive intervals that passed with a PING unanswered.
    pub keepalive_misses: u64,
    /// The smoothed round-trip time (RFC 6298's SRTT, gain 1/8) from keepalive PINGs answered
    /// (a PING goes when the peer was silent for the keepalive interval); `None` before the
    /// first sample. Calls are not timed: reading the clock at each answer would cost a call
    /// about 2% more instructions.
    pub rtt: Option<Duration>,
    /// Round-trip samples taken.
    pub rtt_samples: u64,
    /// Frames handed to the driver for sending.
    pub frames_sent: u64,
    /// Frames received.
    pub frames_received: u64,
    /// Explicit CREDIT frames sent.
    pub credit_frames_sent: u64,
    /// Responses dropped because their call was no longer pending (timed out, cancelled).
    pub late_responses: u64,
    /// Byte-stream writes appended to a message still waiting to go
    /// ([`Connection::append`]).
    pub writes_merged: u64,
    /// Messages added to a batch still waiting to go ([`Connection::append_message`]).
    pub messages_batched: u64,
}

impl Stats {
    /// A message of `len` bytes sent.
    #[inline]
    pub(super) fn sent(&mut self, len: u64) {
        self.messages_sent += 1;
        self.bytes_sent += len;
    }
}

/// Sums: every counter added; the round-trip estimate is the mean of the estimates (`rtt`
/// weighted by `rtt_samples`).
impl AddAssign for Stats {
    fn add_assign(&mut self, o: Stats) {
        let weighted = |s: &Stats| s.rtt.map(|r| (r.as_nanos(), u128::from(s.rtt_samples)));
        self.rtt = match (weighted(self), weighted(&o)) {
            (Some((a, n)), Some((b, m))) if n + m > 0 => {
                let mean = (a * n + b * m) / (n + m);
                Some(Duration::from_nanos(
                    u64::try_from(mean).unwrap_or(u64::MAX),
                ))
            }
            (Some(_), _) => self.rtt,
            (None, _) => o.rtt,
        };
        self.messages_sent += o.messages_sent;
        self.bytes_sent += o.bytes_sent;
        self.messages_received += o.messages_received;
        self.bytes_received += o.bytes_received;
        self.calls += o.calls;
        self.responses_received += o.responses_received;
        self.call_timeouts += o.call_timeouts;
        self.requests_received += o.requests_received;
        self.responses_sent += o.responses_sent;
        self.rendezvous_sent += o.rendezvous_sent;
        self.rendezvous_received += o.rendezvous_received;
        self.read_bytes += o.read_bytes;
        self.credit_stalls += o.credit_stalls;
        self.credit_stall_time += o.credit_stall_time;
        self.send_queue_stalls += o.send_queue_stalls;
        self.pings_sent += o.pings_sent;
        self.probes_sent += o.probes_sent;
        self.keepalive_misses += o.keepalive_misses;
        self.rtt_samples += o.rtt_samples;
        self.frames_sent += o.frames_sent;
        self.frames_received += o.frames_received;
        self.credit_frames_sent += o.credit_frames_sent;
        self.late_responses += o.late_responses;
        self.writes_merged += o.writes_merged;
        self.messages_batched += o.messages_batched;
    }
}

/// Where data waiting to go stands: sending, or stalled for credit (since when, once the
/// driver stamped it) or for a send-queue slot.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) enum Stall {
    #[default]
    None,
    Credit(Option<Instant>),
    SendQueue,
}

impl<B: Payload> Connection<B> {
    /// Counters.
    pub fn stats(&self) -> Stats {
        let mut s = self.stats;
        s.rtt = (s.rtt_samples > 0).then(|| Duration::from_nanos(self.srtt_ns));
        s
    }

    /// Adds the round trip from `since` to the last frame received to the smoothed estimate
    /// (in nanoseconds: shifts, no division of a `Duration`).
    fn rtt_sample(&mut self, since: Instant) {
        let sample = self.last_recv.saturating_duration_since(since).as_nanos();
        let sample = u64::try_from(sample).unwrap_or(u64::MAX);
        self.srtt_ns = match self.stats.rtt_samples {
            0 => sample,
            _ => self.srtt_ns - self.srtt_ns / 8 + sample / 8,
        };
        self.stats.rtt_samples += 1;
    }

    /// Names the connection in its `tracing` events (field `qp`): the driver's QP number.
    pub fn set_label(&mut self, label: u32) {
        self.label = label;
    }

    /// Whether data waits for credit and the stall has no start time yet: the driver reads
    /// the clock and calls [`stamp_stall`](Self::stamp_stall), after handing out actions.
    #[inline]
    pub fn stall_unstamped(&self) -> bool {
        self.stall == Stall::Credit(None)
    }

    /// Gives the credit stall in progress its start, `now`.
    pub fn stamp_stall(&mut self, now: Instant) {
        if self.stall == Stall::Credit(None) {
            self.stall = Stall::Credit(Some(now));
        }
    }

    /// Data waits to go and found no credit (`credit`) or no send-queue slot.
    pub(super) fn note_stall(&mut self, credit: bool) {
        match (self.stall, credit) {
            (Stall::Credit(_), true) | (Stall::SendQueue, false) => {}
            (_, true) => {
                self.stats.credit_stalls += 1;
                self.stall = Stall::Credit(None);
            }
            (_, false) => {
                self.end_stall();
                self.stats.send_queue_stalls += 1;
                self.stall = Stall::SendQueue;
            }
        }
    }

    /// A PONG arrived: the PING it answers gives a round-trip sample.
    pub(super) fn on_pong(&mut self) {
        if let (true, Some(ping)) = (self.ping_unanswered, self.last_ping) {
            self.ping_unanswered = false;
            self.rtt_sample(ping);
        }
    }

    /// Data goes again: a credit stall's time counts up to the last frame received (the
    /// one that brought credit back).
    pub(super) fn end_stall(&mut self) {
        if let Stall::Credit(Some(since)) = self.stall {
            let stalled = self.last_recv.saturating_duration_since(since);
            self.stats.credit_stall_time += stalled;
            crate::trace::credit_stall(self.label, stalled);
        }
        self.stall = Stall::None;
    }
}

/// How connections ended, counted (an endpoint's sums: `transport::EndpointStats`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Ends {
    /// Closed gracefully (everything delivered both ways).
    pub closed: u64,
    /// Failed: the peer broke the protocol ([`ConnError::Protocol`]).
    pub protocol_errors: u64,
    /// Failed: nothing heard from the peer within the keepalive timeout
    /// ([`ConnError::PeerDead`]).
    pub peer_dead: u64,
    /// Failed: the peer disconnected before a graceful close ([`PeerGone::Disconnected`]).
    pub disconnected: u64,
    /// Failed: the queue pair went to the error state ([`PeerGone::QueuePairError`]).
    pub queue_pair_errors: u64,
    /// Aborted by this side ([`ConnError::Aborted`]: a stream dropped with linger zero).
    pub aborted: u64,
}

impl Ends {
    /// Counts one end: `None` graceful, else the failure.
    pub fn count(&mut self, end: Option<&ConnError>) {
        let n = match end {
            None => &mut self.closed,
            Some(ConnError::Protocol(_)) => &mut self.protocol_errors,
            Some(ConnError::PeerDead { .. }) => &mut self.peer_dead,
            Some(ConnError::PeerGone(PeerGone::Disconnected)) => &mut self.disconnected,
            Some(ConnError::PeerGone(PeerGone::QueuePairError)) => &mut self.queue_pair_errors,
            Some(ConnError::Aborted) => &mut self.aborted,
        };
        *n += 1;
    }

    /// Connections that failed.
    pub fn failed(&self) -> u64 {
        self.protocol_errors
            + self.peer_dead
            + self.disconnected
            + self.queue_pair_errors
            + self.aborted
    }

    /// Connections that ended, gracefully or not.
    pub fn total(&self) -> u64 {
        self.closed + self.failed()
    }
}
