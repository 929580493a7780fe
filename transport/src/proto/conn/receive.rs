//! Frames and READ completions coming in; delivery in send order.

use super::*;

impl<B: Payload> Connection<B> {
    /// A frame arrived: `frame` is the bytes received (header and body) and `buf` the receive
    /// buffer holding them. A DATA frame's buffer is delivered as the message; any other is
    /// dropped at once. A malformed frame fails the connection (`Action::Closed`) and is
    /// returned as the error.
    pub fn on_receive(&mut self, frame: &[u8], buf: B, now: Instant) -> Result<(), ProtocolError> {
        let head = &frame[..frame.len().min(MAX_HEAD)];
        self.on_receive_head(head, frame.len(), buf, now)
    }

    /// [`on_receive`](Self::on_receive) for a driver that cannot lend the frame while moving
    /// its buffer: `head` is a copy of the frame's first `min(len, MAX_HEAD)` bytes and `len`
    /// the frame's length (the completion's byte count).
    pub fn on_receive_head(
        &mut self,
        head: &[u8],
        len: usize,
        buf: B,
        now: Instant,
    ) -> Result<(), ProtocolError> {
        if !self.heard(now) {
            return Ok(());
        }
        let r = self.receive(head, len, buf);
        self.after_frame(r)
    }

    /// A compact DATA frame arrived (PROTOCOL.md, "Compact DATA frames"): a SEND with
    /// immediate data `imm` whose `len` bytes in `buf`, from offset 0, are a plain message.
    /// It is delivered as [`Parts::Bare`]. A malformed one fails the connection
    /// (`Action::Closed`) and is returned as the error, as [`on_receive`](Self::on_receive)
    /// does.
    pub fn on_receive_compact(
        &mut self,
        imm: u32,
        len: usize,
        buf: B,
        now: Instant,
    ) -> Result<(), ProtocolError> {
        if !self.heard(now) {
            return Ok(());
        }
        let r = self.receive_compact(imm, len, buf);
        self.after_frame(r)
    }

    /// Notes a frame heard at `now`; false if the connection no longer takes frames.
    fn heard(&mut self, now: Instant) -> bool {
        if self.state != State::Open {
            return false;
        }
        self.last_recv = now;
        self.last_heard = self.last_heard.max(now);
        self.stats.frames_received += 1;
        true
    }

    /// What follows a frame: deliveries, or the failure it caused.
    fn after_frame(&mut self, r: Result<(), ProtocolError>) -> Result<(), ProtocolError> {
        match r {
            Ok(()) => {
                self.deliver_ready();
                self.maybe_finish();
                Ok(())
            }
            Err(e) => {
                self.fail(ConnError::Protocol(e.clone()));
                Err(e)
            }
        }
    }

    /// The immediate data to post a DATA frame with `header` as a compact frame (the
    /// message without the header, as a SEND with immediate data; PROTOCOL.md), if it may
    /// go so: a plain message's frame (no flags, no tag), on a connection whose window fits
    /// the immediate's credit field and whose devices both have immediate data (not iWARP's:
    /// the handshake's NO_IMMEDIATE flag). Posting it so saves the header's 16 bytes on the wire:
    /// a message of a multiple of the path MTU then takes no extra packet.
    pub fn compact_imm(&self, header: &[u8; HEADER_LEN]) -> Option<u32> {
        if !self.compact_frames || !self.credits.limit_fits(COMPACT_LIMIT_BITS) {
            return None;
        }
        compact_imm(header)
    }

    fn receive_compact(&mut self, imm: u32, len: usize, buf: B) -> Result<(), ProtocolError> {
        if !self.compact_frames {
            return Err(ProtocolError::CompactWithoutImmediate);
        }
        let low = decode_compact(imm)?;
        let credit_limit = self
            .credits
            .peer_limit_from_low(low, COMPACT_LIMIT_BITS)
            .ok_or(ProtocolError::CompactNotAllowed {
                window: self.credits.peer_window(),
            })?;
        // The header it stands for: a plain message's, checked and handled as one.
        let h = Header {
            kind: Kind::Data,
            flags: 0,
            credit_limit,
            tag: 0,
        };
        self.receive_decoded(h, FrameBody::Data { len }, HEADER_LEN + len, buf, true)
    }

