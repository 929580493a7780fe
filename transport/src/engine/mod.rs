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
mod cm_ops;
mod conn;
mod one_sided_ops;
mod poll;
mod post;
mod spin;
mod worker;

use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use memory::{Buffer, ClassConfig, Pool, PoolAccess, PoolConfig};
use parking_lot::{Mutex, RwLock};
use rustc_hash::FxHashMap;
use verbs::{CompletionBuf, Cq, Pd, Reclaimed, RecvRing, Srq};

pub(crate) use cm_ops::{Backlog, ConnectOp};
pub(crate) use conn::{ConnShared, ConnState, SqOp};
pub(crate) use poll::{Counts, Spinning};
pub(crate) use spin::{SpinBudget, GROWTH};
pub(crate) use worker::Engine;

use crate::config::{EndpointConfig, SRQ_SLACK};
use crate::proto::{Delivery, Parts};
use crate::{Error, Result};

/// How often the progress thread runs timers and teardown when nothing else wakes it, and
/// at most how long it leaves a connection being set up or torn down unlooked at.
const TICK: Duration = Duration::from_millis(5);

/// How long the progress thread may sleep between timer runs when it does not poll (it
/// stands aside, or a reactor polls) and no deadline is nearer: it need not wake every
/// [`TICK`], taking a core from the threads that poll.
const IDLE_TICK: Duration = Duration::from_millis(100);

/// The shortest sleep before the next timer run.
const MIN_TICK: Duration = Duration::from_micros(100);

/// Idle turns of a busy progress thread between two yields of its core: a thread waiting
/// for the core (an application thread just started) runs soon, not at the next tick.
const IDLE_TURNS_PER_YIELD: u32 = 32;

/// How long the CM thread waits before it reads again from a channel that failed a read.
const CM_RETRY: Duration = Duration::from_millis(50);

/// A reactor that polled or armed the queue this recently counts as driving progress: the
/// progress thread's fallback poll ([`Polling::Reactor`]) waits until it has been quiet this
/// long.
const REACTOR_QUIET: Duration = Duration::from_secs(1);

/// Application threads that polled the queue this recently count as polling: the progress
/// thread stands aside (busy and adaptive), for at most this long after their last poll.
const CALLERS_ACTIVE: Duration = Duration::from_micros(500);

/// The longest the progress thread naps while standing aside for callers that keep polling
/// (without a spinning caller). Its naps start at [`CALLERS_ACTIVE`] and double while the
/// callers keep at it: waking every 500 us beside a streaming sender cost it a context switch
/// pair each time, and the scheduler's moves that came with them. Whoever waits without
/// polling unparks it at once ([`Shared::wake_progress`]), so only a completion nobody waits
/// for can sit this long.
const ASIDE_NAP_MAX: Duration = Duration::from_millis(20);

/// Tasks the engines of this process woke so far: a task busy-polling for its connection
/// stops when this moves, since other tasks then have work for an executor, maybe its own
/// thread (two endpoints of one process on a current-thread runtime: the peer's task can
/// only run once the spinning one yields).
pub(crate) static TASK_WAKES: AtomicU64 = AtomicU64::new(0);

/// Wakes a task waiting on the engine, counted in [`TASK_WAKES`].
pub(crate) fn wake_task(waker: std::task::Waker) {
    TASK_WAKES.fetch_add(1, Ordering::Relaxed);
    waker.wake();
}

/// Wakes (and empties) `wakers`, each through [`wake_task`].
pub(crate) fn wake_tasks(wakers: &mut Vec<std::task::Waker>) {
    if !wakers.is_empty() {
        wakers.drain(..).for_each(wake_task);
    }
}

