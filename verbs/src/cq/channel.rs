//! Completion channels (`ibv_create_comp_channel`): a pollable fd that signals armed CQs.
use std::os::fd::{AsRawFd, RawFd};
use std::ptr::NonNull;
use std::sync::Arc;

use verbs_sys as sys;

use crate::context::{Context, ContextInner};
use crate::{Error, Result};

/// A completion channel. It is given to exactly one CQ (`Context::create_cq` takes it by
/// value), so every event read from it belongs to that CQ and is acknowledged by it.
pub struct CompletionChannel {
    pub(crate) inner: ChannelInner,
}

pub(crate) struct ChannelInner {
    pub(crate) raw: NonNull<sys::ibv_comp_channel>,
    _ctx: Arc<ContextInner>,
}

// SAFETY: a channel is an fd plus a context pointer, usable from any thread; reads of the
// non-blocking fd by concurrent threads are handled (EAGAIN).
unsafe impl Send for ChannelInner {}
// SAFETY: as above; shared access only reads the fd.
unsafe impl Sync for ChannelInner {}

impl Drop for ChannelInner {
    fn drop(&mut self) {
        // SAFETY: created by ibv_create_comp_channel; the CQ using it was destroyed first
        // (CqInner destroys its CQ before dropping its channel).
        unsafe { sys::ibv_destroy_comp_channel(self.raw.as_ptr()) };
    }
}

impl ChannelInner {
    pub(crate) fn fd(&self) -> RawFd {
        // SAFETY: plain field of a live channel.
        unsafe { (*self.raw.as_ptr()).fd }
    }
}

impl std::fmt::Debug for CompletionChannel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CompletionChannel")
            .field("fd", &self.inner.fd())
            .finish()
    }
}

impl AsRawFd for CompletionChannel {
    fn as_raw_fd(&self) -> RawFd {
        self.inner.fd()
    }
}

impl Context {
    /// Creates a completion channel (its fd is non-blocking).
    #[doc(alias = "ibv_create_comp_channel")]
    pub fn create_comp_channel(&self) -> Result<CompletionChannel> {
        // SAFETY: open context.
        let raw = unsafe { sys::ibv_create_comp_channel(self.as_raw()) };
        let raw = sys::errno::check_ptr(raw).map_err(Error::CreateCompChannel)?;
        let inner = ChannelInner {
            raw,
            _ctx: self.inner.clone(),
        };
        sys::fd::set_nonblocking(inner.fd()).map_err(Error::CreateCompChannel)?;
        Ok(CompletionChannel { inner })
    }
}
