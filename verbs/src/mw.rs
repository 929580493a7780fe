//! Memory windows (`ibv_alloc_mw`): remote access to exactly a sub-range of a region, granted
//! by a bind and revoked by invalidation, a rebind or deallocation.
//!
//! A window is allocated in a PD ([`Pd::alloc_mw`]) and bound to a range of an
//! `Arc<MemoryRegion>` registered with [`AccessFlags::MW_BIND`]:
//! - **type 1** through [`Qp::bind_mw`](crate::Qp::bind_mw) (`ibv_bind_mw`), any QP of the
//!   PD; unbound with [`Qp::unbind_mw`](crate::Qp::unbind_mw) or by a rebind;
//! - **type 2** through a send work request
//!   ([`SendRequest::bind_mw`](crate::SendRequest::bind_mw)); the window then serves only
//!   peers of that QP, and is revoked by a local invalidate
//!   ([`SendRequest::local_inv`](crate::SendRequest::local_inv)) or by the peer's
//!   SEND_WITH_INV naming its rkey ([`WrOp::SendWithInv`](crate::WrOp::SendWithInv)).
//!
//! The window keeps the region it is bound to alive (and a bind or invalidation request keeps
//! the region it replaces until its completion), so the memory a window grants is never freed
//! while a peer may still reach it. Should a region's last handle go while a window is still
//! bound to it anyway (say, the device refused an unbind), its deregistration fails and its
//! memory is leaked rather than freed.
use std::ptr::NonNull;
use std::sync::Arc;

use parking_lot::{Mutex, MutexGuard};
use verbs_sys as sys;

use crate::mr::{AccessFlags, MemoryRegion};
use crate::pd::{Pd, PdInner};
use crate::{Error, Result};

/// The type of a memory window (`enum ibv_mw_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MwType {
    /// Bound with `ibv_bind_mw` on any QP of the PD; invalidated only by a rebind (or
    /// deallocation).
    Type1,
    /// Bound by a `BIND_MW` work request on one QP, for that QP's peer; invalidated by a
    /// local invalidate or a received SEND_WITH_INV.
    Type2,
}

impl MwType {
    fn raw(self) -> sys::ibv_mw_type::Type {
        match self {
            MwType::Type1 => sys::ibv_mw_type::IBV_MW_TYPE_1,
            MwType::Type2 => sys::ibv_mw_type::IBV_MW_TYPE_2,
        }
    }
}

/// The rights a window may grant: the remote ones.
const WINDOW_RIGHTS: AccessFlags = AccessFlags::REMOTE_READ
    .union(AccessFlags::REMOTE_WRITE)
    .union(AccessFlags::REMOTE_ATOMIC);

/// A memory window. Cheap to clone; deallocated (which revokes any binding) when the last
/// handle and the last request naming it are gone.
#[derive(Clone)]
pub struct Mw {
    pub(crate) inner: Arc<MwInner>,
}

pub(crate) struct MwInner {
    raw: NonNull<sys::ibv_mw>,
    mw_type: MwType,
    /// The region of the last bind; its lock also orders every write of the window's rkey.
    bound: Mutex<Option<Arc<MemoryRegion>>>,
    pd: Arc<PdInner>,
}

// SAFETY: a window is a kernel object handle without thread affinity; its rkey field is only
// written under `bound`'s lock.
unsafe impl Send for MwInner {}
// SAFETY: as above.
unsafe impl Sync for MwInner {}

impl Drop for MwInner {
    fn drop(&mut self) {
        // SAFETY: allocated by ibv_alloc_mw; every request naming the window holds an Arc of
        // this inner, so none is in flight. Deallocation invalidates any binding.
        let r = unsafe { sys::ibv_dealloc_mw(self.raw.as_ptr()) };
        if sys::errno::check_ret(r).is_err() {
            // The window may still grant access to its region: never free that memory.
            std::mem::forget(self.bound.get_mut().take());
        }
    }
}

impl std::fmt::Debug for Mw {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mw")
            .field("type", &self.inner.mw_type)
            .field("rkey", &format_args!("{:#x}", self.rkey()))
            .finish()
    }
}

impl Pd {
    /// Allocates a memory window of `mw_type`. A device without memory windows (or without
    /// type 2 windows, for [`MwType::Type2`]) gives [`Error::MissingCapability`] (or
    /// [`Error::Unsupported`]).
    #[doc(alias = "ibv_alloc_mw")]
    pub fn alloc_mw(&self, mw_type: MwType) -> Result<Mw> {
        let ctx = self.context();
        ctx.require(crate::Capability::MemoryWindows)?;
        let attr = ctx.query_device()?;
        let missing = if mw_type == MwType::Type2 && !attr.has_mw_type2() {
            Some("type 2 memory windows (IBV_DEVICE_MEM_WINDOW_TYPE_2A/2B)")
        } else {
            None
        };
        if let Some(what) = missing {
            return Err(Error::Unsupported {
                what,
                source: std::io::Error::from_raw_os_error(libc::EOPNOTSUPP),
            });
        }
        // SAFETY: live PD.
        let raw = unsafe { sys::ibv_alloc_mw(self.as_raw(), mw_type.raw()) };
        let raw =
            sys::errno::check_ptr(raw).map_err(|source| Error::AllocMw { mw_type, source })?;
        Ok(Mw {
            inner: Arc::new(MwInner {
                raw,
                mw_type,
                bound: Mutex::new(None),
                pd: self.inner.clone(),
            }),
        })
    }
}

