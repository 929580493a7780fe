//! One connection's protocol state: events in (user requests, frames, completions, time),
//! actions out.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use super::config::{
    Config, ConnectInfo, MAX_LARGE_MESSAGES, MAX_OUTSTANDING_CHUNKS, SQ_CONTROL_RESERVE,
};
use super::credit::Credits;
use super::error::{
    CallError, ConfigError, ConnError, PeerGone, ProtocolError, SendError, SendErrorKind,
};
use super::frame::{
    decode, encode_body, FrameBody, Header, Kind, RemoteChunk, FLAG_NO_HANDLER, FLAG_REQUEST,
    FLAG_RESPONSE, HEADER_LEN,
};
use super::rndv::{ChunkOut, InClass, LargeIn, LargeOut};
use super::rpc::{CallId, Calls};
use super::{Action, Body, Chunk, Class, Delivery, MsgId, Parts, Payload, ReadId, Received};

/// Counters of one connection.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stats {
    /// Frames handed to the driver for sending.
    pub frames_sent: u64,
    /// Frames received.
    pub frames_received: u64,
    /// Explicit CREDIT frames sent.
    pub credit_frames_sent: u64,
    /// PING frames sent.
    pub pings_sent: u64,
    /// Responses dropped because their call was no longer pending (timed out, cancelled).
    pub late_responses: u64,
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
    Eager { flags: u8, tag: u64, payload: B },
    Large(MsgId),
    Reject(CallId),
}

