//! Allocator bookkeeping without memory: free lists, counts, caps and high-water marks.
//!
//! Pure state, generic over what a free slot is (the pool stores slot tokens, tests store
//! numbers), so it is tested on the host against a model. No unsafe, no pointers.

use std::sync::atomic::{AtomicUsize, Ordering};

use crate::config::ValidClass;
use crate::stats::ClassStats;

/// The pool-wide cap on registered bytes, shared by all classes.
#[derive(Debug)]
pub(crate) struct Budget {
    cap: usize,
    registered: AtomicUsize,
}

impl Budget {
    pub(crate) fn new(cap: usize) -> Self {
        Self {
            cap,
            registered: AtomicUsize::new(0),
        }
    }

    /// Reserve `bytes` of the cap; false if that would exceed it.
    pub(crate) fn try_reserve(&self, bytes: usize) -> bool {
        self.registered
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |registered| {
                registered.checked_add(bytes).filter(|&n| n <= self.cap)
            })
            .is_ok()
    }

    /// Give back a reservation whose chunk could not be created.
    pub(crate) fn release(&self, bytes: usize) {
        self.registered.fetch_sub(bytes, Ordering::AcqRel);
    }

    pub(crate) fn registered(&self) -> usize {
        self.registered.load(Ordering::Acquire)
    }

    pub(crate) fn cap(&self) -> usize {
        self.cap
    }
}

/// Outcome of [`ClassBook::take`].
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Take<T> {
    /// A free slot, now counted in use.
    Slot(T),
    /// No free slot, but the caps allow another chunk and its bytes are reserved in the budget:
    /// create it and call [`ClassBook::add_chunk`], or [`Budget::release`] the reservation.
    Grow { chunk_bytes: usize },
    /// No free slot and the named cap forbids another chunk.
    Exhausted { cap_bytes: usize },
}

/// State of one size class.
#[derive(Debug)]
pub(crate) struct ClassBook<T> {
    class: ValidClass,
    chunks: usize,
    free: Vec<T>,
    in_use: usize,
    high_water: usize,
}

impl<T> ClassBook<T> {
    pub(crate) fn new(class: ValidClass) -> Self {
        Self {
            class,
            chunks: 0,
            free: Vec::new(),
            in_use: 0,
            high_water: 0,
        }
    }

    pub(crate) fn class(&self) -> &ValidClass {
        &self.class
    }

    /// Take a free slot, or say whether the class may grow.
    pub(crate) fn take(&mut self, budget: &Budget) -> Take<T> {
        if let Some(slot) = self.pop() {
            return Take::Slot(slot);
        }
        let chunk_bytes = self.class.chunk_bytes;
        if let Some(cap) = self.class.cap_bytes {
            if self.registered() + chunk_bytes > cap {
                return Take::Exhausted { cap_bytes: cap };
            }
        }
        if budget.try_reserve(chunk_bytes) {
            Take::Grow { chunk_bytes }
        } else {
            Take::Exhausted {
                cap_bytes: budget.cap(),
            }
        }
    }

    /// Take a free slot, if any, without considering growth.
    pub(crate) fn pop(&mut self) -> Option<T> {
        let slot = self.free.pop()?;
        self.in_use += 1;
        self.high_water = self.high_water.max(self.in_use);
        Some(slot)
    }

    /// True if a slot can be taken without growing.
    pub(crate) fn has_free(&self) -> bool {
        !self.free.is_empty()
    }

    /// Add the free slots of a new chunk, whose bytes [`take`](Self::take) reserved.
    /// Slots are handed out in the order given.
    pub(crate) fn add_chunk(&mut self, slots: impl DoubleEndedIterator<Item = T>) {
        let before = self.free.len();
        self.free.extend(slots.rev());
        debug_assert_eq!(
            self.free.len() - before,
            self.class.slots_per_chunk as usize
        );
        self.chunks += 1;
    }

    /// Return a slot taken from this class.
    pub(crate) fn put(&mut self, slot: T) {
        debug_assert!(self.in_use > 0);
        self.in_use -= 1;
        self.free.push(slot);
    }

    /// Bytes registered by this class.
    pub(crate) fn registered(&self) -> usize {
        self.chunks * self.class.chunk_bytes
    }

