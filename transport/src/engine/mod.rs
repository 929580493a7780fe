//! The progress engine: one completion queue and one shared receive queue for every
//! connection of an endpoint, a pool for all their buffers, and a thread that polls (busy,
//! event or adaptive), runs the protocol timers and tears down ended connections.
//!
//! Waiting threads drive progress themselves when they can (whoever holds the progress lock
//! polls), so a blocked call sees its completion without a thread handoff; the progress thread
//! covers everything else and wakes waiters through their connection's condition variable or
//! `Waker`s.

mod batch;
mod conn;
mod spin;

use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use memory::{Buffer, ClassConfig, Pool, PoolAccess, PoolConfig};
use parking_lot::{Mutex, RwLock};
use rustc_hash::FxHashMap;
use verbs::{CompletionBuf, Cq, Pd, Reclaimed, RecvRing, Srq, WorkCompletion};

pub(crate) use conn::{ConnShared, ConnState, SqOp};
pub(crate) use spin::{SpinBudget, GROWTH};

use crate::config::{EndpointConfig, Polling, SRQ_SLACK};
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
    /// CM events (disconnects) of every established connection arrive here.
    pub cm_channel: cm::EventChannel,
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

    /// Whether application threads poll the queue now (one spins in a call, or one polled
    /// since the progress thread's last nap began): the progress thread then stands aside.
    fn callers_poll(&self) -> bool {
        self.spinners.load(Ordering::SeqCst) > 0 || self.caller_polled.load(Ordering::Relaxed)
    }

    /// Whether `stamp` was recorded less than `window` ago (never, if it is 0).
    fn within(&self, stamp: &AtomicU64, window: Duration) -> bool {
        let at = stamp.load(Ordering::Relaxed);
        at > 0
            && (self.epoch.elapsed().as_nanos() as u64).saturating_sub(at)
                < window.as_nanos() as u64
    }

    /// Makes sure the progress thread polls: call before waiting without polling yourself
    /// (sleeping, or returning `Pending` with a waker registered). Costs a store and a load
    /// unless the progress thread stood aside for polling callers.
    pub(crate) fn wake_progress(&self) {
        // Someone now depends on the progress thread: earlier polls by callers no longer
        // excuse it (a spinning caller still does).
        self.caller_polled.store(false, Ordering::Relaxed);
        if self.standing_aside.load(Ordering::SeqCst) {
            self.unpark_progress();
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

    /// Polls the completion queue once and handles what it finds; returns how many
    /// completions. Does nothing (0) while another thread is polling.
    pub(crate) fn progress(&self) -> usize {
        self.caller_polled.store(true, Ordering::Relaxed);
        self.caller_poll()
    }

    /// One poll by an application thread, counted as the callers'.
    fn caller_poll(&self) -> usize {
        let n = self.try_poll();
        if n > 0 {
            self.counts.callers.fetch_add(n as u64, Ordering::Relaxed);
        }
        n
    }

    /// [`progress`](Self::progress) without counting (the progress thread counts its own).
    fn try_poll(&self) -> usize {
        match self.progress.try_lock() {
            Some(guard) => self.poll_with(guard),
            None => 0,
        }
    }

    /// One poll by a reactor's spin (counted as the reactor's); 0 while another polls. A
    /// reactor that found completions records when with
    /// [`reactor_drove_at`](Self::reactor_drove_at) (it reads the clock for its spin anyway).
    #[cfg_attr(not(feature = "tokio"), allow(dead_code))]
    pub(crate) fn reactor_poll(&self) -> usize {
        let n = self.try_poll();
        if n > 0 {
            self.counts.reactor.fetch_add(n as u64, Ordering::Relaxed);
        }
        n
    }

    /// A reactor drove progress at `at` (see [`reactor_active`](Self::reactor_active)):
    /// recorded as nanoseconds after `epoch`, at least 1 (0 means never).
    pub(crate) fn reactor_drove_at(&self, at: Instant) {
        let at = at.saturating_duration_since(self.epoch).as_nanos() as u64;
        self.reactor_polled.store(at.max(1), Ordering::Relaxed);
    }

    /// Whether a reactor drives progress: the endpoint polls [`Polling::Reactor`], or a tokio
    /// driver task lives.
    pub(crate) fn reactor_drives(&self) -> bool {
        matches!(self.cfg.polling, Polling::Reactor { .. })
            || self.drivers.load(Ordering::Relaxed) > 0
    }

    /// Whether a reactor drove progress within [`REACTOR_QUIET`].
    fn reactor_active(&self) -> bool {
        self.within(&self.reactor_polled, REACTOR_QUIET)
    }

    /// The completion channel's fd (every endpoint's CQ has one).
    pub(crate) fn channel_fd(&self) -> std::os::fd::RawFd {
        self.cq
            .channel_fd()
            .expect("an endpoint's completion queue has a channel")
    }

    /// The completion channel is readable (or may be): consumes and acknowledges every
    /// event on it, re-arms the queue, then polls until it is empty (a completion that came
    /// before the re-arm raised no event). Lossless whatever the reactor's wakeups: a
    /// spurious call only polls. Returns the completions handled.
    pub(crate) fn on_channel_ready(&self) -> usize {
        while matches!(self.cq.get_event(Some(Duration::ZERO)), Ok(true)) {}
        self.cq.ack_events();
        let _ = self.cq.req_notify(false);
        let mut total = 0;
        loop {
            let n = self.progress_after_arm();
            if n == 0 {
                break;
            }
            total += n;
        }
        self.counts
            .reactor
            .fetch_add(total as u64, Ordering::Relaxed);
        self.reactor_drove_at(Instant::now());
        total
    }

    /// Polls once, waiting for the progress lock if another thread holds it (so every
    /// completion queued before the call is seen, by this poll or by the other thread's).
    /// Waits by yielding, not parking: a poll is short, and the first time a thread parks on
    /// a lock, parking_lot allocates its bookkeeping, which would land in the data path at
    /// a random moment.
    fn progress_after_arm(&self) -> usize {
        let guard = match self.progress.try_lock() {
            Some(guard) => guard,
            None => self.wait_progress_lock(),
        };
        self.poll_with(guard)
    }

    /// Yields until the progress lock is free, and takes it: the wait of
    /// [`progress_after_arm`](Self::progress_after_arm), a function of its own so that a
    /// profile (the cost bench) can tell waiting from work.
    #[inline(never)]
    fn wait_progress_lock(&self) -> parking_lot::MutexGuard<'_, Progress> {
        loop {
            std::thread::yield_now();
            if let Some(guard) = self.progress.try_lock() {
                return guard;
            }
        }
    }

    fn count_thread(&self, n: usize) {
        if n > 0 {
            self.counts
                .progress_thread
                .fetch_add(n as u64, Ordering::Relaxed);
        }
    }

    /// Handles every completion queued now, waiting for the poller if another thread polls.
    fn progress_all(&self) {
        while self.poll_with(self.progress.lock()) > 0 {}
    }

    fn poll_with(&self, mut guard: parking_lot::MutexGuard<'_, Progress>) -> usize {
        let Progress {
            wcs,
            reclaimed,
            last,
        } = &mut *guard;
        let Ok(polled) = self.cq.poll(wcs) else {
            return 0;
        };
        let n = polled.len();
        for wc in polled.iter() {
            self.on_completion(wc, reclaimed, last);
        }
        drop(guard);
        // Nothing came: replace the receives taken since the last idle poll (and what the
        // pool could not give before), off the path of the frames themselves.
        if n == 0 && self.srq_deficit.load(Ordering::Relaxed) > 0 {
            self.repay_receives();
        }
        n
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

    /// The connection of QP `qp_num`: the cached one while no connection came or went since
    /// it was looked up, else from the map (and cached). Inlined into the poll of every
    /// completion, as [`ConnShared::wake`] is into every drive.
    #[inline(always)]
    fn conn_of<'c>(
        &self,
        last: &'c mut Option<LastConn>,
        qp_num: u32,
    ) -> Option<&'c Arc<ConnShared>> {
        // Read before the map: a change after this read bumps it again, so a stale entry is
        // never taken for current.
        let gen = self.conns_gen.load(Ordering::Acquire);
        let current = last
            .as_ref()
            .is_some_and(|l| l.qp_num == qp_num && l.gen == gen);
        if !current {
            let conn = self.conns.read().get(&qp_num).cloned()?;
            *last = Some(LastConn { qp_num, gen, conn });
        }
        last.as_ref().map(|l| &l.conn)
    }

    fn on_completion(
        &self,
        wc: &WorkCompletion,
        reclaimed: &mut Vec<Reclaimed>,
        last: &mut Option<LastConn>,
    ) {
        if let Some(buf) = self.recv_ring.reclaim(wc) {
            // A receive: it is replaced later, on an idle poll, unless `srq_slack` are owed
            // now. The SRQ holds that many beyond every credit granted, so the receives owed
            // never leave a credit without a receive behind it.
            if self.srq_deficit.fetch_add(1, Ordering::Relaxed) + 1 >= self.srq_slack {
                self.repay_receives();
            }
            let conn = self.conn_of(last, wc.qp_num());
            if let (Some(conn), Ok(())) = (conn, wc.status()) {
                let mut st = conn.state.lock();
                conn.on_frame(&mut st, buf, wc.byte_len() as usize, wc.imm());
            }
            return;
        }
        let Some(conn) = self.conn_of(last, wc.qp_num()) else {
            return;
        };
        reclaimed.clear();
        conn.qp.reclaim_into(wc, reclaimed);
        let mut st = conn.state.lock();
        conn.on_send_completion(&mut st, wc.wr_id(), wc.status(), reclaimed.drain(..));
    }

    /// Runs the protocol timers of every connection and tears down those that ended; returns
    /// when it needs to run next: the earliest protocol deadline, within [`TICK`] while a
    /// connection is being set up or torn down or a task waits for the pool, and within
    /// [`IDLE_TICK`] in any case.
    /// Allocates nothing unless a connection goes (`gone` is the caller's reused list).
    fn tick(&self, now: Instant, gone: &mut Vec<u32>) -> Instant {
        gone.clear();
        let mut next = now + IDLE_TICK;
        let soon = now + TICK;
        let mut waiting = std::mem::take(&mut *self.tick_wakers.lock());
        if !waiting.is_empty() {
            next = soon;
        }
        wake_tasks(&mut waiting);
        for conn in self.conns.read().values() {
            let mut st = conn.state.lock();
            if let Some(p) = st.proto.as_mut() {
                if p.poll_timeout().is_some_and(|t| t <= now) {
                    p.on_timeout(now);
                    conn.drive(&mut st);
                }
            }
            match st.proto.as_ref() {
                Some(p) => {
                    if let Some(t) = p.poll_timeout() {
                        next = next.min(t);
                    }
                }
                None => next = next.min(soon),
            }
            if st.end.is_some() {
                next = next.min(soon);
                // Kept frame buffers go back to the pool: the connection sends no more.
                st.spare_frames.clear();
                if st.teardown.is_none() && st.ready_for_teardown(now) {
                    st.teardown = Some(now);
                    // Flush what is still queued; the peer learns through the CM.
                    let _ = conn.qp.to_error();
                    let _ = conn.id.disconnect();
                    conn.wake(&mut st);
                }
                if st.teardown.is_some() && st.drained(now) {
                    gone.push(conn.qp.qp_num());
                }
            }
        }
        if !gone.is_empty() {
            self.remove_conns(gone.drain(..));
        }
        next.max(now + MIN_TICK)
    }

    /// Has the progress thread run its timers within [`TICK`] even if they are far off (it
    /// may sleep up to [`IDLE_TICK`]): for a task waiting on a tick, or a connection that
    /// ended and is to be torn down (its slot is taken until then).
    pub(crate) fn tick_soon(&self) {
        self.tick_soon.store(true, Ordering::Relaxed);
        self.unpark_progress();
    }

    /// Unparks the progress thread whatever it waits for (to stop, or to run the timers).
    pub(crate) fn unpark_progress(&self) {
        if let Some(t) = self.progress_thread.get() {
            t.unpark();
        }
    }

    /// A CM event of an established connection (a disconnect).
    fn on_cm_event(&self, ev: &cm::CmEvent) {
        let Some(id) = ev.id() else { return };
        if !matches!(
            ev.kind(),
            Ok(cm::EventKind::Disconnected | cm::EventKind::DeviceRemoval)
        ) {
            return;
        }
        let conn = self
            .conns
            .read()
            .values()
            .find(|c| c.id.as_raw() == id.as_raw())
            .cloned();
        if let Some(conn) = conn {
            // What the peer sent before disconnecting is already in the completion queue
            // (its device acknowledged it first): handle it before the disconnect.
            self.progress_all();
            let mut st = conn.state.lock();
            match st.proto.as_mut() {
                // The end of stream if the peer closed and nothing it announced is missing,
                // else a failure (the protocol decides).
                Some(p) => p.on_peer_gone(crate::proto::PeerGone::Disconnected),
                None => {
                    st.end.get_or_insert(Some(crate::proto::ConnError::PeerGone(
                        crate::proto::PeerGone::Disconnected,
                    )));
                }
            }
            conn.drive(&mut st);
        }
    }
}

