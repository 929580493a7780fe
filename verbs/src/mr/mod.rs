//! Memory regions (`ibv_reg_mr`): owned regions whose buffer cannot move, raw registrations of
//! caller memory, regions over a dma-buf (`dmabuf.rs`), and bounds-checked local/remote
//! descriptors.
mod buf;
mod dmabuf;
mod owned;
pub(crate) mod slice;

use std::ptr::NonNull;
use std::sync::Arc;

use bitflags::bitflags;
use verbs_sys as sys;

pub(crate) use buf::AlignedBuf;
pub use dmabuf::DmabufMr;
pub(crate) use dmabuf::INSTEAD as DMABUF_INSTEAD;
pub use owned::{RegisteredBuf, RegisteredBufMut};
pub use slice::{LocalSlice, RemoteSlice};

use crate::pd::{Pd, PdInner};
use crate::{Error, Result};

bitflags! {
    /// Access rights of a memory region or a QP (`enum ibv_access_flags`).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
    pub struct AccessFlags: u32 {
        /// The local NIC may write (needed for RECV, RDMA READ and atomic destinations, and
        /// for any remote write or atomic right).
        const LOCAL_WRITE = 1;
        /// Peers may RDMA WRITE into it.
        const REMOTE_WRITE = 1 << 1;
        /// Peers may RDMA READ from it.
        const REMOTE_READ = 1 << 2;
        /// Peers may run atomics on it.
        const REMOTE_ATOMIC = 1 << 3;
        /// Memory windows may be bound to it.
        const MW_BIND = 1 << 4;
        /// Addresses are offsets from the region start.
        const ZERO_BASED = 1 << 5;
        /// On-demand paging.
        const ON_DEMAND = 1 << 6;
        /// Relaxed PCI ordering.
        const RELAXED_ORDERING = 1 << 20;
    }
}

impl AccessFlags {
    /// Rights that let the network write into the region behind the program's back (memory
    /// windows bound to the region may grant remote writes too).
    pub const REMOTELY_WRITABLE: AccessFlags = AccessFlags::REMOTE_WRITE
        .union(AccessFlags::REMOTE_ATOMIC)
        .union(AccessFlags::MW_BIND);
}

/// A registration (`struct ibv_mr`), deregistered on drop; for an owned region, with the
/// buffer it covers, freed after the registration is gone; for a dma-buf region, with the
/// dma-buf's descriptor, closed after the registration is gone.
pub(crate) struct MrInner {
    raw: NonNull<sys::ibv_mr>,
    access: AccessFlags,
    /// The owned region's memory (`None` for caller memory).
    mem: Option<AlignedBuf>,
    /// The dma-buf a dma-buf region covers (`None` for the others).
    dmabuf: Option<std::os::fd::OwnedFd>,
    /// Set once `ibv_dereg_mr` succeeded through [`RawMr::deregister`] or
    /// [`DmabufMr::deregister`]; Drop then does nothing.
    deregistered: bool,
    _pd: Arc<PdInner>,
}

// SAFETY: an MR handle has no thread affinity; ibv_dereg_mr may run on any thread.
unsafe impl Send for MrInner {}
// SAFETY: the handle is only read (lkey, rkey, addr) through shared references.
unsafe impl Sync for MrInner {}

impl Drop for MrInner {
    fn drop(&mut self) {
        if self.deregistered {
            return;
        }
        if self.dereg().is_err() {
            // Still registered (e.g. a memory window is bound to it): peers may still write
            // the memory, so it must not be freed (nor the dma-buf released).
            std::mem::forget(self.mem.take());
            std::mem::forget(self.dmabuf.take());
        }
    }
}

/// Refuses the flag combinations `ibv_reg_mr` answers with a bare EINVAL.
fn check_access(access: AccessFlags) -> Result<()> {
    if access.intersects(AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_ATOMIC)
        && !access.contains(AccessFlags::LOCAL_WRITE)
    {
        return Err(Error::InvalidAccess {
            access,
            problem: "remote write and remote atomic access require LOCAL_WRITE as well \
                      (the verbs refuse them without it): add AccessFlags::LOCAL_WRITE",
        });
    }
    Ok(())
}