    /// An eager message of `len` bytes in `buf` (after a header, unless `bare`): delivered
    /// now when nothing is before it, else queued in order.
    fn eager(&mut self, class: InClass, buf: B, len: usize, bare: bool) {
        if self.inq.is_empty() {
            // Nothing before it: delivered now, without a trip through the queue.
            self.complete(class, len as u64, eager_parts(buf, bare));
        } else {
            self.inq.push_back(In::Eager {
                class,
                buf,
                len,
                bare,
            });
        }
    }

    /// What a frame just received left for the driver, taken when it is all there is: the
    /// only queued action, a message delivered or a call finished, with nothing due to go out
    /// (no message waiting for credit, no control frame, READ, close or credit update due).
    /// The driver carries it out without asking [`poll_action`](Self::poll_action) for
    /// more. `None`: nothing taken; drive as usual.
    pub fn take_lone_delivery(&mut self) -> Option<Action<B>> {
        let quiet = self.actions.len() == 1
            && self.state == State::Open
            && self.nothing_waiting()
            && !self.close_queued
            && !self.credits.update_due();
        if !quiet
            || !matches!(
                self.actions.front(),
                Some(Action::Deliver(_) | Action::CallDone { .. })
            )
        {
            return None;
        }
        self.actions.pop_front()
    }

    pub(super) fn release_now(&mut self, buf: B) {
        drop(buf);
        self.credits.release();
    }

    pub(super) fn receive(
        &mut self,
        head: &[u8],
        frame_len: usize,
        buf: B,
    ) -> Result<(), ProtocolError> {
        let (h, body) = decode_head(head, frame_len)?;
        self.receive_decoded(h, body, frame_len, buf, false)
    }

    /// A frame of `frame_len` bytes decoded into `h` and `body` (header included, as if it
    /// had one when `bare`: a compact frame, whose message starts at `buf`'s offset 0).
    fn receive_decoded(
        &mut self,
        h: Header,
        body: FrameBody,
        frame_len: usize,
        buf: B,
        bare: bool,
    ) -> Result<(), ProtocolError> {
        self.credits.on_receive()?;
        self.credits.on_peer_limit(h.credit_limit)?;
        if self.close_received && h.kind.is_data() {
            return Err(ProtocolError::AfterClose(h.kind as u8));
        }
        match body {
            FrameBody::Data { len } => {
                self.merging.on_data_received();
                if frame_len > self.recv_frame_size {
                    return Err(ProtocolError::FrameTooLarge {
                        len: frame_len,
                        limit: self.recv_frame_size,
                    });
                }
                if h.flags & FLAG_NO_HANDLER != 0 {
                    self.release_now(buf);
                    self.inq.push_back(In::NoHandler(call_id(h.kind, h.tag)?));
                } else if h.flags & FLAG_BATCH != 0 {
                    self.receive_batch(buf, frame_len)?;
                } else {
                    let class = in_class(h.kind, h.flags, h.tag)?;
                    self.eager(class, buf, len, bare);
                }
            }
            FrameBody::RndvStart { total, call } => {
                self.merging.on_data_received();
                self.release_now(buf);
                if total > self.max_recv {
                    return Err(ProtocolError::MessageTooLarge {
                        len: total,
                        max: self.max_recv,
                    });
                }
                if self.large_in >= MAX_LARGE_MESSAGES {
                    return Err(ProtocolError::TooMany {
                        what: "rendezvous messages in progress",
                        limit: MAX_LARGE_MESSAGES,
                    });
                }
                if self.large_in_mut(MsgId(h.tag)).is_some() {
                    return Err(ProtocolError::DuplicateMessage(h.tag));
                }
                self.large_in += 1;
                self.stats.rendezvous_received += 1;
                crate::trace::rendezvous(self.label, false, total);
                self.inq.push_back(In::Large(LargeIn::new(
                    MsgId(h.tag),
                    total,
                    in_class(h.kind, h.flags, call)?,
                )));
            }
            FrameBody::RndvChunk { offset, remote } => {
                self.release_now(buf);
                let outstanding = self.read_wait.len() + self.reads.len() + self.acks.len();
                let msg = MsgId(h.tag);
                if remote.len > self.max_read_chunk {
                    return Err(ProtocolError::ChunkTooLarge {
                        msg: h.tag,
                        len: remote.len,
                        max: self.max_read_chunk,
                    });
                }
                let Some(l) = self.large_in_mut(msg).filter(|l| l.next_offset < l.total) else {
                    return Err(ProtocolError::UnknownMessage(h.tag));
                };
                let end = offset.checked_add(u64::from(remote.len));
                if offset != l.next_offset || remote.len == 0 || end.map_or(true, |e| e > l.total) {
                    return Err(ProtocolError::BadChunk {
                        msg: h.tag,
                        offset,
                        len: remote.len,
                        total: l.total,
                        expected: l.next_offset,
                    });
                }
                if outstanding >= MAX_OUTSTANDING_CHUNKS {
                    return Err(ProtocolError::TooMany {
                        what: "rendezvous chunks unacknowledged",
                        limit: MAX_OUTSTANDING_CHUNKS,
                    });
                }
                l.next_offset += u64::from(remote.len);
                self.read_wait.push_back(ReadReq {
                    msg,
                    offset,
                    remote,
                });
            }
            FrameBody::RndvAck { offset } => {
                self.release_now(buf);
                let unknown = ProtocolError::UnknownAck { msg: h.tag, offset };
                let i = self.large_out_index(MsgId(h.tag)).ok_or(unknown.clone())?;
                let payload = self.large_out[i].ack(offset).ok_or(unknown)?;
                self.chunks_out -= 1;
                self.actions.push_back(Action::Release(payload));
                if self.large_out[i].finished() {
                    self.large_out.remove(i);
                }
            }
            FrameBody::Empty => {
                self.release_now(buf);
                match h.kind {
                    Kind::Close => {
                        self.close_received = true;
                        self.close_queued = true;
                    }
                    Kind::Ping => self.pong_due = true,
                    Kind::Pong => self.on_pong(),
                    // Its header's credit (and the sign of life) was taken above.
                    Kind::Credit => {}
                    // The decoder gives these kinds a body of their own: never without one.
                    Kind::Data | Kind::RndvStart | Kind::RndvChunk | Kind::RndvAck => {
                        return Err(ProtocolError::BadLength {
                            what: "frame without its body",
                            len: HEADER_LEN,
                            expected: "a body for its kind",
                        });
                    }
                }
            }
        }
        Ok(())
    }

