//! Executor-neutral helpers of the async API: registering a task's `Waker`, and blocking a
//! thread on a poll function (the blocking connect and accept wait on their async forms).

use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::time::Instant;

use crate::engine::{ConnState, Shared};

/// Adds the task's waker to the connection's list (once per task), to be woken by the next
/// batch of protocol actions, and makes sure the progress thread polls. Call with the state
/// locked, after checking the condition under the same lock, so no wakeup falls between the
/// check and the registration.
pub(crate) fn register(shared: &Shared, st: &mut ConnState, cx: &Context<'_>) {
    push_waker(&mut st.wakers.any, cx.waker());
    shared.policy.wake_progress();
}

/// Adds the task's waker to the connection's receivers, woken when a message is delivered
/// or the connection ends (same locking rule as [`register`]).
pub(crate) fn register_recv(shared: &Shared, st: &mut ConnState, cx: &Context<'_>) {
    push_waker(&mut st.wakers.recv, cx.waker());
    shared.policy.wake_progress();
}

/// Adds the task's waker to the endpoint's list woken at every tick of the progress thread
/// (for waits no connection signals, such as an exhausted pool).
pub(crate) fn register_tick(shared: &Shared, cx: &Context<'_>) {
    push_waker(&mut shared.tick_wakers.lock(), cx.waker());
    // The timers may be far off: have the next tick come within its usual interval.
    shared.tick_soon();
}

/// Adds `waker` unless one of the last few entries wakes the same task (a task polled again
/// before the list was drained); a full scan would cost quadratic time with many tasks.
pub(crate) fn push_waker(list: &mut Vec<Waker>, waker: &Waker) {
    if !list.iter().rev().take(8).any(|w| w.will_wake(waker)) {
        list.push(waker.clone());
    }
}

/// Wakes a thread parked in [`block_on`].
struct Unpark(std::thread::Thread);

impl Wake for Unpark {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.0.unpark();
    }
}

/// Polls `f` on this thread until it is ready, parking in between (the engine's threads
/// wake it through the waker): the blocking form of an async operation. `None` once
/// `deadline` (if any) passed.
pub(crate) fn block_on<T>(
    deadline: Option<Instant>,
    mut f: impl FnMut(&mut Context<'_>) -> Poll<T>,
) -> Option<T> {
    let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    loop {
        if let Poll::Ready(r) = f(&mut cx) {
            return Some(r);
        }
        match deadline {
            None => std::thread::park(),
            Some(d) => {
                let now = Instant::now();
                if now >= d {
                    return None;
                }
                std::thread::park_timeout(d - now);
            }
        }
    }
}
