//! A simulated RC wire between two protocol cores: in-order delivery, a bounded number of posted
//! receives per side (a SEND finding none is RNR and fails the test), send-queue bounds, and
//! RDMA READs served from the memory the peer has announced and not yet released.

use std::cell::Cell;
use std::collections::{HashMap, VecDeque};
use std::rc::Rc;
use std::time::{Duration, Instant};

use crate::proto::{
    Action, Body, CallError, CallId, Class, Config, ConnError, Connection, Delivery, MsgId, Parts,
    Payload, ReadId, Received, RemoteChunk, SendErrorKind, BATCH_ENTRY_HEADER, HEADER_LEN,
    MAX_HEAD,
};

/// A buffer of the simulated driver. A receive buffer gives its posted-receive slot back when
/// dropped; a chunk buffer names the address it is exposed at.
#[derive(Debug)]
pub struct SimBuf {
    pub data: Vec<u8>,
    slot: Option<Rc<Cell<u32>>>,
    addr: Option<u64>,
}

impl SimBuf {
    pub fn plain(data: Vec<u8>) -> Self {
        SimBuf {
            data,
            slot: None,
            addr: None,
        }
    }
}

impl Drop for SimBuf {
    fn drop(&mut self) {
        if let Some(s) = &self.slot {
            s.set(s.get() + 1);
        }
    }
}

impl Payload for SimBuf {
    fn len(&self) -> usize {
        self.data.len()
    }
    fn bytes(&self) -> &[u8] {
        &self.data
    }
    fn spare(&self) -> usize {
        usize::MAX - self.data.len()
    }
    fn append(&mut self, bytes: &[u8], max_len: usize) -> usize {
        Payload::append(&mut self.data, bytes, max_len)
    }
}

/// The bytes of message `k` sent by side `side`, `len` long.
pub fn content(side: usize, k: usize, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i.wrapping_mul(7) ^ k.wrapping_mul(31) ^ (side * 101)) as u8)
        .collect()
}

/// A SEND on the simulated wire: its bytes, and its immediate data if it is a compact DATA
/// frame (a plain message without its header).
#[derive(Debug, Clone)]
pub struct WireFrame {
    pub imm: Option<u32>,
    pub bytes: Vec<u8>,
}

impl std::ops::Deref for WireFrame {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.bytes
    }
}

/// The message bytes of a delivery.
pub fn bytes_of(d: &Delivery<SimBuf>) -> Vec<u8> {
    match &d.parts {
        Parts::Eager(b) => b.data[HEADER_LEN..HEADER_LEN + d.len as usize].to_vec(),
        Parts::Bare(b) => b.data[..d.len as usize].to_vec(),
        Parts::Part { frame, offset } => frame.data[*offset..offset + d.len as usize].to_vec(),
        Parts::Chunks(cs) => {
            let mut v = Vec::new();
            for c in cs {
                v.extend_from_slice(&c.buf.data[..c.len as usize]);
            }
            assert_eq!(v.len() as u64, d.len, "chunks add up to the message length");
            v
        }
    }
}

#[derive(Debug)]
struct Exposed {
    rkey: u32,
    data: Vec<u8>,
    read: bool,
}

/// A message the simulated user wants to send.
#[derive(Debug, Clone, Copy)]
pub struct Msg {
    pub len: usize,
    pub class: Class,
}

/// Plain messages of the lengths `lens`, in order.
pub fn messages(lens: &[usize]) -> Vec<Msg> {
    lens.iter()
        .map(|&len| Msg {
            len,
            class: Class::Message,
        })
        .collect()
}

