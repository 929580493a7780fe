//! Classes starved by the pool's cap, and the news that memory came free for them.
//!
//! A class that cannot grow because the other classes' chunks fill the pool's cap can still be
//! served once a chunk of another class has all its slots free: the pool deregisters that chunk
//! and gives its bytes to the starved class (see `Pool`'s reclaim). A thread waiting in
//! `Pool::alloc` for such a class must then be woken, although no buffer of its own class came
//! back. [`Starved`] carries that news:
//!
//! - While a thread is starved ([`Starving`] alive), no class caches freed slots per thread, so
//!   the free that completes a chunk goes to the chunk's class, which sees it and calls
//!   [`Starved::chunk_freed`]. (Slots cached before are taken back by the starved thread's own
//!   search, which follows its registration.)
//! - Every such event, and every return of bytes to the pool's budget, bumps a generation and
//!   wakes the classes that have waiters. A starved waiter reads the generation before its
//!   attempt and sleeps only if it is unchanged, under its class lock; the waker takes that
//!   lock before notifying, so the news is never lost between the check and the sleep.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock, Weak};

use crate::pool::ClassShared;

/// Shared by all classes of a pool; on cache lines of its own, read on every cached free.
#[derive(Debug, Default)]
#[repr(align(128))]
pub(crate) struct Starved {
    /// Threads waiting in `alloc` for a class that the pool's cap keeps from growing.
    starving: AtomicUsize,
    /// Bumped whenever memory a starved class could use came free.
    generation: AtomicU64,
    /// The pool's classes (weak: classes hold this), set once when the pool is made.
    classes: OnceLock<Box<[Weak<ClassShared>]>>,
}

impl Starved {
    /// Set the classes to wake; once, right after they are made.
    pub(crate) fn set_classes(&self, classes: &[Arc<ClassShared>]) {
        let weak = classes.iter().map(Arc::downgrade).collect();
        let set = self.classes.set(weak);
        debug_assert!(set.is_ok(), "the classes are set once");
    }

    /// Whether some thread is starved: then freed slots go to their class, not to a cache.
    pub(crate) fn any(&self) -> bool {
        self.starving.load(Ordering::SeqCst) > 0
    }

    /// The current generation, read before an attempt that may end in a starved wait.
    pub(crate) fn generation(&self) -> u64 {
        self.generation.load(Ordering::SeqCst)
    }

    /// Whether memory came free since `seen` was read.
    pub(crate) fn changed_since(&self, seen: u64) -> bool {
        self.generation() != seen
    }

    /// A chunk's slots all came back to its class (with no class lock held): wake the starved,
    /// if any.
    pub(crate) fn chunk_freed(&self) {
        if self.any() {
            self.wake();
        }
    }

    /// Memory came free (a chunk, or bytes of the budget): bump the generation and wake every
    /// class with waiters. The caller holds no class lock.
    pub(crate) fn wake(&self) {
        self.generation.fetch_add(1, Ordering::SeqCst);
        let Some(classes) = self.classes.get() else {
            return;
        };
        for class in classes.iter().filter_map(Weak::upgrade) {
            if class.has_waiters() {
                class.notify_waiters();
            }
        }
    }
}

/// A thread starved by the pool's cap, for as long as it lives.
pub(crate) struct Starving<'a>(&'a Starved);

impl<'a> Starving<'a> {
    pub(crate) fn new(starved: &'a Starved) -> Self {
        starved.starving.fetch_add(1, Ordering::SeqCst);
        Self(starved)
    }
}

impl Drop for Starving<'_> {
    fn drop(&mut self) {
        self.0.starving.fetch_sub(1, Ordering::SeqCst);
    }
}
