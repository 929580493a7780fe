//! Pool statistics: registered chunks and bytes, buffers in use, high-water marks.

/// A snapshot of a pool's usage, from [`Pool::stats`](crate::Pool::stats).
///
/// Each class's numbers are consistent with each other; the totals are read without stopping
/// other threads, so under concurrent use they may be a moment apart from the classes.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct PoolStats {
    /// Chunks registered, over all classes.
    pub chunks: usize,
    /// Chunks that got huge pages.
    pub huge_page_chunks: usize,
    /// Bytes registered, over all classes (chunks are kept until the pool is dropped).
    pub bytes_registered: usize,
    /// The pool's cap on registered bytes.
    pub cap_bytes: usize,
    /// Bytes of class capacity held by live buffers.
    pub bytes_in_use: usize,
    /// Most bytes of class capacity ever held by live buffers at once.
    pub high_water_bytes: usize,
    /// Per size class, ascending.
    pub classes: Vec<ClassStats>,
}

impl PoolStats {
    /// Buffers currently handed out, over all classes.
    pub fn buffers_in_use(&self) -> usize {
        self.classes.iter().map(|c| c.in_use).sum()
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
    /// Most buffers ever in use at once.
    pub high_water: usize,
}
