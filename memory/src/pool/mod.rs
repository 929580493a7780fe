//! The pool: per-class free lists over registered chunks, growth up to the cap, reclaim of
//! idle chunks for classes the cap starves, waiting.

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex, MutexGuard};

use crate::bookkeeping::{Budget, ClassBook, Take};
use crate::buffer::Buffer;
use crate::class::SizeClasses;
use crate::config::ValidClass;
use crate::local::{self, Shard};
use crate::registered::{
    reserved_huge_pages, Chunk, ChunkLimit, PdRegistrar, Registrar, SlotMemory, SlotToken,
};
use crate::starved::{Starved, Starving};
use crate::stats::{ClassStats, PoolStats};
use crate::{Error, HugePages, PoolAccess, PoolConfig, Result};

mod reclaim;

/// A pool of registered memory handing out [`Buffer`]s by size class.
///
/// Cheap to clone (an `Arc` inside); clones share the pool. Buffers keep what they need alive,
/// so the pool may be dropped before them; chunks are deregistered and unmapped once the pool
/// and all their buffers are gone.
#[derive(Clone)]
pub struct Pool {
    inner: Arc<PoolInner>,
}

struct PoolInner {
    classes: SizeClasses,
    /// Buffers hold their class, not the pool: threads using different classes share no
    /// reference count, lock or counter.
    states: Box<[Arc<ClassShared>]>,
    budget: Budget,
    /// Threads starved by the cap, and the news that memory came free; shared with the classes.
    starved: Arc<Starved>,
    huge_page_chunks: AtomicUsize,
    /// Chunks deregistered to give their bytes to another class.
    reclaimed_chunks: AtomicUsize,
    /// Chunks taken out of their class whose deregistration failed: still registered, their
    /// memory leaked, their bytes still counted in the budget.
    leaked_chunks: AtomicUsize,
    leaked_bytes: AtomicUsize,
    access: PoolAccess,
    huge_pages: HugePages,
    registrar: Box<dyn Registrar>,
}

/// A class's lock and the condition "a buffer came back", on their own cache lines.
#[derive(Debug)]
#[repr(align(128))]
pub(crate) struct ClassShared {
    state: Mutex<ClassState>,
    /// Signalled when a buffer comes back and when a growth ends.
    returned: Condvar,
    /// A thread is creating a chunk for the class, with the lock released. Changed under the
    /// lock.
    growing: AtomicBool,
    /// Threads waiting for a buffer of the class to come back; while any does, freed slots go
    /// to the class, not to per-thread caches. Changed under the lock.
    waiters: AtomicUsize,
    /// Identity for per-thread caches, never reused.
    id: u64,
    /// The pool is gone: freed slots go to the class, not to per-thread caches.
    closed: AtomicBool,
    /// The pool's news for starved classes.
    starved: Arc<Starved>,
}

/// Ends a growth, also if the registrar panics: clears the flag and wakes those waiting on it.
struct Growing<'a>(&'a ClassShared);

impl Drop for Growing<'_> {
    fn drop(&mut self) {
        self.0.growing.store(false, Ordering::Relaxed);
        self.0.returned.notify_all();
    }
}

#[derive(Debug)]
struct ClassState {
    book: ClassBook<SlotToken>,
    /// Ascending by id: a class creates its chunks one at a time.
    chunks: Vec<Arc<Chunk>>,
    /// The per-thread caches of the class ([`local`]); their slots count as taken in `book`.
    shards: Vec<Arc<Shard>>,
    /// When the class's exhaustion was last reported.
    exhausted: crate::trace::Throttle,
}

/// Refuses classes whose chunks exceed what the registrar can register.
fn check_chunk_limit(classes: &[ValidClass], limit: &ChunkLimit) -> Result<()> {
    match classes.iter().find(|c| c.chunk_bytes as u64 > limit.bytes) {
        Some(c) => Err(Error::InvalidConfig {
            reason: format!(
                "chunk size {} of class {} exceeds {} ({} bytes): give the class a smaller \
                 chunk_size, or lift the limit",
                c.chunk_bytes, c.size, limit.reason, limit.bytes
            ),
        }),
        None => Ok(()),
    }
}

