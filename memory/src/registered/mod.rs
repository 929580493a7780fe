//! Registered chunks and the memory of their slots: the only module of this crate with `unsafe`.
//!
//! A chunk is one anonymous mapping ([`ChunkMemory`]) plus its registration with the device
//! (a [`Registration`] made by the pool's [`Registrar`], the seam to the verbs layer). The chunk
//! is cut into equal slots; [`Chunk::create`] mints exactly one [`SlotToken`] per slot, and memory
//! of a slot is reachable only through a [`SlotMemory`] made by consuming its token.
//!
//! Soundness of the slices handed out:
//! - Validity: a `SlotMemory` holds an `Arc` of its chunk, which owns the mapping; the mapping
//!   is unmapped only when the chunk drops, after every `SlotMemory` of it is gone. Anonymous
//!   mappings are zero-filled, so every byte is initialised.
//! - Exclusivity: tokens are neither `Clone` nor `Copy` and are minted only in `Chunk::create`,
//!   once per (chunk id, slot index); chunk ids are never reused. `claim` consumes a token and
//!   `release` consumes the `SlotMemory` to give it back, so at most one `SlotMemory` per slot
//!   exists at any time, and slots of a chunk do not overlap (`index * size`, `index < slots`).
//!   Mutable access needs `&mut SlotMemory`, so the borrow checker does the rest.
//! - Peers: in a chunk whose registration grants remote write or atomic rights (as the pool
//!   asked, or as the registration reports it granted: `Registration::access`, which the
//!   `unsafe` traits oblige registrars to report truthfully) a peer (or this program, through
//!   a safe RDMA WRITE to the chunk's rkey) may write any slot at any time, so such slots give
//!   no slices at all, only volatile copies (`read_volatile`, `write_volatile`).
//! - Deregistration: a chunk whose registration cannot be removed keeps its memory mapped
//!   forever (`ChunkMemory::leak`), since the device may still access it. The pool
//!   deregisters a chunk before the end only through [`Chunk::deregister`], which consumes
//!   the chunk: it needs the chunk's last reference, so no slot of it is lent out.
//!
//! Soundness towards the device (`device`):
//! - Registration: a chunk is registered once, by its [`Registrar`], and `Chunk::drop`
//!   deregisters before unmapping; a chunk drops only when no buffer of it is left, so the
//!   registered memory stays mapped while registered.
//! - Posting: a buffer may be moved into a verbs work request (`RegisteredBuf`,
//!   `RegisteredBufMut`) because it holds its chunk (mapping and registration), its slot never
//!   moves, and it is the only path to the slot's bytes; the request owns it until its
//!   completion hands it back.
//!
//! The bookkeeping's own invariants (counts, caps) are checked by its property tests; soundness
//! does not depend on them.

#![allow(unsafe_code)]

mod device;
#[cfg(any(test, feature = "testing"))]
pub(crate) mod host;
mod memlock;
mod mmap;

use std::fmt;
use std::io;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;

pub use device::PdRegistrar;
pub(crate) use memlock::pinning_limit;
pub use memlock::{memlock_limit, registration_error};
pub(crate) use mmap::reserved_huge_pages;
pub use mmap::ChunkMemory;

use crate::bookkeeping::ChunkSlot;
use crate::{Error, HugePages, PoolAccess, Result};

