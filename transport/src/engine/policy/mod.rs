//! The polling policy, in one place: who polls the completion queue, and for how long before
//! it sleeps.
//!
//! The endpoint itself is a passive worker: [`Shared::progress`] polls the queue once and
//! handles what it finds, and [`Shared::on_channel_ready`] re-arms it behind its pollable
//! channel. Its drivers are interchangeable and all ask [`Policy`]:
//! - a waiting caller that polls while it waits: a blocked call
//!   ([`spin_until`](Policy::spin_until)) or an async task ([`task_spin`](Policy::task_spin)),
//!   counted as a [`Spinning`] while it does;
//! - the progress thread, which stands aside while callers poll
//!   ([`stand_aside`](Policy::stand_aside)), spins as the mode says
//!   ([`progress_sleeps`](Policy::progress_sleeps)), then sleeps on the channel;
//! - a reactor (the tokio driver task, or the application's), which spins
//!   [`driver_spin`](Policy::driver_spin) after its last completion.
//!
//! The mode ([`Polling`]) is the policy: busy spins, event sleeps at once, adaptive spins for
//! its `spin` then sleeps, reactor leaves the polling to a reactor. Four rules go beyond it,
//! each kept because a benchmark showed it pays (the figures where each is decided, and in
//! `docs/benchmarks.md`, "Figures behind the defaults"):
//! - adaptive polling stretches a connection's spin while its waits keep ending soon after
//!   the spin gave up ([`SpinBudget`]);
//! - the tokio driver of an adaptive endpoint spins [`GROWTH`] times the `spin`
//!   ([`driver_spin`](Policy::driver_spin));
//! - while a driver lives, only a lone connection's task spins
//!   ([`task_spin`](Policy::task_spin));
//! - a busy progress thread yields its core now and then ([`idle_turn`](Policy::idle_turn)).

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

mod spin;

pub(crate) use spin::{SpinBudget, GROWTH};

use super::Shared;
use crate::config::{EndpointConfig, Polling};

/// Turns of a spinning wait per look at the clock.
///
/// A spinning turn has no `spin_loop` hint (PAUSE): each turn already polls the completion
/// queue, and under emulation (qemu's TCG) a PAUSE leaves the translated code, making every
/// turn longer and the completion's discovery later. perftest's and rsocket's polling
/// loops have none either.
pub(crate) const SPIN_TURNS_PER_CLOCK: u32 = 8;

/// Idle turns of a busy progress thread between two yields of its core: a thread waiting for
/// the core (the sender of a one-way stream, an application thread just started) runs soon,
/// not at the scheduler's next tick. Kept because it pays: the 64 B one-way message rate under
/// busy polling (`cargo xtask bench transport`, medians of 3 rounds) measured 118,000 a second
/// with it against 84,000 and 91,000 without (two boots; single rounds ranged from 50,000 to
/// 181,000 either way), on the guest's 2 vCPUs.
const IDLE_TURNS_PER_YIELD: u32 = 32;

/// A reactor that polled or armed the queue this recently counts as driving progress: the
/// progress thread's fallback poll ([`Polling::Reactor`]) waits until it has been quiet this
/// long.
const REACTOR_QUIET: Duration = Duration::from_secs(1);

/// Application threads that polled the queue this recently count as polling: the progress
/// thread stands aside (busy and adaptive), napping this long between looks at whether they
/// still poll. Whoever waits without polling unparks it at once
/// ([`Policy::wake_progress`]), so only a completion nobody waits for can sit this long.
pub(super) const CALLERS_ACTIVE: Duration = Duration::from_micros(500);

