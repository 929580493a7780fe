//! User requests: eager and rendezvous sends, chunks, call rejection, close.

use super::*;

impl<B: Payload> Connection<B> {
    /// Queues an eager message. `payload` starts with [`HEADER_LEN`] bytes of header room; the
    /// message is the rest (at most [`eager_limit`](Self::eager_limit) bytes). Returns the call
    /// id for a request. Refused (payload handed back) when the connection's queue holds
    /// `window` messages, or the connection is closing.
    pub fn send(&mut self, class: Class, payload: B) -> Result<Option<CallId>, SendError<B>> {
        if let Some(kind) = self.eager_refusal(payload.len()) {
            return Err(SendError { kind, payload });
        }
        let (flags, tag, id) = self.classify(class);
        self.stats.sent((payload.len() - HEADER_LEN) as u64);
        self.outq.push_back(Out::Eager {
            flags,
            tag,
            payload,
            mergeable: false,
            held: false,
            batch: false,
        });
        Ok(id)
    }

    /// Takes an eager message of `len` bytes (header room not included) straight to the wire
    /// when [`send`](Self::send) would queue it and [`poll_action`](Self::poll_action) hand it
    /// out next, as the only thing to do: nothing queued ahead of it (no action, message,
    /// control frame or READ), a credit and a send-queue slot for data. The message is then
    /// accounted as sent; the driver posts the returned header and the message bytes as one
    /// frame at once, with no payload buffer and no action in between. `None` (nothing
    /// changed): queue it with `send`, which also says why it cannot go if it cannot.
    pub fn send_at_once(&mut self, class: Class, len: usize) -> Option<FrameAtOnce> {
        if !self.can_go_at_once(len) {
            return None;
        }
        let (flags, tag, call) = self.classify(class);
        self.stats.sent(len as u64);
        Some(self.frame_at_once(flags, tag, call, false))
    }

    /// [`send_at_once`](Self::send_at_once) for a byte-stream write of `len` bytes, which
    /// [`send_mergeable`](Self::send_mergeable) would queue: it goes at once only while
    /// no signaled stream frame is unfinished (it would wait then, for later writes to join
    /// it).
    pub fn write_at_once(&mut self, len: usize) -> Option<FrameAtOnce> {
        if self.merging.holding() || !self.can_go_at_once(len) {
            return None;
        }
        self.stats.sent(len as u64);
        Some(self.frame_at_once(0, 0, None, true))
    }

    /// Whether an eager message of `len` bytes would be the next frame out and can go now.
    fn can_go_at_once(&self, len: usize) -> bool {
        self.actions.is_empty()
            && self.nothing_waiting()
            && self.sq_free > SQ_CONTROL_RESERVE
            && self.credits.can_send(true)
            && self.eager_refusal(HEADER_LEN + len).is_none()
    }

    /// Accounts a DATA frame going at once, as
    /// [`next_message_frame`](Self::next_message_frame) accounts one from the queue.
    fn frame_at_once(
        &mut self,
        flags: u8,
        tag: u64,
        call: Option<CallId>,
        mergeable: bool,
    ) -> FrameAtOnce {
        let header = self.header(Kind::Data, flags, tag);
        let signal =
            self.counts_for_merging(mergeable, flags) && self.merging.on_counted_frame_sent(false);
        FrameAtOnce {
            header,
            signal,
            call,
        }
    }

    /// Why an eager message of `len` bytes (header room included) cannot be queued now, if
    /// it cannot.
    pub(super) fn eager_refusal(&self, len: usize) -> Option<SendErrorKind> {
        if !self.accepting() {
            Some(SendErrorKind::Closed)
        } else if len < HEADER_LEN {
            Some(SendErrorKind::NoHeaderRoom {
                len,
                need: HEADER_LEN,
            })
        } else if len - HEADER_LEN > self.send_eager_limit {
            Some(SendErrorKind::TooLarge {
                len: (len - HEADER_LEN) as u64,
                limit: self.send_eager_limit as u64,
                hint: "send it with send_large (rendezvous)",
            })
        } else if self.outq.len() >= self.out_cap {
            Some(SendErrorKind::WouldBlock)
        } else {
            None
        }
    }

    pub(super) fn classify(&mut self, class: Class) -> (u8, u64, Option<CallId>) {
        match class {
            Class::Message => (0, 0, None),
            Class::Request { deadline } => {
                self.stats.calls += 1;
                let id = self.calls.start(deadline);
                (FLAG_REQUEST, id.get(), Some(id))
            }
            Class::Response { call } => {
                self.stats.responses_sent += 1;
                (FLAG_RESPONSE, call.get(), None)
            }
        }
    }

