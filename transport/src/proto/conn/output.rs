//! Actions going out: the next frame or READ within credits and send-queue slots; graceful end
//! and failure.

use super::*;

impl<B: Payload> Connection<B> {
    /// The next action for the driver, in order; `None` when there is nothing to do now.
    pub fn poll_action(&mut self) -> Option<Action<B>> {
        if let Some(a) = self.actions.pop_front() {
            return Some(a);
        }
        if self.state != State::Open {
            return None;
        }
        let a = self.next_output();
        self.maybe_finish();
        a
    }

    /// Whether actions are queued for the driver (that [`poll_action`](Self::poll_action)
    /// hands out before anything else).
    pub fn has_actions(&self) -> bool {
        !self.actions.is_empty()
    }

    /// Whether nothing waits to go out in the send order or as a reply: no message queued,
    /// no READ waiting, no acknowledgement, PONG or PING due. What
    /// [`next_output`](Self::next_output) would hand out besides then is a CLOSE or a
    /// credit update.
    pub(super) fn nothing_waiting(&self) -> bool {
        self.outq.is_empty()
            && self.acks.is_empty()
            && self.read_wait.is_empty()
            && !self.pong_due
            && !self.ping_due
    }

    pub(super) fn header(&mut self, kind: Kind, flags: u8, tag: u64) -> [u8; HEADER_LEN] {
        let credit_limit = self.credits.on_send();
        self.sq_free -= 1;
        self.stats.frames_sent += 1;
        if kind.is_data() {
            self.last_data_frame = self.stats.frames_sent;
        }
        self.merging.on_frame_sent();
        Header {
            kind,
            flags,
            credit_limit,
            tag,
        }
        .encode()
    }

    pub(super) fn frame(&mut self, kind: Kind, flags: u8, tag: u64, body: FrameBody) -> Action<B> {
        let header = self.header(kind, flags, tag);
        let (b, n) = encode_body(&body);
        Action::Send {
            header,
            body: Body::Control(b, n),
            signal: false,
        }
    }

    pub(super) fn next_output(&mut self) -> Option<Action<B>> {
        let sq_control = self.sq_free >= 1;
        let sq_data = self.sq_free > SQ_CONTROL_RESERVE;
        let control = sq_control && self.credits.can_send(false);
        if control {
            if let Some((msg, offset)) = self.acks.pop_front() {
                return Some(self.frame(Kind::RndvAck, 0, msg.0, FrameBody::RndvAck { offset }));
            }
            if self.pong_due {
                self.pong_due = false;
                return Some(self.frame(Kind::Pong, 0, 0, FrameBody::Empty));
            }
            if self.ping_due {
                self.ping_due = false;
                self.ping_unanswered = true;
                self.stats.pings_sent += 1;
                return Some(self.frame(Kind::Ping, 0, 0, FrameBody::Empty));
            }
        }
        if sq_data && self.reads.len() < self.max_reads {
            if let Some(r) = self.read_wait.pop_front() {
                let id = ReadId(self.next_read);
                self.next_read += 1;
                self.reads.push_back(InflightRead {
                    id,
                    msg: r.msg,
                    offset: r.offset,
                    len: r.remote.len,
                });
                self.sq_free -= 1;
                return Some(Action::Read {
                    id,
                    remote: r.remote,
                    len: r.remote.len,
                });
            }
        }
        if sq_data && self.credits.can_send(true) {
            if self.stall != Stall::None {
                self.end_stall();
            }
            if let Some(a) = self.next_message_frame() {
                return Some(a);
            }
        } else if !self.outq.is_empty() {
            self.note_stall(sq_data);
        }
        if control && self.close_queued && !self.close_sent && self.outq.is_empty() {
            self.close_sent = true;
            return Some(self.frame(Kind::Close, 0, 0, FrameBody::Empty));
        }
        if control && self.credits.update_due() {
            self.stats.credit_frames_sent += 1;
            return Some(self.frame(Kind::Credit, 0, 0, FrameBody::Empty));
        }
        None
    }