impl Pool {
    /// A pool with `config`, registering its chunks through `registrar`. Registers nothing yet:
    /// chunks are created when first needed.
    ///
    /// A configuration that could never allocate is [`Error::InvalidConfig`] here rather than
    /// a failure at the first allocation: besides [`PoolConfig`]'s own rules, a chunk larger
    /// than the registrar can register ([`Registrar::max_chunk`]: the device's largest region,
    /// the locked-memory limit) and [`HugePages::Require`] on a system with no huge pages
    /// reserved.
    pub fn new(config: PoolConfig, registrar: impl Registrar) -> Result<Self> {
        let classes = config.validate()?;
        if let Some(limit) = registrar.max_chunk() {
            check_chunk_limit(&classes, &limit)?;
        }
        if config.get_huge_pages() == HugePages::Require && reserved_huge_pages() == Some(0) {
            return Err(Error::InvalidConfig {
                reason: "huge pages are required but the system has none reserved: reserve some \
                         (echo N > /proc/sys/vm/nr_hugepages) or use HugePages::Prefer"
                    .into(),
            });
        }
        let starved = Arc::new(Starved::default());
        let states: Box<[Arc<ClassShared>]> = classes
            .iter()
            .map(|&class| {
                Arc::new(ClassShared {
                    state: Mutex::new(ClassState {
                        book: ClassBook::new(class),
                        chunks: Vec::new(),
                        shards: Vec::new(),
                        exhausted: crate::trace::Throttle::default(),
                    }),
                    returned: Condvar::new(),
                    growing: AtomicBool::new(false),
                    waiters: AtomicUsize::new(0),
                    id: local::class_id(),
                    closed: AtomicBool::new(false),
                    starved: Arc::clone(&starved),
                })
            })
            .collect();
        starved.set_classes(&states);
        Ok(Self {
            inner: Arc::new(PoolInner {
                classes: SizeClasses::new(classes.iter().map(|c| c.size)),
                states,
                budget: Budget::new(config.get_cap_bytes()),
                starved,
                huge_page_chunks: AtomicUsize::new(0),
                reclaimed_chunks: AtomicUsize::new(0),
                leaked_chunks: AtomicUsize::new(0),
                leaked_bytes: AtomicUsize::new(0),
                access: config.get_access(),
                huge_pages: config.get_huge_pages(),
                registrar: Box::new(registrar),
            }),
        })
    }

    /// A pool with `config` whose chunks are registered on `pd` ([`PdRegistrar`]). The pool
    /// keeps the protection domain alive while any chunk is registered.
    pub fn on_pd(pd: &verbs::Pd, config: PoolConfig) -> Result<Self> {
        Self::new(config, PdRegistrar::new(pd))
    }

    /// A buffer of `len` bytes from the smallest class that holds it, without waiting.
    ///
    /// Registers a new chunk if the class has no free buffer and the caps allow it. When the
    /// pool's cap is what stops the class, first deregisters chunks of other classes whose
    /// buffers are all free (see [the crate docs](crate#reclaiming-idle-chunks)).
    /// Errors: [`Error::ZeroLength`], [`Error::TooLarge`], [`Error::Exhausted`] (backpressure),
    /// or a failure to create a chunk ([`Error::Allocate`], [`Error::Register`],
    /// [`Error::MemlockLimit`]).
    pub fn try_alloc(&self, len: usize) -> Result<Buffer> {
        let class = self.inner.classes.select(len)?;
        let shared = &self.inner.states[class];
        if let Some((slot, class)) = local::take(shared) {
            return Ok(Buffer::new(class, slot, len));
        }
        let mut state = shared.state.lock();
        let slot = self.inner.take(class, &mut state)?;
        drop(state);
        Ok(Buffer::new(Arc::clone(shared), slot, len))
    }

