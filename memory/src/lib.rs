//! Registered-memory pool for RDMA: the data path never registers per message.
//!
//! Registering memory (`ibv_reg_mr`) costs a system call and page pinning. A [`Pool`]
//! registers a few large chunks per size class and hands out [`Buffer`]s carved from them:
//! allocation takes a lock and pops a free list, and dropping a buffer pushes it back.
//!
//! - **Size classes** ([`PoolConfig`]): a request gets the smallest class that holds it
//!   (64 B to 1 MiB by default). Each class grows one chunk (one registration) at a time, up to
//!   the pool's cap on registered bytes and the class's own cap, if any. Chunks stay registered
//!   until the pool and all its buffers are dropped.
//! - **Buffers** deref to their bytes and give their [`Sge`] and, in pools created with remote
//!   access ([`PoolAccess`]), a [`RemoteDescriptor`] carrying the rkey. Local-only pools have no
//!   remote key at all.
//! - **Registration** goes through a [`Registrar`], the seam to the device: the verbs binding
//!   registers on a protection domain; `testing::HostRegistrar` (feature `testing`) fakes keys
//!   so everything except the NIC is tested on the host.
//!
//! # Quick start
//! ```
//! use std::time::Duration;
//! use memory::{Pool, PoolAccess, PoolConfig};
//! # use memory::testing::HostRegistrar as DeviceRegistrar;
//!
//! # fn main() -> memory::Result<()> {
//! // With a device, the registrar registers on a protection domain; here it is a host stand-in.
//! let config = PoolConfig::new()
//!     .class_sizes([64, 4096, 1 << 20])
//!     .cap_bytes(64 << 20)
//!     .access(PoolAccess::REMOTE_READ);
//! let pool = Pool::new(config, DeviceRegistrar::new())?;
//!
//! let mut buf = pool.try_alloc(100)?; // from the 4 KiB class
//! buf.copy_from_slice(&[7; 100]);
//! assert_eq!((buf.len(), buf.capacity()), (100, 4096));
//! let sge = buf.sge(); // for a work request
//! assert_eq!(sge.length, 100);
//! let remote = buf.remote().expect("the pool allows remote read"); // for a peer
//! assert_eq!(remote.addr, sge.addr);
//!
//! // Waiting for a buffer to come back, with a bound.
//! let other = pool.alloc(64, Duration::from_millis(10))?;
//! drop((buf, other)); // both return to the pool
//! assert_eq!(pool.stats().buffers_in_use(), 0);
//! # Ok(())
//! # }
//! ```
//!
//! # Exhaustion is backpressure
//! When a class has no free buffer and the cap forbids another chunk, [`Pool::try_alloc`]
//! returns [`Error::Exhausted`] at once and [`Pool::alloc`] waits for a buffer of that class to
//! be dropped, up to its timeout, then returns [`Error::Timeout`]. Neither panics; the pool
//! stays usable. Failing to map or register a chunk is an error too: [`Error::MemlockLimit`]
//! says which limit to raise.
//!
//! # Thread safety
//! [`Pool`] is `Clone + Send + Sync`; [`Buffer`] is `Send + Sync` and may be dropped on any
//! thread. Each class has its own lock, so classes do not contend with each other. A class
//! registers a new chunk with its lock released: buffers of the class keep coming back
//! meanwhile, and a caller finding the class empty waits for that growth instead of starting
//! another.
//!
//! # Cleanup
//! A buffer keeps its chunk registered and mapped, and its pool alive, until it is dropped.
//! A chunk is deregistered, then unmapped, when the pool and all its buffers are gone.
//!
//! # Unsafe code
//! Only the `registered` module contains `unsafe`: mapping memory and turning a slot into a
//! slice. Its module documentation gives the soundness argument.

#![deny(unsafe_code)]

mod bookkeeping;
mod buffer;
mod class;
mod config;
mod error;
mod pool;
mod registered;
mod stats;
#[cfg(any(test, feature = "testing"))]
pub mod testing;

pub use buffer::{Buffer, RemoteDescriptor, Sge};
pub use config::{
    default_chunk_size, ClassConfig, HugePages, PoolAccess, PoolConfig, CLASS_ALIGN,
    DEFAULT_CAP_BYTES, DEFAULT_MIN_CHUNK, DEFAULT_MIN_SLOTS_PER_CHUNK, MAX_CLASS_SIZE,
};
pub use error::{Error, Result, MEMLOCK_HINT};
pub use pool::Pool;
pub use registered::{
    memlock_limit, registration_error, ChunkMemory, PdRegistrar, Registrar, Registration,
};
pub use stats::{ClassStats, PoolStats};
