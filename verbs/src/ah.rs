//! Address handles (`ibv_create_ah`): the destination of UD sends.
use std::ptr::NonNull;
use std::sync::Arc;

use verbs_sys as sys;

use crate::pd::{Pd, PdInner};
use crate::qp::AhAttr;
use crate::{Error, Result};

/// An address handle. Cheap to clone; a UD send request keeps a clone until its completion.
#[derive(Clone)]
pub struct Ah {
    inner: Arc<AhInner>,
}

struct AhInner {
    raw: NonNull<sys::ibv_ah>,
    attr: AhAttr,
    _pd: Arc<PdInner>,
}

// SAFETY: an AH handle has no thread affinity and is immutable after creation.
unsafe impl Send for AhInner {}
// SAFETY: as above.
unsafe impl Sync for AhInner {}

impl Drop for AhInner {
    fn drop(&mut self) {
        // SAFETY: created by ibv_create_ah; requests using it hold a clone until completion.
        unsafe { sys::ibv_destroy_ah(self.raw.as_ptr()) };
    }
}

impl std::fmt::Debug for Ah {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ah")
            .field("attr", &self.inner.attr)
            .finish()
    }
}

impl Pd {
    /// Creates an address handle for `attr` (on RoCE it needs a GRH).
    #[doc(alias = "ibv_create_ah")]
    pub fn create_ah(&self, attr: &AhAttr) -> Result<Ah> {
        if let Some(grh) = &attr.grh {
            self.context()
                .check_sgid_index(0, attr.port_num, grh.sgid_index)?;
        }
        let mut raw_attr = attr.to_sys();
        // SAFETY: live PD; complete attribute struct.
        let raw = unsafe { sys::ibv_create_ah(self.as_raw(), &mut raw_attr) };
        let raw = sys::errno::check_ptr(raw).map_err(Error::CreateAh)?;
        Ok(Ah {
            inner: Arc::new(AhInner {
                raw,
                attr: *attr,
                _pd: self.inner.clone(),
            }),
        })
    }
}

impl Ah {
    /// The device context the address handle was created on.
    pub(crate) fn context_raw(&self) -> *mut sys::ibv_context {
        self.inner._pd.ctx.raw.as_ptr()
    }

    /// The raw `ibv_ah`, valid while this handle lives.
    pub fn as_raw(&self) -> *mut sys::ibv_ah {
        self.inner.raw.as_ptr()
    }
    /// The attributes it was created with.
    pub fn attr(&self) -> &AhAttr {
        &self.inner.attr
    }
}
