//! Protection domains (`ibv_alloc_pd`): the scope of memory regions, QPs and address handles.
use std::ptr::NonNull;
use std::sync::Arc;

use verbs_sys as sys;

use crate::context::{Context, ContextInner};
use crate::{Error, Result};

/// A protection domain. Cheap to clone; deallocated when the last handle and the last object
/// created in it are gone.
#[derive(Clone)]
pub struct Pd {
    pub(crate) inner: Arc<PdInner>,
}

pub(crate) struct PdInner {
    pub(crate) raw: NonNull<sys::ibv_pd>,
    pub(crate) ctx: Arc<ContextInner>,
}

// SAFETY: a PD is a kernel object handle with no thread affinity; libibverbs calls on it are
// thread-safe.
unsafe impl Send for PdInner {}
// SAFETY: as above; the handle is never mutated through a shared reference.
unsafe impl Sync for PdInner {}

impl Drop for PdInner {
    fn drop(&mut self) {
        // SAFETY: allocated by ibv_alloc_pd; all children (MRs, QPs, AHs, SRQs) hold an Arc of
        // this inner, so none is alive. A failure here cannot be reported from drop.
        unsafe { sys::ibv_dealloc_pd(self.raw.as_ptr()) };
    }
}

impl std::fmt::Debug for Pd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pd").field("raw", &self.inner.raw).finish()
    }
}

impl Context {
    /// Allocates a protection domain.
    #[doc(alias = "ibv_alloc_pd")]
    pub fn alloc_pd(&self) -> Result<Pd> {
        // SAFETY: open context.
        let raw = unsafe { sys::ibv_alloc_pd(self.as_raw()) };
        let raw = sys::errno::check_ptr(raw).map_err(Error::AllocPd)?;
        Ok(Pd {
            inner: Arc::new(PdInner {
                raw,
                ctx: self.inner.clone(),
            }),
        })
    }
}

impl Pd {
    /// The raw `ibv_pd`, valid while this handle lives.
    pub fn as_raw(&self) -> *mut sys::ibv_pd {
        self.inner.raw.as_ptr()
    }

    /// The device context this PD belongs to.
    pub fn context(&self) -> Context {
        Context {
            inner: self.inner.ctx.clone(),
        }
    }
}