    /// The next frame of the message at the head of the send order, if it can go.
    pub(super) fn next_message_frame(&mut self) -> Option<Action<B>> {
        if self.hold_head() {
            return None;
        }
        let msg = match self.outq.front()? {
            Out::Large(msg) => *msg,
            Out::Eager { .. } | Out::Reject(_) => match self.outq.pop_front() {
                Some(Out::Eager {
                    flags,
                    tag,
                    payload,
                    mergeable,
                    held,
                    batch,
                }) => {
                    let flags = if batch { flags | FLAG_BATCH } else { flags };
                    let header = self.header(Kind::Data, flags, tag);
                    let signal = self.counts_for_merging(mergeable, flags)
                        && self.merging.on_counted_frame_sent(held);
                    return Some(Action::Send {
                        header,
                        body: Body::Payload(payload),
                        signal,
                    });
                }
                Some(Out::Reject(call)) => {
                    return Some(self.frame(
                        Kind::Data,
                        FLAG_RESPONSE | FLAG_NO_HANDLER,
                        call.get(),
                        FrameBody::Empty,
                    ));
                }
                _ => return None,
            },
        };
        let i = self.large_out_index(msg)?;
        let l = &mut self.large_out[i];
        let (flags, body) = if !l.start_sent {
            l.start_sent = true;
            (
                l.flags,
                FrameBody::RndvStart {
                    total: l.total,
                    call: l.call,
                },
            )
        } else {
            let c = l.next_unsent()?;
            c.sent = true;
            let (offset, remote) = (c.offset, c.remote);
            l.sent += u64::from(remote.len);
            (0, FrameBody::RndvChunk { offset, remote })
        };
        let kind = if matches!(body, FrameBody::RndvStart { .. }) {
            Kind::RndvStart
        } else {
            Kind::RndvChunk
        };
        if l.all_sent() {
            self.outq.pop_front();
            if l.finished() {
                self.large_out.remove(i);
            }
        }
        Some(self.frame(kind, flags, msg.0, body))
    }

    /// Ends the connection after a graceful close once nothing is left in either direction.
    /// Inlined: it runs after every frame and action, and only a connection that sent and
    /// received CLOSE has anything to check.
    #[inline]
    pub(super) fn maybe_finish(&mut self) {
        if self.close_sent && self.close_received {
            self.finish_if_done();
        }
    }

    fn finish_if_done(&mut self) {
        let done = self.state == State::Open
            && self.close_sent
            && self.close_received
            && self.inq.is_empty()
            && self.large_out.is_empty()
            && self.read_wait.is_empty()
            && self.reads.is_empty()
            && self.acks.is_empty();
        if done {
            self.finish();
        }
    }

    /// Ends the connection gracefully: pending calls fail with `Closed`, then `Closed`
    /// without an error (end of stream).
    pub(super) fn finish(&mut self) {
        self.state = State::Closed;
        while let Some(id) = self.calls.pop_any() {
            self.actions.push_back(Action::CallDone {
                id,
                result: Err(CallError::Closed),
            });
        }
        self.actions.push_back(Action::Closed { error: None });
    }

    /// Fails the connection: pending calls fail, `Closed` with the error, then every buffer
    /// the connection holds comes back as `Release` (to reuse only once the queue pair is in
    /// the error state: the peer may still be reading an announced chunk).
    pub(super) fn fail(&mut self, error: ConnError) {
        self.state = State::Failed;
        while let Some(id) = self.calls.pop_any() {
            self.actions.push_back(Action::CallDone {
                id,
                result: Err(CallError::Failed(error.clone())),
            });
        }
        self.actions
            .push_back(Action::Closed { error: Some(error) });
        for out in self.outq.drain(..) {
            if let Out::Eager { payload, .. } = out {
                self.actions.push_back(Action::Release(payload));
            }
        }
        for l in self.large_out.drain(..) {
            for c in l.chunks {
                self.actions.push_back(Action::Release(c.payload));
            }
        }
        for i in self.inq.drain(..) {
            match i {
                In::Eager { buf, .. } => self.actions.push_back(Action::Release(buf)),
                // The last reference hands the batch frame's buffer back.
                In::Part { frame, .. } => {
                    if let Some(buf) = Arc::into_inner(frame) {
                        self.actions.push_back(Action::Release(buf));
                    }
                }
                In::Large(l) => {
                    for (_, c) in l.parts {
                        self.actions.push_back(Action::Release(c.buf));
                    }
                }
                In::NoHandler(_) => {}
            }
        }
        self.read_wait.clear();
        self.reads.clear();
        self.acks.clear();
        self.chunks_out = 0;
        self.large_in = 0;
    }
}
