//! Host-only registrar with keys of no registration, for tests and benchmarks without an RDMA
//! device (re-exported as `memory::testing::HostRegistrar`).
//!
//! **Test use only.** [`HostRegistrar`] maps real memory but registers nothing: its keys name
//! no registration (the [`Registration`] contract's second case), so no device can reach a
//! chunk through them, and posting its buffers to a queue pair fails. Device tests use the
//! verbs registrar instead.

use std::io;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::sync::Arc;

use super::{ChunkLimit, ChunkMemory, Registrar, Registration};
use crate::{Error, PoolAccess, Result};

/// A [`Registrar`] that hands out fake keys and counts registrations. Clones share the counts.
#[derive(Debug, Clone, Default)]
pub struct HostRegistrar {
    shared: Arc<Shared>,
}

#[derive(Debug, Default)]
struct Shared {
    next_key: AtomicU32,
    registrations: AtomicUsize,
    live: AtomicUsize,
    refuse: AtomicBool,
    /// Rights granted beyond those asked for (`PoolAccess` bits).
    extra_access: AtomicU32,
    fail_deregister: AtomicBool,
    /// Report no rkey even for remote access.
    withhold_rkey: AtomicBool,
    /// Largest chunk reported by `max_chunk` (0: none).
    max_chunk: AtomicUsize,
}

impl HostRegistrar {
    /// A registrar that succeeds until told to [`refuse`](Self::refuse).
    pub fn new() -> Self {
        Self::default()
    }

    /// While `refuse` is true, registrations fail with [`Error::Register`] (this clone and all
    /// others).
    pub fn refuse(&self, refuse: bool) {
        self.shared.refuse.store(refuse, Ordering::Relaxed);
    }

    /// Grant `extra` rights on top of what the pool asks for from now on, and report them as
    /// a faithful registrar must: the pool then treats the chunk as the rights demand.
    pub fn grant_extra(&self, extra: PoolAccess) {
        self.shared
            .extra_access
            .store(extra.bits(), Ordering::Relaxed);
    }

    /// While `fail` is true, deregistration fails (as `ibv_dereg_mr` does while a memory
    /// window is bound): the pool must then leave the chunk's memory mapped.
    pub fn fail_deregister(&self, fail: bool) {
        self.shared.fail_deregister.store(fail, Ordering::Relaxed);
    }

    /// While `withhold` is true, registrations report no rkey even when remote access was
    /// asked for (a registrar that cannot say how peers reach the chunk): the pool must then
    /// refuse the chunk, and deregister it (or leak its memory) rather than drop it.
    pub fn withhold_rkey(&self, withhold: bool) {
        self.shared.withhold_rkey.store(withhold, Ordering::Relaxed);
    }

    /// Report `bytes` as the largest chunk it registers ([`Registrar::max_chunk`]), as a
    /// device or the locked-memory limit would; 0 for no limit.
    pub fn max_chunk_bytes(&self, bytes: usize) {
        self.shared.max_chunk.store(bytes, Ordering::Relaxed);
    }

    /// Registrations made so far, including dropped ones.
    pub fn registrations(&self) -> usize {
        self.shared.registrations.load(Ordering::Relaxed)
    }

    /// Registrations not yet dropped.
    pub fn live_registrations(&self) -> usize {
        self.shared.live.load(Ordering::Relaxed)
    }
}

// SAFETY: nothing is registered with any device, so no one but this program can write the
// memory, and the keys name no registration (the contract's second case: made up, never given
// by a device for this memory). The reported access is what was asked for plus what
// `grant_extra` added, which covers everything "granted". Deregistration "fails" only when
// told to, and then the pool keeps the memory mapped, which is always safe.
unsafe impl Registrar for HostRegistrar {
    fn max_chunk(&self) -> Option<ChunkLimit> {
        match self.shared.max_chunk.load(Ordering::Relaxed) {
            0 => None,
            bytes => Some(ChunkLimit {
                bytes: bytes as u64,
                reason: "the test registrar's limit".into(),
            }),
        }
    }

    fn register(&self, memory: &ChunkMemory, access: PoolAccess) -> Result<Box<dyn Registration>> {
        let shared = &self.shared;
        if shared.refuse.load(Ordering::Relaxed) {
            return Err(Error::Register {
                len: memory.len(),
                source: io::Error::other("registration refused by the test registrar"),
            });
        }
        shared.registrations.fetch_add(1, Ordering::Relaxed);
        let key = shared.next_key.fetch_add(1, Ordering::Relaxed);
        shared.live.fetch_add(1, Ordering::Relaxed);
        let granted =
            access | PoolAccess::from_bits_truncate(shared.extra_access.load(Ordering::Relaxed));
        Ok(Box::new(HostRegistration {
            lkey: key,
            rkey: (access.is_remote() && !shared.withhold_rkey.load(Ordering::Relaxed))
                .then_some(key | 0x8000_0000),
            access: granted,
            shared: Arc::clone(shared),
        }))
    }
}

#[derive(Debug)]
struct HostRegistration {
    lkey: u32,
    rkey: Option<u32>,
    access: PoolAccess,
    shared: Arc<Shared>,
}

// SAFETY: see the `Registrar` implementation above.
unsafe impl Registration for HostRegistration {
    fn access(&self) -> PoolAccess {
        self.access
    }

    fn deregister(self: Box<Self>) -> io::Result<()> {
        if self.shared.fail_deregister.load(Ordering::Relaxed) {
            // Stays "registered": counted as live forever.
            std::mem::forget(self);
            return Err(io::Error::from_raw_os_error(libc::EBUSY));
        }
        Ok(())
    }

    fn lkey(&self) -> u32 {
        self.lkey
    }

    fn rkey(&self) -> Option<u32> {
        self.rkey
    }
}

impl Drop for HostRegistration {
    fn drop(&mut self) {
        self.shared.live.fetch_sub(1, Ordering::Relaxed);
    }
}