    pub(super) fn large_in_mut(&mut self, msg: MsgId) -> Option<&mut LargeIn<B>> {
        self.inq.iter_mut().find_map(|e| match e {
            In::Large(l) if l.id == msg => Some(l),
            _ => None,
        })
    }

    /// Delivers complete messages from the head of the receive order. Inlined: it runs after
    /// every frame, and a message that had nothing before it was delivered already.
    #[inline]
    pub(super) fn deliver_ready(&mut self) {
        if !self.inq.is_empty() {
            self.deliver_queued();
        }
    }

    fn deliver_queued(&mut self) {
        loop {
            let ready = match self.inq.front() {
                None => return,
                Some(In::Large(l)) => l.complete(),
                Some(_) => true,
            };
            if !ready {
                return;
            }
            match self.inq.pop_front() {
                Some(In::Eager {
                    class,
                    buf,
                    len,
                    bare,
                }) => self.complete(class, len as u64, eager_parts(buf, bare)),
                Some(In::Part { frame, offset, len }) => self.complete(
                    InClass::Deliver(Received::Message),
                    len as u64,
                    Parts::Part { frame, offset },
                ),
                Some(In::NoHandler(id)) => {
                    if self.calls.finish(id) {
                        self.stats.responses_received += 1;
                        self.actions.push_back(Action::CallDone {
                            id,
                            result: Err(CallError::NoHandler),
                        });
                    } else {
                        self.stats.late_responses += 1;
                    }
                }
                Some(In::Large(l)) => {
                    self.large_in -= 1;
                    let parts = l.parts.into_iter().map(|p| p.1).collect();
                    self.complete(l.class, l.total, Parts::Chunks(parts));
                }
                None => return,
            }
        }
    }

