//! The crate's `tracing` events (target `memory`), with the `tracing` feature. Without it every
//! function here is empty and inlined away, so its call sites compile to nothing.
//!
//! All of them are on the pool's slow path (a class without a free slot): growth by a chunk
//! (debug), a chunk that could not be created (warn), an allocation the caps refuse (warn, at
//! most once a second per class, counting the refusals in between), a thread starved by the
//! pool's cap (debug), an idle chunk reclaimed for another class (debug) or leaked because it
//! could not be deregistered (warn).

use crate::Error;

/// A class registered a new chunk.
#[derive(Debug, Clone, Copy)]
#[cfg_attr(not(feature = "tracing"), allow(dead_code))]
pub(crate) struct Growth {
    /// The class's buffer size.
    pub(crate) class: usize,
    /// The chunk's bytes.
    pub(crate) bytes: usize,
    /// The class's chunks, the new one included.
    pub(crate) class_chunks: usize,
    /// Bytes the pool has registered (or reserved) in all.
    pub(crate) registered: usize,
    /// The pool's cap on them.
    pub(crate) cap: usize,
    /// Whether the chunk is on huge pages.
    pub(crate) huge_pages: bool,
}

#[cfg_attr(not(feature = "tracing"), inline(always))]
pub(crate) fn grew(g: Growth) {
    #[cfg(feature = "tracing")]
    tracing::debug!(
        target: "memory",
        class = g.class,
        bytes = g.bytes,
        class_chunks = g.class_chunks,
        registered = g.registered,
        cap = g.cap,
        huge_pages = g.huge_pages,
        "pool grew by a chunk"
    );
    #[cfg(not(feature = "tracing"))]
    let _ = g;
}

/// Creating a chunk of `bytes` for the class of `class`-byte buffers failed.
#[cold]
#[cfg_attr(not(feature = "tracing"), inline(always))]
pub(crate) fn grow_failed(class: usize, bytes: usize, error: &Error) {
    #[cfg(feature = "tracing")]
    tracing::warn!(target: "memory", class, bytes, error = %error, "pool could not grow");
    #[cfg(not(feature = "tracing"))]
    let _ = (class, bytes, error);
}

/// Reports of a class's exhaustion: at most one a second, each counting the refusals not
/// reported since the last.
#[derive(Debug, Default)]
pub(crate) struct Throttle {
    #[cfg(feature = "tracing")]
    last: Option<std::time::Instant>,
    #[cfg(feature = "tracing")]
    unreported: u64,
}

/// How often a class's exhaustion is reported at most.
#[cfg(feature = "tracing")]
const EXHAUSTED_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

/// An allocation of the class of `class`-byte buffers was refused: `cap` bytes, the class's
/// own cap (`class_cap`) or the pool's, are registered and nothing is free.
#[cold]
#[cfg_attr(not(feature = "tracing"), inline(always))]
pub(crate) fn exhausted(throttle: &mut Throttle, class: usize, cap: usize, class_cap: bool) {
    #[cfg(feature = "tracing")]
    {
        let now = std::time::Instant::now();
        if throttle
            .last
            .is_some_and(|last| now.duration_since(last) < EXHAUSTED_EVERY)
        {
            throttle.unreported += 1;
            return;
        }
        let cap_of = if class_cap { "class" } else { "pool" };
        let also_refused = std::mem::take(&mut throttle.unreported);
        throttle.last = Some(now);
        tracing::warn!(
            target: "memory",
            class,
            cap,
            cap_of,
            also_refused,
            "pool exhausted: allocation refused"
        );
    }
    #[cfg(not(feature = "tracing"))]
    let _ = (throttle, class, cap, class_cap);
}

/// A thread asking for a `class`-byte buffer waits for other classes' chunks to become idle:
/// the pool's `cap` keeps the class from growing.
#[cold]
#[cfg_attr(not(feature = "tracing"), inline(always))]
pub(crate) fn starved(class: usize, cap: usize) {
    #[cfg(feature = "tracing")]
    tracing::debug!(
        target: "memory",
        class,
        cap,
        "class starved by the pool's cap: waiting for idle chunks"
    );
    #[cfg(not(feature = "tracing"))]
    let _ = (class, cap);
}

/// An idle chunk of `bytes` of the class `from` was deregistered for the class `to`
/// (`reclaimed`), or could not be and is leaked.
#[cold]
#[cfg_attr(not(feature = "tracing"), inline(always))]
pub(crate) fn retired(from: usize, to: usize, bytes: usize, reclaimed: bool) {
    #[cfg(feature = "tracing")]
    if reclaimed {
        tracing::debug!(target: "memory", class = from, bytes, for_class = to, "idle chunk reclaimed");
    } else {
        tracing::warn!(
            target: "memory",
            class = from,
            bytes,
            for_class = to,
            "idle chunk could not be deregistered: its memory is leaked"
        );
    }
    #[cfg(not(feature = "tracing"))]
    let _ = (from, to, bytes, reclaimed);
}
