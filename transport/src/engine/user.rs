//! The user-facing side of a connection's state: what was delivered and not yet taken
//! ([`UserQueues`]), and the async tasks waiting for it ([`Wakers`]), woken by the driver
//! as the connection changes.

use std::collections::VecDeque;
use std::task::Waker;

use memory::Buffer;

use super::calls::{ByCall, FinishedCalls};
use super::wake_tasks;
use crate::proto::Delivery;

/// What a connection delivered and its users did not take yet.
#[derive(Debug)]
pub(crate) struct UserQueues {
    /// Messages delivered and not yet taken.
    pub inbox: VecDeque<Delivery<Buffer>>,
    /// RPC requests delivered and not yet taken.
    pub requests: VecDeque<Delivery<Buffer>>,
    /// Finished calls not yet picked up by their caller.
    pub calls: FinishedCalls,
}

impl Default for UserQueues {
    fn default() -> Self {
        UserQueues {
            inbox: VecDeque::with_capacity(64),
            requests: VecDeque::new(),
            calls: FinishedCalls::default(),
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