/// Completions handled, by who polled them (see [`ProgressCounts`](crate::ProgressCounts)).
#[derive(Debug, Default)]
pub(crate) struct Counts {
    pub progress_thread: AtomicU64,
    pub reactor: AtomicU64,
    pub callers: AtomicU64,
}

/// A thread that polls the completion queue itself while it waits (busy or adaptive
/// polling): while one exists, the progress thread runs only the timers. A spinner that stops
/// to sleep calls [`Shared::wake_progress`] first; one whose wait ended needs not.
pub(crate) struct Spinning<'a> {
    shared: &'a Shared,
    /// It holds the endpoint's one task slot (`task_spinning`).
    task: bool,
}

impl<'a> Spinning<'a> {
    pub(crate) fn new(shared: &'a Shared) -> Self {
        shared.spinners.fetch_add(1, Ordering::SeqCst);
        Spinning {
            shared,
            task: false,
        }
    }

    /// A spinning async task, if no other task of the endpoint spins now.
    pub(crate) fn task(shared: &'a Shared) -> Option<Self> {
        shared
            .task_spinning
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .ok()?;
        let mut spinning = Spinning::new(shared);
        spinning.task = true;
        Some(spinning)
    }

    /// One poll of the spinner's ([`Shared::progress`] without the time stamp: while it
    /// spins, the progress thread stands aside anyway).
    pub(crate) fn poll(&self) -> usize {
        self.shared.caller_poll()
    }
}