impl MrInner {
    /// # Safety
    /// `addr..addr+len` must be memory that stays allocated while the registration lives.
    unsafe fn register(pd: &Pd, addr: *mut u8, len: usize, access: AccessFlags) -> Result<Self> {
        check_access(access)?;
        // SAFETY: forwarded caller contract; the PD is alive.
        let raw = unsafe { sys::ibv_reg_mr(pd.as_raw(), addr.cast(), len, access.bits() as i32) };
        let raw = sys::errno::check_ptr(raw).map_err(|source| Error::RegMr { len, source })?;
        Ok(MrInner {
            raw,
            access,
            mem: None,
            dmabuf: None,
            deregistered: false,
            _pd: pd.inner.clone(),
        })
    }

    /// `ibv_dereg_mr`; on success the registration is gone and Drop does nothing more.
    fn dereg(&mut self) -> std::io::Result<()> {
        debug_assert!(!self.deregistered);
        // SAFETY: registered by ibv_reg_mr; `deregistered` makes a successful call the last.
        let r = unsafe { sys::ibv_dereg_mr(self.raw.as_ptr()) };
        sys::errno::check_ret(r)?;
        self.deregistered = true;
        Ok(())
    }
    fn mr(&self) -> &sys::ibv_mr {
        // SAFETY: valid until deregistered in drop.
        unsafe { self.raw.as_ref() }
    }
}

/// A memory region that owns its buffer: page-aligned, zero-initialised, never moved or
/// resized, freed only after deregistration.
///
/// Reading it from Rust while the NIC may write into it would be a data race, so:
/// - posting it as a destination (RECV, RDMA READ, atomic) moves it into the request (see
///   [`RegisteredBufMut`]); it comes back with the completion;
/// - a region with remote write or atomic rights ([`AccessFlags::REMOTELY_WRITABLE`]) can be
///   written by a peer at any time, so it offers only copying access ([`read`](Self::read),
///   [`write`](Self::write)), never a slice.
pub struct MemoryRegion {
    /// The registration, owning the buffer (freed only after deregistration succeeded).
    reg: MrInner,
}

impl std::fmt::Debug for MemoryRegion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryRegion")
            .field("addr", &self.buf().as_ptr())
            .field("len", &self.len())
            .field("lkey", &self.lkey())
            .field("rkey", &self.rkey())
            .field("access", &self.access())
            .finish()
    }
}

impl Pd {
    /// Allocates a zeroed, page-aligned buffer of `len` bytes and registers it.
    #[doc(alias = "ibv_reg_mr")]
    pub fn reg_mr(&self, len: usize, access: AccessFlags) -> Result<MemoryRegion> {
        let buf = AlignedBuf::zeroed(len)?;
        // SAFETY: the registration owns the buffer and frees it only once deregistered.
        let mut reg = unsafe { MrInner::register(self, buf.as_ptr(), len, access)? };
        reg.mem = Some(buf);
        Ok(MemoryRegion { reg })
    }

    /// Registers caller-owned memory.
    ///
    /// # Safety
    /// `addr..addr + len` must be allocated memory that stays allocated (not freed, not
    /// unmapped) as long as the returned [`RawMr`] lives, and as long as any work request using
    /// it is in flight. Posting it is `unsafe` too: the caller keeps the memory untouched by
    /// Rust code while the NIC may write into it.
    #[doc(alias = "ibv_reg_mr")]
    pub unsafe fn reg_mr_raw(
        &self,
        addr: *mut u8,
        len: usize,
        access: AccessFlags,
    ) -> Result<RawMr> {
        // SAFETY: forwarded caller contract.
        let reg = unsafe { MrInner::register(self, addr, len, access)? };
        Ok(RawMr { reg })
    }
}

macro_rules! region_common {
    () => {
        /// Start address of the registered memory.
        pub fn addr(&self) -> u64 {
            self.reg.mr().addr as u64
        }
        /// Length of the registered memory.
        pub fn len(&self) -> usize {
            self.reg.mr().length
        }
        /// Whether the region is empty.
        pub fn is_empty(&self) -> bool {
            self.len() == 0
        }
        /// Local key: names this region in local scatter/gather entries.
        pub fn lkey(&self) -> u32 {
            self.reg.mr().lkey
        }
        /// Remote key: lets a peer access the region (with the rights of [`Self::access`]).
        pub fn rkey(&self) -> u32 {
            self.reg.mr().rkey
        }
        /// The rights it was registered with.
        pub fn access(&self) -> AccessFlags {
            self.reg.access
        }
        /// The raw `ibv_mr`, valid while this region lives.
        pub fn as_raw(&self) -> *mut sys::ibv_mr {
            self.reg.raw.as_ptr()
        }
        /// A local descriptor (address, length, lkey) of `range`, bounds-checked.
        pub fn local(&self, range: impl std::ops::RangeBounds<usize>) -> Result<LocalSlice> {
            let (start, len) = slice::check_range(range, self.len())?;
            Ok(LocalSlice {
                addr: self.addr() + start as u64,
                len,
                lkey: self.lkey(),
            })
        }
        /// A remote descriptor (address, length, rkey) of `range` to give to a peer,
        /// bounds-checked.
        pub fn remote(&self, range: impl std::ops::RangeBounds<usize>) -> Result<RemoteSlice> {
            let (start, len) = slice::check_range(range, self.len())?;
            Ok(RemoteSlice {
                addr: self.addr() + start as u64,
                len,
                rkey: self.rkey(),
            })
        }
    };
}

