//! The table of owned requests in flight on one queue, keyed by their process-unique ids.
//!
//! Ids are taken from the table's own block of the process's ids ([`IdBlock`]) under its lock,
//! so entries are inserted in increasing id order and a ring kept in insertion order is
//! sorted: completions (in order on a QP's queues) pop from the front, without allocating and
//! without searching; anything else is a binary search.
use std::collections::VecDeque;

use super::request::Owner;
use super::small::Small;
use super::{IdBlock, Reclaimed, OWNED_WR_ID, RECV_WR_ID};
use crate::ah::Ah;

struct Entry {
    id: u64,
    bufs: Small<Owner>,
    tag: u64,
    _ah: Option<Ah>,
    /// Finished only by its own completion, never by a later one: a request the device may
    /// complete after later requests (on iWARP, a READ or atomic, completed when its
    /// response arrives), whose memory it still writes until then.
    own_completion: bool,
}

impl Entry {
    fn reclaimed(self) -> Reclaimed {
        Reclaimed {
            wr_id: self.id,
            bufs: self.bufs,
            tag: self.tag,
        }
    }
}

/// An owned request still in flight: posted, its completion not yet reclaimed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Outstanding {
    /// Its id (as returned by the post call).
    pub wr_id: u64,
    /// The tag given to the request (0 if none).
    pub tag: u64,
    /// A receive (else a send-queue request).
    pub recv: bool,
    /// How many buffers it holds.
    pub buffers: usize,
}

impl std::fmt::Display for Outstanding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let queue = if self.recv { "recv" } else { "send" };
        write!(f, "{queue} {:#x}", self.wr_id)?;
        if self.tag != 0 {
            write!(f, " (tag {})", self.tag)?;
        }
        Ok(())
    }
}

/// Requests in flight on one queue, in id (= post) order.
#[derive(Default)]
pub(crate) struct InFlight {
    ring: VecDeque<Entry>,
    ids: IdBlock,
}

/// Entries a table reserves up front at most: a queue deeper than this may still grow its
/// table (once) while it fills for the first time.
const RESERVED_MAX: usize = 1024;

impl InFlight {
    /// A table with room for a queue of `depth` requests (up to [`RESERVED_MAX`]), so posting
    /// never allocates once the queue's depth is reserved: completions that come in batches
    /// (unsignaled sends) would otherwise grow it at whatever moment the queue first peaks.
    pub(crate) fn with_depth(depth: u32) -> Self {
        InFlight {
            ring: VecDeque::with_capacity((depth as usize).min(RESERVED_MAX)),
            ids: IdBlock::default(),
        }
    }

    /// The id of the next request posted on this queue (take it under the table's lock).
    pub(crate) fn next_id(&mut self, recv: bool) -> u64 {
        self.ids.take(recv)
    }