/// A live registration of a chunk with the device.
///
/// # Safety
///
/// The pool decides from what a registration reports whether the chunk's bytes may be lent out
/// as Rust slices, so an implementation must report truthfully:
/// - [`access`](Self::access) names every right the registration grants, or more: if the device
///   lets anyone but this program's own posts write the memory (remote write, remote atomics,
///   binding memory windows that grant them), it contains `REMOTE_WRITE` or `REMOTE_ATOMIC`;
/// - [`lkey`](Self::lkey) and [`rkey`](Self::rkey) name a registration of exactly the chunk's
///   memory (`ChunkMemory::as_ptr()`, `len()` bytes) that stays in force until
///   [`deregister`](Self::deregister) returns `Ok` (or the registration is dropped); or, for a
///   registration made with no device at all (a host test's), they name no registration: keys
///   no device gave for this memory, so no device reaches the chunk through them (a device
///   checks every access against a registration covering it, and none covers the chunk's own
///   fresh mapping) and a post of its buffers fails;
/// - `deregister` returns `Ok` only once the device can no longer access the memory through any
///   key of this registration. On `Err` the pool leaks the chunk's memory rather than unmap it.
pub unsafe trait Registration: Send + Sync + fmt::Debug {
    /// Local key, for scatter/gather entries.
    fn lkey(&self) -> u32;
    /// Remote key; `Some` exactly when the registration allows remote access.
    fn rkey(&self) -> Option<u32>;
    /// The rights actually granted (see the trait's safety contract).
    fn access(&self) -> PoolAccess;
    /// Deregisters (`ibv_dereg_mr`). On failure the memory may still be accessed by the device,
    /// so the pool never unmaps it.
    fn deregister(self: Box<Self>) -> io::Result<()>;
}

/// Registers chunks of pool memory: the seam between the pool and the device.
///
/// [`PdRegistrar`] implements it over a verbs protection domain (`ibv_reg_mr` with the access
/// flags given); `testing::HostRegistrar` (feature `testing`) implements it with
/// fake keys for host tests. The pool calls it once per chunk, while holding the lock of the
/// class that grows.
///
/// # Safety
///
/// The [`Registration`]s it returns must keep that trait's contract, for the memory and access
/// they were made for: the pool lends out slices of chunks whose registration reports no remote
/// write rights, and trusts the keys to cover exactly the chunk.
pub unsafe trait Registrar: Send + Sync + fmt::Debug + 'static {
    /// Register all of `memory` (`memory.as_ptr()`, `memory.len()` bytes) with `access`.
    ///
    /// Errors: [`Error::Register`], or [`Error::MemlockLimit`] when the locked-memory limit is
    /// the cause ([`registration_error`] makes the right one from an OS error).
    fn register(&self, memory: &ChunkMemory, access: PoolAccess) -> Result<Box<dyn Registration>>;

    /// The largest chunk this registrar can register, and why, if it knows one (the device's
    /// largest region, the locked-memory limit): [`Pool::new`](crate::Pool::new) refuses a
    /// configuration whose chunks exceed it, instead of failing at the first allocation.
    fn max_chunk(&self) -> Option<ChunkLimit> {
        None
    }
}

/// A bound on the size of one registration (see [`Registrar::max_chunk`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChunkLimit {
    /// Most bytes one registration may cover.
    pub bytes: u64,
    /// What sets the bound and how to lift it, for the error message.
    pub reason: String,
}

/// Source of chunk ids; never wraps, so a token can never match a later chunk.
static NEXT_CHUNK_ID: AtomicU32 = AtomicU32::new(0);

/// The right to the memory of one slot. Minted once per slot by [`Chunk::create`].
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct SlotToken {
    chunk: u32,
    index: u32,
}

impl ChunkSlot for SlotToken {
    fn chunk(&self) -> u32 {
        self.chunk
    }
}

impl SlotToken {
    /// Id of the chunk the slot belongs to.
    pub(crate) fn chunk(&self) -> u32 {
        self.chunk
    }

    #[cfg(test)]
    pub(crate) fn index(&self) -> u32 {
        self.index
    }
}

/// A registered chunk cut into equal slots.
pub(crate) struct Chunk {
    id: u32,
    slot_size: usize,
    slots: u32,
    lkey: u32,
    rkey: Option<u32>,
    /// Peers may write the chunk (remote write or atomic rights): no slices of it.
    remotely_writable: bool,
    /// The rkey was handed out (a buffer's remote descriptor): a peer may hold it for as long
    /// as it likes, so the pool keeps the chunk registered until the end.
    exposed: AtomicBool,
    /// Taken in `Drop` (or `deregister`) so that deregistration precedes unmapping.
    registration: Option<Box<dyn Registration>>,
    memory: ChunkMemory,
}

