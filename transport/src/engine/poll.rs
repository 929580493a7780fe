//! Polling the completion queues, the endpoint's passive side (who polls, and when, is
//! [`super::Policy`]'s): one poll, how no poller loses a completion (arm, poll again, then
//! wait), and what each completion does (its connection found by QP number, its work
//! request's buffer reclaimed).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use verbs::{Reclaimed, WorkCompletion};

use super::resources::Queues;
use super::{ConnShared, LastConn, Progress, Shared};

impl Shared {
    /// Polls the completion queue once and handles what it finds; returns how many
    /// completions. Does nothing (0) while another thread is polling.
    pub(crate) fn progress(&self) -> usize {
        self.policy.caller_polled();
        self.caller_poll()
    }

    /// One poll by an application thread, counted as the callers'.
    pub(super) fn caller_poll(&self) -> usize {
        let n = self.try_poll();
        if n > 0 {
            self.counts.callers.fetch_add(n as u64, Ordering::Relaxed);
        }
        n
    }

    /// [`progress`](Self::progress) without counting (the progress thread counts its own).
    pub(super) fn try_poll(&self) -> usize {
        match self.progress.try_lock() {
            Some(guard) => self.poll_with(guard, &mut None),
            None => 0,
        }
    }

    /// One poll by a reactor's spin (counted as the reactor's); 0 while another polls. A
    /// reactor that found completions records when with
    /// [`Policy::reactor_drove_at`](super::Policy::reactor_drove_at) (it reads the clock for its spin anyway).
    #[cfg_attr(not(feature = "tokio"), allow(dead_code))]
    pub(crate) fn reactor_poll(&self) -> usize {
        let n = self.try_poll();
        if n > 0 {
            self.counts.reactor.fetch_add(n as u64, Ordering::Relaxed);
        }
        n
    }

    /// The descriptor readable while a completion channel of the endpoint has an event (one
    /// for all its completion queues).
    pub(crate) fn channel_fd(&self) -> std::os::fd::RawFd {
        self.res.channels_fd()
    }

    /// A completion channel is readable (or may be): consumes and acknowledges every event
    /// on them, re-arms the queues, then polls until they are empty (a completion that came
    /// before the re-arm raised no event). Lossless whatever the reactor's wakeups: a
    /// spurious call only polls. Returns the completions handled.
    pub(crate) fn on_channel_ready(&self) -> usize {
        self.res.drain_channels();
        let _ = self.res.arm();
        let mut total = 0;
        // One look at the clock for the frames of all the polls and for the record below.
        let mut clock = None;
        loop {
            let n = self.progress_after_arm_at(&mut clock);
            if n == 0 {
                break;
            }
            total += n;
        }
        self.counts
            .reactor
            .fetch_add(total as u64, Ordering::Relaxed);
        self.policy
            .reactor_drove_at(clock.unwrap_or_else(Instant::now));
        total
    }

    /// Polls once, waiting for the progress lock if another thread holds it (so every
    /// completion queued before the call is seen, by this poll or by the other thread's).
    /// Waits by yielding, not parking: a poll is short, and the first time a thread parks on
    /// a lock, parking_lot allocates its bookkeeping, which would land in the data path at
    /// a random moment.
    pub(super) fn progress_after_arm(&self) -> usize {
        self.progress_after_arm_at(&mut None)
    }

    /// [`progress_after_arm`](Self::progress_after_arm), the frames it finds received at
    /// `clock` (read at the first of them if `None`).
    fn progress_after_arm_at(&self, clock: &mut Option<Instant>) -> usize {
        let guard = match self.progress.try_lock() {
            Some(guard) => guard,
            None => self.wait_progress_lock(),
        };
        self.poll_with(guard, clock)
    }

