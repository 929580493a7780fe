//! The endpoint's threads: the progress loop (polling as the mode says, standing aside for
//! callers that poll, timers and teardown), the CM thread (every CM event of the endpoint:
//! connects, accepts, disconnects), and shutting both down when the last handle goes.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::{wake_tasks, Shared, CM_RETRY, IDLE_TICK, MIN_TICK, QUIET_TICK, TICK};
use crate::{Error, Result};

impl Shared {
    /// Runs the protocol timers of every connection and tears down those that ended; returns
    /// when it needs to run next: the earliest protocol deadline, within [`TICK`] while a
    /// connection is being set up or torn down or a task waits for the pool, and within
    /// [`IDLE_TICK`] in any case ([`QUIET_TICK`] when the endpoint is `quiet`, no completion
    /// since the last run, or has no connection). When the pool ran out, it also asks every
    /// connection's unsignaled frames back ([`release_unsignaled`](Self::release_unsignaled)).
    /// Allocates nothing unless a connection goes (`gone` is the caller's reused list).
    pub(super) fn tick(&self, now: Instant, gone: &mut Vec<u32>, quiet: bool) -> Instant {
        gone.clear();
        let mut next = now
            + if quiet || self.conns.count() == 0 {
                QUIET_TICK
            } else {
                IDLE_TICK
            };
        let soon = now + TICK;
        let mut waiting = std::mem::take(&mut *self.tick_wakers.lock());
        if !waiting.is_empty() {
            next = soon;
        }
        wake_tasks(&mut waiting);
        let release_unsignaled = self.release_unsignaled_due.swap(false, Ordering::Relaxed);
        for conn in self.conns.read().values() {
            let mut st = conn.state.lock();
            // The pool ran out: unsignaled frames give their buffers back once a probe
            // behind them completes (`release_unsignaled`).
            if release_unsignaled && st.end.is_none() && st.sq.has_unsignaled() {
                conn.post_probe(&mut st);
            }
            if let Some(p) = st.proto.as_mut() {
                if p.poll_timeout().is_some_and(|t| t <= now) {
                    p.on_timeout(now);
                    conn.drive(&mut st);
                }
            }
            // A rest of a rendezvous message that waits for a pool buffer tries again.
            if !st.rests.is_empty() && conn.finish_rests(&mut st) {
                next = next.min(soon);
            }
            // A dropped write half's end of stream that found no room.
            if st.end_of_stream_due {
                st.end_of_stream_due = !conn.queue_end_of_stream(&mut st);
                if st.end_of_stream_due {
                    next = next.min(soon);
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
                    st.torn_down(now);
                    // Flush what is still queued; the peer learns through the CM.
                    let _ = conn.qp.to_error();
                    let _ = conn.id.disconnect();
                    conn.wake(&mut st);
                }
                if st.teardown.is_some() && st.drained(now) {
                    #[cfg(feature = "tracing")]
                    if !st.sq.only_unsignaled_left() {
                        crate::debug_event!(
                            qp = conn.qp.qp_num(),
                            sq_ops = st.sq.len(),
                            in_flight = ?conn.qp.in_flight(),
                            "connection forgotten with requests its device never completed"
                        );
                    }
                    gone.push(conn.qp.qp_num());
                }
            }
        }
        if !gone.is_empty() {
            self.keep_totals(gone);
            self.remove_conns(gone.drain(..));
        }
        next.max(now + MIN_TICK)
    }

    /// Has the progress thread run its timers within [`TICK`] even if they are far off (it
    /// may sleep up to [`IDLE_TICK`]): for a task waiting on a tick, or a connection that
    /// ended and is to be torn down (its slot is taken until then).
    pub(crate) fn tick_soon(&self) {
        // SeqCst: ordered against the progress thread announcing its sleep on the channel
        // (`Policy::sleep_on_channel`), so one of the two sees the other.
        self.tick_soon.store(true, Ordering::SeqCst);
        self.policy.unpark_progress();
    }

