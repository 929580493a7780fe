//! What a connection keeps by RPC call id ([`ByCall`]): the answers of calls that finished
//! before their callers came for them ([`CallResult`]s), and the callers' wakers.

use std::collections::VecDeque;

use memory::Buffer;

use crate::proto::{CallError, Delivery};

/// What a finished call gives its caller: the response, or why it failed.
pub(crate) type CallResult = Result<Delivery<Buffer>, CallError>;

/// Entries by call id, kept in the order of their ids. Calls are made in the order of their
/// ids, finish and are come for mostly in that order too, so an entry is nearly always added
/// at the back and taken from the front, and a look for a call with no entry yet (a caller
/// registering its waker) is settled by the last entry: each a comparison or two, where a
/// hash map hashes and probes every time. Any other look is a binary search over the calls
/// in flight on one connection.
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
    #[inline]
    pub(crate) fn push(&mut self, id: u64, value: T) {
        match self.entries.back() {
            Some(last) if last.0 > id => {
                let at = self.entries.partition_point(|e| e.0 < id);
                self.entries.insert(at, (id, value));
            }
            _ => self.entries.push_back((id, value)),
        }
    }

    /// Where call `id`'s entry is.
    #[inline]
    fn position(&self, id: u64) -> Option<usize> {
        match self.entries.back() {
            Some(last) if last.0 >= id => self.entries.binary_search_by_key(&id, |e| e.0).ok(),
            _ => None,
        }
    }

    /// Takes call `id`'s entry.
    #[inline]
    pub(crate) fn remove(&mut self, id: u64) -> Option<T> {
        if self.entries.front().is_some_and(|e| e.0 == id) {
            return self.entries.pop_front().map(|e| e.1);
        }
        let i = self.position(id)?;
        self.entries.remove(i).map(|e| e.1)
    }

    /// Call `id`'s entry.
    #[inline]
    pub(crate) fn get_mut(&mut self, id: u64) -> Option<&mut T> {
        let i = self.position(id)?;
        self.entries.get_mut(i).map(|e| &mut e.1)
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
    fn entries_added_out_of_order_are_found_and_come_out_by_id() {
        let mut q = ByCall::default();
        for id in [5u64, 2, 9, 1, 7, 3] {
            q.push(id, id * 10);
        }
        for id in [1u64, 2, 3, 5, 7, 9] {
            assert_eq!(q.get_mut(id).copied(), Some(id * 10));
        }
        assert_eq!(q.get_mut(4), None);
        assert_eq!(q.get_mut(10), None);
        assert_eq!(q.remove(7), Some(70));
        assert_eq!(q.remove(1), Some(10));
        q.push(4, 40);
        assert_eq!(
            q.drain().collect::<Vec<_>>(),
            vec![(2, 20), (3, 30), (4, 40), (5, 50), (9, 90)]
        );
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