/// Everything an endpoint's connections share.
#[derive(Debug)]
pub(crate) struct Shared {
    pub cfg: EndpointConfig,
    pub local_ip: IpAddr,
    pub pd: Pd,
    pub cq: Cq,
    pub srq: Srq,
    /// The SRQ's receives, all of it: a receive buffer is found again by the slot its
    /// completion's `wr_id` names.
    pub recv_ring: RecvRing<Buffer>,
    /// Buffers of sends, rendezvous chunks, READ destinations and control frames.
    pub pool: Pool,
    /// Receive buffers only, sized for every receive posted plus every message the
    /// application may hold (credits bound both), so reposting a receive never fails for
    /// lack of memory the data path took: a missing receive would mean RNR.
    pub recv_pool: Pool,
    /// Receive buffers of messages the application dropped, posted again before any buffer
    /// is taken from `recv_pool`: in steady state a receive buffer goes from the SRQ to a
    /// message and back without the pool's bookkeeping (the pool's free and alloc cost
    /// more than keeping the buffer, the free on the path of a caller that drops a
    /// message before its next send). Its capacity is every buffer the pool can hold, so
    /// keeping one never allocates.
    recycled: Mutex<Vec<Buffer>>,
    /// CM events of every id of the endpoint arrive here: connects and accepts in progress,
    /// listeners, and established connections (disconnects).
    pub cm_channel: cm::EventChannel,
    /// Connects, accepts and listeners in progress, by id ([`cm_ops`]).
    cm_ops: Mutex<cm_ops::CmOps>,
    /// Stops the thread serving `cm_channel`, which otherwise sleeps until an event comes.
    cm_stop: cm::Wakeup,
    /// Connections by QP number. Change it only through [`add_conn`](Shared::add_conn) and
    /// [`remove_conns`](Shared::remove_conns), which keep `conns_gen` in step.
    pub conns: RwLock<FxHashMap<u32, Arc<ConnShared>>>,
    /// Bumped after every change of `conns`: the poller's cached connection is good while it
    /// stays the same.
    conns_gen: AtomicU64,
    /// How many connections `conns` holds, for readers that may not take its lock (one who
    /// holds a connection's state lock: the ticker locks states under the map's lock).
    conn_count: AtomicUsize,
    progress: Mutex<Progress>,
    /// Receives owed to the SRQ: consumed and not yet replaced (replacing waits for an idle
    /// poll), or not posted because the pool had no buffer.
    pub(crate) srq_deficit: AtomicU32,
    /// Receives the SRQ holds beyond every connection's window: how many may be owed before
    /// they are replaced at once.
    srq_slack: u32,
    pub stop: AtomicBool,
    /// Threads polling the completion queue themselves while they wait ([`Spinning`]); the
    /// progress thread stands aside (timers only) while there is one, so it takes no core
    /// from them.
    spinners: AtomicU32,
    /// A task spins in its poll ([`Spinning::task`]): one at a time per endpoint. It polls
    /// the queue for every connection, and the tasks it wakes run next on its executor
    /// thread, without a handoff; more spinning tasks would take turns holding executor
    /// threads (and cores) from each other.
    task_spinning: AtomicBool,
    /// The progress thread stands aside (parked) for a spinning waiter: whoever starts
    /// waiting without spinning (a thread going to sleep, a task registering its waker)
    /// unparks it through [`wake_progress`](Shared::wake_progress).
    standing_aside: AtomicBool,
    /// An application thread polled the queue since the progress thread last looked (and
    /// nobody waited without polling since): while they poll, the progress thread stands
    /// aside too. A flag, not a time: a poll costs a store, no look at the clock.
    caller_polled: AtomicBool,
    /// When (after `epoch`) a reactor last polled or armed the queue (0: never).
    reactor_polled: AtomicU64,
    epoch: Instant,
    /// The progress thread, unparked by [`wake_progress`](Shared::wake_progress).
    progress_thread: OnceLock<std::thread::Thread>,
    /// The task driving progress from a reactor ([`Polling::Reactor`]), woken when the
    /// endpoint stops.
    pub(crate) reactor_waker: Mutex<Option<std::task::Waker>>,
    /// Tokio driver tasks alive (spawned and not yet dropped): while there is one, it polls
    /// for the endpoint and the progress thread only runs the timers, as under
    /// [`Polling::Reactor`], whatever the configured mode.
    pub(crate) drivers: AtomicUsize,
    /// Held while a driver task is spawned for the endpoint (one at a time).
    pub(crate) driver_spawn: Mutex<()>,
    /// Completions handled, by who polled them.
    pub(crate) counts: Counts,
    /// Tasks waiting for something no connection signals (pool buffers): woken every tick.
    pub(crate) tick_wakers: Mutex<Vec<std::task::Waker>>,
    /// A task joined `tick_wakers`: the next tick comes within [`TICK`] of the last.
    pub(crate) tick_soon: AtomicBool,
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
        let dev = ctx.query_device()?;
        let srq_depth = cfg.srq_depth().min(dev.max_srq_wr().saturating_sub(1));
        let srq_slack = SRQ_SLACK.min(dev.max_srq_wr().saturating_sub(1) - srq_depth);
        let cq_depth = cfg.cq_depth().min(dev.max_cqe());
        if cq_depth < cfg.cq_depth() || srq_depth < cfg.srq_depth() {
            return Err(Error::Config(format!(
                "the device allows {} CQ entries and {} SRQ receives, but max_connections {} \
                 with window {} need {} and {}: lower max_connections or window",
                dev.max_cqe(),
                dev.max_srq_wr(),
                cfg.max_connections,
                cfg.proto.window,
                cfg.cq_depth(),
                cfg.srq_depth()
            )));
        }
        let pd = match pd {
            Some(pd) => {
                let theirs = pd.context().name().to_string();
                if theirs != ctx.name() {
                    return Err(Error::Config(format!(
                        "the protection domain is on device {theirs}, but {local_ip} is served \
                         by {}: allocate it on the device of that address \
                         (verbs::Context::open_by_addr)",
                        ctx.name()
                    )));
                }
                pd
            }
            None => ctx.alloc_pd()?,
        };
        // The CQ and SRQ go on the PD's context: queue pairs need all three on one.
        let ctx = pd.context();
        let channel = ctx.create_comp_channel()?;
        let cq = ctx.create_cq(cq_depth, Some(channel))?;
        let srq = pd.create_srq(srq_depth + srq_slack, 1)?;
        let recv_ring = srq.recv_ring(srq.max_wr())?;
        let needed = PoolAccess::LOCAL_WRITE | PoolAccess::REMOTE_READ;
        let pool = match pool {
            Some(pool) if !pool.access().contains(needed) => {
                return Err(Error::Config(format!(
                    "the pool's access is {:?}; the transport needs LOCAL_WRITE | REMOTE_READ \
                     (peers read rendezvous chunks from it)",
                    pool.access()
                )))
            }
            Some(pool) => pool,
            None => Pool::on_pd(
                &pd,
                PoolConfig::new().cap_bytes(cfg.pool_bytes).access(needed),
            )?,
        };
        let frame = cfg.proto.frame_size as usize;
        let frame_class = frame.next_multiple_of(64);
        let recv_bytes =
            (2 * srq_depth as usize + srq_slack as usize + 64) * frame_class + (4 << 20);
        let recv_pool = Pool::on_pd(
            &pd,
            PoolConfig::new()
                .classes([ClassConfig::new(frame_class)])
                .cap_bytes(recv_bytes),
        )?;
        let shared = Arc::new(Shared {
            recv_pool,
            recycled: Mutex::new(Vec::with_capacity(recv_bytes / frame_class)),
            local_ip,
            pd,
            cq,
            srq,
            recv_ring,
            pool,
            cm_channel: cm::EventChannel::new()?,
            cm_ops: Mutex::new(cm_ops::CmOps::default()),
            cm_stop: cm::Wakeup::new().map_err(cm::Error::CreateChannel)?,
            conns: RwLock::new(FxHashMap::default()),
            conns_gen: AtomicU64::new(0),
            conn_count: AtomicUsize::new(0),
            progress: Mutex::new(Progress {
                wcs: CompletionBuf::new(64),
                reclaimed: Vec::with_capacity(64),
                last: None,
            }),
            srq_deficit: AtomicU32::new(0),
            srq_slack,
            stop: AtomicBool::new(false),
            spinners: AtomicU32::new(0),
            task_spinning: AtomicBool::new(false),
            caller_polled: AtomicBool::new(false),
            reactor_polled: AtomicU64::new(0),
            epoch: Instant::now(),
            standing_aside: AtomicBool::new(false),
            progress_thread: OnceLock::new(),
            tick_wakers: Mutex::new(Vec::new()),
            tick_soon: AtomicBool::new(false),
            reactor_waker: Mutex::new(None),
            drivers: AtomicUsize::new(0),
            driver_spawn: Mutex::new(()),
            counts: Counts::default(),
            _anchor: anchor,
            cfg,
        });
        shared.post_receives(srq_depth + srq_slack)?;
        Ok(shared)
    }

    /// Posts `n` receive buffers of the frame size on the SRQ; what the pool cannot give is
    /// owed (retried on every progress call).
    fn post_receives(&self, n: u32) -> Result<()> {
        let frame = self.cfg.proto.frame_size as usize;
        for i in 0..n {
            let kept = self.recycled.lock().pop();
            let buf = match kept.map_or_else(|| self.recv_pool.try_alloc(frame), Ok) {
                Ok(b) => b,
                Err(_) => {
                    self.srq_deficit.fetch_add(n - i, Ordering::Relaxed);
                    return Ok(());
                }
            };
            self.recv_ring.post(buf).map_err(|e| e.error)?;
        }
        Ok(())
    }

    /// Drops a delivered message, keeping an eager message's receive buffer for the next
    /// receive posted; returns whether the drop must be reported to the protocol
    /// ([`Delivery::release`](crate::proto::Delivery::release)).
    pub(crate) fn release_delivery(&self, d: Delivery<Buffer>) -> bool {
        match d.parts {
            Parts::Eager(buf) | Parts::Bare(buf) => {
                self.recycle(buf);
                true
            }
            parts => Delivery { parts, ..d }.release(),
        }
    }

    /// Keeps `buf`, a receive buffer of the frame size, for the next receive posted (or
    /// gives it back to the pool if it is not one).
    fn recycle(&self, buf: Buffer) {
        if buf.len() != self.cfg.proto.frame_size as usize {
            return;
        }
        let mut kept = self.recycled.lock();
        if kept.len() < kept.capacity() {
            kept.push(buf);
        }
    }

    fn repay_receives(&self) {
        let owed = self.srq_deficit.swap(0, Ordering::Relaxed);
        if owed > 0 {
            let _ = self.post_receives(owed);
        }
    }

    /// A buffer of `len` bytes from the pool, waiting up to `timeout`. Before it waits, the
    /// progress thread is woken: the buffers it waits for may be held by send completions
    /// that nobody else polls.
    pub(crate) fn alloc(&self, len: usize, timeout: Duration) -> Result<Buffer> {
        match self.pool.try_alloc(len) {
            Ok(buf) => Ok(buf),
            Err(memory::Error::Exhausted { .. }) => {
                self.wake_progress();
                self.pool.alloc(len, timeout).map_err(pool_error)
            }
            Err(e) => Err(pool_error(e)),
        }
    }

    /// Adds a connection, known by its QP number from now on.
    pub(crate) fn add_conn(&self, conn: Arc<ConnShared>) {
        let mut map = self.conns.write();
        map.insert(conn.qp.qp_num(), conn);
        self.conn_count.store(map.len(), Ordering::Relaxed);
        drop(map);
        self.conns_gen.fetch_add(1, Ordering::Release);
    }

    /// How many connections the endpoint has (lock-free).
    pub(crate) fn conn_count(&self) -> usize {
        self.conn_count.load(Ordering::Relaxed)
    }

    /// Removes the connections of `qp_nums`, and lets go of the poller's cached one (it would
    /// keep a removed connection's queue pair alive).
    pub(crate) fn remove_conns(&self, qp_nums: impl IntoIterator<Item = u32>) {
        {
            let mut map = self.conns.write();
            for qpn in qp_nums {
                map.remove(&qpn);
            }
            self.conn_count.store(map.len(), Ordering::Relaxed);
        }
        self.conns_gen.fetch_add(1, Ordering::Release);
        self.progress.lock().last = None;
    }
}

/// Copies `data` into a pool buffer with header room first: the frame of an eager message.
pub(crate) fn frame_from(
    shared: &Shared,
    data: &[u8],
    timeout: Option<Duration>,
) -> Result<Buffer> {
    let len = crate::proto::HEADER_LEN + data.len();
    let mut buf = match timeout {
        None => shared.pool.try_alloc(len).map_err(pool_error)?,
        Some(t) => shared.alloc(len, t)?,
    };
    buf[crate::proto::HEADER_LEN..].copy_from_slice(data);
    Ok(buf)
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
}
