//! Allocator bookkeeping without memory: free lists, counts, caps and high-water marks.
//!
//! Pure state, generic over what a free slot is (the pool stores slot tokens, tests store
//! numbered pairs), so it is tested on the host against a model. No unsafe, no pointers.
//!
//! Each class also counts the free slots of each of its chunks, so that a chunk whose slots
//! are all free can be found and taken out of the class ([`ClassBook::remove_chunk`]) when
//! another class needs its bytes of the pool's cap.

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

    /// Give back a reservation whose chunk could not be created, or the bytes of a chunk
    /// that was deregistered.
    pub(crate) fn release(&self, bytes: usize) {
        self.registered.fetch_sub(bytes, Ordering::AcqRel);
    }

    pub(crate) fn registered(&self) -> usize {
        self.registered.load(Ordering::Acquire)
    }

    pub(crate) fn cap(&self) -> usize {
        self.cap
    }

    /// Bytes that may still be reserved.
    pub(crate) fn slack(&self) -> usize {
        self.cap.saturating_sub(self.registered())
    }
}

/// A free slot names the chunk it belongs to.
pub(crate) trait ChunkSlot {
    /// Id of the slot's chunk; a class adds its chunks in ascending id order.
    fn chunk(&self) -> u32;
}

/// Outcome of [`ClassBook::take`].
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Take<T> {
    /// A free slot, now counted in use.
    Slot(T),
    /// No free slot, but the caps allow another chunk and its bytes are reserved in the budget:
    /// create it and call [`ClassBook::add_chunk`], or [`Budget::release`] the reservation.
    Grow { chunk_bytes: usize },
    /// No free slot and the class's own cap (`cap_bytes`) forbids another chunk.
    Exhausted { cap_bytes: usize },
    /// No free slot, the class's own cap allows another chunk of `chunk_bytes`, but the pool's
    /// budget has no room for it: chunks of other classes whose slots are all free may give
    /// their bytes back ([`ClassBook::remove_chunk`]).
    PoolFull { chunk_bytes: usize },
}

/// State of one size class.
#[derive(Debug)]
pub(crate) struct ClassBook<T> {
    class: ValidClass,
    chunks: usize,
    /// Per chunk, ascending by id: (chunk id, free slots of it in `free`).
    chunk_free: Vec<(u32, u32)>,
    free: Vec<T>,
    in_use: usize,
    high_water: usize,
}

impl<T: ChunkSlot> ClassBook<T> {
    pub(crate) fn new(class: ValidClass) -> Self {
        Self {
            class,
            chunks: 0,
            chunk_free: Vec::new(),
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
            Take::PoolFull { chunk_bytes }
        }
    }

    /// Whether the class's own cap forbids another chunk.
    pub(crate) fn at_class_cap(&self) -> bool {
        self.class
            .cap_bytes
            .is_some_and(|cap| self.registered() + self.class.chunk_bytes > cap)
    }

    /// Take a free slot, if any, without considering growth.
    pub(crate) fn pop(&mut self) -> Option<T> {
        let slot = self.free.pop()?;
        *self.free_of(slot.chunk()) -= 1;
        self.in_use += 1;
        self.high_water = self.high_water.max(self.in_use);
        Some(slot)
    }

    /// True if a slot can be taken without growing.
    pub(crate) fn has_free(&self) -> bool {
        !self.free.is_empty()
    }

    /// Add the free slots of a new chunk `id`, whose bytes [`take`](Self::take) reserved.
    /// Slots are handed out in the order given.
    pub(crate) fn add_chunk(&mut self, id: u32, slots: impl DoubleEndedIterator<Item = T>) {
        debug_assert!(self.chunk_free.last().map_or(true, |&(last, _)| last < id));
        let before = self.free.len();
        self.free.extend(slots.rev());
        let added = self.free.len() - before;
        debug_assert_eq!(added, self.class.slots_per_chunk as usize);
        debug_assert!(self.free[before..].iter().all(|slot| slot.chunk() == id));
        self.chunk_free.push((id, added as u32));
        self.chunks += 1;
    }

