//! The progress engine: one completion queue and one shared receive queue for every
//! connection of an endpoint, a pool for all their buffers, and a thread that polls (busy,
//! event or adaptive), runs the protocol timers and tears down ended connections.
//!
//! Waiting threads drive progress themselves when they can (whoever holds the progress lock
//! polls), so a blocked call sees its completion without a thread handoff; the progress thread
//! covers everything else and wakes waiters through their connection's condition variable or
//! `Waker`s.

mod batch;
mod calls;
mod chunks;
mod cm_ops;
mod conn;
mod conn_close;
mod conn_table;
mod one_sided_ops;
mod policy;
mod poll;
mod post;
mod resources;
mod send_queue;
mod totals;
mod user;
mod worker;

use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use memory::{Buffer, Pool};
use parking_lot::Mutex;
use verbs::{CompletionBuf, Pd, Reclaimed};

pub(crate) use chunks::{remote_chunk, Chunks};
pub(crate) use cm_ops::{Backlog, CmWatcher, ConnectOp};
pub(crate) use conn::{ConnShared, ConnState, StateGuard};
#[cfg(feature = "tokio")]
pub(crate) use policy::SPIN_TURNS_PER_CLOCK;
pub(crate) use policy::{Policy, SpinBudget, Spinning};
pub(crate) use poll::Counts;
pub(crate) use send_queue::SqOp;
pub use totals::EndpointStats;
pub(crate) use user::{push_waker, register, register_recv, register_tick};
pub(crate) use worker::Engine;

use conn_table::ConnTable;
pub(crate) use resources::{QueueSlot, Queues, Resources};

use crate::config::EndpointConfig;
use crate::proto::BATCH_ENTRY_HEADER;
use crate::{Error, Result};

/// How often the progress thread runs timers and teardown when nothing else wakes it, and
/// at most how long it leaves a connection being set up or torn down unlooked at.
const TICK: Duration = Duration::from_millis(5);

/// How long the progress thread may sleep between timer runs when it does not poll (it
/// stands aside, or a reactor polls) and no deadline is nearer: it need not wake every
/// [`TICK`], taking a core from the threads that poll.
const IDLE_TICK: Duration = Duration::from_millis(100);

/// How long the progress thread may sleep between timer runs when the endpoint is quiet: no
/// connection, or no completion since the last run (a connect or accept that begins, or
/// anything else due soon, asks for a tick within [`TICK`]; the protocol's timers say when
/// they fall due). An idle endpoint wakes for its timers, at least once a second, not every
/// [`IDLE_TICK`].
const QUIET_TICK: Duration = Duration::from_secs(1);

/// The shortest sleep before the next timer run.
const MIN_TICK: Duration = Duration::from_micros(100);

/// How long the CM thread waits before it reads again from a channel that failed a read.
const CM_RETRY: Duration = Duration::from_millis(50);

/// Wakes (and empties) `wakers`.
pub(crate) fn wake_tasks(wakers: &mut Vec<std::task::Waker>) {
    if !wakers.is_empty() {
        wakers.drain(..).for_each(std::task::Waker::wake);
    }
}

/// Everything an endpoint's connections share.
#[derive(Debug)]
pub(crate) struct Shared {
    pub cfg: EndpointConfig,
    pub local_ip: IpAddr,
    /// The device's resources every connection uses.
    pub res: Resources,
    /// CM events of every id of the endpoint, and the connects, accepts and listeners in
    /// progress on them.
    pub cm: CmWatcher,
    /// Connections by QP number. Change it only through [`add_conn`](Shared::add_conn) and
    /// [`remove_conns`](Shared::remove_conns), which keep the poller's cache in step.
    pub conns: ConnTable<Arc<ConnShared>>,
    /// The pool ran out: the next tick asks the frames posted unsignaled back
    /// ([`release_unsignaled`](Shared::release_unsignaled)).
    pub(super) release_unsignaled_due: AtomicBool,
    progress: Mutex<Progress>,
    pub stop: AtomicBool,
    /// Who polls the completion queue, and for how long ([`policy`]).
    pub policy: Policy,
    /// The task driving progress from a reactor ([`Polling::Reactor`]), woken when the
    /// endpoint stops.
    pub(crate) reactor_waker: Mutex<Option<std::task::Waker>>,
    /// Completions handled, by who polled them.
    pub(crate) counts: Counts,
    /// Runs of the timers by the progress thread (`EndpointStats::timer_runs`).
    pub(crate) timer_runs: AtomicU64,
    /// Tasks waiting for something no connection signals (pool buffers): woken every tick.
    pub(crate) tick_wakers: Mutex<Vec<std::task::Waker>>,
    /// A task joined `tick_wakers`: the next tick comes within [`TICK`] of the last.
    pub(crate) tick_soon: AtomicBool,
    /// The counters of connections that went ([`Shared::stats`]).
    totals: totals::TotalsLock,
    /// The id bound to the local address: it holds librdmacm's device context open.
    _anchor: cm::CmId,
}