/// One end: the protocol core plus the simulated driver and user around it.
#[derive(Debug)]
pub struct Host {
    pub conn: Connection<SimBuf>,
    pub posted: Rc<Cell<u32>>,
    pub sq_depth: u32,
    pub sq_used: u32,
    completable: u32,
    reads: VecDeque<(ReadId, RemoteChunk)>,
    exposed: HashMap<u64, Exposed>,
    next_addr: u64,
    pub to_send: Vec<Msg>,
    /// Messages whose bytes are given rather than computed by `content` (responses).
    explicit: HashMap<usize, Vec<u8>>,
    pub next: usize,
    /// Sends were refused because the connection is closing.
    pub stopped: bool,
    large: VecDeque<(MsgId, usize, u64)>,
    chunk_size: u32,
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
    posted_at_once: VecDeque<WireFrame>,
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
    fn new(cfg: &Config, peer: &Config, now: Instant) -> Self {
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
    fn send_in_batch(&mut self, data: &[u8]) -> Option<bool> {
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
    fn write_stream(&mut self, data: &[u8]) -> bool {
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

    fn send_bytes(&mut self, class: Class, data: &[u8]) -> bool {
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
    fn post_at_once(&mut self, header: [u8; HEADER_LEN], signal: bool, data: &[u8]) {
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
    fn frame(&mut self, header: [u8; HEADER_LEN], body: &[u8]) -> WireFrame {
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
    fn refused(&mut self, e: SendErrorKind) -> bool {
        match e {
            SendErrorKind::WouldBlock => {}
            SendErrorKind::Closed => self.stopped = true,
            other => panic!("send refused: {other}"),
        }
        false
    }

    /// The driver copies chunks of large messages into exposed buffers while it may.
    fn feed_chunks(&mut self, side: usize) -> bool {
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
    fn drain(&mut self, wire: &mut VecDeque<WireFrame>) -> bool {
        let mut any = !self.posted_at_once.is_empty();
        wire.extend(self.posted_at_once.drain(..));
        while let Some(a) = self.conn.poll_action() {
            any = true;
            self.carry_out(a, wire);
        }
        any
    }

    /// Carries out one action, as a driver does.
    fn carry_out(&mut self, a: Action<SimBuf>, wire: &mut VecDeque<WireFrame>) {
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

/// Two hosts joined by an RC wire.
#[derive(Debug)]
pub struct Sim {
    pub hosts: [Host; 2],
    /// `wires[i]`: frames from host i to the other, in order.
    pub wires: [VecDeque<WireFrame>; 2],
    pub now: Instant,
}

impl Sim {
    pub fn new(a: &Config, b: &Config) -> Self {
        let now = Instant::now();
        Sim {
            hosts: [Host::new(a, b, now), Host::new(b, a, now)],
            wires: [VecDeque::new(), VecDeque::new()],
            now,
        }
    }

    /// Lets both drivers act until neither has anything to do. True if anything happened.
    pub fn pump(&mut self) -> bool {
        let mut any = false;
        loop {
            let mut step = false;
            for side in 0..2 {
                step |= self.hosts[side].feed_chunks(side);
                step |= self.hosts[side].drain(&mut self.wires[side]);
                if self.hosts[side].close_when_done
                    && self.hosts[side].all_sent()
                    && !self.hosts[side].conn.is_closed()
                {
                    self.hosts[side].conn.close();
                }
            }
            if !step {
                return any;
            }
            any = true;
        }
    }

    /// Delivers the oldest frame from `from` to its peer. Panics on RNR (no posted receive).
    pub fn deliver(&mut self, from: usize) -> bool {
        let Some(frame) = self.wires[from].pop_front() else {
            return false;
        };
        self.hosts[from].completable += 1;
        let to = &mut self.hosts[1 - from];
        let slots = to.posted.get();
        assert!(
            slots > 0,
            "RNR: a SEND from host {from} found no posted receive"
        );
        to.posted.set(slots - 1);
        let buf = SimBuf {
            data: frame.bytes.clone(),
            slot: Some(to.posted.clone()),
            addr: None,
        };
        if let Some(imm) = frame.imm {
            to.conn
                .on_receive_compact(imm, frame.len(), buf, self.now)
                .expect("valid compact frame");
        } else {
            // as a driver does: copy the head, move the buffer
            let mut head = [0u8; MAX_HEAD];
            let n = frame.len().min(MAX_HEAD);
            head[..n].copy_from_slice(&frame[..n]);
            to.conn
                .on_receive_head(&head[..n], frame.len(), buf, self.now)
                .expect("valid frame");
        }
        if to.lone_deliveries {
            // As a driver carries out a lone delivery: nothing else may be left to do.
            if let Some(a) = to.conn.take_lone_delivery() {
                to.lone += 1;
                to.carry_out(a, &mut self.wires[1 - from]);
                let left = to.conn.poll_action();
                assert!(left.is_none(), "a lone delivery left {left:?} to do");
            }
        }
        true
    }

    /// Executes the oldest READ of `side` against the peer's exposed memory.
    pub fn complete_read(&mut self, side: usize) -> bool {
        let Some((id, remote)) = self.hosts[side].reads.pop_front() else {
            return false;
        };
        let peer = &mut self.hosts[1 - side];
        let e = peer
            .exposed
            .get_mut(&remote.addr)
            .expect("READ of memory the peer no longer exposes");
        assert_eq!(e.rkey, remote.rkey, "READ with a wrong rkey");
        assert_eq!(e.data.len(), remote.len as usize);
        e.read = true;
        let dest = SimBuf::plain(e.data.clone());
        let me = &mut self.hosts[side];
        me.sq_used -= 1;
        me.conn.on_read_complete(id, dest);
        true
    }

    /// Advances time and lets both ends see it.
    pub fn tick(&mut self, dt: Duration) {
        self.now += dt;
        for h in &mut self.hosts {
            h.conn.on_timeout(self.now);
        }
    }

    /// One step chosen by `op` (from a proptest schedule). True if anything happened.
    pub fn step(&mut self, op: u8) -> bool {
        let side = (op & 1) as usize;
        let did = match op >> 1 {
            0 => self.hosts[side].send_next(side),
            1 => self.deliver(side),
            2 => self.hosts[side].complete_sends(),
            3 => self.complete_read(side),
            4 => self.hosts[side].release_one(),
            _ => {
                self.tick(Duration::from_millis(3));
                true
            }
        };
        self.pump() || did
    }

    /// Runs every kind of step fairly until nothing happens any more; returns the steps taken.
    pub fn run_until_quiet(&mut self, max_steps: usize) -> usize {
        let mut steps = 0;
        loop {
            let mut any = false;
            for op in 0..10u8 {
                any |= self.step(op);
                steps += 1;
            }
            if !any {
                return steps;
            }
            assert!(steps < max_steps, "no quiescence after {steps} steps");
        }
    }
}