/// A message received, waiting for delivery in order.
#[derive(Debug)]
enum In<B> {
    Eager { class: InClass, buf: B, len: usize },
    NoHandler(u64),
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
    last_recv: Instant,
    last_ping: Option<Instant>,
    held: u32,
    stats: Stats,
}

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
            last_recv: now,
            last_ping: None,
            held: 0,
            stats: Stats::default(),
        })
    }

    /// The largest message [`send`](Self::send) takes (longer ones go through
    /// [`send_large`](Self::send_large)).
    pub fn eager_limit(&self) -> usize {
        self.send_eager_limit
    }

    /// Counters.
    pub fn stats(&self) -> Stats {
        self.stats
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

    // ---- user requests ----

    /// Queues an eager message. `payload` starts with [`HEADER_LEN`] bytes of header room; the
    /// message is the rest (at most [`eager_limit`](Self::eager_limit) bytes). Returns the call
    /// id for a request. Refused (payload handed back) when the connection's queue holds
    /// `window` messages, or the connection is closing.
    pub fn send(&mut self, class: Class, payload: B) -> Result<Option<CallId>, SendError<B>> {
        let len = payload.len();
        let kind = if !self.accepting() {
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
        };
        if let Some(kind) = kind {
            return Err(SendError { kind, payload });
        }
        let (flags, tag, id) = self.classify(class);
        self.outq.push_back(Out::Eager {
            flags,
            tag,
            payload,
        });
        Ok(id)
    }

    fn classify(&mut self, class: Class) -> (u8, u64, Option<CallId>) {
        match class {
            Class::Message => (0, 0, None),
            Class::Request { deadline } => {
                let id = self.calls.start(deadline);
                (FLAG_REQUEST, id.0, Some(id))
            }
            Class::Response { call } => (FLAG_RESPONSE, call.0, None),
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
        self.large_out
            .push_back(LargeOut::new(msg, total_len, flags, tag, self.max_chunks));
        self.outq.push_back(Out::Large(msg));
        Ok(LargeSend { msg, call })
    }

    fn large_out_index(&self, msg: MsgId) -> Option<usize> {
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
    pub fn reject_call(&mut self, call: CallId) -> Result<(), SendErrorKind> {
        if !self.accepting() {
            return Err(SendErrorKind::Closed);
        }
        if self.outq.len() >= self.out_cap {
            return Err(SendErrorKind::WouldBlock);
        }
        self.outq.push_back(Out::Reject(call));
        Ok(())
    }

    /// Graceful close: CLOSE goes out after everything already queued; the connection ends
    /// (`Action::Closed { error: None }`) once the peer's CLOSE arrived and every message in
    /// both directions is delivered and acknowledged. Sends are refused from now on.
    pub fn close(&mut self) {
        if self.state == State::Open {
            self.close_queued = true;
        }
    }

    /// Forgets a pending call: no `CallDone` is emitted for it, and its response, if one
    /// comes, is dropped.
    pub fn cancel_call(&mut self, id: CallId) {
        self.calls.finish(id);
    }

    // ---- driver events ----

    /// A frame arrived: `frame` is the bytes received (header and body) and `buf` the receive
    /// buffer holding them. A DATA frame's buffer is delivered as the message; any other is
    /// dropped at once. A malformed frame fails the connection (`Action::Closed`) and is
    /// returned as the error.
    pub fn on_receive(&mut self, frame: &[u8], buf: B, now: Instant) -> Result<(), ProtocolError> {
        if self.state != State::Open {
            return Ok(());
        }
        self.last_recv = now;
        self.stats.frames_received += 1;
        match self.receive(frame, buf) {
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

    fn release_now(&mut self, buf: B) {
        drop(buf);
        self.credits.release();
    }

    fn receive(&mut self, frame: &[u8], buf: B) -> Result<(), ProtocolError> {
        let (h, body) = decode(frame)?;
        self.credits.on_receive()?;
        self.credits.on_peer_limit(h.credit_limit)?;
        if self.close_received && h.kind.is_data() {
            return Err(ProtocolError::AfterClose(h.kind as u8));
        }
        match body {
            FrameBody::Data { len } => {
                if frame.len() > self.recv_frame_size {
                    return Err(ProtocolError::FrameTooLarge {
                        len: frame.len(),
                        limit: self.recv_frame_size,
                    });
                }
                if h.flags & FLAG_NO_HANDLER != 0 {
                    self.release_now(buf);
                    self.inq.push_back(In::NoHandler(h.tag));
                } else {
                    let class = in_class(h.flags, h.tag);
                    self.inq.push_back(In::Eager { class, buf, len });
                }
            }
            FrameBody::RndvStart { total, call } => {
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
                self.inq.push_back(In::Large(LargeIn::new(
                    MsgId(h.tag),
                    total,
                    in_class(h.flags, call),
                )));
            }
            FrameBody::RndvChunk { offset, remote } => {
                self.release_now(buf);
                let outstanding = self.read_wait.len() + self.reads.len() + self.acks.len();
                let msg = MsgId(h.tag);
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
                    _ => {}
                }
            }
        }
        Ok(())
    }

    fn large_in_mut(&mut self, msg: MsgId) -> Option<&mut LargeIn<B>> {
        self.inq.iter_mut().find_map(|e| match e {
            In::Large(l) if l.id == msg => Some(l),
            _ => None,
        })
    }

    /// Delivers complete messages from the head of the receive order.
    fn deliver_ready(&mut self) {
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
                Some(In::Eager { class, buf, len }) => {
                    self.complete(class, len as u64, Parts::Eager(buf))
                }
                Some(In::NoHandler(call)) => {
                    let id = CallId(call);
                    if self.calls.finish(id) {
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

    fn complete(&mut self, class: InClass, len: u64, parts: Parts<B>) {
        let eager = matches!(parts, Parts::Eager(_));
        match class {
            InClass::Deliver(class) => {
                self.held += u32::from(eager);
                self.actions
                    .push_back(Action::Deliver(Delivery { class, len, parts }));
            }
            InClass::Response(call) => {
                let id = CallId(call);
                if self.calls.finish(id) {
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

    /// `count` SENDs completed (their slots are free again).
    pub fn on_send_complete(&mut self, count: u32) {
        self.sq_free = self.sq_free.saturating_add(count).min(self.sq_depth);
    }

    /// The READ `read` completed into `dest`, which now holds the chunk's bytes from offset 0.
    pub fn on_read_complete(&mut self, read: ReadId, dest: B, now: Instant) {
        let _ = now;
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

    /// The user dropped one delivered message that [`holds_credit`](Delivery::holds_credit):
    /// its receive is free, so the peer gets the credit back.
    pub fn on_release(&mut self) {
        if self.held > 0 {
            self.held -= 1;
            self.credits.release();
        }
    }

    /// Time passed: expires calls, sends PING when the peer was silent for the keepalive
    /// interval, fails the connection when it was silent for the keepalive timeout.
    pub fn on_timeout(&mut self, now: Instant) {
        if self.state != State::Open {
            return;
        }
        let silent = now.saturating_duration_since(self.last_recv);
        if silent >= self.keepalive_timeout {
            self.fail(ConnError::PeerDead { silent_for: silent });
            return;
        }
        while let Some(id) = self.calls.pop_expired(now) {
            self.actions.push_back(Action::CallDone {
                id,
                result: Err(CallError::TimedOut),
            });
        }
        if !self.ping_due && now >= self.next_ping() {
            self.ping_due = true;
            self.last_ping = Some(now);
        }
    }

    fn next_ping(&self) -> Instant {
        let base = match self.last_ping {
            Some(p) if p > self.last_recv => p,
            _ => self.last_recv,
        };
        base + self.keepalive_interval
    }

    /// The driver saw the peer go (CM disconnect, queue pair error): the connection fails.
    pub fn on_peer_gone(&mut self, reason: PeerGone) {
        if self.state == State::Open {
            self.fail(ConnError::PeerGone(reason));
        }
    }

    /// When [`on_timeout`](Self::on_timeout) must be called next (`None`: the connection
    /// ended).
    pub fn poll_timeout(&self) -> Option<Instant> {
        if self.state != State::Open {
            return None;
        }
        let mut t = self.last_recv + self.keepalive_timeout;
        if !self.ping_due {
            t = t.min(self.next_ping());
        }
        if let Some(d) = self.calls.next_deadline() {
            t = t.min(d);
        }
        Some(t)
    }

    // ---- outputs ----

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

    fn header(&mut self, kind: Kind, flags: u8, tag: u64) -> [u8; HEADER_LEN] {
        let credit_limit = self.credits.on_send();
        self.sq_free -= 1;
        self.stats.frames_sent += 1;
        Header {
            kind,
            flags,
            credit_limit,
            tag,
        }
        .encode()
    }

    fn frame(&mut self, kind: Kind, flags: u8, tag: u64, body: FrameBody) -> Action<B> {
        let header = self.header(kind, flags, tag);
        let (b, n) = encode_body(&body);
        Action::Send {
            header,
            body: Body::Control(b, n),
        }
    }

    fn next_output(&mut self) -> Option<Action<B>> {
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
            if let Some(a) = self.next_message_frame() {
                return Some(a);
            }
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
    fn next_message_frame(&mut self) -> Option<Action<B>> {
        let msg = match self.outq.front()? {
            Out::Large(msg) => *msg,
            Out::Eager { .. } | Out::Reject(_) => match self.outq.pop_front() {
                Some(Out::Eager {
                    flags,
                    tag,
                    payload,
                }) => {
                    let header = self.header(Kind::Data, flags, tag);
                    return Some(Action::Send {
                        header,
                        body: Body::Payload(payload),
                    });
                }
                Some(Out::Reject(call)) => {
                    return Some(self.frame(
                        Kind::Data,
                        FLAG_RESPONSE | FLAG_NO_HANDLER,
                        call.0,
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
    fn maybe_finish(&mut self) {
        let done = self.state == State::Open
            && self.close_sent
            && self.close_received
            && self.inq.is_empty()
            && self.large_out.is_empty()
            && self.read_wait.is_empty()
            && self.reads.is_empty()
            && self.acks.is_empty();
        if done {
            self.state = State::Closed;
            while let Some(id) = self.calls.pop_any() {
                self.actions.push_back(Action::CallDone {
                    id,
                    result: Err(CallError::Closed),
                });
            }
            self.actions.push_back(Action::Closed { error: None });
        }
    }

    /// Fails the connection: pending calls fail, `Closed` with the error, then every buffer
    /// the connection holds comes back as `Release` (to reuse only once the queue pair is in
    /// the error state: the peer may still be reading an announced chunk).
    fn fail(&mut self, error: ConnError) {
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

fn in_class(flags: u8, tag: u64) -> InClass {
    if flags & FLAG_RESPONSE != 0 {
        InClass::Response(tag)
    } else if flags & FLAG_REQUEST != 0 {
        InClass::Deliver(Received::Request { call: CallId(tag) })
    } else {
        InClass::Deliver(Received::Message)
    }
}