    /// Starts a rendezvous message of `total_len` bytes; then add its chunks in order with
    /// [`add_chunk`](Self::add_chunk) while [`can_add_chunk`](Self::can_add_chunk).
    pub fn send_large(&mut self, class: Class, total_len: u64) -> Result<LargeSend, SendErrorKind> {
        if !self.accepting() {
            return Err(SendErrorKind::Closed);
        }
        if total_len > self.max_send {
            return Err(SendErrorKind::TooLarge {
                len: total_len,
                limit: self.max_send,
                hint: "raise max_message on both ends or split the message",
            });
        }
        if self.outq.len() >= self.out_cap || self.large_out.len() >= MAX_LARGE_MESSAGES {
            return Err(SendErrorKind::WouldBlock);
        }
        let msg = MsgId(self.next_msg);
        self.next_msg += 1;
        let (flags, tag, call) = self.classify(class);
        self.stats.sent(total_len);
        self.stats.rendezvous_sent += 1;
        crate::trace::rendezvous(self.label, true, total_len);
        self.large_out
            .push_back(LargeOut::new(msg, total_len, flags, tag, self.max_chunks));
        self.outq.push_back(Out::Large(msg));
        Ok(LargeSend { msg, call })
    }

    /// Whether the queue of messages waiting for credit is full ([`send`](Self::send) would
    /// say `WouldBlock` if the connection is open).
    pub fn queue_full(&self) -> bool {
        self.outq.len() >= self.out_cap
    }

    /// Whether a rendezvous message of `chunks` chunks would have every chunk taken by
    /// [`add_chunk`](Self::add_chunk) right after [`send_large`](Self::send_large), so a sender
    /// can queue it whole in one step (and never leave it half announced).
    pub fn can_take_whole(&self, chunks: usize) -> bool {
        chunks <= self.max_chunks && self.chunks_out + chunks <= MAX_OUTSTANDING_CHUNKS
    }

    pub(super) fn large_out_index(&self, msg: MsgId) -> Option<usize> {
        self.large_out.iter().position(|l| l.id == msg)
    }

    /// Whether [`add_chunk`](Self::add_chunk) would take a chunk of `msg` now (the message
    /// still has bytes to add and fewer than `max_chunks_in_flight` chunks unacknowledged).
    pub fn can_add_chunk(&self, msg: MsgId) -> bool {
        let Some(i) = self.large_out_index(msg) else {
            return false;
        };
        let l = &self.large_out[i];
        self.state == State::Open
            && l.added < l.total
            && l.chunks.len() < self.max_chunks
            && self.chunks_out < MAX_OUTSTANDING_CHUNKS
    }

    /// Adds the next chunk of `msg`: `payload` holds the message bytes
    /// `offset..offset + remote.len`, registered and readable by the peer at `remote`. It is
    /// handed back with `Action::Release` once the peer acknowledged reading it.
    pub fn add_chunk(
        &mut self,
        msg: MsgId,
        offset: u64,
        remote: RemoteChunk,
        payload: B,
    ) -> Result<(), SendError<B>> {
        let kind = match self.large_out_index(msg) {
            _ if self.state != State::Open => Some(SendErrorKind::Closed),
            None => Some(SendErrorKind::UnknownMessage(msg.0)),
            Some(i) => {
                let l = &self.large_out[i];
                let end = offset.checked_add(u64::from(remote.len));
                if offset != l.added || remote.len == 0 || end.map_or(true, |e| e > l.total) {
                    Some(SendErrorKind::BadChunk {
                        offset,
                        len: remote.len,
                        expected: l.added,
                        total: l.total,
                    })
                } else if !self.can_add_chunk(msg) {
                    Some(SendErrorKind::WouldBlock)
                } else {
                    None
                }
            }
        };
        if let Some(kind) = kind {
            return Err(SendError { kind, payload });
        }
        if let Some(i) = self.large_out_index(msg) {
            let l = &mut self.large_out[i];
            l.added += u64::from(remote.len);
            l.chunks.push_back(ChunkOut {
                offset,
                remote,
                payload,
                sent: false,
            });
            self.chunks_out += 1;
        }
        Ok(())
    }

    /// Answers request `call` with "no handler" (the caller gets [`CallError::NoHandler`]).
    /// Refused only once the connection no longer sends ([`SendErrorKind::Closed`]), never
    /// for a full queue: the answer waits behind what is queued, so a driver can answer from
    /// anywhere (a request dropped unanswered) without waiting. The queue grows by at most one
    /// answer per request received, and requests are bounded by the credits granted.
    pub fn reject_call(&mut self, call: CallId) -> Result<(), SendErrorKind> {
        if !self.accepting() {
            return Err(SendErrorKind::Closed);
        }
        self.stats.responses_sent += 1;
        self.outq.push_back(Out::Reject(call));
        Ok(())
    }

    /// Graceful close: CLOSE goes out after everything already queued; the connection ends
    /// (`Action::Closed { error: None }`) once the peer's CLOSE arrived and every message in
    /// both directions is delivered and acknowledged. Sends are refused from now on. The
    /// close is complete for the closer (it may go away) when the connection ended so and
    /// [`delivered`](Self::delivered) holds.
    pub fn close(&mut self) {
        if self.state == State::Open {
            self.close_queued = true;
        }
    }

    /// Ends the connection at once, as a TCP reset does: nothing more is sent or delivered,
    /// pending calls fail, every buffer comes back, and the driver tears the connection down
    /// (the peer sees it gone, not a close). An ended connection stays as it ended.
    pub fn abort(&mut self) {
        if self.state == State::Open {
            self.fail(ConnError::Aborted);
        }
    }

    /// Forgets a pending call: no `CallDone` is emitted for it, and its response, if one
    /// comes, is dropped.
    pub fn cancel_call(&mut self, id: CallId) {
        self.calls.finish(id);
    }
}