    /// A CM event of an established connection (a disconnect).
    pub(super) fn on_conn_cm_event(&self, ev: &cm::CmEvent) {
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
        shared.policy.set_progress_thread(progress.thread().clone());
        let cm = {
            let shared = shared.clone();
            std::thread::Builder::new()
                .name("transport-cm".into())
                .spawn(move || {
                    // Sleeps until an event comes or the endpoint stops: an idle endpoint's
                    // CM thread never wakes.
                    while !shared.stop.load(Ordering::Relaxed) {
                        match shared.cm.next_event() {
                            Ok(Some(ev)) => shared.on_cm_event(ev),
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
const LINGER: Duration = Duration::from_secs(2);

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
        self.shared.stop.store(true, Ordering::SeqCst);
        self.shared.cm.stop();
        self.shared.policy.unpark_progress();
        if let Some(w) = self.shared.reactor_waker.lock().take() {
            w.wake();
        }
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
        self.shared.clear_cm_ops();
        // End every connection still known, and let go of them (they hold the shared state).
        let conns = self.shared.conns.all();
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
    /// Completions handled by the last run, and whether none came since the one before.
    handled: u64,
    quiet: bool,
}

impl Timers {
    fn new() -> Self {
        let now = Instant::now();
        Timers {
            next: now,
            last: now,
            gone: Vec::with_capacity(16),
            handled: 0,
            quiet: false,
        }
    }

    /// Runs the timers if they are due at `now`; returns whether they ran.
    fn run_if_due(&mut self, shared: &Arc<Shared>, now: Instant) -> bool {
        if now < self.next {
            return false;
        }
        shared.timer_runs.fetch_add(1, Ordering::Relaxed);
        let handled = shared.counts.total();
        self.quiet = handled == self.handled;
        self.handled = handled;
        self.next = shared.tick(now, &mut self.gone, self.quiet);
        // A connect or accept in progress fails itself at its deadline, which only a tick
        // looks at: tick within a TICK while there is one.
        if shared.cm_timers(now) {
            self.next = self.next.min(now + TICK);
        }
        self.last = now;
        true
    }

    /// How long from `now` until the next run.
    fn until_next(&self, now: Instant) -> Duration {
        self.next.saturating_duration_since(now)
    }
}

fn progress_loop(shared: &Arc<Shared>) {
    let mut timers = Timers::new();
    let mut idle_since: Option<Instant> = None;
    let mut idle_turns = 0u32;
    while !shared.stop.load(Ordering::Relaxed) {
        if shared.tick_soon.load(Ordering::Relaxed)
            && shared.tick_soon.swap(false, Ordering::Relaxed)
        {
            timers.next = timers.next.min(timers.last + TICK);
        }
        if shared.policy.progress_thread_spins() && shared.policy.callers_poll() {
            // Application threads poll the queue themselves (for everyone): leave the core
            // to them and run the timers when due, until someone waits without polling
            // (`wake_progress`) or they stop polling.
            let now = Instant::now();
            timers.run_if_due(shared, now);
            shared.policy.stand_aside(timers.until_next(now));
            idle_since = None;
            continue;
        }
        if shared.policy.reactor_drives() {
            // A reactor waits on the channel. Poll once per tick in case none does, but not
            // while one is at work: a completion taken here would wake its task from this
            // thread, a handoff the reactor avoids. Meanwhile wake only for the timers.
            let now = Instant::now();
            let active = shared.policy.reactor_active(now);
            if !active {
                let n = shared.try_poll();
                shared.count_thread(n);
            }
            timers.run_if_due(shared, now);
            let until_tick = timers.until_next(now);
            // A reactor that armed the queue learns of the next completion from the channel:
            // the fallback poll is then for one that stopped, and rare.
            let fallback =
                if shared.conn_count() == 0 || (timers.quiet && shared.policy.driven_by_task()) {
                    // No connection, no completion to miss; or a quiet endpoint whose driver
                    // task hears the channel it armed.
                    QUIET_TICK
                } else if shared.policy.reactor_ever_drove() {
                    IDLE_TICK
                } else {
                    TICK
                };
            std::thread::park_timeout(if active {
                until_tick
            } else {
                until_tick.min(fallback)
            });
            continue;
        }
        let n = shared.try_poll();
        shared.count_thread(n);
        let now = Instant::now();
        // The timers run at their deadline (the tick knows each), not on every spin.
        timers.run_if_due(shared, now);
        if n > 0 {
            idle_since = None;
            continue;
        }
        let idle = *idle_since.get_or_insert(now);
        let sleep = shared
            .policy
            .progress_sleeps(now.duration_since(idle), shared.conn_count());
        if !sleep {
            shared.policy.idle_turn(&mut idle_turns);
            continue;
        }
        // Lossless sleep: arm, poll again (a completion may have come before arming), and
        // only then wait on the channel, no longer than the next tick. The poll after arming
        // waits for a thread polling at that moment and polls once more: that thread may
        // have looked at the queue before a completion that came before the arm (which raises
        // no event), and without this poll the completion would wait a whole tick.
        if shared.res.arm().is_err() {
            std::thread::sleep(TICK);
            continue;
        }
        let n = shared.progress_after_arm();
        shared.count_thread(n);
        if n > 0 {
            idle_since = None;
            continue;
        }
        // Asleep until a completion, a request to run (tick_soon, stop) or the next timer: an
        // idle endpoint wakes only for its timers.
        let until = timers.until_next(Instant::now());
        let wanted =
            || shared.stop.load(Ordering::SeqCst) || shared.tick_soon.load(Ordering::SeqCst);
        if shared
            .policy
            .sleep_on_channel(shared.channel_fd(), until, wanted)
        {
            shared.res.drain_channels();
            // A driver task may have begun while this thread slept on the channel: it waits
            // for the channel's next event, which comes only from an armed queue, and the
            // event this thread just took was the one it armed for (its reactor, seeing the
            // channel no longer readable, reports nothing). So arm again, and poll what came
            // before the arm, before this thread leaves the channel to it.
            if shared.policy.reactor_drives() {
                let _ = shared.res.arm();
                let n = shared.progress_after_arm();
                shared.count_thread(n);
            }
        }
    }
}
