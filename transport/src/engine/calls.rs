//! What a connection keeps by RPC call id ([`ByCall`]): the answers of calls that finished
//! before their callers came for them ([`CallResult`]s), and the callers' wakers.

use std::collections::VecDeque;

use memory::Buffer;

use crate::proto::{CallError, Delivery};

/// What a finished call gives its caller: the response, or why it failed.
pub(crate) type CallResult = Result<Delivery<Buffer>, CallError>;

/// Entries by call id, in the order they came. Calls finish, and their callers come for
/// them, mostly in the order they were made, so the entry looked for is nearly always at the
/// front: a look costs a comparison or two, where a hash map hashes and probes every time.
/// The entries are those of calls in flight on one connection, a few dozen at most in
/// practice; a look that misses the front scans them.
#[derive(Debug)]
pub(crate) struct ByCall<T> {
    entries: VecDeque<(u64, T)>,
}

impl<T> ByCall<T> {
    pub(crate) fn with_capacity(n: usize) -> Self {
        ByCall {
            entries: VecDeque::with_capacity(n),
        }
    }

    /// Adds `value` for call `id`, which has no entry.
    pub(crate) fn push(&mut self, id: u64, value: T) {
        self.entries.push_back((id, value));
    }

    /// Takes call `id`'s entry.
    #[inline]
    pub(crate) fn remove(&mut self, id: u64) -> Option<T> {
        if self.entries.front().is_some_and(|e| e.0 == id) {
            return self.entries.pop_front().map(|e| e.1);
        }
        let i = self.entries.iter().position(|e| e.0 == id)?;
        self.entries.remove(i).map(|e| e.1)
    }

    /// Call `id`'s entry.
    pub(crate) fn get_mut(&mut self, id: u64) -> Option<&mut T> {
        self.entries
            .iter_mut()
            .find(|e| e.0 == id)
            .map(|e| &mut e.1)
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Takes every entry.
    pub(crate) fn drain(&mut self) -> impl Iterator<Item = (u64, T)> + '_ {
        self.entries.drain(..)
    }
}

impl<T> Default for ByCall<T> {
    fn default() -> Self {
        ByCall::with_capacity(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kind(r: Option<CallResult>) -> Option<String> {
        r.map(|r| {
            r.map(|_| "response".to_string())
                .unwrap_or_else(|e| e.to_string())
        })
    }

    #[test]
    fn entries_by_call_come_out_once_in_any_order() {
        let mut q = ByCall::default();
        for id in 1..=5u64 {
            q.push(id, id * 10);
        }
        *q.get_mut(3).unwrap() = 31;
        assert_eq!(q.get_mut(7), None);
        assert_eq!(q.remove(1), Some(10));
        assert_eq!(q.remove(4), Some(40));
        assert_eq!(q.remove(4), None);
        assert_eq!(q.remove(9), None);
        assert_eq!(
            q.drain().collect::<Vec<_>>(),
            vec![(2, 20), (3, 31), (5, 50)]
        );
        assert!(q.is_empty());
    }

    #[test]
    fn finished_calls_come_out_once_by_id_whichever_finished_first() {
        let mut calls = ByCall::<CallResult>::default();
        calls.push(1, Err(CallError::TimedOut));
        calls.push(2, Err(CallError::NoHandler));
        calls.push(3, Err(CallError::Closed));
        assert_eq!(kind(calls.remove(9)), None);
        assert_eq!(
            kind(calls.remove(2)),
            Some(CallError::NoHandler.to_string())
        );
        assert_eq!(kind(calls.remove(2)), None);
        assert_eq!(kind(calls.remove(1)), Some(CallError::TimedOut.to_string()));
        // A call that finished after others were taken comes out as well.
        calls.push(4, Err(CallError::NoHandler));
        assert_eq!(kind(calls.remove(3)), Some(CallError::Closed.to_string()));
        assert_eq!(
            kind(calls.remove(4)),
            Some(CallError::NoHandler.to_string())
        );
        assert_eq!(kind(calls.remove(1)), None);
    }
}
