//! Per-thread caches of free slots: the common alloc/free pair on one thread touches no lock
//! or counter shared with other threads.
//!
//! Each thread has, per class it has used, a [`Shard`]: at most [`CAPACITY`] free slots behind
//! a lock that only that thread takes on its fast paths. The class lists every shard (under
//! its own lock), so other threads reach cached slots when they need them: before the class
//! grows, reports [`Exhausted`](crate::Error::Exhausted) or waits, it takes every cached slot
//! back. A thread frees into its shard only while nobody waits for the class. On thread exit
//! the shards go back to their classes.
//!
//! A cached slot keeps the reference to its class that its buffer held, so alloc and free from
//! the cache touch no reference count shared with other threads either. When the pool drops,
//! its classes are closed: the caches are emptied (dropping those references) and take no more
//! slots, so cached slots never keep a class or its chunks alive beyond the pool and its
//! buffers.
//!
//! The bookkeeping counts a cached slot as taken; statistics subtract the cached slots, so a
//! cached slot counts as free.

use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};

use parking_lot::Mutex;

use crate::pool::ClassShared;
use crate::registered::SlotMemory;

/// Most free slots a thread keeps per class.
pub(crate) const CAPACITY: usize = 8;

/// Source of class identities; a `u64` never wraps, so a cache entry never matches a later
/// class.
static NEXT_CLASS_ID: AtomicU64 = AtomicU64::new(0);

/// A fresh, never reused class identity.
pub(crate) fn class_id() -> u64 {
    NEXT_CLASS_ID.fetch_add(1, Ordering::Relaxed)
}

/// The free slots of one class cached by one thread, on its own cache lines.
#[derive(Debug, Default)]
#[repr(align(128))]
pub(crate) struct Shard {
    slots: Mutex<Vec<Cached>>,
}

/// A free slot and the reference to its class that came with it.
pub(crate) type Cached = (SlotMemory, Arc<ClassShared>);

impl Shard {
    /// Take every cached slot out.
    pub(crate) fn drain(&self) -> Vec<Cached> {
        std::mem::take(&mut *self.slots.lock())
    }

    /// Number of cached slots.
    pub(crate) fn len(&self) -> usize {
        self.slots.lock().len()
    }
}

struct Entry {
    id: u64,
    class: Weak<ClassShared>,
    shard: Arc<Shard>,
}

struct Local {
    entries: Vec<Entry>,
}

impl Drop for Local {
    fn drop(&mut self) {
        for entry in self.entries.drain(..) {
            if let Some(class) = entry.class.upgrade() {
                class.retire(&entry.shard);
            }
        }
    }
}

thread_local! {
    static LOCAL: RefCell<Local> = const {
        RefCell::new(Local {
            entries: Vec::new(),
        })
    };
}

/// Take a slot of `class` from this thread's cache.
#[inline]
pub(crate) fn take(class: &ClassShared) -> Option<Cached> {
    LOCAL
        .try_with(|local| {
            let local = local.try_borrow().ok()?;
            let entry = local.entries.iter().find(|e| e.id == class.id())?;
            let slot = entry.shard.slots.lock().pop();
            slot
        })
        .ok()
        .flatten()
}

/// Cache a free slot (with its class reference) on this thread, or give it back if the cache
/// is full, nobody may cache now (a thread waits for the class, or the pool is gone) or the
/// thread is exiting.
#[inline]
pub(crate) fn put(slot: Cached) -> Result<(), Cached> {
    let slot = match cache(slot) {
        Outcome::Done => return Ok(()),
        Outcome::Refused(slot) => return Err(slot),
        Outcome::NoShard(slot) => slot,
    };
    match register(&slot.1) {
        Some(shard) => push(&shard, slot),
        None => Err(slot),
    }
}

enum Outcome {
    Done,
    Refused(Cached),
    NoShard(Cached),
}

fn cache(slot: Cached) -> Outcome {
    let mut slot = Some(slot);
    let done = LOCAL.try_with(|local| {
        let Ok(local) = local.try_borrow() else {
            return Outcome::Refused(slot.take().expect("the slot is here"));
        };
        let slot = slot.take().expect("the slot is here");
        let id = slot.1.id();
        match local.entries.iter().find(|e| e.id == id) {
            Some(entry) => match push(&entry.shard, slot) {
                Ok(()) => Outcome::Done,
                Err(slot) => Outcome::Refused(slot),
            },
            None => Outcome::NoShard(slot),
        }
    });
    match done {
        Ok(cached) => cached,
        // The thread is exiting: its caches are gone.
        Err(_) => Outcome::Refused(slot.take().expect("the slot is here")),
    }
}

#[inline(always)]
fn push(shard: &Shard, slot: Cached) -> Result<(), Cached> {
    let mut slots = shard.slots.lock();
    // Under the shard's lock: a thread about to wait (or closing the class) says so first and
    // then takes the cached slots under this lock, so either it sees this slot or this sees it.
    if slots.len() >= CAPACITY || slot.1.refuses_caching() {
        return Err(slot);
    }
    slots.push(slot);
    Ok(())
}

/// Give this thread a shard of `class` and list it in the class; `None` if the thread is
/// exiting.
#[cold]
fn register(class: &Arc<ClassShared>) -> Option<Arc<Shard>> {
    let shard = Arc::new(Shard::default());
    let stale = LOCAL
        .try_with(|local| {
            let mut local = local.try_borrow_mut().ok()?;
            // Entries of classes that are gone hold nothing: a cached slot keeps its class.
            let stale: Vec<Entry> = {
                let (live, dead) = local
                    .entries
                    .drain(..)
                    .partition(|e| e.class.strong_count() > 0);
                local.entries = live;
                dead
            };
            local.entries.push(Entry {
                id: class.id(),
                class: Arc::downgrade(class),
                shard: Arc::clone(&shard),
            });
            Some(stale)
        })
        .ok()
        .flatten()?;
    drop(stale);
    class.enlist(Arc::clone(&shard));
    Some(shard)
}