    /// Like [`try_alloc`](Self::try_alloc), but when the class is exhausted, wait up to
    /// `timeout` for a buffer of the class to be dropped, or, when the pool's cap stops the
    /// class, for a chunk of another class to become idle; [`Error::Timeout`] if neither
    /// happens.
    pub fn alloc(&self, len: usize, timeout: Duration) -> Result<Buffer> {
        let class = self.inner.classes.select(len)?;
        let start = Instant::now();
        let deadline = start.checked_add(timeout);
        let shared = &self.inner.states[class];
        if let Some((slot, class)) = local::take(shared) {
            return Ok(Buffer::new(class, slot, len));
        }
        let mut state = shared.state.lock();
        let mut starving = None;
        loop {
            let seen = self.inner.starved.generation();
            match self.inner.take(class, &mut state) {
                Ok(slot) => {
                    drop(state);
                    return Ok(Buffer::new(Arc::clone(shared), slot, len));
                }
                Err(Error::Exhausted { .. }) => {}
                Err(other) => return Err(other),
            }
            if starving.is_none() && !state.book.at_class_cap() {
                // The pool's cap stops the class. From now on frees in every class go to
                // their class, whose chunk then tells when it is idle; look once more (taking
                // back what threads cached before), then wait for that news.
                starving = Some(Starving::new(&self.inner.starved));
                crate::trace::starved(self.inner.classes.size(class), self.inner.budget.cap());
                continue;
            }
            let seen = starving.is_some().then_some(seen);
            match deadline {
                Some(deadline) if Instant::now() >= deadline => {
                    return Err(Error::Timeout {
                        waited: start.elapsed(),
                    })
                }
                Some(deadline) => shared.wait(&mut state, Some(deadline), seen),
                None => shared.wait(&mut state, None, seen),
            }
        }
    }

    /// A snapshot of the pool's usage.
    pub fn stats(&self) -> PoolStats {
        let inner = &self.inner;
        let classes: Vec<_> = inner
            .states
            .iter()
            .map(|shared| shared.state.lock().stats())
            .collect();
        let leaked_chunks = inner.leaked_chunks.load(Ordering::Relaxed);
        PoolStats {
            chunks: classes.iter().map(|c| c.chunks).sum::<usize>() + leaked_chunks,
            huge_page_chunks: inner.huge_page_chunks.load(Ordering::Relaxed),
            bytes_registered: classes
                .iter()
                .map(|c| c.chunks * c.chunk_bytes)
                .sum::<usize>()
                + inner.leaked_bytes.load(Ordering::Relaxed),
            cap_bytes: inner.budget.cap(),
            reclaimed_chunks: inner.reclaimed_chunks.load(Ordering::Relaxed),
            leaked_chunks,
            bytes_in_use: classes.iter().map(|c| c.in_use * c.size).sum(),
            classes,
        }
    }

    /// The class sizes, ascending.
    pub fn class_sizes(&self) -> &[usize] {
        self.inner.classes.sizes()
    }

    /// The largest buffer the pool hands out.
    pub fn max_buffer_size(&self) -> usize {
        self.inner.classes.max()
    }

    /// The access the pool's registrations grant.
    pub fn access(&self) -> PoolAccess {
        self.inner.access
    }
}

impl PoolInner {
    /// Take a slot of `class`, growing the class by a chunk if it is empty and the caps allow.
    ///
    /// The chunk is created with the class lock released, so buffers of the class can be
    /// dropped meanwhile; a class grows one chunk at a time, and a caller finding the class
    /// empty while it grows waits for the growth to end.
    fn take(&self, class: usize, state: &mut MutexGuard<'_, ClassState>) -> Result<SlotMemory> {
        match state.book.pop() {
            Some(token) => Ok(state.chunk(token.chunk()).claim(token)),
            None => self.take_or_grow(class, state),
        }
    }