/// Who polls an endpoint's completion queue now, and what the mode lets each driver do.
#[derive(Debug)]
pub(crate) struct Policy {
    mode: Polling,
    busy_read: Duration,
    /// Threads and tasks polling the queue themselves while they wait ([`Spinning`]); the
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
    /// unparks it through [`wake_progress`](Policy::wake_progress).
    standing_aside: AtomicBool,
    /// An application thread polled the queue since the progress thread last looked (and
    /// nobody waited without polling since): while they poll, the progress thread stands
    /// aside too. A flag, not a time: a poll costs a store, no look at the clock.
    caller_polled: AtomicBool,
    /// When (after `epoch`) a reactor last polled or armed the queue (0: never).
    reactor_polled: AtomicU64,
    epoch: Instant,
    /// The progress thread, unparked by [`wake_progress`](Policy::wake_progress).
    progress_thread: OnceLock<std::thread::Thread>,
    /// Tokio driver tasks alive (spawned and not yet dropped): while there is one, it polls
    /// for the endpoint and the progress thread only runs the timers, as under
    /// [`Polling::Reactor`], whatever the configured mode.
    drivers: AtomicUsize,
    /// The progress thread sleeps on the completion channel (until its next timer): whoever
    /// needs it to run before then rings [`channel_wakeup`](Self::channel_wakeup).
    sleeping_on_channel: AtomicBool,
    /// Wakes the progress thread from its sleep on the channel (`None` if no eventfd could
    /// be had: it then sleeps at most a [`TICK`](super::TICK) at a time).
    channel_wakeup: Option<verbs::sys::fd::Wakeup>,
    /// Held while a driver task is spawned for the endpoint (one at a time).
    #[cfg_attr(not(feature = "tokio"), allow(dead_code))]
    driver_spawn: Mutex<()>,
}

impl Policy {
    pub(super) fn new(cfg: &EndpointConfig) -> Self {
        Policy {
            mode: cfg.polling,
            busy_read: cfg.busy_read,
            spinners: AtomicU32::new(0),
            task_spinning: AtomicBool::new(false),
            standing_aside: AtomicBool::new(false),
            caller_polled: AtomicBool::new(false),
            reactor_polled: AtomicU64::new(0),
            epoch: Instant::now(),
            progress_thread: OnceLock::new(),
            drivers: AtomicUsize::new(0),
            sleeping_on_channel: AtomicBool::new(false),
            channel_wakeup: verbs::sys::fd::Wakeup::new().ok(),
            driver_spawn: Mutex::new(()),
        }
    }

    /// Whether the mode is [`Polling::Adaptive`].
    pub(crate) fn adaptive(&self) -> bool {
        matches!(self.mode, Polling::Adaptive { .. })
    }

    // ---- waiting callers ----

    /// Until when a blocked call that began at `start` (and ends at `deadline`) polls the
    /// queue itself before it sleeps until the progress thread wakes it: busy polling spins
    /// to the deadline, adaptive for the connection's `budget`, the others not at all.
    pub(crate) fn spin_until(
        &self,
        budget: Duration,
        start: Instant,
        deadline: Instant,
    ) -> Instant {
        match self.mode {
            Polling::Busy => deadline,
            Polling::Adaptive { .. } => start + budget,
            Polling::Event | Polling::Reactor { .. } => start,
        }
    }

    /// How long a waiting task that found nothing polls the queue itself before it
    /// registers its waker (`None`: it registers at once), its connection's adaptive spin
    /// being `budget`: [`busy_read`](crate::EndpointConfig::with_busy_read) when set; else,
    /// under adaptive polling, `budget`, unless the caller runs on tokio's current-thread
    /// runtime (`single_threaded`: the spin would hold the runtime's one thread from every
    /// other task), or a tokio driver serves an endpoint of several connections (`lone`
    /// false): the driver serves them all, and a spinning task would hold a runtime thread
    /// from it; a lone connection's task catches its own message without a wakeup
    /// (docs/benchmarks.md, "the tokio driver and a lone connection": 87 us against 301 us
    /// for the default echo). `lone` and `single_threaded` are asked only when needed.
    pub(crate) fn task_spin(
        &self,
        budget: Duration,
        lone: impl FnOnce() -> bool,
        single_threaded: impl FnOnce() -> bool,
    ) -> Option<Duration> {
        if !self.busy_read.is_zero() {
            return Some(self.busy_read);
        }
        let spins = self.adaptive()
            && !budget.is_zero()
            && (!self.reactor_drives() || lone())
            && !single_threaded();
        spins.then_some(budget)
    }

