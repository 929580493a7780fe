//! One end of the simulated wire: the protocol core, plus the simulated driver (posted
//! receives, the send queue, exposed chunks, READs) and user (what it sends, what it got)
//! around it.

use std::cell::Cell;
use std::collections::{HashMap, VecDeque};
use std::rc::Rc;
use std::time::Instant;

use super::{bytes_of, content, Exposed, Msg, SimBuf, WireFrame};
use crate::proto::{
    Action, Body, CallError, CallId, Class, Config, ConnError, Connection, Delivery, MsgId, ReadId,
    Received, RemoteChunk, SendErrorKind, BATCH_ENTRY_HEADER, HEADER_LEN,
};

/// One end: the protocol core plus the simulated driver and user around it.
#[derive(Debug)]
pub struct Host {
    pub conn: Connection<SimBuf>,
    pub posted: Rc<Cell<u32>>,
    pub sq_depth: u32,
    pub sq_used: u32,
    pub(super) completable: u32,
    pub(super) reads: VecDeque<(ReadId, RemoteChunk)>,
    pub(super) exposed: HashMap<u64, Exposed>,
    pub(super) next_addr: u64,
    pub to_send: Vec<Msg>,
    /// Messages whose bytes are given rather than computed by `content` (responses).
    pub(super) explicit: HashMap<usize, Vec<u8>>,
    pub next: usize,
    /// Sends were refused because the connection is closing.
    pub stopped: bool,
    pub(super) large: VecDeque<(MsgId, usize, u64)>,
    pub(super) chunk_size: u32,
    pub close_when_done: bool,
    pub received: Vec<(Received, Vec<u8>)>,
    pub held: VecDeque<Delivery<SimBuf>>,
    pub calls: Vec<(CallId, usize)>,
    pub calls_done: Vec<(CallId, Result<Vec<u8>, CallError>)>,
    pub closed: Vec<Option<ConnError>>,
    /// Probes asked for (zero-length WRITEs the peer's device would acknowledge).
    pub probes: usize,
    /// Requests received are answered with the request's bytes reversed.
    pub echo_requests: bool,
    /// Plain messages up to the eager limit are byte-stream writes: appended to the waiting
    /// message when they fit (`Connection::append`), else sent with `send_mergeable`; empty
    /// ones send nothing.
    pub stream: bool,
    /// Plain messages up to the eager limit go in batches when the connection would hold
    /// them: added to the batch waiting to go (`Connection::append_message`), or sent as a
    /// new one (`send_batch`); else on their own.
    pub batch: bool,
    /// Eager messages go straight to the wire when nothing is ahead of them
    /// (`Connection::send_at_once`), as the driver sends small ones; else they are queued.
    pub at_once: bool,
    /// A frame that leaves one delivery and nothing else to do is carried out on its own
    /// (`Connection::take_lone_delivery`), as the driver does.
    pub lone_deliveries: bool,
    /// Frames carried out that way.
    pub lone: usize,
    /// Frames taken at once, posted before the next actions.
    pub(super) posted_at_once: VecDeque<WireFrame>,
    /// Plain messages go as compact DATA frames (`Connection::compact_imm`), as the driver
    /// sends them; else every frame carries its header.
    pub compact: bool,
    /// Compact frames sent.
    pub compact_frames: usize,
    /// Bytes of message `next` already appended (a stream write taken in part).
    pub partial: usize,
    /// Frames sent, and how many of them the connection asked to be signaled.
    pub frames: usize,
    pub signaled: usize,
}

impl Host {
    pub(super) fn new(cfg: &Config, peer: &Config, now: Instant) -> Self {
        Host {
            conn: Connection::new(cfg, &peer.connect_info(), now).expect("valid config"),
            posted: Rc::new(Cell::new(cfg.window())),
            sq_depth: cfg.sq_depth(),
            sq_used: 0,
            completable: 0,
            reads: VecDeque::new(),
            exposed: HashMap::new(),
            next_addr: 0x1000,
            to_send: Vec::new(),
            explicit: HashMap::new(),
            next: 0,
            stopped: false,
            large: VecDeque::new(),
            chunk_size: cfg.rndv_chunk_size(),
            close_when_done: false,
            received: Vec::new(),
            held: VecDeque::new(),
            calls: Vec::new(),
            calls_done: Vec::new(),
            closed: Vec::new(),
            probes: 0,
            echo_requests: false,
            stream: false,
            batch: false,
            at_once: false,
            lone_deliveries: false,
            lone: 0,
            posted_at_once: VecDeque::new(),
            compact: true,
            compact_frames: 0,
            partial: 0,
            frames: 0,
            signaled: 0,
        }
    }

    /// Every message was taken, or sending ended because the connection is closing.
    pub fn all_sent(&self) -> bool {
        self.next == self.to_send.len() || self.stopped
    }

    /// Bytes of the announced chunks the peer has not acknowledged yet.
    pub fn exposed_chunks(&self) -> usize {
        self.exposed.len()
    }

