//! Sealed traits that let an extended CQ stand where a CQ is expected: as a QP's CQ
//! ([`AsCq`]) and as the completion that hands buffers back ([`PolledWc`]).
use super::{Cq, CqEx, ExWc, WorkCompletion};

/// A completion queue a QP can complete on: [`Cq`] or [`CqEx`]. Sealed.
pub trait AsCq: private::CqSealed {}

/// A completion as polled from a CQ, which [`Qp::reclaim`](crate::Qp::reclaim) trusts:
/// [`WorkCompletion`] (from [`Cq::poll`]) or [`ExWc`] (from an [`ExPoll`](super::ExPoll)
/// batch). Sealed: only a poll makes one.
pub trait PolledWc: private::WcSealed {}

pub(crate) mod private {
    use super::Cq;

    pub trait CqSealed {
        /// The plain CQ view the QP holds (the same kernel object).
        fn as_cq(&self) -> &Cq;
    }

    pub trait WcSealed {
        fn polled_wr_id(&self) -> u64;
        fn polled_qp_num(&self) -> u32;
    }
}

impl private::CqSealed for Cq {
    fn as_cq(&self) -> &Cq {
        self
    }
}
impl AsCq for Cq {}

impl private::CqSealed for CqEx {
    fn as_cq(&self) -> &Cq {
        self.cq()
    }
}
impl AsCq for CqEx {}

impl private::WcSealed for WorkCompletion {
    fn polled_wr_id(&self) -> u64 {
        self.wr_id()
    }
    fn polled_qp_num(&self) -> u32 {
        self.qp_num()
    }
}
impl PolledWc for WorkCompletion {}

impl private::WcSealed for ExWc<'_> {
    fn polled_wr_id(&self) -> u64 {
        self.wr_id()
    }
    fn polled_qp_num(&self) -> u32 {
        self.qp_num()
    }
}
impl PolledWc for ExWc<'_> {}
