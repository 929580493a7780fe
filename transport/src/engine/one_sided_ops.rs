//! A connection's one-sided operations (region reads and writes of the user): how many are in
//! flight against their bound, the results of finished ones until their callers take them, and
//! the ones whose callers gave up (their results are dropped as they come).

use rustc_hash::{FxHashMap, FxHashSet};

/// A finished one-sided operation: its buffer (READ destination or WRITE source), or why it
/// failed.
pub(crate) type OneSidedResult<B> = Result<B, String>;

/// In-flight and finished one-sided operations, by number.
#[derive(Debug)]
pub(crate) struct OneSidedOps<B> {
    in_flight: u32,
    next: u64,
    done: FxHashMap<u64, OneSidedResult<B>>,
    /// Fenced writes whose WRITE completed, until their READ does: the WRITE's outcome.
    written: FxHashMap<u64, OneSidedResult<B>>,
    /// Posted operations whose callers went away before they finished.
    forgotten: FxHashSet<u64>,
}

impl<B> Default for OneSidedOps<B> {
    fn default() -> Self {
        OneSidedOps {
            in_flight: 0,
            next: 1,
            done: FxHashMap::default(),
            written: FxHashMap::default(),
            forgotten: FxHashSet::default(),
        }
    }
}

impl<B> OneSidedOps<B> {
    /// A number for one more operation in flight, unless `max` are already.
    pub(crate) fn start(&mut self, max: u32) -> Option<u64> {
        if self.in_flight >= max {
            return None;
        }
        let id = self.next;
        self.next += 1;
        self.in_flight += 1;
        Some(id)
    }

    /// Operation `id` completed with `result`: kept for its caller, or dropped if the caller
    /// went away.
    pub(crate) fn finish(&mut self, id: u64, result: OneSidedResult<B>) {
        self.in_flight -= 1;
        if !self.forgotten.remove(&id) {
            self.done.insert(id, result);
        }
    }

    /// The WRITE of fenced write `id` completed with `result`: kept until its fence does.
    pub(crate) fn written(&mut self, id: u64, result: OneSidedResult<B>) {
        self.written.insert(id, result);
    }

    /// The outcome of operation `id`'s last request: its own buffer or error (`fence`), or
    /// for a fenced write whose zero-length READ completed, the WRITE's buffer; the first
    /// error either request had.
    pub(crate) fn outcome(
        &mut self,
        id: u64,
        fence: OneSidedResult<Option<B>>,
    ) -> OneSidedResult<B> {
        match (self.written.remove(&id), fence) {
            (Some(Err(e)), _) => Err(e),
            (_, Err(e)) => Err(e),
            (_, Ok(Some(buf))) => Ok(buf),
            (Some(Ok(buf)), Ok(None)) => Ok(buf),
            (None, Ok(None)) => Err("the operation's buffer did not come back".into()),
        }
    }

    /// The result of operation `id` once it finished (once).
    pub(crate) fn take(&mut self, id: u64) -> Option<OneSidedResult<B>> {
        self.done.remove(&id)
    }

    /// The caller of operation `id` went away: its result is dropped now, or when it comes.
    pub(crate) fn forget(&mut self, id: u64) {
        if self.done.remove(&id).is_none() {
            self.forgotten.insert(id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fenced_write_finishes_with_its_reads_outcome_and_the_first_error() {
        let mut ops = OneSidedOps::<&str>::default();
        // The WRITE completed (sent), then its zero-length READ: the WRITE's buffer back.
        ops.written(1, Ok("source"));
        assert_eq!(ops.outcome(1, Ok(None)), Ok("source"));
        // The READ names a sink of its own: that one comes back.
        ops.written(2, Ok("source"));
        assert_eq!(ops.outcome(2, Ok(Some("fence"))), Ok("fence"));
        // The peer refused the WRITE: the connection ended, the READ flushed; the WRITE's
        // error is the one reported, whichever failed first.
        ops.written(3, Err("remote access".into()));
        assert_eq!(
            ops.outcome(3, Err("flushed".into())),
            Err("remote access".into())
        );
        ops.written(4, Ok("source"));
        assert_eq!(ops.outcome(4, Err("flushed".into())), Err("flushed".into()));
        // Not fenced: its own buffer, or the lack of one named.
        assert_eq!(ops.outcome(5, Ok(Some("dest"))), Ok("dest"));
        assert!(ops.outcome(6, Ok(None)).is_err());
        assert!(ops.written.is_empty(), "every outcome taken");
    }

    #[test]
    fn operations_are_bounded_their_results_taken_once_and_forgotten_ones_dropped() {
        let mut ops = OneSidedOps::<&str>::default();
        let (a, b) = (ops.start(2).unwrap(), ops.start(2).unwrap());
        assert_ne!(a, b);
        assert_eq!(ops.start(2), None, "a third beyond the bound of 2");
        ops.finish(a, Ok("a"));
        assert_eq!(ops.take(a), Some(Ok("a")));
        assert_eq!(ops.take(a), None, "taken once");
        let c = ops.start(2).expect("a's slot is free again");
        // b's caller gives up before b finishes, c's after: neither result stays behind.
        ops.forget(b);
        ops.finish(b, Err("late".into()));
        ops.finish(c, Ok("c"));
        ops.forget(c);
        assert!(ops.done.is_empty() && ops.forgotten.is_empty());
        assert_eq!(ops.in_flight, 0);
    }
}