    /// Return a slot taken from this class. True if every slot of its chunk is now free.
    pub(crate) fn put(&mut self, slot: T) -> bool {
        debug_assert!(self.in_use > 0);
        self.in_use -= 1;
        let slots = self.class.slots_per_chunk;
        let free = self.free_of(slot.chunk());
        *free += 1;
        let whole = *free == slots;
        self.free.push(slot);
        whole
    }

    /// Ids of the chunks whose slots are all free, newest first.
    pub(crate) fn free_chunks(&self) -> impl Iterator<Item = u32> + '_ {
        let slots = self.class.slots_per_chunk;
        self.chunk_free
            .iter()
            .rev()
            .filter(move |&&(_, free)| free == slots)
            .map(|&(id, _)| id)
    }

    /// Take chunk `id`, whose slots are all free, out of the class: its slots leave the free
    /// list and its bytes no longer count as the class's. The caller deregisters it and gives
    /// its bytes back to the budget.
    ///
    /// Panics if the chunk is not the class's or has a slot in use (a bug in the caller).
    pub(crate) fn remove_chunk(&mut self, id: u32) {
        let index = self.chunk_index(id);
        assert_eq!(
            self.chunk_free[index].1, self.class.slots_per_chunk,
            "only a chunk whose slots are all free leaves its class"
        );
        self.chunk_free.remove(index);
        self.free.retain(|slot| slot.chunk() != id);
        self.chunks -= 1;
    }

    fn chunk_index(&self, id: u32) -> usize {
        self.chunk_free
            .binary_search_by_key(&id, |&(chunk, _)| chunk)
            .expect("a slot's chunk belongs to its class")
    }

    fn free_of(&mut self, id: u32) -> &mut u32 {
        let index = self.chunk_index(id);
        &mut self.chunk_free[index].1
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

    /// Test slots are numbers: chunk `c` holds slots `16 * c ..`, at most 16 of them.
    impl ChunkSlot for u32 {
        fn chunk(&self) -> u32 {
            self / 16
        }
    }

    /// Take a slot, growing by chunks numbered from `next_id` when allowed.
    fn take(book: &mut ClassBook<u32>, budget: &Budget, next_id: &mut u32) -> Take<u32> {
        match book.take(budget) {
            Take::Grow { .. } => {
                let n = book.class().slots_per_chunk;
                assert!(n <= 16);
                let id = *next_id;
                *next_id += 1;
                book.add_chunk(id, 16 * id..16 * id + n);
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
            vec![Take::Slot(0), Take::Slot(1), Take::Slot(16), Take::Slot(17)]
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
            Take::PoolFull { chunk_bytes: 128 }
        );
        // The small class still has a free slot in its chunk.
        assert!(matches!(
            take(&mut small, &budget, &mut next),
            Take::Slot(_)
        ));
        assert_eq!(
            take(&mut small, &budget, &mut next),
            Take::PoolFull { chunk_bytes: 128 }
        );
        assert!(!small.at_class_cap() && !large.at_class_cap());
    }

    #[test]
    fn a_chunk_whose_slots_are_all_free_can_leave_its_class() {
        let budget = Budget::new(256);
        let mut small = ClassBook::new(class(64, 2, None));
        let mut large = ClassBook::new(class(128, 1, None));
        let mut next = 0;
        let a = take(&mut small, &budget, &mut next);
        let b = take(&mut small, &budget, &mut next);
        let (Take::Slot(a), Take::Slot(b)) = (a, b) else {
            panic!("the small class grows once");
        };
        assert!(matches!(
            take(&mut large, &budget, &mut next),
            Take::Slot(_)
        ));
        assert_eq!(small.free_chunks().count(), 0, "both slots are in use");
        assert!(!small.put(a), "one slot of the chunk is still in use");
        assert_eq!(small.free_chunks().count(), 0);
        assert!(small.put(b), "the last slot of the chunk came back");
        let free: Vec<u32> = small.free_chunks().collect();
        assert_eq!(free, vec![a / 16]);
        small.remove_chunk(free[0]);
        budget.release(small.class().chunk_bytes);
        let stats = small.stats();
        assert_eq!((stats.chunks, stats.capacity, stats.free), (0, 0, 0));
        assert_eq!(small.registered(), 0);
        assert!(!small.has_free());
        // Its bytes serve the other class.
        assert!(matches!(
            take(&mut large, &budget, &mut next),
            Take::Slot(_)
        ));
        assert_eq!(budget.registered(), 256);
    }

    #[test]
    #[should_panic(expected = "all free")]
    fn a_chunk_with_a_slot_in_use_never_leaves_its_class() {
        let budget = Budget::new(256);
        let mut book = ClassBook::new(class(64, 2, None));
        let mut next = 0;
        assert_eq!(take(&mut book, &budget, &mut next), Take::Slot(0));
        book.remove_chunk(0);
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

        /// Against a model: a slot is never handed out twice, counts add up, caps hold, and
        /// exactly the chunks with no slot in use can leave the class.
        #[test]
        fn bookkeeping_matches_model(
            ops in proptest::collection::vec((0u8..5, any::<prop::sample::Index>()), 1..200),
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
            // Ids of the class's chunks.
            let mut chunks: Vec<u32> = Vec::new();
            let mut high = 0;
            let max_chunks = class_chunks.unwrap_or(usize::MAX).min(pool_chunks);
            for (op, index) in ops {
                let before = book.stats();
                if op == 4 {
                    // Take a chunk whose slots are all free out of the class, if there is one.
                    let idle: Vec<u32> = chunks
                        .iter()
                        .rev()
                        .copied()
                        .filter(|&c| held.iter().all(|&slot| slot / 16 != c))
                        .collect();
                    prop_assert_eq!(book.free_chunks().collect::<Vec<_>>(), idle.clone());
                    if let Some(&id) = idle.get(index.index(idle.len().max(1))) {
                        book.remove_chunk(id);
                        budget.release(chunk);
                        chunks.retain(|&c| c != id);
                    }
                } else if op < 2 || held.is_empty() {
                    let expect_exhausted = held.len() == max_chunks * slots as usize;
                    match take(&mut book, &budget, &mut next) {
                        Take::Slot(slot) => {
                            prop_assert!(!expect_exhausted);
                            prop_assert!(!held.contains(&slot), "slot {} handed out twice", slot);
                            if !chunks.contains(&(slot / 16)) {
                                prop_assert_eq!(before.free, 0, "grew with a slot free");
                                chunks.push(slot / 16);
                            }
                            held.push(slot);
                        }
                        Take::Exhausted { cap_bytes } => {
                            prop_assert!(expect_exhausted);
                            prop_assert!(class_chunks.is_some_and(|c| c <= pool_chunks));
                            prop_assert_eq!(Some(cap_bytes), class_chunks.map(|c| c * chunk));
                            prop_assert!(book.at_class_cap());
                        }
                        Take::PoolFull { chunk_bytes } => {
                            prop_assert!(expect_exhausted);
                            prop_assert!(class_chunks.map_or(true, |c| c > pool_chunks));
                            prop_assert_eq!(chunk_bytes, chunk);
                            prop_assert!(!book.at_class_cap());
                        }
                        Take::Grow { .. } => prop_assert!(false, "take after growth must succeed"),
                    }
                } else {
                    let slot = held.swap_remove(index.index(held.len()));
                    let whole = book.put(slot);
                    prop_assert_eq!(whole, held.iter().all(|&s| s / 16 != slot / 16));
                }
                high = high.max(held.len());
                let stats = book.stats();
                prop_assert_eq!(stats.in_use, held.len());
                prop_assert_eq!(stats.in_use + stats.free, stats.capacity);
                prop_assert_eq!(stats.capacity, chunks.len() * slots as usize);
                prop_assert_eq!(stats.chunks, chunks.len());
                prop_assert_eq!(stats.high_water, high);
                prop_assert_eq!(budget.registered(), stats.chunks * chunk);
                prop_assert!(budget.registered() <= budget.cap());
                prop_assert_eq!(book.has_free(), stats.free > 0);
            }
        }
    }
}
