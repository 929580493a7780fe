//! Shared receive queues (`ibv_create_srq`): one pool of receives for several QPs.
use std::any::Any;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use verbs_sys as sys;

use crate::cq::PolledWc;
use crate::pd::{Pd, PdInner};
use crate::qp::post::{self, InFlight, PostError, Reclaimed, RecvRequest, RecvWr};
use crate::{Error, Result};

/// A shared receive queue. Cheap to clone; QPs using it keep it alive.
#[derive(Clone)]
pub struct Srq {
    pub(crate) inner: Arc<SrqInner>,
}

pub(crate) struct SrqInner {
    raw: NonNull<sys::ibv_srq>,
    max_wr: u32,
    max_sge: u32,
    // Dropped after the SRQ is destroyed.
    rq: Mutex<InFlight>,
    /// Receives reserved by [`RecvRing`](crate::RecvRing)s: owned receives posted through the
    /// SRQ itself get `max_wr` minus these.
    pub(crate) ring_reserved: AtomicU32,
    /// The slots of every ring made on this SRQ (with the buffers posted from them), dropped
    /// after the SRQ is destroyed, whenever the rings themselves are dropped.
    pub(crate) ring_slots: Mutex<Vec<Arc<dyn Any + Send + Sync>>>,
    _pd: Arc<PdInner>,
}

impl SrqInner {
    /// The device context the SRQ was created on.
    pub(crate) fn context_raw(&self) -> *mut sys::ibv_context {
        self._pd.ctx.raw.as_ptr()
    }
}

// SAFETY: an SRQ handle has no thread affinity; posting is thread-safe in libibverbs and the
// in-flight table is behind a mutex.
unsafe impl Send for SrqInner {}
// SAFETY: as above.
unsafe impl Sync for SrqInner {}

impl Drop for SrqInner {
    fn drop(&mut self) {
        // SAFETY: created by ibv_create_srq; QPs using it hold an Arc of this inner, so they
        // are destroyed already.
        let r = unsafe { sys::ibv_destroy_srq(self.raw.as_ptr()) };
        if r != 0 {
            // The SRQ lives on (a QP that failed to be destroyed still uses it): the device
            // may still write the posted buffers, so leak them.
            std::mem::forget(std::mem::take(self.rq.get_mut()));
            std::mem::forget(std::mem::take(self.ring_slots.get_mut()));
        }
    }
}

impl std::fmt::Debug for Srq {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Srq")
            .field("max_wr", &self.inner.max_wr)
            .field("max_sge", &self.inner.max_sge)
            .finish()
    }
}

impl Pd {
    /// Creates a shared receive queue of `max_wr` receives with `max_sge` entries each.
    #[doc(alias = "ibv_create_srq")]
    pub fn create_srq(&self, max_wr: u32, max_sge: u32) -> Result<Srq> {
        // SAFETY: all-zero is a valid ibv_srq_init_attr.
        let mut init: sys::ibv_srq_init_attr = unsafe { std::mem::zeroed() };
        init.attr.max_wr = max_wr;
        init.attr.max_sge = max_sge;
        // SAFETY: live PD; complete attribute struct.
        let raw = unsafe { sys::ibv_create_srq(self.as_raw(), &mut init) };
        let raw = sys::errno::check_ptr(raw).map_err(Error::CreateSrq)?;
        Ok(Srq {
            inner: Arc::new(SrqInner {
                raw,
                max_wr: init.attr.max_wr.max(max_wr),
                max_sge: init.attr.max_sge.max(max_sge),
                rq: Mutex::new(InFlight::with_depth(init.attr.max_wr.max(max_wr))),
                ring_reserved: AtomicU32::new(0),
                ring_slots: Mutex::new(Vec::new()),
                _pd: self.inner.clone(),
            }),
        })
    }
}

impl Srq {
    /// The raw `ibv_srq`, valid while this handle lives.
    pub fn as_raw(&self) -> *mut sys::ibv_srq {
        self.inner.raw.as_ptr()
    }

    /// Depth.
    pub fn max_wr(&self) -> u32 {
        self.inner.max_wr
    }

    /// The receives owned receives posted through the SRQ itself may fill: its depth less
    /// what its [`RecvRing`](crate::RecvRing)s reserve.
    fn owned_depth(&self) -> u32 {
        self.inner
            .max_wr
            .saturating_sub(self.inner.ring_reserved.load(Ordering::Relaxed))
    }

