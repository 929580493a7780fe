//! How a blocking call waits: one bounded wait around a non-blocking attempt over the
//! connection's state, spinning or sleeping as the endpoint's polling mode says, and driving
//! progress meanwhile.

use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use crate::engine::{ConnShared, ConnState, Spinning, StateGuard, SPIN_TURNS_PER_CLOCK};
use crate::{Conn, Error, Result};

impl Conn {
    /// Waits (up to `timeout`) until `check` gives a result, driving progress meanwhile.
    pub(crate) fn wait<T>(
        &self,
        op: &'static str,
        timeout: Duration,
        check: impl FnMut(&ConnShared, &mut StateGuard<'_>) -> Option<Result<T>>,
    ) -> Result<T> {
        self.wait_until(op, timeout, None, check)
    }

    /// [`wait`](Self::wait) until `deadline` when given (a caller that read the clock
    /// already), else until `timeout` after the first look at the clock. A `check` that
    /// succeeds at once costs no look at the clock: most sends find room, most receives a
    /// message.
    pub(crate) fn wait_until<T>(
        &self,
        op: &'static str,
        timeout: Duration,
        deadline: Option<Instant>,
        mut check: impl FnMut(&ConnShared, &mut StateGuard<'_>) -> Option<Result<T>>,
    ) -> Result<T> {
        let conn = &*self.inner;
        if let Some(r) = check(conn, &mut conn.state.lock()) {
            return r;
        }
        self.wait_blocked((op, timeout, deadline), check)
    }

    /// The rest of [`wait_until`](Self::wait_until) once its first look found nothing: the
    /// wait itself (spinning, sleeping, driving progress). A function of its own, so that a
    /// profile (the cost bench) can tell waiting from work.
    #[inline(never)]
    pub(crate) fn wait_blocked<T>(
        &self,
        (op, timeout, deadline): (&'static str, Duration, Option<Instant>),
        mut check: impl FnMut(&ConnShared, &mut StateGuard<'_>) -> Option<Result<T>>,
    ) -> Result<T> {
        let start = Instant::now();
        let conn = &*self.inner;
        let deadline = deadline.unwrap_or(start + timeout);
        // How long this thread polls the queue itself before it sleeps until the progress
        // thread wakes it: no handoff between threads while it spins.
        let policy = &conn.shared.policy;
        let adaptive = policy.adaptive();
        let spin_until = policy.spin_until(conn.spin.get(), start, deadline);
        let mut spinning = (start < spin_until).then(|| Spinning::new(&conn.shared));
        let mut turns = 0u32;
        // The last look at the clock, and whether the wait slept: how it ended tunes the
        // adaptive spin.
        let (mut looked, mut slept) = (start, false);
        let ended = |r: Result<T>, st: &ConnState, looked: Instant, slept: bool| {
            if adaptive {
                if slept {
                    conn.wait_slept(st, start);
                } else {
                    conn.spin.spun(looked.duration_since(start));
                }
            }
            r
        };
        loop {
            let polled = match &spinning {
                Some(s) => s.poll(),
                None => conn.shared.progress(),
            };
            // While spinning, look at the clock (deadline, spin time) only every few turns:
            // a shorter turn sees a completion sooner.
            turns = turns.wrapping_add(1);
            if polled > 0 || (spinning.is_some() && turns % SPIN_TURNS_PER_CLOCK != 0) {
                let mut st = conn.state.lock();
                if let Some(r) = check(conn, &mut st) {
                    return ended(r, &st, looked, slept);
                }
                // No spin hint: see `SPIN_TURNS_PER_CLOCK`.
                drop(st);
                continue;
            }
            let mut st = conn.state.lock();
            if let Some(r) = check(conn, &mut st) {
                return ended(r, &st, looked, slept);
            }
            let now = Instant::now();
            looked = now;
            if now >= deadline {
                crate::debug_event!(
                    qp = conn.qp.qp_num(),
                    sq_ops = st.sq.len(),
                    unsignaled = st.sq.unsignaled(),
                    in_flight = ?conn.qp.in_flight(),
                    ended = ?st.end,
                    proto = ?st.proto,
                    "{op} timed out"
                );
                return Err(Error::TimedOut { op, after: timeout });
            }
            if now < spin_until {
                drop(st);
                spinning.get_or_insert_with(|| Spinning::new(&conn.shared));
                continue;
            }
            // Hand polling back to the progress thread before sleeping.
            spinning = None;
            slept = true;
            conn.shared.policy.wake_progress();
            let nap = deadline.min(now + Duration::from_millis(2));
            conn.cond.wait_until(&mut st, nap);
        }
    }
}

/// The async waiter.
impl Conn {
    /// Looks for what a task waits for with `check` (under the state lock). While it finds
    /// nothing, the task may poll the completion queue itself for a while, as a spinning
    /// caller (how long, and which tasks: [`Policy::task_spin`](crate::engine::Policy)).
    /// Then `wait` registers its waker (under the same lock) and the poll is `Pending`.
    pub(crate) fn poll_busy<T>(
        &self,
        cx: &mut Context<'_>,
        mut check: impl FnMut(&mut ConnState) -> Option<T>,
        wait: impl FnOnce(&mut ConnState, &mut Context<'_>),
    ) -> Poll<T> {
        let conn = &*self.inner;
        let shared = &conn.shared;
        let adaptive = shared.policy.adaptive();
        let mut st = conn.state.lock();
        if let Some(found) = check(&mut st) {
            // The end of a wait that registered its waker.
            if let Some(began) = st.async_wait.take() {
                conn.wait_slept(&st, began);
            }
            return Poll::Ready(found);
        }
        let spin = Spinning::for_task(
            shared,
            conn.spin.get(),
            || shared.conn_count() == 1,
            on_a_single_threaded_runtime,
        );
        let Some((busy, spinner)) = spin else {
            wait(&mut st, cx);
            return Poll::Pending;
        };
        drop(st);
        let start = Instant::now();
        let (mut looked, mut turns) = (start, 0u32);
        loop {
            spinner.poll();
            let mut st = conn.state.lock();
            if let Some(found) = check(&mut st) {
                match st.async_wait.take() {
                    // A wait woken before its frame came (or by something else), which
                    // then spun for it.
                    Some(began) => conn.wait_slept(&st, began),
                    None if adaptive => conn.spin.spun(looked.duration_since(start)),
                    None => {}
                }
                return Poll::Ready(found);
            }
            // The clock only every few turns: a shorter turn sees a completion sooner.
            turns = turns.wrapping_add(1);
            if turns % SPIN_TURNS_PER_CLOCK == 0 && {
                looked = Instant::now();
                looked.duration_since(start) >= busy
            } {
                // Stop spinning first: registering then hands polling back to the progress
                // thread (or the reactor).
                drop(spinner);
                if adaptive && st.async_wait.is_none() {
                    st.async_wait = Some(start);
                }
                wait(&mut st, cx);
                return Poll::Pending;
            }
            // No spin hint: see `SPIN_TURNS_PER_CLOCK`.
            drop(st);
        }
    }
}

/// Whether the task runs on tokio's current-thread runtime, whose one thread a spinning
/// task would hold from every other task (the peer's too, when both ends live there).
#[cfg(feature = "tokio")]
fn on_a_single_threaded_runtime() -> bool {
    tokio::runtime::Handle::try_current()
        .is_ok_and(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::CurrentThread)
}

#[cfg(not(feature = "tokio"))]
fn on_a_single_threaded_runtime() -> bool {
    false
}