    pub(crate) fn len(&self) -> usize {
        self.ring.len()
    }
    /// Adds a request; `id` must be greater than every id in the table (take it under the
    /// table's lock with `next_id`). With `own_completion`, only the request's own completion
    /// finishes it (see [`complete_into`](Self::complete_into)).
    pub(crate) fn insert(
        &mut self,
        id: u64,
        tag: u64,
        bufs: Small<Owner>,
        ah: Option<Ah>,
        own_completion: bool,
    ) {
        debug_assert!(self.ring.back().map_or(true, |e| e.id < id));
        self.ring.push_back(Entry {
            id,
            bufs,
            tag,
            _ah: ah,
            own_completion,
        });
    }
    /// Removes `id` and, for an in-order queue, everything posted before it except requests
    /// entered with `own_completion` (they wait for their own completion); appends them to
    /// `out` in post order and returns how many. On an out-of-order queue an unknown id
    /// removes nothing. On an in-order queue an id without an entry that this queue issued (a
    /// request that held nothing and was not entered, see `Qp::post_inline_send`) still
    /// finishes every request posted before it; one it did not issue (another queue's with
    /// the same QP number, on another device) finishes nothing, and a stale one (of an
    /// earlier QP, or from before a reset) is older than every entry and removes nothing.
    pub(crate) fn complete_into(
        &mut self,
        id: u64,
        in_order: bool,
        out: &mut Vec<Reclaimed>,
    ) -> usize {
        // The common case: the completion is for the oldest request.
        if self.ring.front().is_some_and(|e| e.id == id) {
            out.extend(self.ring.pop_front().map(Entry::reclaimed));
            return 1;
        }
        if in_order {
            if !self.ids.issued(id) {
                return 0;
            }
            let n = self.ring.partition_point(|e| e.id <= id);
            let waiting = |e: &Entry| e.own_completion && e.id != id;
            if !self.ring.range(..n).any(waiting) {
                out.extend(self.ring.drain(..n).map(Entry::reclaimed));
                self.ids.forget_before(self.ring.front().map(|e| e.id));
                return n;
            }
            // A request the device completes out of order (an iWARP READ) is older than
            // this completion: it stays, with its memory, at the front.
            let mut kept = Vec::new();
            let mut finished = 0;
            for e in self.ring.drain(..n) {
                if waiting(&e) {
                    kept.push(e);
                } else {
                    out.push(e.reclaimed());
                    finished += 1;
                }
            }
            for e in kept.into_iter().rev() {
                self.ring.push_front(e);
            }
            self.ids.forget_before(self.ring.front().map(|e| e.id));
            return finished;
        }
        let Ok(i) = self.ring.binary_search_by_key(&id, |e| e.id) else {
            return 0;
        };
        out.extend(self.ring.remove(i).map(Entry::reclaimed));
        1
    }
    /// Removes `id` alone (an out-of-order queue's completion) and hands back its first
    /// buffer of type `B`, dropping any others: `None` for an unknown id, `Some(Err(..))`
    /// with the type names it held when it held no `B`. Moves the entry once, where
    /// [`complete_into`](Self::complete_into) builds a [`Reclaimed`] and moves it through
    /// the caller's list.
    pub(crate) fn complete_one<B: 'static>(
        &mut self,
        id: u64,
    ) -> Option<Result<B, Vec<&'static str>>> {
        let entry = if self.ring.front().is_some_and(|e| e.id == id) {
            self.ring.pop_front()?
        } else {
            let i = self.ring.binary_search_by_key(&id, |e| e.id).ok()?;
            self.ring.remove(i)?
        };
        let mut bufs = entry.bufs;
        Some(super::request::take_buffer::<B>(&mut bufs).ok_or_else(|| {
            bufs.as_slice()
                .iter()
                .map(super::request::Owner::type_name)
                .collect()
        }))
    }

    /// [`complete_into`](Self::complete_into) into a new list.
    #[cfg(test)]
    fn complete(&mut self, id: u64, in_order: bool) -> Vec<Reclaimed> {
        let mut out = Vec::new();
        self.complete_into(id, in_order, &mut out);
        out
    }
    /// The requests in the table, oldest first.
    pub(crate) fn requests(&self, recv: bool) -> impl Iterator<Item = Outstanding> + '_ {
        self.ring.iter().map(move |e| Outstanding {
            wr_id: e.id,
            tag: e.tag,
            recv,
            buffers: e.bufs.len(),
        })
    }
    pub(crate) fn take_all(&mut self) -> Vec<Reclaimed> {
        std::mem::take(&mut self.ring)
            .into_iter()
            .map(Entry::reclaimed)
            .collect()
    }
}

