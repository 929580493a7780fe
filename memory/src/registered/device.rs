//! The device binding: chunks registered on a verbs protection domain ([`PdRegistrar`]), and
//! pool buffers postable with the verbs layer's owned (safe) work requests.

use std::io;

use verbs::{AccessFlags, LocalSlice, Pd, RawMr, RegisteredBuf, RegisteredBufMut};

use super::{pinning_limit, ChunkLimit, ChunkMemory, Registrar, Registration};
use crate::{registration_error, Buffer, Error, PoolAccess, Result, MEMLOCK_HINT};

/// Registers pool chunks on a protection domain (`ibv_reg_mr`), with the pool's access flags.
///
/// Each registration holds the protection domain (and through it the device context), so a
/// pool keeps its PD alive for as long as any of its chunks is registered.
/// [`Pool::on_pd`](crate::Pool::on_pd) is the short way to make a pool with one.
#[derive(Debug, Clone)]
pub struct PdRegistrar {
    pd: Pd,
}

impl PdRegistrar {
    /// A registrar for chunks of `pd`.
    pub fn new(pd: &Pd) -> Self {
        Self { pd: pd.clone() }
    }

    /// The protection domain chunks are registered on.
    pub fn pd(&self) -> &Pd {
        &self.pd
    }
}

/// The verbs access flags granting exactly what `access` allows.
pub(crate) fn access_flags(access: PoolAccess) -> AccessFlags {
    [
        (PoolAccess::LOCAL_WRITE, AccessFlags::LOCAL_WRITE),
        (PoolAccess::REMOTE_WRITE, AccessFlags::REMOTE_WRITE),
        (PoolAccess::REMOTE_READ, AccessFlags::REMOTE_READ),
        (PoolAccess::REMOTE_ATOMIC, AccessFlags::REMOTE_ATOMIC),
    ]
    .into_iter()
    .filter(|(pool, _)| access.contains(*pool))
    .fold(AccessFlags::empty(), |flags, (_, verbs)| flags | verbs)
}

// SAFETY: the registration covers exactly `memory` (`ibv_reg_mr` over its pointer and length),
// with the verbs flags that grant exactly `access` (`access_flags`, bit for bit), and reports
// that `access`; it deregisters through `RawMr::deregister`, which says when `ibv_dereg_mr`
// failed.
unsafe impl Registrar for PdRegistrar {
    #[doc(alias = "ibv_reg_mr")]
    /// The device's largest region (`max_mr_size`) and, unless the process may lock memory
    /// past it, the locked-memory limit: whichever is smaller.
    fn max_chunk(&self) -> Option<ChunkLimit> {
        let device = self
            .pd
            .context()
            .query_device()
            .ok()
            .map(|d| d.max_mr_size())
            .filter(|&m| m > 0)
            .map(|bytes| ChunkLimit {
                bytes,
                reason: format!(
                    "the largest memory region device {} registers (max_mr_size)",
                    self.pd.context().name()
                ),
            });
        let memlock = pinning_limit().map(|bytes| ChunkLimit {
            bytes,
            reason: format!("the locked-memory limit: {MEMLOCK_HINT}"),
        });
        [device, memlock]
            .into_iter()
            .flatten()
            .min_by_key(|l| l.bytes)
    }

    fn register(&self, memory: &ChunkMemory, access: PoolAccess) -> Result<Box<dyn Registration>> {
        let len = memory.len();
        // SAFETY: `ChunkMemory` is only created by the pool, which registers each one once and
        // keeps the registration inside the `Chunk` that owns the mapping; `Chunk::drop`
        // deregisters before the mapping is unmapped, and a chunk is dropped only when no
        // buffer of it is left, so none is in a work request. The range is `len` mapped bytes.
        // A registrar called by other code may keep the returned registration longer than the
        // mapping, but its keys alone give safe code no access to memory: only the pool's
        // buffers are postable safely, and they hold their chunk.
        let mr = unsafe {
            self.pd
                .reg_mr_raw(memory.as_ptr(), len, access_flags(access))
        }
        .map_err(|err| match err {
            verbs::Error::RegMr { source, .. } => registration_error(len, source),
            other => Error::Register {
                len,
                source: io::Error::other(other),
            },
        })?;
        Ok(Box::new(PdRegistration { access, mr }))
    }
}

/// A chunk's memory region; dropping it deregisters (`ibv_dereg_mr`) and releases the PD.
#[derive(Debug)]
struct PdRegistration {
    access: PoolAccess,
    mr: RawMr,
}

// SAFETY: see the `Registrar` implementation above.
unsafe impl Registration for PdRegistration {
    fn lkey(&self) -> u32 {
        self.mr.lkey()
    }

    fn rkey(&self) -> Option<u32> {
        self.access.is_remote().then(|| self.mr.rkey())
    }

    fn access(&self) -> PoolAccess {
        self.access
    }

    fn deregister(self: Box<Self>) -> io::Result<()> {
        self.mr.deregister().map_err(|(mr, err)| {
            // Still registered: keep the registration (and its PD) forever, like the memory.
            std::mem::forget(mr);
            io::Error::other(err)
        })
    }
}

// SAFETY: the contract of `RegisteredBuf`, for as long as the buffer lives:
// 1. `local` covers the buffer's whole slot (its capacity, fixed for the buffer's life; the
//    length `set_len` changes is not part of it), inside a chunk mapping that never moves;
// 2. its lkey is the chunk's registration, which lives in the chunk; the buffer holds the chunk
//    (`SlotMemory` keeps an `Arc`), and the chunk deregisters and unmaps only when dropped.
//    (`Registrar` is an unsafe trait whose implementations promise keys covering exactly the
//    chunk, or, for a chunk registered with no device, keys of no registration, through which
//    the device reaches nothing and a post fails);
// 3. the slot's bytes are reachable only through this buffer (one `SlotMemory` per slot, see
//    the module docs), so once the buffer is moved into a work request no safe code can write
//    them. `Buffer` is `Send + 'static`.
unsafe impl RegisteredBuf for Buffer {
    fn local(&self) -> LocalSlice {
        LocalSlice {
            addr: self.addr(),
            // Class sizes are at most MAX_CLASS_SIZE (1 GiB), validated with the config.
            len: self.capacity() as u32,
            lkey: self.lkey(),
        }
    }
}

// SAFETY: as above, and the buffer is the only local path to its bytes: moved into a request,
// nothing in the program can read or write them until the request hands it back.
unsafe impl RegisteredBufMut for Buffer {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn access_maps_bit_for_bit() {
        assert_eq!(
            access_flags(PoolAccess::LOCAL_WRITE),
            AccessFlags::LOCAL_WRITE
        );
        assert_eq!(
            access_flags(PoolAccess::all()),
            AccessFlags::LOCAL_WRITE
                | AccessFlags::REMOTE_WRITE
                | AccessFlags::REMOTE_READ
                | AccessFlags::REMOTE_ATOMIC
        );
        for bits in 0..16 {
            let access = PoolAccess::from_bits_truncate(bits);
            assert_eq!(access_flags(access).bits(), access.bits());
        }
    }
}