impl Chunk {
    /// Map and register `slots * slot_size` bytes; return the chunk and the tokens of its slots,
    /// in ascending address order.
    pub(crate) fn create(
        slot_size: usize,
        slots: u32,
        huge_pages: HugePages,
        access: PoolAccess,
        registrar: &dyn Registrar,
    ) -> Result<(Arc<Chunk>, impl DoubleEndedIterator<Item = SlotToken>)> {
        let len = slot_size
            .checked_mul(slots as usize)
            .filter(|&len| len > 0)
            .ok_or_else(|| Error::InvalidConfig {
                reason: format!("a chunk of {slots} slots of {slot_size} bytes"),
            })?;
        let id = NEXT_CHUNK_ID
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |id| id.checked_add(1))
            .map_err(|_| Error::Allocate {
                len,
                source: io::Error::other("chunk identifiers exhausted"),
            })?;
        let mut memory = ChunkMemory::map(len, huge_pages)?;
        let registration = registrar.register(&memory, access)?;
        let rkey = registration.rkey();
        // Slice safety follows what was registered, not what was asked for.
        let granted = registration.access();
        if access.is_remote() && rkey.is_none() {
            // Refused, but registered: remove the registration before unmapping, or leak the
            // memory if it cannot be removed (as `Chunk::drop` does).
            if registration.deregister().is_err() {
                memory.leak();
            }
            return Err(Error::Register {
                len,
                source: io::Error::other(
                    "remote access requested but the registration has no rkey",
                ),
            });
        }
        let chunk = Arc::new(Chunk {
            id,
            slot_size,
            slots,
            lkey: registration.lkey(),
            rkey: rkey.filter(|_| access.is_remote() || granted.is_remote()),
            remotely_writable: (access | granted)
                .intersects(PoolAccess::REMOTE_WRITE | PoolAccess::REMOTE_ATOMIC),
            exposed: AtomicBool::new(false),
            registration: Some(registration),
            memory,
        });
        let tokens = (0..slots).map(move |index| SlotToken { chunk: id, index });
        Ok((chunk, tokens))
    }

    pub(crate) fn id(&self) -> u32 {
        self.id
    }

    pub(crate) fn is_huge_pages(&self) -> bool {
        self.memory.is_huge_pages()
    }

    /// Bytes of the chunk.
    pub(crate) fn len(&self) -> usize {
        self.memory.len()
    }

    /// Whether the chunk's rkey was ever handed out (see [`SlotMemory::expose_rkey`]).
    pub(crate) fn is_exposed(&self) -> bool {
        self.exposed.load(Ordering::Relaxed)
    }

    /// Deregister now and unmap: true if the registration is gone. If the device refuses,
    /// the memory stays mapped forever (leaked), as in `Drop`, and the bytes stay registered.
    ///
    /// Takes the chunk itself, so its caller had the last reference: no slot of it is lent out.
    pub(crate) fn deregister(mut self) -> bool {
        let Some(registration) = self.registration.take() else {
            return true;
        };
        match registration.deregister() {
            Ok(()) => true,
            Err(_) => {
                self.memory.leak();
                false
            }
        }
        // `self` drops here: without its registration, `Drop` only unmaps (unless leaked).
    }

    /// Exchange a token of this chunk for the memory of its slot.
    ///
    /// Panics if the token belongs to another chunk (a bug in the caller, caught before any
    /// memory is touched).
    pub(crate) fn claim(self: &Arc<Self>, token: SlotToken) -> SlotMemory {
        assert_eq!(token.chunk, self.id, "slot token of another chunk");
        assert!(token.index < self.slots, "slot index out of range");
        let offset = token.index as usize * self.slot_size;
        // SAFETY: `offset + slot_size <= slots * slot_size == memory.len()`, so the pointer
        // stays inside the mapping.
        let ptr = unsafe { self.memory.as_non_null().add(offset) };
        SlotMemory {
            chunk: Arc::clone(self),
            ptr,
            token,
        }
    }
}