/// Whether the completion of request `id` is for an owned request, and which queue.
pub(crate) fn owned_kind(id: u64) -> Option<bool> {
    (id & OWNED_WR_ID != 0).then_some(id & RECV_WR_ID != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_increase_per_table_across_blocks_and_no_two_tables_share_one() {
        let (mut a, mut b) = (InFlight::default(), InFlight::default());
        let mut seen = std::collections::HashSet::new();
        let (mut last_a, mut last_b) = (0, 0);
        // Interleaved, past the first block of each table.
        for i in 0..2 * super::super::ID_BLOCK + 7 {
            let id = a.next_id(false);
            assert!(id > last_a, "table a went from {last_a:#x} to {id:#x}");
            assert_eq!(owned_kind(id), Some(false));
            last_a = id;
            assert!(seen.insert(id));
            if i % 3 == 0 {
                let id = b.next_id(true);
                assert!(id > last_b, "table b went from {last_b:#x} to {id:#x}");
                assert_eq!(owned_kind(id), Some(true));
                last_b = id;
                assert!(seen.insert(id & !RECV_WR_ID), "{id:#x} handed out twice");
            }
        }
    }

    /// A table holding `ids`, whose queue issued every id below 1000 (one block from 0).
    fn table(ids: &[u64]) -> InFlight {
        let mut t = InFlight {
            ids: IdBlock {
                next: 1000,
                end: super::super::ID_BLOCK,
                taken: [0].into(),
            },
            ..InFlight::default()
        };
        for &id in ids {
            let mut bufs = Small::default();
            bufs.push(Owner::new(id));
            t.insert(id, id * 10, bufs, None, false);
        }
        t
    }

    fn ids(r: &[Reclaimed]) -> Vec<u64> {
        r.iter().map(|r| r.wr_id).collect()
    }

    #[test]
    fn a_request_that_completes_alone_waits_for_its_own_completion() {
        // 3 and 9: unsignaled SENDs; 5: an iWARP READ, which completes when its response
        // arrives, after the SEND 12 posted behind it.
        let mut t = table(&[3]);
        for (id, own) in [(5, true), (9, false), (12, false)] {
            let mut bufs = Small::default();
            bufs.push(Owner::new(id));
            t.insert(id, id * 10, bufs, None, own);
        }
        let mut out = Vec::new();
        assert_eq!(t.complete_into(12, true, &mut out), 3);
        assert_eq!(ids(&out), [3, 9, 12], "the READ's sink is not handed back");
        let left: Vec<u64> = t.requests(false).map(|o| o.wr_id).collect();
        assert_eq!(left, [5]);
        assert_eq!(t.complete_into(5, true, &mut out), 1);
        assert_eq!(ids(&out), [3, 9, 12, 5]);
        assert_eq!(t.len(), 0);
    }

    #[test]
    fn in_order_completion_takes_everything_before_it() {
        let mut t = table(&[3, 5, 8, 9]);
        let mut out = Vec::new();
        assert_eq!(t.complete_into(3, true, &mut out), 1);
        assert_eq!(t.complete_into(8, true, &mut out), 2);
        assert_eq!(ids(&out), [3, 5, 8]);
        assert_eq!(out[2].tag, 80);
        assert_eq!(t.len(), 1);
        let left: Vec<_> = t.requests(false).collect();
        assert_eq!(
            left,
            [Outstanding {
                wr_id: 9,
                tag: 90,
                recv: false,
                buffers: 1
            }]
        );
        assert_eq!(left[0].to_string(), "send 0x9 (tag 90)");
        // Already completed (or stale) ids take nothing.
        assert_eq!(t.complete_into(5, true, &mut out), 0);
        assert_eq!(t.complete_into(8, true, &mut out), 0);
        assert_eq!(t.len(), 1);
        // An id without an entry, posted after 9 (a request entered nowhere), finishes 9.
        assert_eq!(t.complete_into(100, true, &mut out), 1);
        assert_eq!(ids(&out), [3, 5, 8, 9]);
        assert_eq!(t.len(), 0);
    }

    #[test]
    fn an_in_order_id_without_an_entry_finishes_only_what_was_posted_before_it() {
        let mut t = table(&[2, 4, 6]);
        let mut out = Vec::new();
        assert_eq!(
            t.complete_into(1, true, &mut out),
            0,
            "older than every entry"
        );
        assert_eq!(t.complete_into(5, true, &mut out), 2);
        assert_eq!(ids(&out), [2, 4]);
        // On an out-of-order queue it finishes nothing.
        assert!(t.complete(7, false).is_empty());
        assert_eq!(t.len(), 1);
    }

    #[test]
    fn an_in_order_id_the_queue_did_not_issue_finishes_nothing() {
        // Two queues with the same QP number on two devices: ids of the same process-wide
        // count, interleaved by blocks.
        let (mut ours, mut theirs) = (InFlight::default(), InFlight::default());
        let mut out = Vec::new();
        let first = ours.next_id(false);
        ours.insert(first, 1, Small::default(), None, false);
        let foreign = theirs.next_id(false);
        assert!(foreign > first, "the other queue's block came later");
        assert_eq!(ours.complete_into(foreign, true, &mut out), 0);
        assert_eq!(ours.len(), 1, "another queue's completion finished ours");
        // Ours finishes ours, and a later id of ours (an untracked inline send) everything.
        let second = ours.next_id(false);
        ours.insert(second, 2, Small::default(), None, false);
        let untracked = ours.next_id(false);
        assert_eq!(ours.complete_into(untracked, true, &mut out), 2);
        assert_eq!(ids(&out), [first, second]);
    }

    #[test]
    fn a_queue_remembers_only_blocks_that_may_hold_requests_in_flight() {
        let mut t = InFlight::default();
        let mut out = Vec::new();
        let old = t.next_id(false);
        t.insert(old, 0, Small::default(), None, false);
        // Past the first block: the table takes a second.
        let mut last = old;
        for _ in 0..super::super::ID_BLOCK {
            last = t.next_id(false);
        }
        assert_eq!(t.ids.taken.len(), 2);
        assert!(t.ids.issued(old) && t.ids.issued(last));
        // The old request completes (by a later untracked id): its block is forgotten.
        assert_eq!(t.complete_into(last, true, &mut out), 1);
        assert_eq!(t.ids.taken.len(), 1);
        assert!(!t.ids.issued(old) && t.ids.issued(last));
        assert!(!t.ids.issued(last + 1), "not handed out yet");
    }

    #[test]
    fn out_of_order_completion_takes_only_its_request() {
        let mut t = table(&[1, 2, 4]);
        assert_eq!(ids(&t.complete(2, false)), [2]);
        assert_eq!(ids(&t.complete(1, false)), [1]);
        assert!(t.complete(2, false).is_empty());
        let mut rest = t.take_all();
        assert_eq!(ids(&rest), [4]);
        assert_eq!(rest[0].take::<u64>().unwrap(), 4);
        assert_eq!(t.len(), 0);
    }

    #[test]
    fn complete_one_takes_its_buffer_and_names_what_else_it_held() {
        let mut t = table(&[1, 2, 3]);
        assert!(t.complete_one::<u64>(9).is_none(), "unknown id");
        // Out of order: the middle one only.
        assert_eq!(t.complete_one::<u64>(2), Some(Ok(2)));
        assert!(t.complete_one::<u64>(2).is_none(), "taken already");
        let held = t.complete_one::<String>(1).unwrap().unwrap_err();
        assert_eq!(held, [std::any::type_name::<u64>()]);
        assert_eq!(ids(&t.take_all()), [3]);
    }

    #[test]
    fn reuses_the_caller_list_without_growing_it() {
        let mut t = InFlight::default();
        let mut out = Vec::with_capacity(1);
        let cap = out.capacity();
        for id in 1..100 {
            t.insert(id, 0, Small::default(), None, false);
            assert_eq!(t.complete_into(id, true, &mut out), 1);
            assert_eq!(out.pop().map(|r| r.wr_id), Some(id));
        }
        assert_eq!(out.capacity(), cap);
    }
}