    /// Yields until the progress lock is free, and takes it: the wait of
    /// [`progress_after_arm`](Self::progress_after_arm), a function of its own so that a
    /// profile (the cost bench) can tell waiting from work.
    #[inline(never)]
    pub(super) fn wait_progress_lock(&self) -> parking_lot::MutexGuard<'_, Progress> {
        loop {
            std::thread::yield_now();
            if let Some(guard) = self.progress.try_lock() {
                return guard;
            }
        }
    }

    pub(super) fn count_thread(&self, n: usize) {
        if n > 0 {
            self.counts
                .progress_thread
                .fetch_add(n as u64, Ordering::Relaxed);
        }
    }

    /// Handles every completion queued now, waiting for the poller if another thread polls.
    pub(super) fn progress_all(&self) {
        while self.poll_with(self.progress.lock(), &mut None) > 0 {}
    }

    /// Polls every completion queue once, under the progress lock `guard`, and handles what
    /// it finds; returns how many completions. The frames it finds were received at `clock`,
    /// read at the first of them if `None`: one look at the clock serves a batch.
    pub(super) fn poll_with(
        &self,
        mut guard: parking_lot::MutexGuard<'_, Progress>,
        clock: &mut Option<Instant>,
    ) -> usize {
        let Progress {
            wcs,
            reclaimed,
            last,
        } = &mut *guard;
        let mut n = 0;
        for queues in self.res.queues() {
            let Ok(polled) = queues.cq.poll(wcs) else {
                continue;
            };
            n += polled.len();
            for wc in polled.iter() {
                self.on_completion(queues, wc, reclaimed, last, clock);
            }
        }
        drop(guard);
        // Nothing came: replace the receives taken since the last idle poll (and what the
        // pool could not give before), off the path of the frames themselves.
        if n == 0 {
            for queues in self.res.queues() {
                if queues.srq_deficit.load(Ordering::Relaxed) > 0 {
                    self.res.repay_receives(queues);
                }
            }
        }
        n
    }

    /// The connection of QP `qp_num`: the cached one while no connection came or went since
    /// it was looked up, else from the map (and cached). Inlined into the poll of every
    /// completion, as [`ConnShared::wake`] is into every drive.
    #[inline(always)]
    pub(super) fn conn_of<'c>(
        &self,
        last: &'c mut Option<LastConn>,
        qp_num: u32,
    ) -> Option<&'c Arc<ConnShared>> {
        // Read before the map: a change after this read bumps it again, so a stale entry is
        // never taken for current.
        let gen = self.conns.generation();
        let current = last
            .as_ref()
            .is_some_and(|l| l.qp_num == qp_num && l.gen == gen);
        if !current {
            let conn = self.conns.get(qp_num)?;
            *last = Some(LastConn { qp_num, gen, conn });
        }
        last.as_ref().map(|l| &l.conn)
    }

    pub(super) fn on_completion(
        &self,
        queues: &Queues,
        wc: &WorkCompletion,
        reclaimed: &mut Vec<Reclaimed>,
        last: &mut Option<LastConn>,
        clock: &mut Option<Instant>,
    ) {
        if let Some(buf) = queues.recv_ring.reclaim(wc) {
            self.res.owe_receive(queues);
            let conn = self.conn_of(last, wc.qp_num());
            if let (Some(conn), Ok(())) = (conn, wc.status()) {
                let mut st = conn.state.lock();
                let now = *clock.get_or_insert_with(Instant::now);
                conn.on_frame(&mut st, buf, wc.byte_len() as usize, wc.imm(), now);
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
}

/// Completions handled, by who polled them (see [`ProgressCounts`](crate::ProgressCounts)).
#[derive(Debug, Default)]
pub(crate) struct Counts {
    pub progress_thread: AtomicU64,
    pub reactor: AtomicU64,
    pub callers: AtomicU64,
}

impl Counts {
    /// Completions handled so far, by anyone.
    pub(crate) fn total(&self) -> u64 {
        [&self.progress_thread, &self.reactor, &self.callers]
            .iter()
            .map(|c| c.load(Ordering::Relaxed))
            .sum()
    }
}