impl Drop for Chunk {
    fn drop(&mut self) {
        // Deregister while the memory is still mapped; `memory` is unmapped after this.
        let Some(registration) = self.registration.take() else {
            return;
        };
        if registration.deregister().is_err() {
            // Still registered: the device (or a peer with the rkey) may still access the
            // memory, so it must stay mapped. Leak the mapping.
            self.memory.leak();
        }
    }
}

impl fmt::Debug for Chunk {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Chunk")
            .field("id", &self.id)
            .field("slot_size", &self.slot_size)
            .field("slots", &self.slots)
            .field("lkey", &self.lkey)
            .field("rkey", &self.rkey)
            .field("memory", &self.memory)
            .finish()
    }
}

/// Exclusive access to the memory of one slot, like a `Box<[u8]>` that the pool reuses.
#[derive(Debug)]
pub(crate) struct SlotMemory {
    chunk: Arc<Chunk>,
    ptr: NonNull<u8>,
    token: SlotToken,
}

// SAFETY: a SlotMemory owns its slot exclusively (see the module docs), like a Box<[u8]>:
// moving it to another thread moves that ownership, and the chunk it keeps alive is Send + Sync.
unsafe impl Send for SlotMemory {}
// SAFETY: through `&SlotMemory` only shared `&[u8]` access is possible, which is fine to share.
unsafe impl Sync for SlotMemory {}

impl SlotMemory {
    /// The first `len` bytes of the slot. Panics if `len` exceeds the slot.
    /// Whether a peer may write the slot at any time (the pool has remote write or atomic
    /// rights): then it has no slice view, only copies.
    pub(crate) fn remotely_writable(&self) -> bool {
        self.chunk.remotely_writable
    }

    fn assert_no_remote_writes(&self) {
        assert!(
            !self.chunk.remotely_writable,
            "a buffer of a pool with remote write/atomic rights has no slice view: use read/write"
        );
    }

    /// Volatile copy out of `offset..offset + dst.len()` of the slot: correct even while a peer
    /// writes it (the bytes may then be torn).
    pub(crate) fn read_volatile(&self, offset: usize, dst: &mut [u8]) {
        assert!(
            offset
                .checked_add(dst.len())
                .is_some_and(|end| end <= self.chunk.slot_size),
            "range beyond the slot"
        );
        for (i, d) in dst.iter_mut().enumerate() {
            // SAFETY: inside this slot of a live mapping (asserted); volatile because the device
            // may write the slot concurrently, and no reference to those bytes is formed.
            *d = unsafe { self.ptr.as_ptr().add(offset + i).read_volatile() };
        }
    }

    /// Volatile copy of `src` into the slot at `offset`.
    pub(crate) fn write_volatile(&mut self, offset: usize, src: &[u8]) {
        assert!(
            offset
                .checked_add(src.len())
                .is_some_and(|end| end <= self.chunk.slot_size),
            "range beyond the slot"
        );
        for (i, b) in src.iter().enumerate() {
            // SAFETY: inside this slot of a live mapping (asserted); `&mut self` excludes other
            // local access, and the write is volatile as the device may access the slot too.
            unsafe { self.ptr.as_ptr().add(offset + i).write_volatile(*b) };
        }
    }

