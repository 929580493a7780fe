//! The waits around an attempt over a connection's state: a blocking call's (bounded,
//! spinning and then sleeping as the endpoint's polling mode says, driving progress
//! meanwhile) and a task's (spinning as the policy lets it, then registering its waker). Both
//! spin through the one [`Spinning::spin`].

use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use crate::engine::{ConnShared, ConnState, Spinning, StateGuard};
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
    /// wait itself. It spins first as the policy says ([`Spinning::spin`], the spin every
    /// waiter shares), then sleeps on the connection's condition in naps, polling between
    /// them. A function of its own, so that a profile (the cost bench) can tell waiting
    /// from work.
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
        if start < spin_until {
            let spinner = Spinning::new(&conn.shared);
            let found = spinner.spin(start, spin_until, |looked| {
                let r = check(conn, &mut conn.state.lock())?;
                // How long it took tunes the adaptive spin.
                if adaptive {
                    conn.spin.spun(looked.duration_since(start));
                }
                Some(r)
            });
            if let Some(r) = found {
                return r;
            }
        }
        let mut slept = false;
        loop {
            conn.shared.progress();
            let mut st = conn.state.lock();
            if let Some(r) = check(conn, &mut st) {
                // How it ended tunes the adaptive spin: by when the frame came, if it slept.
                if adaptive && slept {
                    conn.wait_slept(&st, start);
                } else if adaptive {
                    conn.spin.spun(start.elapsed());
                }
                return r;
            }
            let now = Instant::now();
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
            // Hand polling back to the progress thread before sleeping.
            policy.wake_progress();
            slept = true;
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
        let found = spinner.spin(start, start + busy, |looked| {
            let mut st = conn.state.lock();
            let found = check(&mut st)?;
            match st.async_wait.take() {
                // A wait woken before its frame came (or by something else), which then
                // spun for it.
                Some(began) => conn.wait_slept(&st, began),
                None if adaptive => conn.spin.spun(looked.duration_since(start)),
                None => {}
            }
            Some(found)
        });
        if let Some(found) = found {
            return Poll::Ready(found);
        }
        // Stop spinning first: registering then hands polling back to the progress thread
        // (or the reactor).
        drop(spinner);
        let mut st = conn.state.lock();
        if let Some(found) = check(&mut st) {
            return Poll::Ready(found);
        }
        if adaptive && st.async_wait.is_none() {
            st.async_wait = Some(start);
        }
        wait(&mut st, cx);
        Poll::Pending
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