impl Mw {
    /// The raw `ibv_mw`, valid while this handle lives.
    pub fn as_raw(&self) -> *mut sys::ibv_mw {
        self.inner.raw.as_ptr()
    }

    /// The window's type.
    pub fn mw_type(&self) -> MwType {
        self.inner.mw_type
    }

    /// The rkey of the window's latest bind (the one peers must use), or the initial key
    /// before any bind.
    pub fn rkey(&self) -> u32 {
        let _order = self.inner.bound.lock();
        // SAFETY: live window; the field is written only under the lock held here.
        unsafe { (*self.as_raw()).rkey }
    }

    /// The region of the latest bind, if any (it may since have been invalidated: the window
    /// keeps it until the next bind or an invalidation posted through
    /// [`SendRequest::local_inv`](crate::SendRequest::local_inv)).
    pub fn bound_region(&self) -> Option<Arc<MemoryRegion>> {
        self.inner.bound.lock().clone()
    }

    /// Forgets the region of the latest bind, after the window was invalidated by a peer
    /// (a received SEND_WITH_INV naming [`rkey`](Self::rkey)), and returns it. Should the
    /// window in fact still be bound, the region cannot be deregistered while it is, and
    /// dropping it leaks its memory rather than freeing it.
    pub fn release_region(&self) -> Option<Arc<MemoryRegion>> {
        self.inner.bound.lock().take()
    }

    /// Puts the rkey of a bind that completed with an error back to `previous` (the key
    /// before it), as the verbs leave to the caller: the device still knows the window by
    /// its old key.
    pub fn restore_rkey(&self, previous: u32) {
        let _order = self.inner.bound.lock();
        // SAFETY: live window; written under the lock.
        unsafe { (*self.as_raw()).rkey = previous };
    }

    /// Locks the window's binding state (and the writes of its rkey).
    pub(crate) fn lock(&self) -> MutexGuard<'_, Option<Arc<MemoryRegion>>> {
        self.inner.bound.lock()
    }

    /// The rkey; call with [`lock`](Self::lock) held.
    pub(crate) fn rkey_locked(&self) -> u32 {
        // SAFETY: live window; the caller holds the lock.
        unsafe { (*self.as_raw()).rkey }
    }

    /// Sets the rkey; call with [`lock`](Self::lock) held.
    pub(crate) fn set_rkey_locked(&self, rkey: u32) {
        // SAFETY: live window; the caller holds the lock.
        unsafe { (*self.as_raw()).rkey = rkey };
    }

    /// Checks a bind of `len` bytes of `region` with `access` before any post: the checks
    /// the verbs make with a bare EINVAL, and those whose bind would grant nothing.
    pub(crate) fn check_bind(
        &self,
        mw_type: MwType,
        region: &MemoryRegion,
        len: u32,
        access: AccessFlags,
    ) -> Result<()> {
        let bad = |reason: String| {
            Err(Error::InvalidBind {
                rkey: self.rkey(),
                reason,
            })
        };
        if self.mw_type() != mw_type {
            return bad(match self.mw_type() {
                MwType::Type1 => "a type 1 window is bound with Qp::bind_mw".into(),
                MwType::Type2 => "a type 2 window is bound by posting SendRequest::bind_mw".into(),
            });
        }
        if !WINDOW_RIGHTS.contains(access) {
            return bad(format!(
                "{access:?}: a window grants only REMOTE_READ, REMOTE_WRITE and REMOTE_ATOMIC"
            ));
        }
        if access.is_empty() {
            return bad("no rights given: grant REMOTE_READ and/or REMOTE_WRITE".into());
        }
        let ra = region.access();
        if !ra.contains(AccessFlags::MW_BIND) {
            return bad(format!(
                "the region ({ra:?}) was not registered with AccessFlags::MW_BIND: add it"
            ));
        }
        if ra.contains(AccessFlags::ZERO_BASED) {
            return bad("windows cannot be bound to a zero-based region".into());
        }
        if access.intersects(AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_ATOMIC)
            && !ra.contains(AccessFlags::LOCAL_WRITE)
        {
            return bad(format!(
                "remote write or atomic rights need a region with LOCAL_WRITE (it has {ra:?})"
            ));
        }
        if region.pd_raw() != self.inner.pd.raw.as_ptr() {
            return bad("the region belongs to another protection domain".into());
        }
        if len == 0 && mw_type == MwType::Type2 {
            return bad(
                "a type 2 window cannot be bound to zero bytes: invalidate it instead".into(),
            );
        }
        Ok(())
    }

    /// The raw PD of the window.
    pub(crate) fn pd_raw(&self) -> *mut sys::ibv_pd {
        self.inner.pd.raw.as_ptr()
    }
}
