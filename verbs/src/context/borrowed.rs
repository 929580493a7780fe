//! A [`Context`] over an `ibv_context` that another library (librdmacm) opened and owns.
use std::ptr::NonNull;
use std::sync::Arc;

use verbs_sys as sys;

use super::{Context, Release};
use crate::Result;

impl Context {
    /// Wraps a device context owned by someone else, such as the `verbs` field of an
    /// `rdma_cm_id`, so verbs objects (PD, CQ, QP, MR) can be created on it. The context is never
    /// closed by this crate; instead `owner` is kept alive until this handle and every object
    /// created from it are gone, and must be whatever keeps `raw` open (for librdmacm: a CM id
    /// bound to the device, since librdmacm closes a device when its last id is destroyed).
    ///
    /// # Safety
    ///
    /// `raw` must be an open `ibv_context` that stays open at least as long as `owner` lives,
    /// and nothing else may close it meanwhile.
    pub unsafe fn from_borrowed_raw(
        raw: NonNull<sys::ibv_context>,
        owner: Arc<dyn std::any::Any + Send + Sync>,
    ) -> Result<Context> {
        // SAFETY: forwarded from the caller; the owner keeps the context open.
        unsafe {
            Context::wrap(
                raw,
                Release::Borrowed {
                    _keep_alive: Some(owner),
                },
            )
        }
    }

    /// Whether this context belongs to someone else (not closed by this crate).
    pub fn is_borrowed(&self) -> bool {
        matches!(self.inner.release, Release::Borrowed { .. })
    }
}