    /// Offers the next message to the connection; true if it was taken.
    pub fn send_next(&mut self, side: usize) -> bool {
        let Some(&m) = self.to_send.get(self.next).filter(|_| !self.stopped) else {
            return false;
        };
        let data = self.data_of(side, self.next);
        if self.stream && m.class == Class::Message && data.len() <= self.conn.eager_limit() {
            return self.write_stream(&data);
        }
        if self.batch
            && m.class == Class::Message
            && BATCH_ENTRY_HEADER + data.len() <= self.conn.eager_limit()
        {
            if let Some(taken) = self.send_in_batch(&data) {
                return taken;
            }
        }
        self.send_bytes(m.class, &data)
    }

    /// A plain message in a batch, as the driver batches them; `None`: send it on its own.
    pub(super) fn send_in_batch(&mut self, data: &[u8]) -> Option<bool> {
        if !self.conn.append_message(data) {
            if !self.conn.would_hold() || self.conn.queue_full() {
                return None;
            }
            let mut frame = vec![0u8; HEADER_LEN];
            frame.extend_from_slice(&(data.len() as u32).to_le_bytes());
            frame.extend_from_slice(data);
            if let Err(e) = self.conn.send_batch(SimBuf::plain(frame)) {
                return Some(self.refused(e.kind));
            }
        }
        self.next += 1;
        Some(true)
    }

    /// A byte-stream write of (the rest of) message `next`.
    pub(super) fn write_stream(&mut self, data: &[u8]) -> bool {
        let rest = &data[self.partial..];
        let taken = if rest.is_empty() {
            0
        } else {
            let n = self.conn.append(rest);
            if n > 0 {
                n
            } else if let Some(f) = self
                .at_once
                .then(|| self.conn.write_at_once(rest.len()))
                .flatten()
            {
                self.post_at_once(f.header, f.signal, rest);
                rest.len()
            } else {
                let mut frame = vec![0u8; HEADER_LEN];
                frame.extend_from_slice(rest);
                match self.conn.send_mergeable(SimBuf::plain(frame)) {
                    Ok(()) => rest.len(),
                    Err(e) => return self.refused(e.kind),
                }
            }
        };
        self.partial += taken;
        if self.partial == data.len() {
            self.partial = 0;
            self.next += 1;
        }
        true
    }

    pub(super) fn send_bytes(&mut self, class: Class, data: &[u8]) -> bool {
        if self.at_once && data.len() <= self.conn.eager_limit() {
            if let Some(f) = self.conn.send_at_once(class, data.len()) {
                if let Some(c) = f.call {
                    self.calls.push((c, self.next));
                }
                self.post_at_once(f.header, f.signal, data);
                self.next += 1;
                return true;
            }
        }
        if data.len() <= self.conn.eager_limit() {
            let mut frame = vec![0u8; HEADER_LEN];
            frame.extend_from_slice(data);
            match self.conn.send(class, SimBuf::plain(frame)) {
                Ok(call) => {
                    if let Some(c) = call {
                        self.calls.push((c, self.next));
                    }
                    self.next += 1;
                    true
                }
                Err(e) => self.refused(e.kind),
            }
        } else {
            match self.conn.send_large(class, data.len() as u64) {
                Ok(l) => {
                    if let Some(c) = l.call {
                        self.calls.push((c, self.next));
                    }
                    self.large.push_back((l.msg, self.next, 0));
                    self.next += 1;
                    true
                }
                Err(e) => self.refused(e),
            }
        }
    }

    /// Posts a frame the connection let go at once: it goes on the wire before the frames of
    /// the next actions.
    pub(super) fn post_at_once(&mut self, header: [u8; HEADER_LEN], signal: bool, data: &[u8]) {
        self.frames += 1;
        self.signaled += usize::from(signal);
        let frame = self.frame(header, data);
        self.posted_at_once.push_back(frame);
        self.sq_used += 1;
        assert!(
            self.sq_used <= self.sq_depth,
            "send queue overflow (at once)"
        );
    }

    /// The SEND of a frame with `header` and `body`: compact when the connection lets a plain
    /// message go so and this driver sends compact frames.
    pub(super) fn frame(&mut self, header: [u8; HEADER_LEN], body: &[u8]) -> WireFrame {
        if let Some(imm) = self.conn.compact_imm(&header).filter(|_| self.compact) {
            self.compact_frames += 1;
            return WireFrame {
                imm: Some(imm),
                bytes: body.to_vec(),
            };
        }
        let mut bytes = header.to_vec();
        bytes.extend_from_slice(body);
        WireFrame { imm: None, bytes }
    }

    /// The bytes of message `k`.
    pub fn data_of(&self, side: usize, k: usize) -> Vec<u8> {
        self.explicit
            .get(&k)
            .cloned()
            .unwrap_or_else(|| content(side, k, self.to_send[k].len))
    }