impl MemoryRegion {
    region_common!();

    /// The raw PD the region is registered in.
    pub(crate) fn pd_raw(&self) -> *mut sys::ibv_pd {
        self.reg._pd.raw.as_ptr()
    }

    fn buf(&self) -> &AlignedBuf {
        self.reg
            .mem
            .as_ref()
            .expect("an owned region has its buffer")
    }

    fn buf_mut(&mut self) -> &mut AlignedBuf {
        self.reg
            .mem
            .as_mut()
            .expect("an owned region has its buffer")
    }

    fn assert_not_remotely_writable(&self) {
        assert!(
            !self.access().intersects(AccessFlags::REMOTELY_WRITABLE),
            "a region with remote write/atomic rights has no slice view: use read/write"
        );
    }

    /// The bytes.
    ///
    /// # Panics
    /// If the region has remote write or atomic rights: a peer may write it at any time.
    pub fn as_slice(&self) -> &[u8] {
        self.assert_not_remotely_writable();
        self.buf().as_slice()
    }

    /// The bytes, mutably.
    ///
    /// # Panics
    /// If the region has remote write or atomic rights.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        self.assert_not_remotely_writable();
        self.buf_mut().as_mut_slice()
    }

    /// Copies `dst.len()` bytes at `offset` out of the region (volatile reads: correct even
    /// while a peer writes into it, though the bytes may then be torn).
    pub fn read(&self, offset: usize, dst: &mut [u8]) -> Result<()> {
        slice::check_range(offset..offset.saturating_add(dst.len()), self.len())?;
        self.buf().read_volatile(offset, dst);
        Ok(())
    }

    /// Copies `src` into the region at `offset` (volatile writes).
    pub fn write(&mut self, offset: usize, src: &[u8]) -> Result<()> {
        slice::check_range(offset..offset.saturating_add(src.len()), self.len())?;
        self.buf_mut().write_volatile(offset, src);
        Ok(())
    }
}

/// A registration of caller-owned memory (from the `unsafe` [`Pd::reg_mr_raw`]). Its
/// descriptors can only be posted with the `unsafe` post calls.
pub struct RawMr {
    reg: MrInner,
}

impl RawMr {
    region_common!();

    /// Deregisters now and says whether it worked (dropping deregisters too, but cannot tell).
    ///
    /// On failure (e.g. `EBUSY`: a memory window is still bound to the region) the region is
    /// still registered, and peers holding its rkey may still access the memory: the region
    /// comes back with the error, so the caller can keep the memory alive (or leak it).
    #[doc(alias = "ibv_dereg_mr")]
    pub fn deregister(mut self) -> std::result::Result<(), (RawMr, Error)> {
        match self.reg.dereg() {
            Ok(()) => Ok(()),
            Err(source) => Err((self, Error::DeregMr(source))),
        }
    }
}

impl std::fmt::Debug for RawMr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RawMr")
            .field("addr", &self.addr())
            .field("len", &self.len())
            .field("lkey", &self.lkey())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remote_write_or_atomic_without_local_write_is_refused() {
        for bad in [
            AccessFlags::REMOTE_WRITE,
            AccessFlags::REMOTE_ATOMIC,
            AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ,
        ] {
            let e = check_access(bad).unwrap_err();
            assert!(matches!(e, Error::InvalidAccess { access, .. } if access == bad));
            assert!(
                e.to_string().contains("add AccessFlags::LOCAL_WRITE"),
                "{e}"
            );
        }
        for good in [
            AccessFlags::empty(),
            AccessFlags::REMOTE_READ,
            AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_ATOMIC,
        ] {
            assert!(check_access(good).is_ok(), "{good:?}");
        }
    }
}