#[derive(Debug)]
struct Progress {
    wcs: CompletionBuf,
    reclaimed: Vec<Reclaimed>,
    /// The connection of the last completion, so a run of completions of one connection
    /// looks it up once.
    last: Option<LastConn>,
}

/// A connection the poller looked up, valid while `conns_gen` is `gen`.
#[derive(Debug)]
struct LastConn {
    qp_num: u32,
    gen: u64,
    conn: Arc<ConnShared>,
}

impl Shared {
    /// Opens the device serving `local_ip` and creates the shared resources, on `pd` and with
    /// `pool` for data when given.
    pub(crate) fn new(
        local_ip: IpAddr,
        cfg: EndpointConfig,
        pd: Option<Pd>,
        pool: Option<Pool>,
    ) -> Result<Arc<Shared>> {
        cfg.validate()?;
        let anchor = cm::CmId::with_own_channel(cm::PortSpace::Tcp)?;
        anchor
            .bind_addr(std::net::SocketAddr::new(local_ip, 0))
            .map_err(|source| Error::NoDevice {
                addr: local_ip,
                source,
            })?;
        let ctx = anchor.context().map_err(|source| Error::NoDevice {
            addr: local_ip,
            source,
        })?;
        // An iWARP device has no immediate data: the handshake says so, and no compact frame
        // goes either way. Its WRITE completes once sent: a one-sided write waits for a
        // zero-length READ behind it, and a completion of ours is no sign of the peer's life.
        let mut cfg = cfg;
        let iwarp = ctx.transport() == verbs::Transport::Iwarp;
        cfg.proto.immediate_data = !iwarp;
        cfg.write_completes_when_sent = iwarp;
        let res = Resources::open(&ctx, local_ip, &cfg, pd, pool)?;
        cfg.proto.max_read_chunk = res.max_read_chunk();
        // One keepalive grid for every connection of the endpoint: their timers fall due
        // together.
        cfg.proto.timer_epoch = Some(std::time::Instant::now());
        let shared = Arc::new(Shared {
            res,
            local_ip,
            cm: CmWatcher::new()?,
            conns: ConnTable::new(),
            release_unsignaled_due: AtomicBool::new(false),
            progress: Mutex::new(Progress {
                wcs: CompletionBuf::new(64),
                reclaimed: Vec::with_capacity(64),
                last: None,
            }),
            stop: AtomicBool::new(false),
            policy: Policy::new(&cfg),
            tick_wakers: Mutex::new(Vec::new()),
            tick_soon: AtomicBool::new(false),
            totals: Default::default(),
            reactor_waker: Mutex::new(None),
            counts: Counts::default(),
            timer_runs: AtomicU64::new(0),
            _anchor: anchor,
            cfg,
        });
        Ok(shared)
    }

    /// A buffer of `len` bytes from the pool, waiting up to `timeout`. Before it waits, the
    /// progress thread is woken: the buffers it waits for may be held by send completions
    /// that nobody else polls.
    pub(crate) fn alloc(&self, len: usize, timeout: Duration) -> Result<Buffer> {
        self.alloc_in(&self.res.pool, len, timeout)
    }

    /// The pool a READ's sink comes from: `Resources::read_sinks` on iWARP, else the pool.
    pub(crate) fn read_sink_pool(&self) -> &memory::Pool {
        self.res.read_sinks.as_ref().unwrap_or(&self.res.pool)
    }