    /// # Panics
    /// If the pool has remote write or atomic rights (see `remotely_writable`).
    pub(crate) fn as_slice(&self, len: usize) -> &[u8] {
        self.assert_no_remote_writes();
        assert!(len <= self.chunk.slot_size, "length beyond the slot");
        // SAFETY: the range lies inside this slot of a live mapping, every byte is initialised,
        // and no `&mut` to it exists while `self` is borrowed shared (module docs).
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), len) }
    }

    /// The first `len` bytes of the slot, mutably. Panics if `len` exceeds the slot.
    /// # Panics
    /// If the pool has remote write or atomic rights.
    pub(crate) fn as_mut_slice(&mut self, len: usize) -> &mut [u8] {
        self.assert_no_remote_writes();
        assert!(len <= self.chunk.slot_size, "length beyond the slot");
        // SAFETY: as in `as_slice`, and `&mut self` makes this the only reference to the slot.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), len) }
    }

    /// Address of the slot, as the device sees it.
    pub(crate) fn addr(&self) -> u64 {
        self.ptr.as_ptr() as u64
    }

    pub(crate) fn capacity(&self) -> usize {
        self.chunk.slot_size
    }

    pub(crate) fn lkey(&self) -> u32 {
        self.chunk.lkey
    }

    pub(crate) fn rkey(&self) -> Option<u32> {
        self.chunk.rkey
    }

    /// The rkey, to hand to a peer: marks the chunk as exposed, so it stays registered while
    /// the pool lives (the pool never knows when a peer has forgotten a key).
    pub(crate) fn expose_rkey(&self) -> Option<u32> {
        let rkey = self.chunk.rkey?;
        // Load first: after the first descriptor, the chunk's line is only read.
        if !self.chunk.exposed.load(Ordering::Relaxed) {
            self.chunk.exposed.store(true, Ordering::Relaxed);
        }
        Some(rkey)
    }

    /// Give up the memory and get the token back, for the free list.
    pub(crate) fn release(self) -> SlotToken {
        self.token
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::HostRegistrar;

    #[test]
    fn slots_are_disjoint_and_keep_their_bytes() {
        let registrar = HostRegistrar::new();
        let (chunk, tokens) =
            Chunk::create(64, 4, HugePages::Off, PoolAccess::LOCAL_WRITE, &registrar).unwrap();
        let mut slots: Vec<SlotMemory> = tokens.map(|t| chunk.claim(t)).collect();
        for (i, slot) in slots.iter_mut().enumerate() {
            assert!(
                slot.as_slice(64).iter().all(|&b| b == 0),
                "fresh memory is zeroed"
            );
            slot.as_mut_slice(64).fill(i as u8 + 1);
        }
        for (i, slot) in slots.iter().enumerate() {
            assert!(slot.as_slice(64).iter().all(|&b| b == i as u8 + 1));
            assert_eq!(slot.addr(), slots[0].addr() + 64 * i as u64);
            assert_eq!(slot.rkey(), None);
        }
        let tokens: Vec<SlotToken> = slots.into_iter().map(SlotMemory::release).collect();
        assert_eq!(
            tokens.iter().map(|t| t.index()).collect::<Vec<_>>(),
            [0, 1, 2, 3]
        );
        assert!(tokens.iter().all(|t| t.chunk() == chunk.id()));
    }

    #[test]
    #[should_panic(expected = "another chunk")]
    fn a_token_of_another_chunk_is_refused() {
        let registrar = HostRegistrar::new();
        let create =
            || Chunk::create(64, 1, HugePages::Off, PoolAccess::LOCAL_WRITE, &registrar).unwrap();
        let (_a, mut tokens_a) = create();
        let (b, _tokens_b) = create();
        b.claim(tokens_a.next().unwrap());
    }

    #[test]
    fn the_registration_lives_until_the_last_slot_is_gone() {
        let registrar = HostRegistrar::new();
        let (chunk, mut tokens) =
            Chunk::create(64, 2, HugePages::Off, PoolAccess::REMOTE_READ, &registrar).unwrap();
        let slot = chunk.claim(tokens.next().unwrap());
        assert!(slot.rkey().is_some());
        drop(chunk);
        assert_eq!(
            registrar.live_registrations(),
            1,
            "a live slot keeps the chunk registered"
        );
        drop(slot);
        assert_eq!(registrar.live_registrations(), 0);
    }
}
