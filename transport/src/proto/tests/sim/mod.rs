//! A simulated RC wire between two protocol cores: in-order delivery, a bounded number of posted
//! receives per side (a SEND finding none is RNR and fails the test), send-queue bounds, and
//! RDMA READs served from the memory the peer has announced and not yet released.

use std::cell::Cell;
use std::collections::VecDeque;
use std::rc::Rc;
use std::time::{Duration, Instant};

mod host;

pub use host::Host;

use crate::proto::{Class, Config, Delivery, Parts, Payload, HEADER_LEN, MAX_HEAD};

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
    pub(super) rkey: u32,
    pub(super) data: Vec<u8>,
    pub(super) read: bool,
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