    /// The pool ran out. A frame posted unsignaled keeps its buffer until a later signaled
    /// request of its connection completes, which a connection that sends nothing more never
    /// posts: with many such connections, their buffers are the pool. The next tick (within
    /// [`TICK`]) gives every connection with unsignaled requests a probe behind them, whose
    /// completion gives their buffers back: on the progress thread, in the walk over the
    /// connections it makes anyway, once however many senders ask.
    pub(crate) fn release_unsignaled(&self) {
        self.release_unsignaled_due.store(true, Ordering::Relaxed);
        self.tick_soon();
    }

    /// [`alloc`](Self::alloc) from `pool`.
    pub(crate) fn alloc_in(
        &self,
        pool: &memory::Pool,
        len: usize,
        timeout: Duration,
    ) -> Result<Buffer> {
        match pool.try_alloc(len) {
            Ok(buf) => Ok(buf),
            Err(memory::Error::Exhausted { .. }) => {
                self.release_unsignaled();
                self.policy.wake_progress();
                pool.alloc(len, timeout).map_err(pool_error)
            }
            Err(e) => Err(pool_error(e)),
        }
    }

    /// Adds a connection, known by its QP number from now on.
    pub(crate) fn add_conn(&self, conn: Arc<ConnShared>) {
        self.conns.insert(conn.qp.qp_num(), conn);
    }

    /// How many connections the endpoint has (lock-free).
    pub(crate) fn conn_count(&self) -> usize {
        self.conns.count()
    }

    /// Removes the connections of `qp_nums`, and lets go of the poller's cached one (it would
    /// keep a removed connection's queue pair alive).
    pub(crate) fn remove_conns(&self, qp_nums: impl IntoIterator<Item = u32>) {
        self.conns.remove(qp_nums);
        self.progress.lock().last = None;
    }
}

/// Pool exhaustion is backpressure; anything else is an error.
pub(crate) fn pool_error(e: memory::Error) -> Error {
    match e {
        memory::Error::Exhausted { .. } => Error::WouldBlock,
        memory::Error::Timeout { waited } => Error::TimedOut {
            op: "a buffer from the pool",
            after: waited,
        },
        other => Error::Memory(other),
    }
}

/// A send the protocol refused, as the API's error (`st`: the connection's state, for the
/// cause of its end).
pub(crate) fn send_error(kind: crate::proto::SendErrorKind, st: &ConnState) -> Error {
    use crate::proto::SendErrorKind as K;
    match kind {
        K::WouldBlock => Error::WouldBlock,
        K::Closed => st.ended().unwrap_or(Error::ClosedLocally),
        K::TooLarge { len, limit, .. } => Error::TooLarge { len, limit },
        other => Error::Send(other),
    }
}

impl crate::proto::Payload for Buffer {
    fn len(&self) -> usize {
        Buffer::len(self)
    }

    fn bytes(&self) -> &[u8] {
        self
    }

    fn spare(&self) -> usize {
        self.capacity() - Buffer::len(self)
    }

    fn append(&mut self, bytes: &[u8], max_len: usize) -> usize {
        let len = Buffer::len(self);
        let n = bytes
            .len()
            .min(max_len.min(self.capacity()).saturating_sub(len));
        if n == 0 || self.set_len(len + n).is_err() {
            return 0;
        }
        self[len..len + n].copy_from_slice(&bytes[..n]);
        n
    }

    /// The entry's length and bytes in one step: one length set, the length written in
    /// place, one copy (a batched message costs one copy call, not two appends).
    fn append_entry(&mut self, data: &[u8], max_len: usize) -> bool {
        let len = Buffer::len(self);
        let end = len + BATCH_ENTRY_HEADER + data.len();
        if end > max_len.min(self.capacity()) || self.set_len(end).is_err() {
            return false;
        }
        let (head, body) = self[len..end].split_at_mut(BATCH_ENTRY_HEADER);
        head.copy_from_slice(&(data.len() as u32).to_le_bytes());
        body.copy_from_slice(data);
        true
    }
}
