//! [`Step`]: what a step-wise operation ([`Resolving`](crate::Resolving),
//! [`Connecting`](crate::Connecting), [`Accepting`](crate::Accepting)) says after each event of
//! its id or a look at the clock, and the bounded wait that makes a blocking call of one.
//!
//! A step-wise operation never waits: it is fed the events of its id (from whatever channel
//! they arrive on, shared or its own) and performs the next rdma_cm call itself. The blocking
//! forms of this crate are a loop around the same steps, reading the id's own channel until
//! the operation's deadline.
use std::time::{Duration, Instant};

use crate::{CmEvent, Error, EventChannel, Result};

/// What a step-wise operation says after an event or a look at the clock. A failure is the
/// `Err` around it; the operation is over then.
#[derive(Debug)]
#[must_use]
pub enum Step<T> {
    /// Not finished: feed it the next event of its id, and look at the clock
    /// (`on_timer`) by its `deadline` at the latest.
    Waiting,
    /// Finished, with its result.
    Done(T),
}

/// One operation driven by events and the clock.
pub(crate) trait Stepwise {
    type Output;
    fn on_event(&mut self, ev: &CmEvent) -> Result<Step<Self::Output>>;
    fn on_timer(&mut self, now: Instant) -> Result<Step<Self::Output>>;
    fn deadline(&self) -> Instant;
}

/// The look at the clock of an operation that waits for one last event while it holds
/// `pending`, until `deadline`: past it, `pending` is let go and `op` timed out after
/// `total`; before it (or once nothing is pending), it waits on.
pub(crate) fn expire<T, O>(
    pending: &mut Option<T>,
    now: Instant,
    deadline: Instant,
    op: &'static str,
    total: Duration,
) -> Result<Step<O>> {
    if pending.is_none() || now < deadline {
        return Ok(Step::Waiting);
    }
    *pending = None;
    let err = Error::Timeout { op, after: total };
    crate::trace::gave_up(op, &err);
    Err(err)
}

/// Drives `op` to its end with the events of `channel` (the channel of its id alone): a
/// bounded wait, since the operation fails itself once its deadline passed.
pub(crate) fn wait_steps<S: Stepwise>(channel: &EventChannel, op: &mut S) -> Result<S::Output> {
    loop {
        let now = Instant::now();
        if let Step::Done(v) = op.on_timer(now)? {
            return Ok(v);
        }
        let left = op.deadline().saturating_duration_since(now);
        if let Some(ev) = channel.get_event(left)? {
            if let Step::Done(v) = op.on_event(&ev)? {
                return Ok(v);
            }
        }
    }
}

/// Whether `ev` names `id`.
pub(crate) fn names(ev: &CmEvent, id: &crate::CmId) -> bool {
    ev.id().is_some_and(|e| e.as_raw() == id.as_raw())
}