    pub(crate) fn stats(&self) -> ClassStats {
        ClassStats {
            size: self.class.size,
            chunk_bytes: self.class.chunk_bytes,
            chunks: self.chunks,
            capacity: self.chunks * self.class.slots_per_chunk as usize,
            in_use: self.in_use,
            free: self.free.len(),
            high_water: self.high_water,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn class(size: usize, slots: u32, cap: Option<usize>) -> ValidClass {
        ValidClass {
            size,
            chunk_bytes: size * slots as usize,
            slots_per_chunk: slots,
            cap_bytes: cap,
        }
    }

    /// Take a slot, growing by chunks numbered from `next_id` when allowed.
    fn take(book: &mut ClassBook<u32>, budget: &Budget, next_id: &mut u32) -> Take<u32> {
        match book.take(budget) {
            Take::Grow { .. } => {
                let n = book.class().slots_per_chunk;
                let first = *next_id;
                *next_id += n;
                book.add_chunk(first..first + n);
                book.take(budget)
            }
            other => other,
        }
    }

    #[test]
    fn grows_chunk_by_chunk_until_the_class_cap() {
        let budget = Budget::new(1 << 20);
        let mut book = ClassBook::new(class(64, 2, Some(256)));
        let mut next = 0;
        let got: Vec<_> = (0..4)
            .map(|_| take(&mut book, &budget, &mut next))
            .collect();
        assert_eq!(
            got,
            vec![Take::Slot(0), Take::Slot(1), Take::Slot(2), Take::Slot(3)]
        );
        assert_eq!(
            take(&mut book, &budget, &mut next),
            Take::Exhausted { cap_bytes: 256 }
        );
        assert_eq!(budget.registered(), 256);
        book.put(1);
        assert_eq!(take(&mut book, &budget, &mut next), Take::Slot(1));
        let stats = book.stats();
        assert_eq!((stats.chunks, stats.capacity, stats.in_use), (2, 4, 4));
        assert_eq!(stats.high_water, 4);
    }

    #[test]
    fn the_pool_budget_is_shared_between_classes() {
        let budget = Budget::new(256);
        let mut small = ClassBook::new(class(64, 2, None));
        let mut large = ClassBook::new(class(128, 1, None));
        let mut next = 0;
        assert!(matches!(
            take(&mut small, &budget, &mut next),
            Take::Slot(_)
        ));
        assert!(matches!(
            take(&mut large, &budget, &mut next),
            Take::Slot(_)
        ));
        assert_eq!(budget.registered(), 256);
        assert_eq!(
            take(&mut large, &budget, &mut next),
            Take::Exhausted { cap_bytes: 256 }
        );
        // The small class still has a free slot in its chunk.
        assert!(matches!(
            take(&mut small, &budget, &mut next),
            Take::Slot(_)
        ));
        assert_eq!(
            take(&mut small, &budget, &mut next),
            Take::Exhausted { cap_bytes: 256 }
        );
    }

    #[test]
    fn a_released_reservation_can_be_taken_again() {
        let budget = Budget::new(128);
        assert!(budget.try_reserve(128));
        assert!(!budget.try_reserve(1));
        budget.release(128);
        assert!(budget.try_reserve(64));
        assert_eq!(budget.registered(), 64);
    }

    proptest! {
        /// Budgets against a model: reservations succeed exactly while they fit.
        #[test]
        fn budget_matches_model(
            cap in 0usize..1000,
            ops in proptest::collection::vec((any::<bool>(), 1usize..300), 1..100),
        ) {
            let budget = Budget::new(cap);
            let mut held: Vec<usize> = Vec::new();
            for (reserve, bytes) in ops {
                let total: usize = held.iter().sum();
                if reserve {
                    prop_assert_eq!(budget.try_reserve(bytes), total + bytes <= cap);
                    if total + bytes <= cap {
                        held.push(bytes);
                    }
                } else if let Some(bytes) = held.pop() {
                    budget.release(bytes);
                }
                prop_assert_eq!(budget.registered(), held.iter().sum::<usize>());
            }
        }

        /// Against a model: a slot is never handed out twice, counts add up, caps hold.
        #[test]
        fn bookkeeping_matches_model(
            ops in proptest::collection::vec((any::<bool>(), any::<prop::sample::Index>()), 1..200),
            slots in 1u32..5,
            class_chunks in proptest::option::of(1usize..4),
            pool_chunks in 1usize..6,
        ) {
            let size = 64;
            let chunk = size * slots as usize;
            let budget = Budget::new(pool_chunks * chunk);
            let mut book = ClassBook::new(class(size, slots, class_chunks.map(|c| c * chunk)));
            let mut next = 0;
            let mut held: Vec<u32> = Vec::new();
            let mut high = 0;
            let max_chunks = class_chunks.unwrap_or(usize::MAX).min(pool_chunks);
            for (alloc, index) in ops {
                if alloc || held.is_empty() {
                    let expect_exhausted = held.len() == max_chunks * slots as usize;
                    match take(&mut book, &budget, &mut next) {
                        Take::Slot(slot) => {
                            prop_assert!(!expect_exhausted);
                            prop_assert!(!held.contains(&slot), "slot {} handed out twice", slot);
                            held.push(slot);
                        }
                        Take::Exhausted { .. } => prop_assert!(expect_exhausted),
                        Take::Grow { .. } => prop_assert!(false, "take after growth must succeed"),
                    }
                } else {
                    book.put(held.swap_remove(index.index(held.len())));
                }
                high = high.max(held.len());
                let stats = book.stats();
                prop_assert_eq!(stats.in_use, held.len());
                prop_assert_eq!(stats.in_use + stats.free, stats.capacity);
                prop_assert_eq!(stats.high_water, high);
                prop_assert_eq!(budget.registered(), stats.chunks * chunk);
                prop_assert!(budget.registered() <= budget.cap());
                // Grown only when needed: fewest chunks that hold the high-water mark.
                prop_assert_eq!(stats.chunks, high.div_ceil(slots as usize));
            }
        }
    }
}
