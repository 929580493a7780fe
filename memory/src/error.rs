//! The crate's error type: one variant per way a pool operation can fail.

use std::io;
use std::time::Duration;

/// What raising the locked-memory limit takes, quoted in [`Error::MemlockLimit`].
pub const MEMLOCK_HINT: &str = "raise the locked-memory limit (RLIMIT_MEMLOCK): `ulimit -l unlimited` \
     in the shell, a `memlock` line in /etc/security/limits.conf, or `LimitMEMLOCK=infinity` in the \
     systemd unit";

/// Errors of the memory pool.
///
/// Exhaustion is backpressure, not a failure of the pool: [`Error::Exhausted`] and
/// [`Error::Timeout`] say "try again later" and leave the pool fully usable.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The [`PoolConfig`](crate::PoolConfig) was rejected by [`Pool::new`](crate::Pool::new).
    #[error("invalid pool configuration: {reason}")]
    InvalidConfig {
        /// What is wrong, naming the offending value.
        reason: String,
    },

    /// A buffer of zero bytes was requested.
    #[error("cannot allocate a zero-length buffer")]
    ZeroLength,

    /// The requested length exceeds the largest size class (or, for
    /// [`Buffer::set_len`](crate::Buffer::set_len), the buffer's capacity; for
    /// [`Buffer::read`](crate::Buffer::read) and [`Buffer::write`](crate::Buffer::write), the
    /// end of the range exceeds the buffer's length).
    #[error("requested {requested} bytes, more than the largest buffer of {max} bytes")]
    TooLarge {
        /// Bytes asked for.
        requested: usize,
        /// The most that could have been given.
        max: usize,
    },

    /// Every buffer of the class is in use and the cap forbids registering another chunk (when
    /// it is the pool's cap: even after reclaiming the idle chunks of other classes).
    /// Backpressure: retry after buffers of the class, or every buffer of another class's
    /// chunk, are dropped, or use [`Pool::alloc`](crate::Pool::alloc) to wait for that.
    #[error("pool exhausted: no free {class_size}-byte buffer and the cap of {cap_bytes} bytes is reached")]
    Exhausted {
        /// Size of the class that ran out.
        class_size: usize,
        /// The cap that was reached: the class's own cap if it has one and hit it, else the pool's.
        cap_bytes: usize,
    },

    /// [`Pool::alloc`](crate::Pool::alloc) waited this long and no buffer came back.
    #[error("no buffer became free within {waited:?}")]
    Timeout {
        /// How long the call waited.
        waited: Duration,
    },

    /// Mapping memory for a new chunk failed (`mmap`).
    #[error("cannot map {len} bytes for a pool chunk")]
    Allocate {
        /// Length of the chunk.
        len: usize,
        /// The operating system's error.
        #[source]
        source: io::Error,
    },

    /// Registering a chunk failed because it would exceed the locked-memory limit.
    #[error("registering {len} bytes exceeds the locked-memory limit of {limit} bytes: {hint}")]
    MemlockLimit {
        /// Length of the chunk.
        len: usize,
        /// The soft RLIMIT_MEMLOCK in force, in bytes.
        limit: u64,
        /// What to raise, and where.
        hint: &'static str,
    },

    /// Registering a chunk with the device failed (`ibv_reg_mr`).
    #[error("cannot register {len} bytes of pool memory")]
    Register {
        /// Length of the chunk.
        len: usize,
        /// The error reported by the registration.
        #[source]
        source: io::Error,
    },
}

/// Result with the crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