    /// The slow path of [`take`](Self::take): the class has no free slot.
    #[cold]
    #[inline(never)]
    fn take_or_grow(
        &self,
        class: usize,
        state: &mut MutexGuard<'_, ClassState>,
    ) -> Result<SlotMemory> {
        let shared = &self.states[class];
        loop {
            if !state.book.has_free() {
                state.reclaim_cached();
            }
            if !state.book.has_free() && shared.growing.load(Ordering::Relaxed) {
                shared.returned.wait(state);
                continue;
            }
            match state.book.take(&self.budget) {
                Take::Slot(token) => {
                    let chunk = state.chunk(token.chunk());
                    return Ok(chunk.claim(token));
                }
                Take::Grow { chunk_bytes } => {
                    self.grow(class, state, chunk_bytes, true)?;
                }
                Take::PoolFull { chunk_bytes } => {
                    if !self.grow(class, state, chunk_bytes, false)? {
                        // Nothing to reclaim; buffers of the class may have come back meanwhile.
                        state.reclaim_cached();
                        if state.book.has_free() {
                            continue;
                        }
                        let (class_size, cap_bytes) = (self.classes.size(class), self.budget.cap());
                        crate::trace::exhausted(&mut state.exhausted, class_size, cap_bytes, false);
                        return Err(Error::Exhausted {
                            class_size,
                            cap_bytes,
                        });
                    }
                }
                Take::Exhausted { cap_bytes } => {
                    let class_size = self.classes.size(class);
                    crate::trace::exhausted(&mut state.exhausted, class_size, cap_bytes, true);
                    return Err(Error::Exhausted {
                        class_size,
                        cap_bytes,
                    });
                }
            }
        }
    }

    /// Add a chunk of `chunk_bytes` to `class`, with the class lock released meanwhile. If
    /// `reserved` is false the pool's cap is full: the bytes are first reclaimed from idle
    /// chunks of other classes, and `Ok(false)` says there were not enough.
    fn grow(
        &self,
        class: usize,
        state: &mut MutexGuard<'_, ClassState>,
        chunk_bytes: usize,
        reserved: bool,
    ) -> Result<bool> {
        let shared = &self.states[class];
        let valid = *state.book.class();
        shared.growing.store(true, Ordering::Relaxed);
        let growing = Growing(shared);
        let created = MutexGuard::unlocked(state, || {
            if !reserved && !self.reclaim(class, chunk_bytes) {
                return None;
            }
            let created = Chunk::create(
                valid.size,
                valid.slots_per_chunk,
                self.huge_pages,
                self.access,
                &*self.registrar,
            );
            if created.is_err() {
                // Back to the budget, and news for the starved (with no class lock held).
                self.budget.release(chunk_bytes);
                self.starved.wake();
            }
            Some(created)
        });
        drop(growing);
        match created {
            None => Ok(false),
            Some(Ok((chunk, tokens))) => {
                let huge_pages = chunk.is_huge_pages();
                if huge_pages {
                    self.huge_page_chunks.fetch_add(1, Ordering::Relaxed);
                }
                let id = chunk.id();
                state.chunks.push(chunk);
                state.book.add_chunk(id, tokens);
                crate::trace::grew(crate::trace::Growth {
                    class: valid.size,
                    bytes: chunk_bytes,
                    class_chunks: state.chunks.len(),
                    registered: self.budget.registered(),
                    cap: self.budget.cap(),
                    huge_pages,
                });
                Ok(true)
            }
            Some(Err(err)) => {
                crate::trace::grow_failed(valid.size, chunk_bytes, &err);
                Err(err)
            }
        }
    }
}

impl ClassShared {
    /// Return a buffer's slot: to this thread's cache, or to the class, waking one waiter.
    pub(crate) fn put(this: Arc<Self>, slot: SlotMemory) {
        let (slot, this) = match local::put((slot, this)) {
            Ok(()) => return,
            Err(refused) => refused,
        };
        let token = slot.release();
        let idle = this.state.lock().book.put(token);
        this.returned.notify_one();
        if idle {
            this.starved.chunk_freed();
        }
    }

    pub(crate) fn id(&self) -> u64 {
        self.id
    }

    /// Whether freed slots must go to the class: a thread waits for one, a thread is starved
    /// by the pool's cap, or the pool is gone.
    pub(crate) fn refuses_caching(&self) -> bool {
        self.waiters.load(Ordering::SeqCst) > 0
            || self.closed.load(Ordering::SeqCst)
            || self.starved.any()
    }

