//! Registered-memory pool for RDMA: the data path never registers per message.
//!
//! Add it with `cargo add rdma-memory`; the library it gives is `memory` (`use memory::...`).
//!
//! Registering memory (`ibv_reg_mr`) costs a system call and page pinning. A [`Pool`]
//! registers a few large chunks per size class and hands out [`Buffer`]s carved from them:
//! allocation pops a free list, and dropping a buffer pushes it back. Each thread keeps a few
//! free slots per class of its own, so alloc and free on one thread take no lock shared with
//! other threads.
//!
//! - **Size classes** ([`PoolConfig`]): a request gets the smallest class that holds it
//!   (64 B to 1 MiB by default). Each class grows one chunk (one registration) at a time, up to
//!   the pool's cap on registered bytes and the class's own cap, if any. Chunks stay registered
//!   until the pool and all its buffers are dropped, except that a class the pool's cap keeps
//!   from growing takes over the bytes of other classes' idle chunks
//!   ([below](#reclaiming-idle-chunks)).
//! - **Buffers** deref to their bytes (copy with `read`/`write` in pools peers may write) and give their [`Sge`] and, in pools created with remote
//!   access ([`PoolAccess`]), a [`RemoteDescriptor`] carrying the rkey. Local-only pools have no
//!   remote key at all.
//! - **Registration** goes through a [`Registrar`], the seam to the device: [`PdRegistrar`]
//!   registers on a verbs protection domain ([`Pool::on_pd`]); `testing::HostRegistrar`
//!   (feature `testing`) registers nothing (its keys name no registration), so everything
//!   except the NIC is tested on the host.
//!
//! # Quick start
//! Open a device, make a pool on a protection domain, fill a buffer and post it; it comes back
//! with its completion and returns to the pool when dropped.
//! ```no_run
//! use std::time::Duration;
//! use memory::{Buffer, Pool, PoolAccess, PoolConfig};
//! use verbs::{
//!     AccessFlags, CompletionBuf, Context, QpEndpoint, QpInitAttr, QpType, RecvRequest,
//!     SendRequest,
//! };
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! // The device that serves this host's RDMA address, and the GID (port, index) for it.
//! let (ctx, me) = Context::open_by_addr("10.77.0.1".parse()?)?;
//! let pd = ctx.alloc_pd()?;
//! let config = PoolConfig::new()
//!     .class_sizes([64, 4096, 1 << 20])
//!     .cap_bytes(64 << 20)
//!     .access(PoolAccess::REMOTE_READ);
//! let pool = Pool::on_pd(&pd, config)?;
//!
//! let mut buf = pool.try_alloc(100)?; // from the 4 KiB class
//! buf.copy_from_slice(&[7; 100]);
//! assert_eq!((buf.len(), buf.capacity()), (100, 4096));
//! let remote = buf.remote().expect("the pool allows remote read"); // for a peer
//! # let _ = remote;
//!
//! // An RC queue pair connected to itself (see the verbs crate for real peers).
//! let (port, mtu) = (me.gid.port, ctx.query_port(me.gid.port)?.active_mtu());
//! let cq = ctx.create_cq(16, None)?;
//! let qp = pd.create_qp(&QpInitAttr::new(QpType::Rc, &cq, &cq))?;
//! let this_qp = QpEndpoint { qp_num: qp.qp_num(), psn: 0, lid: 0, gid: me.gid.gid };
//! qp.to_init(port, AccessFlags::empty())?;
//! qp.to_rtr(&this_qp, port, Some(me.gid.index), mtu)?;
//! qp.to_rts(0)?;
//!
//! // Buffers move into the requests: nothing can touch or free them while the NIC uses them.
//! qp.post_recv(RecvRequest::new(pool.try_alloc(4096)?, ..)?)?;
//! let len = buf.len();
//! qp.post_send(SendRequest::send(buf, ..len)?)?;
//!
//! // Two completions: the send's and the receive's (fewer only if 5 s pass).
//! let mut completions = CompletionBuf::new(2);
//! let mut received = None;
//! for wc in &cq.wait_n(&mut completions, 2, Duration::from_secs(5))? {
//!     wc.status()?;
//!     // The send's buffer comes back too; dropping it returns it to the pool.
//!     let mut rx: Buffer = qp.reclaim(wc)[0].take()?;
//!     if wc.opcode() == Some(verbs::WcOpcode::Recv) {
//!         rx.set_len(wc.byte_len() as usize)?;
//!         received = Some(rx);
//!     }
//! }
//! assert_eq!(&received.ok_or("no receive within 5 s")?[..], &[7; 100]);
//! # Ok(())
//! # }
//! ```
//! Without a device, the same pool logic runs over the host registrar:
//! ```
//! use std::time::Duration;
//! use memory::{Pool, PoolConfig};
//! use memory::testing::HostRegistrar;
//!
//! # fn main() -> memory::Result<()> {
//! let pool = Pool::new(PoolConfig::new().cap_bytes(64 << 20), HostRegistrar::new())?;
//! let buf = pool.try_alloc(100)?;
//! let sge = buf.sge(); // address, length and lkey for a work request
//! assert_eq!(sge.length, 100);
//! // Waiting for a buffer to come back, with a bound.
//! let other = pool.alloc(64, Duration::from_millis(10))?;
//! drop((buf, other)); // both return to the pool
//! assert_eq!(pool.stats().buffers_in_use(), 0);
//! # Ok(())
//! # }
//! ```
//!
//! # Posting buffers
//! A [`Buffer`] implements the verbs layer's `RegisteredBuf` and `RegisteredBufMut`, so it is
//! posted with the safe owned requests (`SendRequest::send`, `rdma_write`, `rdma_read`,
//! `RecvRequest::new`, ...). Posting moves the buffer into the queue pair's in-flight table;
//! `Qp::reclaim` hands it back once a polled completion proves the NIC is done, failed
//! completions included. Drop it there to return it to the pool, or post it again.
//!
//! The descriptor a request takes its range from covers the buffer's whole slot (its
//! [`capacity`](Buffer::capacity), fixed for the buffer's life), not its current length: post
//! `..buf.len()` to send what the buffer holds, and `..` to receive into all of it, then
//! [`set_len`](Buffer::set_len) to the completion's byte count.
//!
//! A [`RemoteDescriptor`] converts into a verbs `RemoteSlice` (`descriptor.into()`) to be the
//! target of an RDMA WRITE, READ or atomic; [`Sge`] converts into a `LocalSlice`.
//!
//! # What a remote key exposes
//! A buffer's rkey is the rkey of its whole chunk's registration: a peer holding it can reach
//! every buffer of that chunk, in use or free, with the access the pool was created with
//! ([`PoolAccess`]). Give remote descriptors only to peers trusted with the pool's memory, and
//! use separate pools for separate trust domains. A local-only pool registers without remote
//! rights, so its memory cannot be reached remotely with any key. A peer with remote write or
//! atomic access can write a buffer at any time, so buffers of such pools give no slices (a
//! slice would race with the device's writes): copy with [`Buffer::read`] and
//! [`Buffer::write`], once the peer has said (by a message) that it is done writing.
//!
//! # Exhaustion is backpressure
//! When a class has no free buffer and the cap forbids another chunk (after
//! [reclaiming](#reclaiming-idle-chunks) what it can), [`Pool::try_alloc`] returns
//! [`Error::Exhausted`] at once and [`Pool::alloc`] waits for a buffer of that class to be
//! dropped (or, when the pool's cap is what stops it, for a chunk of another class to become
//! idle), up to its timeout, then returns [`Error::Timeout`]. Neither panics; the pool stays
//! usable. Failing to map or register a chunk is an error too: [`Error::MemlockLimit`] says
//! which limit to raise.
//!
//! # Reclaiming idle chunks
//! The pool's cap is shared by all classes, and chunks belong to a class. So that a burst in
//! some classes cannot starve the others for good, a class that needs a chunk when the pool's
//! cap is full deregisters *idle* chunks of other classes and registers its own in their bytes:
//! - idle means every buffer of the chunk is back in the pool (slots cached by threads are
//!   taken back first) and no buffer of it ever gave out its remote key ([`Buffer::remote`]):
//!   a peer may keep a key as long as it likes, so such a chunk stays until the end;
//! - reclaim happens only under cap pressure, when an allocation finds its class empty and the
//!   cap reached, and takes only as many chunks as the new one needs; use within the cap never
//!   registers or deregisters anything after warm-up;
//! - every class keeps one chunk, unless only last chunks are idle and the cap cannot hold a
//!   chunk of each class in use: then those go too (size the cap for a chunk of each class in
//!   use to keep registration off the data path);
//! - a thread waiting in [`Pool::alloc`] for a class the cap stops is woken when a chunk of
//!   another class becomes idle;
//! - a chunk whose deregistration fails is leaked (its memory stays mapped, as the device may
//!   still reach it) and its bytes stay counted against the cap.
//!
//! [`PoolStats::reclaimed_chunks`] counts the chunks given up so far, and
//! [`PoolStats::leaked_chunks`] those that could not be deregistered.
//! ```
//! use memory::testing::HostRegistrar;
//! use memory::{ClassConfig, Pool, PoolConfig};
//!
//! # fn main() -> memory::Result<()> {
//! // Room for two 64 KiB chunks, of either class.
//! let classes = [64, 4096].map(|size| ClassConfig::new(size).chunk_size(64 << 10));
//! let pool = Pool::new(
//!     PoolConfig::new().classes(classes).cap_bytes(128 << 10),
//!     HostRegistrar::new(),
//! )?;
//! let burst: Vec<_> = (0..2048).map(|_| pool.try_alloc(64)).collect::<Result<_, _>>()?;
//! assert!(pool.try_alloc(4096).is_err()); // the 64 B class holds the whole cap
//! drop(burst);
//! let big = pool.try_alloc(4096)?; // one idle 64 B chunk gave its bytes back
//! let stats = pool.stats();
//! assert_eq!((stats.reclaimed_chunks, stats.classes[0].chunks), (1, 1));
//! # drop(big);
//! # Ok(())
//! # }
//! ```
//!
//! # Thread safety
//! [`Pool`] is `Clone + Send + Sync`; [`Buffer`] is `Send + Sync` and may be dropped on any
//! thread. Each class has its own lock, so classes do not contend with each other. A class
//! registers a new chunk with its lock released: buffers of the class keep coming back
//! meanwhile, and a caller finding the class empty waits for that growth instead of starting
//! another. Reclaiming for a starved class is part of its growth: it takes one other class's
//! lock at a time, never two, and deregisters with no lock held.
//!
//! A thread caches up to 8 free slots per class; dropping a buffer puts its slot there unless
//! the cache is full, a thread waits for the class, or a thread waits for a class the pool's
//! cap stops. Cached slots count as free in [`Pool::stats`], and before a class grows,
//! reports [`Error::Exhausted`] or waits, and before a chunk is judged idle, every thread's
//! cached slots of that class are taken back, so caching never causes exhaustion or extra
//! chunks (the caches go back to their classes when a thread exits, and are emptied when the
//! pool is dropped). [`ClassStats::high_water`]
//! counts slots held in other threads' caches as in use, so with several threads it is an
//! upper bound.
//!
//! # Tracing
//! With the `tracing` feature (on by default) the pool emits [`tracing`](https://docs.rs/tracing)
//! events with target `memory`, all from its slow path: a chunk registered (debug: class,
//! bytes, total registered, cap), a chunk that could not be created (warn), an allocation the
//! caps refuse (warn: class and cap, at most once a second per class with the count of
//! refusals in between), a thread starved by the pool's cap (debug), and an idle chunk
//! reclaimed for another class (debug) or leaked (warn). Allocating from a class with a free
//! buffer runs nothing for them; without the feature nothing is compiled.
//!
//! # Cleanup
//! A buffer keeps its chunk registered and mapped, and its pool alive, until it is dropped.
//! A chunk is deregistered, then unmapped, when the pool and all its buffers are gone, or
//! earlier when it is reclaimed for another class.
//!
//! # Unsafe code
//! Only the `registered` module contains `unsafe`: mapping memory, turning a slot into a
//! slice, registering chunks on a protection domain, and the promise that a buffer may be
//! posted (`RegisteredBuf`). Its module documentation gives the soundness argument.

#![deny(unsafe_code)]

mod bookkeeping;
mod buffer;
mod class;
mod config;
mod error;
mod local;
mod pool;
mod registered;
mod starved;
mod stats;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
mod trace;

pub use buffer::{Buffer, RemoteDescriptor, Sge};
pub use config::{
    default_chunk_size, ClassConfig, HugePages, PoolAccess, PoolConfig, CLASS_ALIGN,
    DEFAULT_CAP_BYTES, DEFAULT_MIN_CHUNK, DEFAULT_MIN_SLOTS_PER_CHUNK, MAX_CLASS_SIZE,
};
pub use error::{Error, Result, MEMLOCK_HINT};
pub use pool::Pool;
pub use registered::{
    memlock_limit, registration_error, ChunkLimit, ChunkMemory, PdRegistrar, Registrar,
    Registration,
};
pub use stats::{ClassStats, PoolStats};