    /// Whether a task's spin is shared with no other task: only under `busy_read` does every
    /// waiting task spin; otherwise one task of the endpoint at a time ([`Spinning::task`]).
    pub(crate) fn every_task_spins(&self) -> bool {
        !self.busy_read.is_zero()
    }

    // ---- the progress thread ----

    /// Whether application threads poll the queue now (one spins in a call, or one polled
    /// since the progress thread's last nap began): the progress thread then stands aside.
    pub(super) fn callers_poll(&self) -> bool {
        self.spinners.load(Ordering::SeqCst) > 0 || self.caller_polled.load(Ordering::Relaxed)
    }

    /// A caller polled the queue (see [`callers_poll`](Self::callers_poll)).
    pub(super) fn caller_polled(&self) {
        self.caller_polled.store(true, Ordering::Relaxed);
    }

    /// Whether a spinning driver (busy or adaptive polling) is the progress thread.
    pub(super) fn progress_thread_spins(&self) -> bool {
        matches!(self.mode, Polling::Busy | Polling::Adaptive { .. })
    }

    /// The progress thread's wait while callers poll: parks up to `until_tick` while one
    /// spins, naps [`CALLERS_ACTIVE`] while callers polled since its last look, and returns
    /// at once when they stopped. Whoever waits without polling meanwhile unparks it
    /// ([`wake_progress`](Self::wake_progress)).
    pub(super) fn stand_aside(&self, until_tick: Duration) {
        self.standing_aside.store(true, Ordering::SeqCst);
        if self.spinners.load(Ordering::SeqCst) > 0 {
            std::thread::park_timeout(until_tick);
        } else if self.caller_polled.swap(false, Ordering::Relaxed) {
            // Callers polled since the last look (and nobody waited without polling since,
            // which clears the flag): nap, and look again whether they polled during it.
            std::thread::park_timeout(CALLERS_ACTIVE.min(until_tick));
        }
        self.standing_aside.store(false, Ordering::SeqCst);
    }

    /// Whether the progress thread, finding the queue empty for `idle` with `conns`
    /// connections, sleeps on the channel now (else it spins on). Without a connection
    /// nothing can complete: no spinning then (an endpoint that only listens, or one setting
    /// up its first connection, would take a core from the handshake itself).
    pub(super) fn progress_sleeps(&self, idle: Duration, conns: usize) -> bool {
        match self.mode {
            Polling::Busy => conns == 0,
            Polling::Event | Polling::Reactor { .. } => true,
            Polling::Adaptive { spin } => idle >= spin || conns == 0,
        }
    }

    /// One idle turn of a spinning progress thread (`turns` counts them): a spin hint, and
    /// every [`IDLE_TURNS_PER_YIELD`] turns a yield of its core.
    pub(super) fn idle_turn(&self, turns: &mut u32) {
        *turns = turns.wrapping_add(1);
        if *turns % IDLE_TURNS_PER_YIELD == 0 {
            std::thread::yield_now();
        } else {
            std::hint::spin_loop();
        }
    }

