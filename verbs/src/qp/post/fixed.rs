//! [`FixedBuffers`]: registered memory kept for borrowed work requests, so that a loop can
//! post them safely, without handing a buffer to each request and reclaiming it from each
//! completion (what perftest-style loops and ping-pongs do).
//!
//! Sound because of who may touch the memory: a *source* is shared (`Arc`), so while the
//! NIC reads it the program can only read it too; a *sink* is moved in, so the program can no
//! longer reach the memory the NIC writes. Every scatter/gather entry is checked to lie in one
//! of them, sinks only for requests that write local memory (receives, READ, atomics). A
//! request still posted when the buffers are dropped is harmless: a region is deregistered
//! before its memory is freed (or leaked if the device refuses), and the device checks every
//! access against the registration.
//!
//! A UD request needs its address handle until its completion, longer than a borrow of the
//! post lasts: the buffers keep the address handles UD requests may name ([`add_ah`]), and a
//! request naming another is refused. They are destroyed when the buffers are dropped, after
//! the queue pairs that used them (owners drop their QPs first, as for the regions).
//!
//! [`add_ah`]: FixedBuffers::add_ah
use std::sync::Arc;

use super::{invalid, RecvWr, SendWr};
use crate::ah::Ah;
use crate::mr::{LocalSlice, MemoryRegion};
use crate::qp::Qp;
use crate::Result;

/// Regions kept for borrowed requests: sources the NIC reads, sinks it writes; and the
/// address handles their UD requests name.
#[derive(Debug, Default)]
pub struct FixedBuffers {
    sources: Vec<Arc<MemoryRegion>>,
    sinks: Vec<MemoryRegion>,
    ahs: Vec<Ah>,
}

impl FixedBuffers {
    /// No regions yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Keeps `region` as memory the NIC reads (SEND and RDMA WRITE sources). The program keeps
    /// its shared handle: it may read the region, never write it.
    pub fn add_source(&mut self, region: Arc<MemoryRegion>) {
        self.sources.push(region);
    }

    /// Keeps `region` as memory the NIC writes (receives, READ and atomic results) and returns
    /// `range` of it as a scatter/gather entry. The program gives the region up: nothing it
    /// holds can read or write that memory any more.
    pub fn add_sink(
        &mut self,
        region: MemoryRegion,
        range: impl std::ops::RangeBounds<usize>,
    ) -> Result<LocalSlice> {
        let slice = region.local(range)?;
        self.sinks.push(region);
        Ok(slice)
    }

    /// Keeps (a clone of) `ah` for UD requests to name: a UD request posted through these
    /// buffers may use only an address handle they keep, since it needs the handle until its
    /// completion.
    pub fn add_ah(&mut self, ah: &Ah) {
        if !self.keeps_ah(ah) {
            self.ahs.push(ah.clone());
        }
    }

    /// Posts `wrs` on `qp` as one chain (see [`Qp::post_send_unchecked`]). Each entry must
    /// lie in a sink, or, for requests that only read local memory (SEND, RDMA WRITE), in a
    /// source or a sink, and a UD request's address handle must be one the buffers keep
    /// ([`add_ah`](Self::add_ah)); otherwise nothing is posted and the error names the
    /// request.
    pub fn post_send(&self, qp: &Qp, wrs: &[SendWr<'_>]) -> Result<()> {
        for (i, w) in wrs.iter().enumerate() {
            self.check_request(qp, i, w)?;
        }
        // SAFETY: every entry lies in a region these buffers keep registered. The NIC writes
        // only sinks, which the program can no longer reach; it reads sources, which the
        // program can only read (shared handles). Regions dropped while requests are posted
        // are deregistered before their memory is freed, so the device cannot reach it then.
        // A UD request's address handle is one the buffers keep alive.
        unsafe { qp.post_send_unchecked(wrs) }
    }

    /// Posts receives `wrs` on `qp` as one chain; every entry must lie in a sink.
    pub fn post_recv(&self, qp: &Qp, wrs: &[RecvWr<'_>]) -> Result<()> {
        for (i, w) in wrs.iter().enumerate() {
            self.check_recv(qp, i, w)?;
        }
        // SAFETY: as for sends: receives write only sinks, which the program cannot reach.
        unsafe { qp.post_recv_unchecked(wrs) }
    }

    /// Checks that every entry of receive `i`, `w`, lies in a sink.
    pub(super) fn check_recv(&self, qp: &Qp, i: usize, w: &RecvWr<'_>) -> Result<()> {
        match w.sges.iter().find(|s| !self.holds(s, true)) {
            Some(s) => Err(self.outside(qp, i, s, true)),
            None => Ok(()),
        }
    }

    /// Checks that every entry of request `i`, `w`, lies in a sink, or, for requests that
    /// only read local memory (SEND, RDMA WRITE), in a source or a sink; and that its address
    /// handle, if it has one, is kept here.
    pub(super) fn check_request(&self, qp: &Qp, i: usize, w: &SendWr<'_>) -> Result<()> {
        if let Some(ud) = &w.ud {
            if !self.keeps_ah(ud.ah) {
                return Err(invalid(
                    qp.qp_num(),
                    format!(
                        "request {i}: its address handle is not one of these fixed buffers', \
                         and a UD request needs it until its completion: add it first \
                         (FixedBuffers::add_ah)"
                    ),
                ));
            }
        }
        let sink_only = w.op.writes_local();
        match w.sges.iter().find(|s| !self.holds(s, sink_only)) {
            Some(s) => Err(self.outside(qp, i, s, sink_only)),
            None => Ok(()),
        }
    }

    fn keeps_ah(&self, ah: &Ah) -> bool {
        self.ahs.iter().any(|kept| kept.as_raw() == ah.as_raw())
    }

    /// Whether `s` lies in a sink (or, unless `sink_only`, in a source).
    fn holds(&self, s: &LocalSlice, sink_only: bool) -> bool {
        let within = |r: &MemoryRegion| {
            r.lkey() == s.lkey
                && s.addr >= r.addr()
                && s.addr
                    .checked_add(u64::from(s.len))
                    .is_some_and(|end| end <= r.addr() + r.len() as u64)
        };
        self.sinks.iter().any(within) || (!sink_only && self.sources.iter().any(|r| within(r)))
    }

    fn outside(&self, qp: &Qp, i: usize, s: &LocalSlice, sink_only: bool) -> crate::Error {
        invalid(
            qp.qp_num(),
            format!(
                "request {i}: {} bytes at {:#x} (lkey {:#x}) lie in no {} of these fixed \
                 buffers: add the region first",
                s.len,
                s.addr,
                s.lkey,
                if sink_only { "sink" } else { "source or sink" }
            ),
        )
    }
}
