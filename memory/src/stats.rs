//! Pool statistics: registered chunks and bytes, buffers in use, high-water marks.

/// A snapshot of a pool's usage, from [`Pool::stats`](crate::Pool::stats).
///
/// Each class's numbers are consistent with each other; classes are read one after the other,
/// so under concurrent use the totals may mix moments a little apart.
///
/// High-water marks are kept per class: chunks belong to a class, so the registration a
/// workload needs follows from each class's peak (`ceil(high_water * size / chunk_bytes)`
/// chunks). A pool-wide peak of bytes in use would need a counter shared by every allocation
/// of every class, which measurably slows threads using different classes.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct PoolStats {
    /// Chunks registered: those of the classes, plus [`leaked_chunks`](Self::leaked_chunks).
    pub chunks: usize,
    /// Chunks registered that got huge pages.
    pub huge_page_chunks: usize,
    /// Bytes registered, over the same chunks as [`chunks`](Self::chunks). A chunk stays
    /// registered until the pool is dropped, unless it is reclaimed for another class.
    pub bytes_registered: usize,
    /// The pool's cap on registered bytes.
    pub cap_bytes: usize,
    /// Chunks deregistered since the pool was made, to give their bytes to a class that the
    /// cap kept from growing (chunks whose buffers were all free). Steady use reclaims none.
    pub reclaimed_chunks: usize,
    /// Chunks taken out of their class to be reclaimed whose deregistration failed: they stay
    /// registered, their memory is leaked, and their bytes count against the cap for good.
    pub leaked_chunks: usize,
    /// Bytes of class capacity held by live buffers.
    pub bytes_in_use: usize,
    /// Per size class, ascending, with each class's high-water mark.
    pub classes: Vec<ClassStats>,
}

impl PoolStats {
    /// Buffers currently handed out, over all classes.
    pub fn buffers_in_use(&self) -> usize {
        self.classes.iter().map(|c| c.in_use).sum()
    }

    /// Bytes the classes' peaks add up to (`high_water * size` summed): an upper bound on the
    /// pool-wide peak of bytes in use, reached if all classes peaked at once.
    pub fn high_water_bytes_bound(&self) -> usize {
        self.classes.iter().map(|c| c.high_water * c.size).sum()
    }
}

/// Usage of one size class.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct ClassStats {
    /// Buffer size of the class.
    pub size: usize,
    /// Bytes per chunk.
    pub chunk_bytes: usize,
    /// Chunks registered for this class.
    pub chunks: usize,
    /// Buffers the chunks hold (`in_use + free`).
    pub capacity: usize,
    /// Buffers handed out and not yet dropped.
    pub in_use: usize,
    /// Buffers ready to hand out.
    pub free: usize,
    /// Most buffers ever in use at once. Slots then cached by other threads count as in use,
    /// so with several threads this is an upper bound; with one thread it is exact.
    pub high_water: usize,
}
