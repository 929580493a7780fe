//! Coalescing of small sends, in the spirit of TCP's Nagle algorithm: while a frame of the
//! connection is on its way and not yet acknowledged by the peer's device, small byte-stream
//! writes wait in one message, which later writes are appended to, and plain messages wait in
//! one batch frame ([`Connection::send_batch`]), instead of each going as a frame of its own. The wait ends when that frame completes (the peer's device acknowledged it, which
//! takes no action of the peer's program: there is no delayed acknowledgement to wait for) or
//! when the waiting message is full (the eager limit).
//!
//! Only messages sent with [`Connection::send_mergeable`] or [`Connection::send_batch`] wait:
//! message boundaries mean nothing to a byte stream, so merging writes changes nothing on the
//! wire (see `PROTOCOL.md`, "Byte streams"), and a batch's messages are delivered one by one
//! ("Batches"). Nothing is held unless a frame the connection asked to be
//! signaled is unfinished, so a lone write, or a write after the previous one completed, goes
//! at once. Nor is a write that answers: one after data came from the peer since the last
//! stream frame went (request and reply, an echo). Such frames are not signaled either: only
//! a writer that outruns the device without hearing from the peer pays for completions.
//!
//! Frames complete in the order they were sent (one RC send queue), so counting them is
//! enough to know when a given frame is done.

use super::*;
use crate::proto::BATCH_ENTRY_HEADER;

/// A frame that counts towards signals (a mergeable one, or a plain message's while
/// coalescing is on) is signaled, and followed by a hold, at least this often while sends
/// come one at a time; one that was held back (the sender outruns the device) always is.
pub(crate) const MERGE_SIGNAL_EVERY: u32 = 16;

/// Frame counts that tell whether a signaled stream frame is still unfinished.
#[derive(Debug, Default)]
pub(super) struct Merging {
    /// Frames handed out for sending.
    frames_sent: u64,
    /// Frames the driver reported complete.
    frames_done: u64,
    /// Frames that count towards signals sent since the last signaled one.
    unsignaled: u32,
    /// Stream messages wait while fewer than this many frames are done.
    wait_for: u64,
    /// Data came from the peer since the last stream frame went: the next stream message
    /// answers it, and goes at once.
    answering: bool,
    /// Coalescing is off ([`Connection::set_coalescing`]): plain messages sent on their own
    /// do not count towards signals.
    off: bool,
}

impl Merging {
    pub(super) fn on_frame_sent(&mut self) {
        self.frames_sent += 1;
    }

    pub(super) fn on_frames_done(&mut self, count: u32) {
        self.frames_done += u64::from(count);
    }

    /// A message (or the start of one) came from the peer.
    pub(super) fn on_data_received(&mut self) {
        self.answering = true;
    }

    /// Whether mergeable messages wait: a signaled stream frame is unfinished, and they do
    /// not answer the peer.
    pub(super) fn holding(&self) -> bool {
        self.frames_done < self.wait_for && !self.answering
    }

    /// A frame that counts towards signals (a mergeable one, or a plain message's) was just
    /// handed out (after [`on_frame_sent`](Self::on_frame_sent));
    /// returns whether the driver must signal it. An answer is not.
    pub(super) fn on_counted_frame_sent(&mut self, was_held: bool) -> bool {
        if std::mem::take(&mut self.answering) {
            return false;
        }
        self.unsignaled += 1;
        let signal = was_held || self.unsignaled >= MERGE_SIGNAL_EVERY;
        if signal {
            self.unsignaled = 0;
            self.wait_for = self.frames_sent;
        }
        signal
    }
}

impl<B: Payload> Connection<B> {
    /// Whether plain messages sent on their own ([`send`](Self::send) with
    /// [`Class::Message`]) take part in coalescing: on (the default), one in
    /// 16 of their frames is signaled, so that messages after it can wait
    /// in a batch ([`send_batch`](Self::send_batch)) while it is unfinished. A driver that
    /// never batches (`nodelay`) turns it off, sparing those completions.
    pub fn set_coalescing(&mut self, on: bool) {
        self.merging.off = !on;
    }

    /// Whether a frame counts towards signals: a mergeable one, or a plain message's unless
    /// coalescing is off.
    pub(super) fn counts_for_merging(&self, mergeable: bool, flags: u8) -> bool {
        mergeable || (flags == 0 && !self.merging.off)
    }

    /// Queues a byte-stream message: like [`send`](Self::send) with [`Class::Message`], but
    /// the message may take later writes ([`append`](Self::append)) while it waits, and it
    /// waits while a signaled frame of the stream is unfinished (unless it is full). Sending
    /// a stream's writes this way turns many small writes into few frames when the writer
    /// outruns the device; a write that finds nothing unfinished goes at once.
    pub fn send_mergeable(&mut self, payload: B) -> Result<(), SendError<B>> {
        self.queue_mergeable(payload, false)
    }

