//! Reclaim: a class the pool's cap keeps from growing takes the bytes of other classes' idle
//! chunks (every slot free, rkey never handed out), which are deregistered for it.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::{ClassState, PoolInner};
use crate::registered::Chunk;

impl PoolInner {
    /// Reserve `bytes` of the cap for `class` by deregistering chunks of other classes whose
    /// buffers are all free and whose rkey was never handed out. True if reserved.
    ///
    /// Called with no class lock held; takes one class lock at a time. Leaves every class at
    /// least one chunk if that is enough, and takes a class's last chunk only otherwise (when
    /// the cap cannot hold a chunk of each class in use). Deregisters nothing unless, as far as
    /// a look at each class shows, enough can be had; if another thread takes the idle chunks
    /// or the cap's room first, the bytes freed so far go back to the budget.
    pub(super) fn reclaim(&self, class: usize, bytes: usize) -> bool {
        if self.budget.try_reserve(bytes) {
            return true;
        }
        let others = || {
            self.states
                .iter()
                .enumerate()
                .filter(move |&(other, _)| other != class)
        };
        let idle: usize = others()
            .map(|(_, shared)| shared.state.lock().idle_bytes())
            .sum();
        if self.budget.slack() + idle < bytes {
            return false;
        }
        // Bytes of deregistered chunks, still counted in the budget, now ours.
        let mut held = 0;
        'search: for keep_last in [true, false] {
            for (other, shared) in others() {
                loop {
                    if held >= bytes || self.budget.try_reserve(bytes - held) {
                        held = held.max(bytes);
                        break 'search;
                    }
                    let Some(chunk) = shared.state.lock().detach_idle(keep_last) else {
                        break;
                    };
                    let len = chunk.len();
                    let retired = self.retire(chunk);
                    if retired {
                        held += len;
                    }
                    let (from, to) = (self.classes.size(other), self.classes.size(class));
                    crate::trace::retired(from, to, len, retired);
                }
            }
        }
        let enough = held >= bytes;
        let surplus = if enough { held - bytes } else { held };
        if surplus > 0 {
            self.budget.release(surplus);
            self.starved.wake();
        }
        enough
    }

    /// Deregister and unmap a chunk taken out of its class; true if its registration is gone.
    /// If it cannot be deregistered its memory is leaked and its bytes stay registered.
    fn retire(&self, chunk: Arc<Chunk>) -> bool {
        let (len, huge) = (chunk.len(), chunk.is_huge_pages());
        // No slot of an idle chunk is lent out, so the class held its only reference.
        let chunk = Arc::into_inner(chunk);
        debug_assert!(chunk.is_some(), "an idle chunk has no other reference");
        if chunk.is_some_and(Chunk::deregister) {
            self.reclaimed_chunks.fetch_add(1, Ordering::Relaxed);
            if huge {
                self.huge_page_chunks.fetch_sub(1, Ordering::Relaxed);
            }
            true
        } else {
            self.leaked_chunks.fetch_add(1, Ordering::Relaxed);
            self.leaked_bytes.fetch_add(len, Ordering::Relaxed);
            false
        }
    }
}

impl ClassState {
    /// Chunks another class may have: every slot free (cached ones taken back first) and the
    /// rkey never handed out.
    fn idle_chunks(&mut self) -> impl Iterator<Item = u32> + '_ {
        self.reclaim_cached();
        let chunks = &self.chunks;
        self.book.free_chunks().filter(move |&id| {
            let index = chunks
                .binary_search_by_key(&id, |chunk| chunk.id())
                .expect("a chunk of the book belongs to its class");
            !chunks[index].is_exposed()
        })
    }

    /// Bytes of the idle chunks.
    fn idle_bytes(&mut self) -> usize {
        let chunk_bytes = self.book.class().chunk_bytes;
        self.idle_chunks().count() * chunk_bytes
    }

    /// Take the newest idle chunk out of the class, for another class to reclaim its bytes;
    /// with `keep_last`, only if the class keeps another chunk.
    fn detach_idle(&mut self, keep_last: bool) -> Option<Arc<Chunk>> {
        if keep_last && self.chunks.len() <= 1 {
            return None;
        }
        let id = self.idle_chunks().next()?;
        self.book.remove_chunk(id);
        let index = self
            .chunks
            .binary_search_by_key(&id, |chunk| chunk.id())
            .expect("an idle chunk belongs to its class");
        Some(self.chunks.remove(index))
    }
}
