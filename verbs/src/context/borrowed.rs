//! A [`Context`] over an `ibv_context` that another library (librdmacm) opened and owns.
use std::ffi::CStr;
use std::ptr::NonNull;
use std::sync::Arc;

use verbs_sys as sys;

use super::{Context, ContextInner};

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
    ) -> Context {
        // SAFETY: the caller guarantees an open context; `device` is set for its lifetime and
        // its name is a NUL-terminated string owned by libibverbs.
        let name = unsafe {
            let dev = (*raw.as_ptr()).device;
            CStr::from_ptr(sys::ibv_get_device_name(dev))
                .to_string_lossy()
                .into_owned()
        };
        // Async events are read with a timeout, as for contexts opened here. librdmacm never
        // reads this descriptor, so the mode change is invisible to it; failure only means
        // async-event reads may block, which is not worth failing for.
        // SAFETY: async_fd is a plain field of an open context.
        let _ = crate::util::set_nonblocking(unsafe { (*raw.as_ptr()).async_fd });
        Context {
            inner: Arc::new(ContextInner {
                raw,
                name,
                owner: Some(owner),
            }),
        }
    }

    /// Whether this context is borrowed from another library ([`Context::from_borrowed_raw`]).
    pub fn is_borrowed(&self) -> bool {
        self.inner.owner.is_some()
    }
}