    /// A refused send: backpressure, or the end of sending once the connection is closing.
    pub(super) fn refused(&mut self, e: SendErrorKind) -> bool {
        match e {
            SendErrorKind::WouldBlock => {}
            SendErrorKind::Closed => self.stopped = true,
            other => panic!("send refused: {other}"),
        }
        false
    }

    /// The driver copies chunks of large messages into exposed buffers while it may.
    pub(super) fn feed_chunks(&mut self, side: usize) -> bool {
        let mut any = false;
        for i in 0..self.large.len() {
            let (msg, k, mut off) = self.large[i];
            if !self.conn.can_add_chunk(msg) {
                continue;
            }
            let data = self.data_of(side, k);
            while off < data.len() as u64 && self.conn.can_add_chunk(msg) {
                let len = (data.len() as u64 - off).min(u64::from(self.chunk_size)) as u32;
                let bytes = data[off as usize..off as usize + len as usize].to_vec();
                let addr = self.next_addr;
                self.next_addr += 0x10_0000;
                let rkey = (addr >> 20) as u32;
                self.exposed.insert(
                    addr,
                    Exposed {
                        rkey,
                        data: bytes.clone(),
                        read: false,
                    },
                );
                let buf = SimBuf {
                    data: bytes,
                    slot: None,
                    addr: Some(addr),
                };
                self.conn
                    .add_chunk(msg, off, RemoteChunk { addr, rkey, len }, buf)
                    .expect("chunk accepted");
                off += u64::from(len);
                any = true;
            }
            self.large[i].2 = off;
        }
        self.large
            .retain(|&(_, k, off)| off < self.to_send[k].len as u64);
        any
    }

    /// Drains the connection's actions; the SENDs go onto `wire`. True if anything happened.
    pub(super) fn drain(&mut self, wire: &mut VecDeque<WireFrame>) -> bool {
        let mut any = !self.posted_at_once.is_empty();
        wire.extend(self.posted_at_once.drain(..));
        while let Some(a) = self.conn.poll_action() {
            any = true;
            self.carry_out(a, wire);
        }
        any
    }

    /// Carries out one action, as a driver does.
    pub(super) fn carry_out(&mut self, a: Action<SimBuf>, wire: &mut VecDeque<WireFrame>) {
        {
            let release = matches!(a, Action::Release(_));
            assert!(
                self.closed.is_empty() || release,
                "action other than Release after Closed: {a:?}"
            );
            match a {
                Action::Send {
                    header,
                    body,
                    signal,
                } => {
                    self.frames += 1;
                    self.signaled += usize::from(signal);
                    let f = match body {
                        Body::Payload(b) => self.frame(header, &b.data[HEADER_LEN..]),
                        Body::Control(b, n) => self.frame(header, &b[..n]),
                    };
                    wire.push_back(f);
                    self.sq_used += 1;
                    assert!(self.sq_used <= self.sq_depth, "send queue overflow");
                }
                Action::Read { id, remote, len } => {
                    assert_eq!(remote.len, len);
                    self.reads.push_back((id, remote));
                    self.sq_used += 1;
                    assert!(self.sq_used <= self.sq_depth, "send queue overflow (READ)");
                }
                Action::Release(b) => {
                    if let Some(addr) = b.addr {
                        let e = self
                            .exposed
                            .remove(&addr)
                            .expect("released chunk was exposed");
                        // after a failure everything comes back; before, only what the peer read
                        assert!(
                            e.read || !self.closed.is_empty(),
                            "chunk buffer released before the peer read it"
                        );
                    }
                }
                Action::Deliver(d) => {
                    let bytes = bytes_of(&d);
                    if let (Received::Request { call }, true) = (d.class, self.echo_requests) {
                        let mut r = bytes.clone();
                        r.reverse();
                        self.explicit.insert(self.to_send.len(), r.clone());
                        self.to_send.push(Msg {
                            len: r.len(),
                            class: Class::Response { call },
                        });
                    }
                    self.received.push((d.class, bytes));
                    self.held.push_back(d);
                }
                Action::CallDone { id, result } => {
                    let r = result.map(|d| {
                        let b = bytes_of(&d);
                        self.held.push_back(d);
                        b
                    });
                    self.calls_done.push((id, r));
                }
                Action::Probe => self.probes += 1,
                Action::Closed { error } => self.closed.push(error),
            }
        }
    }

    /// The user drops the oldest message it holds.
    pub fn release_one(&mut self) -> bool {
        let Some(d) = self.held.pop_front() else {
            return false;
        };
        if d.release() {
            self.conn.on_release();
        }
        true
    }

    /// Reports the send completions the wire has produced.
    pub fn complete_sends(&mut self) -> bool {
        if self.completable == 0 {
            return false;
        }
        self.conn.on_send_complete(self.completable);
        self.sq_used -= self.completable;
        self.completable = 0;
        true
    }
}