    /// The progress thread, unparked by [`wake_progress`](Self::wake_progress).
    pub(super) fn set_progress_thread(&self, t: std::thread::Thread) {
        let _ = self.progress_thread.set(t);
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

    /// Unparks the progress thread whatever it waits for (to stop, or to run the timers):
    /// parked, or asleep on the completion channel.
    pub(crate) fn unpark_progress(&self) {
        if let Some(t) = self.progress_thread.get() {
            t.unpark();
        }
        if self.sleeping_on_channel.load(Ordering::SeqCst) {
            if let Some(w) = &self.channel_wakeup {
                w.wake();
            }
        }
    }

    /// The progress thread's sleep once the queue is armed: on the completion channel `fd`
    /// until a completion comes, [`unpark_progress`](Self::unpark_progress) is called, or
    /// `timeout` (its next timer) passes; not at all if `wanted` (asked after the sleep is
    /// announced, so a request made meanwhile is seen either here or by the waker). Returns
    /// whether the channel is readable. An idle endpoint thus wakes for its timers only.
    pub(super) fn sleep_on_channel(
        &self,
        fd: std::os::fd::RawFd,
        timeout: Duration,
        wanted: impl Fn() -> bool,
    ) -> bool {
        use verbs::sys::fd::{wait_readable, wait_readable_or_woken, Ready};
        let Some(wakeup) = &self.channel_wakeup else {
            return wait_readable(fd, Some(timeout.min(super::TICK))).unwrap_or(false);
        };
        self.sleeping_on_channel.store(true, Ordering::SeqCst);
        let ready = if wanted() {
            Ready::Woken
        } else {
            wait_readable_or_woken(fd, wakeup, Some(timeout)).unwrap_or(Ready::TimedOut)
        };
        self.sleeping_on_channel.store(false, Ordering::SeqCst);
        wakeup.reset();
        ready == Ready::Readable
    }

    // ---- reactors ----

    /// Whether a reactor drives progress: the endpoint polls [`Polling::Reactor`], or a tokio
    /// driver task lives.
    pub(crate) fn reactor_drives(&self) -> bool {
        matches!(self.mode, Polling::Reactor { .. }) || self.drivers.load(Ordering::Relaxed) > 0
    }

    /// A reactor drove progress at `at` (see [`reactor_active`](Self::reactor_active)):
    /// recorded as nanoseconds after `epoch`, at least 1 (0 means never).
    pub(crate) fn reactor_drove_at(&self, at: Instant) {
        let at = at.saturating_duration_since(self.epoch).as_nanos() as u64;
        self.reactor_polled.store(at.max(1), Ordering::Relaxed);
    }

    /// Whether a reactor ever polled or armed the queue: armed, it learns of the next
    /// completion through the channel, so the progress thread's fallback poll can be rare.
    pub(super) fn reactor_ever_drove(&self) -> bool {
        self.reactor_polled.load(Ordering::Relaxed) > 0
    }

    /// Whether a reactor drove progress within [`REACTOR_QUIET`] before `now`.
    pub(super) fn reactor_active(&self, now: Instant) -> bool {
        let at = self.reactor_polled.load(Ordering::Relaxed);
        let now = now.saturating_duration_since(self.epoch).as_nanos() as u64;
        at > 0 && now.saturating_sub(at) < REACTOR_QUIET.as_nanos() as u64
    }

    /// How long the tokio driver keeps polling after its last completion before it waits
    /// for the channel: the reactor mode's `spin`; under adaptive polling [`GROWTH`] times
    /// its `spin`, as long as a blocked call's stretched spin lasts at most. A driver polls
    /// between the runtime's other tasks, so its spin costs the runtime's threads only idle
    /// time, and it catches replies later than the configured spin: the 64 B echo on the
    /// default configuration measured a median of 81 us with it against 613 us with the
    /// driver spinning `spin` alone (`cargo xtask bench stream`, its control at 0.91).
    #[cfg_attr(not(feature = "tokio"), allow(dead_code))]
    pub(crate) fn driver_spin(&self) -> Duration {
        match self.mode {
            Polling::Reactor { spin } => spin,
            Polling::Adaptive { spin } => spin * GROWTH,
            _ => Duration::ZERO,
        }
    }

    /// Whether an async entry point spawns a tokio driver for the endpoint: adaptive
    /// polling, and none lives.
    #[cfg_attr(not(feature = "tokio"), allow(dead_code))]
    pub(crate) fn wants_driver(&self) -> bool {
        self.adaptive() && self.drivers.load(Ordering::Relaxed) == 0
    }

    /// Whether a driver task of ours lives (it hears every event of the channel it armed).
    pub(crate) fn driven_by_task(&self) -> bool {
        self.drivers.load(Ordering::Relaxed) > 0
    }

    /// Whether no driver task lives.
    #[cfg_attr(not(feature = "tokio"), allow(dead_code))]
    pub(crate) fn driverless(&self) -> bool {
        self.drivers.load(Ordering::Relaxed) == 0
    }

    /// Held while a driver is spawned, so two first callers at once spawn one.
    #[cfg_attr(not(feature = "tokio"), allow(dead_code))]
    pub(crate) fn spawning_driver(&self) -> parking_lot::MutexGuard<'_, ()> {
        self.driver_spawn.lock()
    }

