//! Executor-neutral helpers of the async API: registering a task's `Waker`, and running a
//! blocking operation (connect, accept) on a thread whose result a future awaits.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use parking_lot::Mutex;

use crate::engine::{ConnState, Shared};
use crate::{Error, Result};

/// Adds the task's waker to the connection's list (once per task), to be woken by the next
/// batch of protocol actions, and makes sure the progress thread polls. Call with the state
/// locked, after checking the condition under the same lock, so no wakeup falls between the
/// check and the registration.
pub(crate) fn register(shared: &Shared, st: &mut ConnState, cx: &Context<'_>) {
    push_waker(&mut st.wakers.any, cx.waker());
    shared.wake_progress();
}

/// Adds the task's waker to the connection's receivers, woken when a message is delivered
/// or the connection ends (same locking rule as [`register`]).
pub(crate) fn register_recv(shared: &Shared, st: &mut ConnState, cx: &Context<'_>) {
    push_waker(&mut st.wakers.recv, cx.waker());
    shared.wake_progress();
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

/// The slot a blocking thread fills and a future takes.
#[derive(Debug)]
struct Slot<T> {
    value: Option<T>,
    /// The thread ended without a value (it panicked).
    gone: bool,
    waker: Option<Waker>,
}

/// A future of the result of a blocking operation running on its own thread. Dropping it
/// lets the operation finish and drops its result (a connection made meanwhile closes
/// gracefully).
#[derive(Debug)]
pub(crate) struct Blocking<T> {
    slot: Arc<Mutex<Slot<T>>>,
}

/// Runs `f` on a new thread named `name`.
pub(crate) fn spawn_blocking<T: Send + 'static>(
    name: &str,
    f: impl FnOnce() -> Result<T> + Send + 'static,
) -> Blocking<Result<T>> {
    let slot = Arc::new(Mutex::new(Slot {
        value: None,
        gone: false,
        waker: None,
    }));
    let theirs = slot.clone();
    let spawned = std::thread::Builder::new()
        .name(name.into())
        .spawn(move || {
            struct Fill<T>(Arc<Mutex<Slot<T>>>, Option<T>);
            impl<T> Drop for Fill<T> {
                fn drop(&mut self) {
                    let mut s = self.0.lock();
                    s.value = self.1.take();
                    s.gone = true;
                    if let Some(w) = s.waker.take() {
                        w.wake();
                    }
                }
            }
            let mut fill = Fill(theirs, None);
            fill.1 = Some(f());
        });
    if let Err(e) = spawned {
        let mut s = slot.lock();
        s.value = Some(Err(Error::Thread(e)));
        s.gone = true;
    }
    Blocking { slot }
}

impl<T> Future for Blocking<Result<T>> {
    type Output = Result<T>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<T>> {
        let mut s = self.slot.lock();
        if let Some(v) = s.value.take() {
            return Poll::Ready(v);
        }
        if s.gone {
            return Poll::Ready(Err(Error::Config(
                "the thread running the operation panicked".into(),
            )));
        }
        match &s.waker {
            Some(w) if w.will_wake(cx.waker()) => {}
            _ => s.waker = Some(cx.waker().clone()),
        }
        Poll::Pending
    }
}
