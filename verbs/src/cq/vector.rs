//! CQs bound to a chosen completion vector (spreading completion interrupts over CPUs).
use std::sync::Arc;

use parking_lot::Mutex;
use verbs_sys as sys;

use super::{CompletionChannel, Cq, CqInner};
use crate::context::Context;
use crate::{Error, Result};

impl Context {
    /// [`create_cq`](Self::create_cq) signalling on completion vector `vector`, which must
    /// be below [`num_comp_vectors`](Self::num_comp_vectors) ([`Error::CompVector`]
    /// otherwise).
    #[doc(alias = "ibv_create_cq")]
    #[doc(alias = "comp_vector")]
    pub fn create_cq_on_vector(
        &self,
        cqe: u32,
        channel: Option<CompletionChannel>,
        vector: u32,
    ) -> Result<Cq> {
        let count = self.num_comp_vectors();
        if vector >= count {
            return Err(Error::CompVector { vector, count });
        }
        let ch = channel.map(|c| c.inner);
        let ch_ptr = ch.as_ref().map_or(std::ptr::null_mut(), |c| c.raw.as_ptr());
        let n = i32::try_from(cqe).unwrap_or(i32::MAX);
        // SAFETY: open context; the channel (if any) belongs to the same context and outlives
        // the CQ (it is dropped after it); the vector is in range (checked).
        let raw = unsafe {
            sys::ibv_create_cq(
                self.as_raw(),
                n,
                std::ptr::null_mut(),
                ch_ptr,
                vector as i32,
            )
        };
        let raw = sys::errno::check_ptr(raw).map_err(|source| Error::CreateCq { cqe, source })?;
        // SAFETY: live CQ; `cqe` is the real size.
        let real = unsafe { (*raw.as_ptr()).cqe } as u32;
        Ok(Cq {
            inner: Arc::new(CqInner {
                raw,
                channel: ch,
                unacked: Mutex::new(0),
                cqe: real,
                rxe: self.is_rxe(),
                _ctx: self.inner.clone(),
            }),
        })
    }
}