    /// A driver task began (it counts until [`driver_ended`](Self::driver_ended)).
    #[cfg_attr(not(feature = "tokio"), allow(dead_code))]
    pub(crate) fn driver_began(&self) {
        self.drivers.fetch_add(1, Ordering::Relaxed);
    }

    /// A driver task ended: the progress thread takes over when it was the last.
    #[cfg_attr(not(feature = "tokio"), allow(dead_code))]
    pub(crate) fn driver_ended(&self) {
        self.drivers.fetch_sub(1, Ordering::Relaxed);
        self.unpark_progress();
    }
}

/// A thread or task that polls the completion queue itself while it waits (busy or adaptive
/// polling): while one exists, the progress thread runs only the timers. A spinner that stops
/// to sleep calls [`Policy::wake_progress`] first; one whose wait ended needs not.
pub(crate) struct Spinning<'a> {
    shared: &'a Shared,
    /// It holds the endpoint's one task slot (`task_spinning`).
    task: bool,
}

impl<'a> Spinning<'a> {
    pub(crate) fn new(shared: &'a Shared) -> Self {
        shared.policy.spinners.fetch_add(1, Ordering::SeqCst);
        Spinning {
            shared,
            task: false,
        }
    }

    /// How long a waiting task that found nothing spins ([`Policy::task_spin`], whose
    /// arguments these are), counted as spinning meanwhile (the progress thread stands aside
    /// for it); `None`: it registers its waker at once. One task of the endpoint spins at a
    /// time unless `busy_read` spins them all: it polls for every connection, and the tasks
    /// it wakes run next on its thread; several would take turns holding executor threads
    /// (and cores) from each other.
    pub(crate) fn for_task(
        shared: &'a Shared,
        budget: Duration,
        lone: impl FnOnce() -> bool,
        single_threaded: impl FnOnce() -> bool,
    ) -> Option<(Duration, Self)> {
        let spin = shared.policy.task_spin(budget, lone, single_threaded)?;
        let spinner = if shared.policy.every_task_spins() {
            Spinning::new(shared)
        } else {
            Spinning::task(shared)?
        };
        Some((spin, spinner))
    }

    /// A spinning async task, if no other task of the endpoint spins now.
    fn task(shared: &'a Shared) -> Option<Self> {
        shared
            .policy
            .task_spinning
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .ok()?;
        let mut spinning = Spinning::new(shared);
        spinning.task = true;
        Some(spinning)
    }

    /// One poll of the spinner's ([`Shared::progress`] without the mark: while it spins,
    /// the progress thread stands aside anyway).
    pub(crate) fn poll(&self) -> usize {
        self.shared.caller_poll()
    }

    /// The one spin of every waiter, a blocked call's or a task's: polls the queue, then
    /// looks for what it waits for (`look`, given when the clock was last read), until it
    /// finds it or the clock reaches `until` (`None`). The clock is read every
    /// [`SPIN_TURNS_PER_CLOCK`] turns, and not after a poll that found completions: a
    /// shorter turn sees a completion sooner. No spin hint: see `SPIN_TURNS_PER_CLOCK`.
    #[inline]
    pub(crate) fn spin<T>(
        &self,
        start: Instant,
        until: Instant,
        mut look: impl FnMut(Instant) -> Option<T>,
    ) -> Option<T> {
        let (mut looked, mut turns) = (start, 0u32);
        loop {
            let polled = self.poll();
            if let Some(found) = look(looked) {
                return Some(found);
            }
            turns = turns.wrapping_add(1);
            if polled == 0 && turns % SPIN_TURNS_PER_CLOCK == 0 {
                looked = Instant::now();
                if looked >= until {
                    return None;
                }
            }
        }
    }
}

impl Drop for Spinning<'_> {
    fn drop(&mut self) {
        let policy = &self.shared.policy;
        // Its last poll counts as recent, as a caller's poll does.
        policy.caller_polled();
        policy.spinners.fetch_sub(1, Ordering::SeqCst);
        if self.task {
            policy.task_spinning.store(false, Ordering::Release);
        }
    }
}

#[cfg(test)]
#[path = "tests.rs"]
mod tests;