impl Drop for Spinning<'_> {
    fn drop(&mut self) {
        // Its last poll counts as recent, as a caller's poll does.
        self.shared.caller_polled.store(true, Ordering::Relaxed);
        self.shared.spinners.fetch_sub(1, Ordering::SeqCst);
        if self.task {
            self.shared.task_spinning.store(false, Ordering::Release);
        }
    }
}

/// The endpoint's threads; stopping them when the last handle goes breaks the reference cycle
/// between the shared state and its connections.
#[derive(Debug)]
pub(crate) struct Engine {
    pub shared: Arc<Shared>,
    threads: Vec<JoinHandle<()>>,
}

impl Engine {
    pub(crate) fn start(shared: Arc<Shared>) -> Result<Arc<Engine>> {
        let progress = {
            let shared = shared.clone();
            std::thread::Builder::new()
                .name("transport-progress".into())
                .spawn(move || progress_loop(&shared))
                .map_err(Error::Thread)?
        };
        let _ = shared.progress_thread.set(progress.thread().clone());
        let cm = {
            let shared = shared.clone();
            std::thread::Builder::new()
                .name("transport-cm".into())
                .spawn(move || {
                    // Sleeps until an event comes or the endpoint stops: an idle endpoint's
                    // CM thread never wakes.
                    while !shared.stop.load(Ordering::Relaxed) {
                        match shared.cm_channel.get_event_unless(&shared.cm_stop, None) {
                            Ok(Some(ev)) => shared.on_cm_event(&ev),
                            Ok(None) => {}
                            // Whatever broke the channel, do not spin on it.
                            Err(_) => std::thread::sleep(CM_RETRY),
                        }
                    }
                })
                .map_err(Error::Thread)?
        };
        Ok(Arc::new(Engine {
            shared,
            threads: vec![progress, cm],
        }))
    }
}

