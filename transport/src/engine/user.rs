//! The user-facing side of a connection's state: what was delivered and not yet taken
//! ([`UserQueues`]), and the async tasks waiting for it ([`Wakers`]), woken by the driver
//! as the connection changes.

use std::collections::VecDeque;
use std::task::{Context, Waker};

use memory::Buffer;

use super::calls::{ByCall, CallResult};
use super::{wake_tasks, ConnState, Shared};
use crate::proto::Delivery;

/// What a connection delivered and its users did not take yet.
#[derive(Debug)]
pub(crate) struct UserQueues {
    /// Messages delivered and not yet taken.
    pub inbox: VecDeque<Delivery<Buffer>>,
    /// RPC requests delivered and not yet taken.
    pub requests: VecDeque<Delivery<Buffer>>,
    /// Finished calls not yet picked up by their caller.
    pub calls: ByCall<CallResult>,
}

impl Default for UserQueues {
    fn default() -> Self {
        UserQueues {
            inbox: VecDeque::with_capacity(64),
            requests: VecDeque::new(),
            calls: ByCall::with_capacity(64),
        }
    }
}

/// The async tasks waiting on a connection, by what wakes them.
#[derive(Debug, Default)]
pub(crate) struct Wakers {
    /// Woken on any change.
    pub any: Vec<Waker>,
    /// Receivers of messages, woken only when a message is delivered or the connection ends
    /// (a send completion does not wake them).
    pub recv: Vec<Waker>,
    /// Callers by call id, woken when their call finishes or the connection ends.
    pub calls: ByCall<Waker>,
}

impl Wakers {
    /// A message was delivered: wakes its receivers.
    pub(crate) fn delivered(&mut self) {
        wake_tasks(&mut self.recv);
    }

    /// Call `id` finished: wakes its caller.
    pub(crate) fn call_done(&mut self, id: u64) {
        if !self.calls.is_empty() {
            if let Some(w) = self.calls.remove(id) {
                w.wake();
            }
        }
    }

    /// The connection changed: wakes the tasks waiting for any change, and once it `ended`,
    /// every task waiting on it. Inlined: it runs after every batch of actions.
    #[inline(always)]
    pub(crate) fn changed(&mut self, ended: bool) {
        wake_tasks(&mut self.any);
        if ended {
            wake_tasks(&mut self.recv);
            for (_, w) in self.calls.drain() {
                w.wake();
            }
        }
    }
}

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