    /// Arms the limit event: when fewer than `limit` receives remain, the device raises
    /// `SrqLimitReached` (once; arm again after).
    #[doc(alias = "ibv_modify_srq")]
    pub fn arm_limit(&self, limit: u32) -> Result<()> {
        let mut attr = sys::ibv_srq_attr {
            max_wr: 0,
            max_sge: 0,
            srq_limit: limit,
        };
        // SAFETY: live SRQ; the mask names the one field set.
        let r = unsafe {
            sys::ibv_modify_srq(
                self.as_raw(),
                &mut attr,
                sys::ibv_srq_attr_mask::IBV_SRQ_LIMIT.0 as i32,
            )
        };
        sys::errno::check_ret(r).map_err(Error::ModifySrq)
    }

    /// Posts one owned receive; returns its `wr_id`.
    #[doc(alias = "ibv_post_srq_recv")]
    // The error hands the request (with its buffers) back; it is rare, so its size is fine.
    #[allow(clippy::result_large_err)]
    pub fn post_recv(&self, req: RecvRequest) -> Result<u64, PostError<RecvRequest>> {
        post::post_recv_one(
            &self.inner.rq,
            None,
            req,
            0,
            "shared receive",
            self.owned_depth(),
            self.inner.max_sge,
            // SAFETY: live SRQ; well-formed chain built by post_recv_one.
            |wr, bad| unsafe { sys::ibv_post_srq_recv(self.as_raw(), wr, bad) },
        )
    }

    /// Posts owned receives as one chain.
    #[doc(alias = "ibv_post_srq_recv")]
    pub fn post_recv_batch(
        &self,
        reqs: Vec<RecvRequest>,
    ) -> Result<Vec<u64>, PostError<Vec<RecvRequest>>> {
        post::post_recv_owned(
            &self.inner.rq,
            None,
            reqs,
            0,
            "shared receive",
            self.owned_depth(),
            self.inner.max_sge,
            // SAFETY: live SRQ; well-formed chain built by post_recv_owned.
            |wr, bad| unsafe { sys::ibv_post_srq_recv(self.as_raw(), wr, bad) },
        )
    }

    /// Posts borrowed receives.
    ///
    /// # Safety
    /// As for `Qp::post_recv_unchecked`: the memory stays allocated, registered and untouched
    /// by the program until the completion is polled or the SRQ destroyed.
    #[doc(alias = "ibv_post_srq_recv")]
    pub unsafe fn post_recv_unchecked(&self, wrs: &[RecvWr<'_>]) -> Result<()> {
        post::post_recv_raw(
            wrs,
            0,
            "shared receive",
            self.inner.max_wr,
            self.inner.max_sge,
            |wr, bad| {
                // SAFETY: live SRQ; well-formed chain; memory per the caller's contract.
                unsafe { sys::ibv_post_srq_recv(self.as_raw(), wr, bad) }
            },
        )
    }

    /// Hands back the buffer of the owned receive this completion (from any QP using the SRQ)
    /// finishes.
    pub fn reclaim<W: PolledWc + ?Sized>(&self, wc: &W) -> Vec<Reclaimed> {
        let mut out = Vec::new();
        self.reclaim_into(wc, &mut out);
        out
    }

    /// [`reclaim`](Self::reclaim) without allocating: appends the buffer's request to `out`
    /// and returns how many were appended (0 or 1).
    pub fn reclaim_into<W: PolledWc + ?Sized>(&self, wc: &W, out: &mut Vec<Reclaimed>) -> usize {
        let id = wc.polled_wr_id();
        match post::owned_kind(id) {
            Some(true) => self.inner.rq.lock().complete_into(id, false, out),
            _ => 0,
        }
    }

    /// The buffer of type `B` of the owned receive this completion finishes, for receives
    /// posted with one buffer: [`reclaim_into`](Self::reclaim_into) and
    /// [`Reclaimed::take`] in one step, without the list. `None` when the completion finishes
    /// no owned receive of this SRQ; [`Error::WrongBufferType`]
    /// when the receive held no `B` (its buffers are dropped: the device is done with them).
    pub fn reclaim_one<B: 'static, W: PolledWc + ?Sized>(&self, wc: &W) -> Option<Result<B>> {
        let id = wc.polled_wr_id();
        if post::owned_kind(id) != Some(true) {
            return None;
        }
        let found = self.inner.rq.lock().complete_one::<B>(id)?;
        Some(found.map_err(|held| Error::WrongBufferType {
            wr_id: id,
            expected: std::any::type_name::<B>(),
            held,
        }))
    }

    /// Number of owned receives in flight.
    pub fn in_flight(&self) -> usize {
        self.inner.rq.lock().len()
    }
}