    /// A batch frame of `frame_len` bytes in `buf`: its messages, in order, share the buffer,
    /// which holds one receive credit until the last of them is released.
    fn receive_batch(&mut self, buf: B, frame_len: usize) -> Result<(), ProtocolError> {
        let frame = Arc::new(buf);
        let entries = batch_of(&*frame, frame_len)?;
        // One credit for the frame, returned by whichever of its messages goes last.
        self.held += 1;
        for (offset, len) in entries {
            let offset = HEADER_LEN + offset;
            if self.inq.is_empty() {
                let parts = Parts::Part {
                    frame: frame.clone(),
                    offset,
                };
                self.complete(InClass::Deliver(Received::Message), len as u64, parts);
            } else {
                self.inq.push_back(In::Part {
                    frame: frame.clone(),
                    offset,
                    len,
                });
            }
        }
        Ok(())
    }

    pub(super) fn complete(&mut self, class: InClass, len: u64, parts: Parts<B>) {
        let eager = matches!(parts, Parts::Eager(_) | Parts::Bare(_));
        match class {
            InClass::Deliver(class) => {
                self.held += u32::from(eager);
                self.stats.messages_received += 1;
                self.stats.bytes_received += len;
                if let Received::Request { .. } = class {
                    self.stats.requests_received += 1;
                }
                self.actions
                    .push_back(Action::Deliver(Delivery { class, len, parts }));
            }
            InClass::Response(id) => {
                if self.calls.finish(id) {
                    self.stats.responses_received += 1;
                    self.stats.messages_received += 1;
                    self.stats.bytes_received += len;
                    self.held += u32::from(eager);
                    let d = Delivery {
                        class: Received::Message,
                        len,
                        parts,
                    };
                    self.actions
                        .push_back(Action::CallDone { id, result: Ok(d) });
                } else {
                    self.stats.late_responses += 1;
                    drop(parts);
                    if eager {
                        self.credits.release();
                    }
                }
            }
        }
    }

    /// The READ `read` completed into `dest`, which now holds the chunk's bytes from offset 0.
    pub fn on_read_complete(&mut self, read: ReadId, dest: B) {
        if self.state != State::Open {
            return;
        }
        let Some(i) = self.reads.iter().position(|r| r.id == read) else {
            return;
        };
        let Some(r) = self.reads.remove(i) else {
            return;
        };
        self.sq_free = (self.sq_free + 1).min(self.sq_depth);
        self.stats.read_bytes += u64::from(r.len);
        if let Some(l) = self.large_in_mut(r.msg) {
            l.insert(
                r.offset,
                Chunk {
                    buf: dest,
                    len: r.len,
                },
            );
        }
        self.acks.push_back((r.msg, r.offset));
        self.deliver_ready();
        self.maybe_finish();
    }
}

/// The messages of the batch frame of `frame_len` bytes in `buf`, checked.
fn batch_of<B: Payload>(buf: &B, frame_len: usize) -> Result<BatchEntries<'_>, ProtocolError> {
    match buf.bytes().get(HEADER_LEN..frame_len) {
        Some(body) => BatchEntries::parse(body),
        None => Err(ProtocolError::BadLength {
            what: "batch frame buffer",
            len: buf.len(),
            expected: "the frame's length",
        }),
    }
}

/// The parts of an eager message: after the header in its buffer, or from offset 0 if it came
/// in a compact frame.
fn eager_parts<B>(buf: B, bare: bool) -> Parts<B> {
    if bare {
        Parts::Bare(buf)
    } else {
        Parts::Eager(buf)
    }
}

/// What a message of frame `kind` with `flags` and call id `tag` is.
fn in_class(kind: Kind, flags: u8, tag: u64) -> Result<InClass, ProtocolError> {
    Ok(if flags & FLAG_RESPONSE != 0 {
        InClass::Response(call_id(kind, tag)?)
    } else if flags & FLAG_REQUEST != 0 {
        InClass::Deliver(Received::Request {
            call: call_id(kind, tag)?,
        })
    } else {
        InClass::Deliver(Received::Message)
    })
}

/// The call id a request or response of frame `kind` carries: never 0, which is no call's.
fn call_id(kind: Kind, tag: u64) -> Result<CallId, ProtocolError> {
    CallId::new(tag).ok_or(ProtocolError::ZeroCallId(kind as u8))
}