    /// Whether a thread waits in `alloc` for the class.
    pub(crate) fn has_waiters(&self) -> bool {
        self.waiters.load(Ordering::SeqCst) > 0
    }

    /// Wake every waiter of the class. Takes the class lock first, so that a waiter between
    /// its last check and its sleep is not missed.
    pub(crate) fn notify_waiters(&self) {
        drop(self.state.lock());
        self.returned.notify_all();
    }

    /// The pool is gone: take the cached slots back and cache no more, so that the caches
    /// keep neither the class nor its chunks alive.
    fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
        self.state.lock().reclaim_cached();
    }

    /// Wait (until `deadline`, if any) for a buffer of the class to come back. Counts itself as
    /// a waiter first, so no further slot goes to a per-thread cache, then takes the cached
    /// slots back; waits only if there still is no free slot.
    ///
    /// A thread starved by the pool's cap passes the [`Starved`] generation it read before its
    /// last attempt (`seen`), and also wakes when memory came free in another class since.
    fn wait(
        &self,
        state: &mut MutexGuard<'_, ClassState>,
        deadline: Option<Instant>,
        seen: Option<u64>,
    ) {
        self.waiters.fetch_add(1, Ordering::SeqCst);
        state.reclaim_cached();
        let news = seen.is_some_and(|seen| self.starved.changed_since(seen));
        if !state.book.has_free() && !news {
            match deadline {
                Some(deadline) => {
                    self.returned.wait_until(state, deadline);
                }
                None => self.returned.wait(state),
            }
        }
        self.waiters.fetch_sub(1, Ordering::SeqCst);
    }

    /// List a thread's new cache of the class.
    pub(crate) fn enlist(&self, shard: Arc<Shard>) {
        self.state.lock().shards.push(shard);
    }

    /// A thread exits: take its cache out of the class and its slots back.
    pub(crate) fn retire(&self, shard: &Arc<Shard>) {
        let mut state = self.state.lock();
        state.shards.retain(|s| !Arc::ptr_eq(s, shard));
        let slots = shard.drain();
        let any = !slots.is_empty();
        let mut idle = false;
        for (slot, _class) in slots {
            idle |= state.book.put(slot.release());
        }
        drop(state);
        if any {
            self.returned.notify_all();
        }
        if idle {
            self.starved.chunk_freed();
        }
    }
}

impl Drop for PoolInner {
    fn drop(&mut self) {
        for shared in self.states.iter() {
            shared.close();
        }
    }
}

impl ClassState {
    /// Take every slot cached by threads back into the free list.
    ///
    /// Drops the class references that came with the slots; the caller holds another (it got
    /// here through the pool or a thread's cache entry), so the class outlives this lock.
    fn reclaim_cached(&mut self) {
        for shard in &self.shards {
            for (slot, _class) in shard.drain() {
                self.book.put(slot.release());
            }
        }
    }

    /// The class's statistics, counting cached slots as free.
    fn stats(&self) -> ClassStats {
        let cached: usize = self.shards.iter().map(|shard| shard.len()).sum();
        let mut stats = self.book.stats();
        stats.in_use -= cached;
        stats.free += cached;
        stats
    }

    fn chunk(&self, id: u32) -> &Arc<Chunk> {
        let index = self
            .chunks
            .binary_search_by_key(&id, |chunk| chunk.id())
            .expect("a token's chunk belongs to its class");
        &self.chunks[index]
    }
}

impl fmt::Debug for Pool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Pool")
            .field("class_sizes", &self.class_sizes())
            .field("access", &self.inner.access)
            .field("huge_pages", &self.inner.huge_pages)
            .field("cap_bytes", &self.inner.budget.cap())
            .field("bytes_registered", &self.inner.budget.registered())
            .field("registrar", &self.inner.registrar)
            .finish()
    }
}

impl fmt::Debug for PoolInner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PoolInner")
            .field("class_sizes", &self.classes.sizes())
            .finish_non_exhaustive()
    }
}
