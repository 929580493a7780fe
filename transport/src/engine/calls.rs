//! Answers of RPC calls that finished before their callers came for them, by call id.

use memory::Buffer;
use rustc_hash::FxHashMap;

use crate::proto::{CallError, Delivery};

/// What a finished call hands its caller: the response, or why there is none.
pub(crate) type CallResult = Result<Delivery<Buffer>, CallError>;

/// Finished calls not yet picked up, by call id: one in a slot of its own, so a caller with
/// one call at a time finds its response without a trip through the map (the common case),
/// the others in the map.
#[derive(Debug)]
pub(crate) struct FinishedCalls {
    slot: Option<(u64, CallResult)>,
    others: FxHashMap<u64, CallResult>,
}

impl Default for FinishedCalls {
    fn default() -> Self {
        FinishedCalls {
            slot: None,
            others: FxHashMap::with_capacity_and_hasher(64, Default::default()),
        }
    }
}

impl FinishedCalls {
    pub(crate) fn insert(&mut self, id: u64, result: CallResult) {
        match self.slot {
            None => self.slot = Some((id, result)),
            Some(_) => {
                self.others.insert(id, result);
            }
        }
    }

    pub(crate) fn remove(&mut self, id: u64) -> Option<CallResult> {
        if self.slot.as_ref().is_some_and(|(i, _)| *i == id) {
            return self.slot.take().map(|(_, r)| r);
        }
        self.others.remove(&id)
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
    fn finished_calls_come_out_once_by_id_whichever_finished_first() {
        let mut calls = FinishedCalls::default();
        calls.insert(1, Err(CallError::TimedOut));
        calls.insert(2, Err(CallError::NoHandler));
        calls.insert(3, Err(CallError::Closed));
        assert_eq!(kind(calls.remove(9)), None);
        assert_eq!(
            kind(calls.remove(2)),
            Some(CallError::NoHandler.to_string())
        );
        assert_eq!(kind(calls.remove(2)), None);
        assert_eq!(kind(calls.remove(1)), Some(CallError::TimedOut.to_string()));
        // The slot is free again: the next finished call takes it.
        calls.insert(4, Err(CallError::NoHandler));
        assert_eq!(kind(calls.remove(3)), Some(CallError::Closed.to_string()));
        assert_eq!(
            kind(calls.remove(4)),
            Some(CallError::NoHandler.to_string())
        );
        assert_eq!(kind(calls.remove(1)), None);
    }
}
