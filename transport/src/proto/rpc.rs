//! RPC call ids and the table of pending calls with their deadlines.

use std::collections::VecDeque;
use std::num::NonZeroU64;
use std::time::Instant;

/// Id of an RPC call, allocated per connection from 1, never reused; never 0 (a request
/// whose tag is 0 is a protocol error). Non-zero, so `Option<CallId>` is a word, and a send's
/// outcome that carries one fits two registers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct CallId(NonZeroU64);

impl CallId {
    /// The id of wire tag `tag`; `None` for 0, which is no call's.
    pub fn new(tag: u64) -> Option<CallId> {
        NonZeroU64::new(tag).map(CallId)
    }

    /// The id as its wire tag.
    pub fn get(self) -> u64 {
        self.0.get()
    }
}

/// Pending calls of one connection, ordered by id (ids are allocated increasing). A deque:
/// calls mostly finish in the order they were made, so the one finishing is nearly always at
/// the front and taking it moves nothing.
#[derive(Debug)]
pub(crate) struct Calls {
    next: NonZeroU64,
    pending: VecDeque<(CallId, Instant)>,
}

impl Calls {
    pub(crate) fn new(capacity: usize) -> Self {
        Calls {
            next: NonZeroU64::MIN,
            pending: VecDeque::with_capacity(capacity),
        }
    }

    /// Allocates an id and records the call as pending until `deadline`.
    pub(crate) fn start(&mut self, deadline: Instant) -> CallId {
        let id = CallId(self.next);
        self.next = self.next.saturating_add(1);
        self.pending.push_back((id, deadline));
        id
    }

    /// Takes a call out of the table; `false` if it was not pending (answered, timed out,
    /// cancelled or never made).
    pub(crate) fn finish(&mut self, id: CallId) -> bool {
        if self.pending.front().is_some_and(|p| p.0 == id) {
            self.pending.pop_front();
            return true;
        }
        match self.pending.binary_search_by_key(&id, |p| p.0) {
            Ok(i) => self.pending.remove(i).is_some(),
            Err(_) => false,
        }
    }

    /// Whether the call is pending.
    #[cfg(test)]
    pub(crate) fn is_pending(&self, id: CallId) -> bool {
        self.pending.binary_search_by_key(&id, |p| p.0).is_ok()
    }

    /// The earliest deadline.
    pub(crate) fn next_deadline(&self) -> Option<Instant> {
        self.pending.iter().map(|p| p.1).min()
    }

    /// Removes one call whose deadline is at or before `now`.
    pub(crate) fn pop_expired(&mut self, now: Instant) -> Option<CallId> {
        let i = self.pending.iter().position(|p| p.1 <= now)?;
        self.pending.remove(i).map(|p| p.0)
    }

    /// Removes any one pending call (for failing them all).
    pub(crate) fn pop_any(&mut self) -> Option<CallId> {
        self.pending.pop_back().map(|p| p.0)
    }

    pub(crate) fn len(&self) -> usize {
        self.pending.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn ids_are_never_reused_and_expire_by_deadline() {
        let t = Instant::now();
        let mut c = Calls::new(4);
        let a = c.start(t + Duration::from_secs(3));
        let b = c.start(t + Duration::from_secs(1));
        assert!(a < b);
        assert_eq!(c.next_deadline(), Some(t + Duration::from_secs(1)));
        assert_eq!(c.pop_expired(t), None);
        assert_eq!(c.pop_expired(t + Duration::from_secs(1)), Some(b));
        assert!(!c.is_pending(b));
        assert!(!c.finish(b), "a timed-out call is not answered later");
        assert!(c.finish(a));
        let d = c.start(t);
        assert!(d > b);
        assert_eq!(c.len(), 1);
    }
}