    /// Queues a batch of plain messages (see `PROTOCOL.md`, "Batches"): `payload` is header
    /// room, then the first message as a batch entry (its length as a little-endian `u32`
    /// ([`BATCH_ENTRY_HEADER`](crate::proto::BATCH_ENTRY_HEADER)), then its bytes). Later
    /// messages join it with [`append_message`](Self::append_message) while it waits, as
    /// stream writes join a message from [`send_mergeable`](Self::send_mergeable), and it
    /// waits by the same rule. The peer receives each message on its own, in order.
    pub fn send_batch(&mut self, payload: B) -> Result<(), SendError<B>> {
        self.queue_mergeable(payload, true)
    }

    fn queue_mergeable(&mut self, payload: B, batch: bool) -> Result<(), SendError<B>> {
        if let Some(kind) = self.eager_refusal(payload.len()) {
            return Err(SendError { kind, payload });
        }
        let entry_header = if batch { BATCH_ENTRY_HEADER } else { 0 };
        let len = payload.len().saturating_sub(HEADER_LEN + entry_header);
        self.stats.sent(len as u64);
        self.outq.push_back(Out::Eager {
            flags: 0,
            tag: 0,
            payload,
            mergeable: true,
            held: false,
            batch,
        });
        Ok(())
    }

    /// Adds message `data` to the batch queued last if it has not been sent yet and has room
    /// for it (at most the eager limit in all), and the queue is not full; returns whether it
    /// did (else send it another way).
    pub fn append_message(&mut self, data: &[u8]) -> bool {
        if !self.accepting() || self.queue_full() {
            return false;
        }
        let max_len = HEADER_LEN + self.send_eager_limit;
        let Some(Out::Eager {
            batch: true,
            payload,
            ..
        }) = self.outq.back_mut()
        else {
            return false;
        };
        if !payload.append_entry(data, max_len) {
            return false;
        }
        self.stats.messages_batched += 1;
        self.stats.sent(data.len() as u64);
        true
    }

    /// Appends as much of `bytes` as fits to the last queued message if it came from
    /// [`send_mergeable`](Self::send_mergeable) and has not been sent yet (at most the eager
    /// limit in all); returns how many bytes it took (0: send a new message). Takes nothing
    /// while the queue is full ([`queue_full`](Self::queue_full)): a full queue is
    /// backpressure for every send, whatever room its last message has.
    pub fn append(&mut self, bytes: &[u8]) -> usize {
        if !self.accepting() || bytes.is_empty() || self.queue_full() {
            return 0;
        }
        let max_len = HEADER_LEN + self.send_eager_limit;
        let n = match self.outq.back_mut() {
            Some(Out::Eager {
                mergeable: true,
                batch: false,
                payload,
                ..
            }) => payload.append(bytes, max_len),
            _ => 0,
        };
        if n > 0 {
            self.stats.writes_merged += 1;
            self.stats.bytes_sent += n as u64;
        }
        n
    }

    /// Whether a stream write may join the last queued message now (see
    /// [`append`](Self::append); it may have no room left, which only `append` tells).
    pub fn has_waiting_merge(&self) -> bool {
        self.accepting()
            && !self.queue_full()
            && matches!(
                self.outq.back(),
                Some(Out::Eager {
                    mergeable: true,
                    batch: false,
                    ..
                })
            )
    }

    /// Whether a message from [`send_mergeable`](Self::send_mergeable) would wait now (behind
    /// an unfinished frame, or behind messages waiting for credit): then it is worth giving it
    /// a buffer with room for the writes that follow.
    pub fn would_hold(&self) -> bool {
        self.merging.holding() || !self.outq.is_empty()
    }

    /// Whether mergeable messages wait for a completion now (a signaled frame they do not
    /// answer is unfinished): then a driver that would poll right after sending should not,
    /// or it would likely take that completion at once and end the wait before it began.
    pub fn waits_for_completion(&self) -> bool {
        self.merging.holding()
    }

    /// Whether the message at the head of the send order must wait: a mergeable one, not
    /// full, while a signaled stream frame is unfinished. Marks it held.
    pub(super) fn hold_head(&mut self) -> bool {
        let full = HEADER_LEN + self.send_eager_limit;
        let holding = self.merging.holding();
        match self.outq.front_mut() {
            Some(Out::Eager {
                mergeable: true,
                payload,
                held,
                ..
            }) if holding && payload.len() < full => {
                *held = true;
                true
            }
            _ => false,
        }
    }
}