/// How long dropping the last handle of an endpoint waits for its connections to finish
/// closing gracefully (their last messages delivered) before cutting them.
pub const LINGER: Duration = Duration::from_secs(2);

impl Drop for Engine {
    fn drop(&mut self) {
        // Let connections that are closing (their handles dropped, CLOSE queued behind the
        // last messages) finish, and what they sent reach the peer, so nothing sent is lost,
        // within a bound.
        let deadline = Instant::now() + LINGER;
        while Instant::now() < deadline {
            let open = self
                .shared
                .conns
                .read()
                .values()
                .any(|c| !c.state.lock().settled());
            if !open {
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        self.shared.stop.store(true, Ordering::Relaxed);
        self.shared.cm_stop.wake();
        self.shared.unpark_progress();
        if let Some(w) = self.shared.reactor_waker.lock().take() {
            w.wake();
        }
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
        // End every connection still known, and let go of them (they hold the shared state).
        let conns: Vec<_> = self.shared.conns.read().values().cloned().collect();
        self.shared
            .remove_conns(conns.iter().map(|c| c.qp.qp_num()));
        for conn in conns {
            let mut st = conn.state.lock();
            let _ = conn.qp.to_error();
            let _ = conn.id.disconnect();
            st.end.get_or_insert(Some(crate::proto::ConnError::PeerGone(
                crate::proto::PeerGone::Disconnected,
            )));
            conn.wake(&mut st);
        }
    }
}

/// When the progress thread runs the timers ([`Shared::tick`]) next, and when it last did.
struct Timers {
    next: Instant,
    last: Instant,
    /// Connections gone at the last run (reused, so a run allocates nothing).
    gone: Vec<u32>,
}

impl Timers {
    fn new() -> Self {
        let now = Instant::now();
        Timers {
            next: now,
            last: now,
            gone: Vec::with_capacity(16),
        }
    }

    /// Runs the timers if they are due at `now`; returns whether they ran.
    fn run_if_due(&mut self, shared: &Shared, now: Instant) -> bool {
        if now < self.next {
            return false;
        }
        self.next = shared.tick(now, &mut self.gone);
        self.last = now;
        true
    }

    /// How long from `now` until the next run.
    fn until_next(&self, now: Instant) -> Duration {
        self.next.saturating_duration_since(now)
    }
}

fn progress_loop(shared: &Shared) {
    let mut timers = Timers::new();
    let mut idle_since: Option<Instant> = None;
    // How long to nap while callers poll: grows from CALLERS_ACTIVE to ASIDE_NAP_MAX.
    let mut nap = CALLERS_ACTIVE;
    let mut idle_turns = 0u32;
    while !shared.stop.load(Ordering::Relaxed) {
        if shared.tick_soon.load(Ordering::Relaxed)
            && shared.tick_soon.swap(false, Ordering::Relaxed)
        {
            timers.next = timers.next.min(timers.last + TICK);
        }
        let spins = matches!(shared.cfg.polling, Polling::Busy | Polling::Adaptive { .. });
        if spins && shared.callers_poll() {
            // Application threads poll the queue themselves (for everyone): leave the core
            // to them and run the timers when due, until someone waits without polling
            // (`wake_progress`) or they stop polling.
            let now = Instant::now();
            timers.run_if_due(shared, now);
            let until_tick = timers.until_next(now);
            shared.standing_aside.store(true, Ordering::SeqCst);
            if shared.spinners.load(Ordering::SeqCst) > 0 {
                std::thread::park_timeout(until_tick);
            } else if shared.caller_polled.swap(false, Ordering::Relaxed) {
                // Callers polled since the last look (and nobody waited without polling
                // since, which clears the flag): nap, and look again whether they polled
                // during the nap.
                std::thread::park_timeout(nap.min(until_tick));
                nap = (nap * 2).min(ASIDE_NAP_MAX);
            }
            shared.standing_aside.store(false, Ordering::SeqCst);
            idle_since = None;
            continue;
        }
        nap = CALLERS_ACTIVE;
        if shared.reactor_drives() {
            // A reactor waits on the channel. Poll once per tick in case none does, but not
            // while one is at work: a completion taken here would wake its task from this
            // thread, a handoff the reactor avoids. Meanwhile wake only for the timers.
            let active = shared.reactor_active();
            if !active {
                let n = shared.try_poll();
                shared.count_thread(n);
            }
            let now = Instant::now();
            timers.run_if_due(shared, now);
            let until_tick = timers.until_next(now);
            std::thread::park_timeout(if active {
                until_tick
            } else {
                until_tick.min(TICK)
            });
            continue;
        }
        let n = shared.try_poll();
        shared.count_thread(n);
        let now = Instant::now();
        // Protocol timers are seconds apart (keepalive, call deadlines): a tick every few
        // milliseconds serves them all without looking at every connection on every spin.
        if timers.run_if_due(shared, now) {
            timers.next = timers.next.min(now + TICK);
        }
        if n > 0 {
            idle_since = None;
            continue;
        }
        let idle = *idle_since.get_or_insert(now);
        // Without a connection nothing can complete: no spinning then (an endpoint that only
        // listens, or one setting up its first connection, would take a core from the
        // handshake itself).
        let sleep = match shared.cfg.polling {
            Polling::Busy => shared.conn_count() == 0,
            Polling::Event | Polling::Reactor { .. } => true,
            Polling::Adaptive { spin } => {
                now.duration_since(idle) >= spin || shared.conn_count() == 0
            }
        };
        if !sleep {
            // A busy poller that finds nothing lets any other thread waiting for this core
            // run now and then (an application thread just started, say), rather than only
            // when the scheduler's tick preempts it.
            idle_turns = idle_turns.wrapping_add(1);
            if idle_turns % IDLE_TURNS_PER_YIELD == 0 {
                std::thread::yield_now();
            } else {
                std::hint::spin_loop();
            }
            continue;
        }
        // Lossless sleep: arm, poll again (a completion may have come before arming), and
        // only then wait on the channel, no longer than the next tick. The poll after arming
        // waits for a thread polling at that moment and polls once more: that thread may
        // have looked at the queue before a completion that came before the arm (which raises
        // no event), and without this poll the completion would wait a whole tick.
        if shared.cq.req_notify(false).is_err() {
            std::thread::sleep(TICK);
            continue;
        }
        let n = shared.progress_after_arm();
        shared.count_thread(n);
        if n > 0 {
            idle_since = None;
            continue;
        }
        let _ = shared.cq.get_event(Some(TICK));
        shared.cq.ack_events();
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
