//! Posting on a QP: send and receive requests, owned and borrowed, and reclaiming buffers.

use std::sync::atomic::Ordering;

use verbs_sys as sys;

use super::{
    check_borrowed_wr_id, invalid, post_recv_one, post_recv_owned, post_recv_raw, zeroed_send_wr,
    Chain, Outstanding, PostError, Reclaimed, RecvRequest, RecvWr, SendFlags, SendRequest, SendWr,
    WrOp,
};
use super::{in_reset_error, owned_kind, post_chain};
use crate::ah::Ah;
use crate::cq::PolledWc;
use crate::mr::LocalSlice;
use crate::qp::{Qp, QpState, QpType};
use crate::{Error, Result};

/// A bind request not built by `SendRequest::bind_mw` names no window or region.
fn unbuilt_bind(qp_num: u32) -> Error {
    invalid(
        qp_num,
        "a window bind is posted as built by SendRequest::bind_mw (it names the window and \
         the region)"
            .into(),
    )
}

impl SendRequest {
    /// Bookkeeping once the request is (or may be) queued: a bind moves its window to the
    /// new key and region.
    fn posted(&mut self) {
        if let (WrOp::BindMw(granted), Some(bind)) = (&self.op, &self.bind) {
            bind.posted(granted, &mut self.owners);
        }
    }
}

impl Qp {
    /// Why the QP takes no send in its current state, if it does not: sends need RTS (or
    /// SQD, or Error, where they complete flushed; not on iWARP, where siw never completes a
    /// request posted in Error).
    pub(super) fn send_state_refusal(&self) -> Option<String> {
        let state = self.state();
        match state {
            QpState::Rts | QpState::Sqd => None,
            QpState::Err if self.inner.capabilities.transport() != crate::Transport::Iwarp => None,
            QpState::Err => {
                Some("the QP is in Err: on iWARP a request posted now would never complete".into())
            }
            _ => Some(format!("the QP is in {state:?}, sends need RTS")),
        }
    }

    /// Checks one send request against the QP's type and limits.
    pub(super) fn check_send(
        &self,
        op: &WrOp,
        sges: &[LocalSlice],
        flags: SendFlags,
        has_ud: bool,
    ) -> Result<()> {
        let qpn = self.qp_num();
        let t = self.qp_type();
        let bad = |r: &str| Err(invalid(qpn, format!("{op:?}: {r}")));
        // What the device cannot do at all comes first: no state would let it through.
        if let Some(c) = op.needs() {
            self.require(c)?;
        }
        if let Some(why) = self.send_state_refusal() {
            return bad(&why);
        }
        match (t, op) {
            (QpType::Ud, WrOp::Send | WrOp::SendWithImm(_)) => {}
            (QpType::Ud, _) => return bad("a UD QP only sends"),
            (QpType::Uc, WrOp::RdmaRead(_)) => return bad("a UC QP cannot RDMA READ"),
            (QpType::Uc, o) if o.is_atomic() => return bad("a UC QP has no atomics"),
            (QpType::Uc, WrOp::SendWithInv(_)) => return bad("SEND_WITH_INV needs an RC QP"),
            _ => {}
        }
        if matches!(op, WrOp::BindMw(_) | WrOp::LocalInv(_))
            && (!sges.is_empty() || flags.contains(SendFlags::INLINE))
        {
            return bad("a window bind or invalidation carries no data");
        }
        if (t == QpType::Ud) != has_ud {
            return bad(if has_ud {
                "only UD requests take a destination"
            } else {
                "a UD send needs a destination (address handle, QPN, Q_Key)"
            });
        }
        let total: u64 = sges.iter().map(|s| u64::from(s.len)).sum();
        if flags.contains(SendFlags::INLINE) {
            if op.writes_local() {
                return bad("inline data is only for SEND and RDMA WRITE");
            }
            if total > u64::from(self.cap().max_inline_data) {
                return bad(&format!(
                    "{total} inline bytes exceed max_inline_data {}",
                    self.cap().max_inline_data
                ));
            }
        } else if sges.len() > self.cap().max_send_sge as usize {
            return bad(&format!(
                "{} SGEs exceed max_send_sge {}",
                sges.len(),
                self.cap().max_send_sge
            ));
        }
        if self.completes_alone(op) {
            if !flags.contains(SendFlags::SIGNALED) && !self.inner.sq_sig_all {
                return bad("on iWARP a READ or atomic completes when its response arrives, after later requests, and an unsignaled one never says when its memory is written: post it SIGNALED");
            }
            // siw takes the length it expects back from the request's first entry, present
            // or not: a stale one fails the queue pair.
            if sges.is_empty() {
                return bad("on iWARP a READ needs a local entry, even a zero-length one");
            }
        }
        let max_sge_rd = self.inner.capabilities.max_sge_rd;
        if matches!(op, WrOp::RdmaRead(_)) && max_sge_rd > 0 && sges.len() > max_sge_rd as usize {
            return bad(&format!(
                "{} SGEs exceed the device's max_sge_rd {max_sge_rd} (what one READ may write)",
                sges.len()
            ));
        }
        if let Some(r) = op.remote() {
            if op.is_atomic() {
                if r.addr % 8 != 0 {
                    return bad("atomic remote address must be 8-byte aligned");
                }
                if total != 8 || sges.len() != 1 {
                    return bad("an atomic needs exactly one 8-byte local SGE");
                }
            } else if total > u64::from(r.len) {
                return bad(&format!(
                    "{total} bytes do not fit the {}-byte remote slice",
                    r.len
                ));
            }
        }
        Ok(())
    }

    /// Whether only `op`'s own completion says it is done: on iWARP a READ (or atomic)
    /// completes when its response arrives, after the SENDs and WRITEs posted behind it
    /// (siw completes them as soon as they are sent), and the device writes its memory until
    /// then.
    pub(super) fn completes_alone(&self, op: &WrOp) -> bool {
        op.writes_local() && self.inner.capabilities.transport() == crate::Transport::Iwarp
    }

    /// The send queue's in-flight table, locked, once the QP is not being reset and the
    /// queue has room for `n` more requests: what every post of tracked requests starts with.
    pub(super) fn lock_send_room(
        &self,
        n: usize,
    ) -> Result<parking_lot::MutexGuard<'_, super::InFlight>> {
        let sq = self.inner.sq.lock();
        if self.in_reset().load(Ordering::Acquire) {
            return Err(self.refused_in_reset());
        }
        let depth = self.cap().max_send_wr;
        if sq.len() + n > depth as usize {
            return Err(crate::trace::refusing(self.queue_full("send", depth)));
        }
        Ok(sq)
    }

    /// Owned requests are refused while the QP is in Reset: some providers accept them and
    /// keep them past the next transition, after `take_in_flight` handed their buffers back.
    pub(super) fn refused_in_reset(&self) -> Error {
        in_reset_error(self.qp_num())
    }

    pub(super) fn queue_full(&self, queue: &'static str, depth: u32) -> Error {
        Error::QueueFull {
            qp_num: self.qp_num(),
            queue,
            depth,
        }
    }

    /// Checks an owned request against the QP.
    pub(super) fn check_request(&self, r: &SendRequest) -> Result<()> {
        let inline_sge;
        let sges: &[LocalSlice] = match &r.inline {
            Some(d) => {
                inline_sge = [LocalSlice {
                    addr: d.as_ptr() as u64,
                    len: d.len() as u32,
                    lkey: 0,
                }];
                &inline_sge
            }
            None => r.sges.as_slice(),
        };
        if let Some((ah, ..)) = &r.ud {
            self.check_ah(ah)?;
        }
        match (&r.op, &r.bind) {
            (WrOp::BindMw(_), Some(bind)) => bind.check_qp(self)?,
            (WrOp::BindMw(_), None) => return Err(unbuilt_bind(self.qp_num())),
            _ => {}
        }
        self.check_send(&r.op, sges, r.flags, r.ud.is_some())
    }

    /// An address handle of another device context would be read by this QP's provider as
    /// one of its own.
    pub(super) fn check_ah(&self, ah: &Ah) -> Result<()> {
        if ah.context_raw() == self.inner.pd_context_raw() {
            return Ok(());
        }
        Err(invalid(
            self.qp_num(),
            "the address handle belongs to another device context".into(),
        ))
    }

    /// The C work request of an owned request; `inline_sge` holds the SGE of inline data and
    /// must stay in place until the post.
    fn build_wr(r: &mut SendRequest, id: u64, inline_sge: &mut sys::ibv_sge) -> sys::ibv_send_wr {
        let mut wr = zeroed_send_wr();
        wr.wr_id = id;
        if let Some(d) = &r.inline {
            *inline_sge = sys::ibv_sge {
                addr: d.as_ptr() as u64,
                length: d.len() as u32,
                lkey: 0,
            };
            wr.sg_list = inline_sge;
            wr.num_sge = 1;
        } else {
            wr.sg_list = r.sges.as_mut_slice().as_mut_ptr().cast();
            wr.num_sge = r.sges.len() as i32;
        }
        wr.send_flags = r.flags.bits();
        r.op.fill(&mut wr);
        if let (WrOp::BindMw(granted), Some(bind)) = (&r.op, &r.bind) {
            bind.fill(granted, &mut wr);
        }
        if let Some((ah, qpn, qkey)) = &r.ud {
            wr.wr.ud = sys::ud_t {
                ah: ah.as_raw(),
                remote_qpn: *qpn,
                remote_qkey: *qkey,
            };
        }
        wr
    }

    /// Posts one owned send request; returns its `wr_id`.
    #[doc(alias = "ibv_post_send")]
    // The error hands the request (with its buffers) back; it is rare, so its size is fine.
    #[allow(clippy::result_large_err)]
    pub fn post_send(&self, mut req: SendRequest) -> Result<u64, PostError<SendRequest>> {
        let fail = |error, req| PostError {
            error,
            unposted: req,
            posted: Vec::new(),
        };
        if let Err(e) = self.check_request(&req) {
            return Err(fail(e, req));
        }
        let mut sq = match self.lock_send_room(1) {
            Ok(sq) => sq,
            Err(e) => return Err(fail(e, req)),
        };
        let id = sq.next_id(false);
        let mut inline_sge = sys::ibv_sge {
            addr: 0,
            length: 0,
            lkey: 0,
        };
        let mut wr = [Self::build_wr(&mut req, id, &mut inline_sge)];
        match self.post_chain(&mut wr) {
            Ok(()) => {
                req.posted();
                let own = self.completes_alone(&req.op);
                sq.insert(id, req.tag, req.owners, req.ud.map(|u| u.0), own);
                Ok(id)
            }
            Err((0, error)) => Err(fail(error, req)),
            // Failed, but possibly queued (see post_chain): the request keeps its buffers.
            Err((_, error)) => {
                req.posted();
                let op = req.op;
                let own = self.completes_alone(&req.op);
                sq.insert(id, req.tag, req.owners, req.ud.map(|u| u.0), own);
                Err(PostError {
                    error,
                    unposted: SendRequest::new(op),
                    posted: vec![id],
                })
            }
        }
    }

    /// Posts owned send requests as one chain (one doorbell); returns their ids. A request
    /// that fails validation or a full queue posts nothing.
    #[doc(alias = "ibv_post_send")]
    pub fn post_send_batch(
        &self,
        mut reqs: Vec<SendRequest>,
    ) -> Result<Vec<u64>, PostError<Vec<SendRequest>>> {
        let fail = |error, reqs| PostError {
            error,
            unposted: reqs,
            posted: Vec::new(),
        };
        if let Some(e) = reqs.iter().find_map(|r| self.check_request(r).err()) {
            return Err(fail(e, reqs));
        }
        let mut sq = self.inner.sq.lock();
        if self.in_reset().load(Ordering::Acquire) {
            return Err(fail(self.refused_in_reset(), reqs));
        }
        let depth = self.cap().max_send_wr;
        if sq.len() + reqs.len() > depth as usize {
            let e = crate::trace::refusing(self.queue_full("send", depth));
            return Err(fail(e, reqs));
        }
        let ids: Vec<u64> = reqs.iter().map(|_| sq.next_id(false)).collect();
        let mut inline_sges = vec![
            sys::ibv_sge {
                addr: 0,
                length: 0,
                lkey: 0,
            };
            reqs.len()
        ];
        let mut wrs: Vec<sys::ibv_send_wr> = reqs
            .iter_mut()
            .zip(&ids)
            .zip(inline_sges.iter_mut())
            .map(|((r, id), sge)| Self::build_wr(r, *id, sge))
            .collect();
        let posted = self.post_chain(&mut wrs);
        let n_ok = match posted {
            Ok(()) => reqs.len(),
            Err((k, _)) => k,
        };
        let rest = reqs.split_off(n_ok);
        for (mut r, id) in reqs.into_iter().zip(&ids) {
            r.posted();
            let own = self.completes_alone(&r.op);
            sq.insert(*id, r.tag, r.owners, r.ud.map(|u| u.0), own);
        }
        match posted {
            Ok(()) => Ok(ids),
            Err((_, error)) => Err(PostError {
                error,
                unposted: rest,
                posted: ids[..n_ok].to_vec(),
            }),
        }
    }

    /// Links `wrs` and posts them; on failure returns the index of the first unposted one.
    pub(super) fn post_chain(&self, wrs: &mut [sys::ibv_send_wr]) -> Result<(), (usize, Error)> {
        post_chain(
            wrs,
            || self.queue_full("send", self.cap().max_send_wr),
            |source| Error::PostSend {
                qp_num: self.qp_num(),
                source,
            },
            // SAFETY: live QP; a well-formed chain whose SGE lists, inline data and AHs are
            // alive for the call (owned by the caller's requests); the memory they describe is
            // either owned by the requests (kept in the in-flight table) or the caller's
            // `unsafe` promise.
            |wr, bad| unsafe { sys::ibv_post_send(self.as_raw(), wr, bad) },
        )
    }

    /// Checks a borrowed request against the QP and writes it into `wr` (its SGE list and
    /// address handle by pointer: they must outlive the post).
    pub(super) fn fill_borrowed(&self, w: &SendWr<'_>, wr: &mut sys::ibv_send_wr) -> Result<()> {
        check_borrowed_wr_id(self.qp_num(), w.wr_id)?;
        if let Some(ud) = &w.ud {
            self.check_ah(ud.ah)?;
        }
        if let WrOp::BindMw(_) = w.op {
            return Err(unbuilt_bind(self.qp_num()));
        }
        self.check_send(&w.op, w.sges, w.flags, w.ud.is_some())?;
        wr.wr_id = w.wr_id;
        // ibv_post_send does not write the SGE list; the cast drops const only.
        wr.sg_list = w.sges.as_ptr() as *mut sys::ibv_sge;
        wr.num_sge = w.sges.len() as i32;
        wr.send_flags = w.flags.bits();
        w.op.fill(wr);
        if let Some(ud) = w.ud {
            wr.wr.ud = sys::ud_t {
                ah: ud.ah.as_raw(),
                remote_qpn: ud.remote_qpn,
                remote_qkey: ud.remote_qkey,
            };
        }
        Ok(())
    }

    /// Posts borrowed send requests as one chain (one doorbell).
    ///
    /// # Safety
    /// Until each request's completion is polled (or the QP is reset or destroyed), the memory
    /// its SGEs describe must stay allocated and registered, must not be written by the
    /// program if the NIC reads it (SEND, WRITE), and must not be read or written by the
    /// program if the NIC writes it (READ, atomics). Inline requests are exempt: their data is
    /// copied during the call. The address handle of a UD request must stay alive until its
    /// completion too. On an error the device may still have taken some or all of the
    /// requests, so the same holds for every request of the call.
    #[doc(alias = "ibv_post_send")]
    pub unsafe fn post_send_unchecked(&self, wrs: &[SendWr<'_>]) -> Result<()> {
        let mut chain = Chain::new(wrs.len(), zeroed_send_wr);
        let raw = chain.as_mut_slice();
        for (w, wr) in wrs.iter().zip(raw.iter_mut()) {
            self.fill_borrowed(w, wr)?;
        }
        self.post_chain(raw).map_err(|(_, e)| e)
    }

    /// A QP on an SRQ takes no receives of its own: hands `unposted` back with that error.
    #[allow(clippy::result_large_err)]
    fn refuse_if_srq<T>(&self, unposted: T) -> Result<T, PostError<T>> {
        if !self.inner.has_srq {
            return Ok(unposted);
        }
        Err(PostError {
            error: invalid(
                self.qp_num(),
                "this QP receives from its SRQ: post there".into(),
            ),
            unposted,
            posted: Vec::new(),
        })
    }

    /// Posts one owned receive request; returns its `wr_id`.
    #[doc(alias = "ibv_post_recv")]
    // The error hands the request (with its buffers) back; it is rare, so its size is fine.
    #[allow(clippy::result_large_err)]
    pub fn post_recv(&self, req: RecvRequest) -> Result<u64, PostError<RecvRequest>> {
        let qpn = self.qp_num();
        let req = self.refuse_if_srq(req)?;
        let cap = self.cap();
        post_recv_one(
            &self.inner.rq,
            Some(self.in_reset()),
            req,
            qpn,
            "receive",
            cap.max_recv_wr,
            cap.max_recv_sge,
            // SAFETY: live QP; the chain is well formed (built by post_recv_one).
            |wr, bad| unsafe { sys::ibv_post_recv(self.as_raw(), wr, bad) },
        )
    }

    /// Posts owned receive requests as one chain.
    #[doc(alias = "ibv_post_recv")]
    pub fn post_recv_batch(
        &self,
        reqs: Vec<RecvRequest>,
    ) -> Result<Vec<u64>, PostError<Vec<RecvRequest>>> {
        let qpn = self.qp_num();
        let reqs = self.refuse_if_srq(reqs)?;
        let cap = self.cap();
        post_recv_owned(
            &self.inner.rq,
            Some(self.in_reset()),
            reqs,
            qpn,
            "receive",
            cap.max_recv_wr,
            cap.max_recv_sge,
            // SAFETY: live QP; the chain is well formed (built by post_recv_owned).
            |wr, bad| unsafe { sys::ibv_post_recv(self.as_raw(), wr, bad) },
        )
    }

    /// Posts borrowed receive requests as one chain.
    ///
    /// # Safety
    /// Until each request's completion is polled (or the QP is reset or destroyed), the memory
    /// its SGEs describe must stay allocated and registered and must not be read or written
    /// by the program (the NIC writes it). On an error the device may still have taken some
    /// or all of the requests, so the same holds for every request of the call.
    #[doc(alias = "ibv_post_recv")]
    pub unsafe fn post_recv_unchecked(&self, wrs: &[RecvWr<'_>]) -> Result<()> {
        let cap = self.cap();
        post_recv_raw(
            wrs,
            self.qp_num(),
            "receive",
            cap.max_recv_wr,
            cap.max_recv_sge,
            |wr, bad| {
                // SAFETY: live QP; well-formed chain; memory per the caller's contract.
                unsafe { sys::ibv_post_recv(self.as_raw(), wr, bad) }
            },
        )
    }

    /// Hands back the buffers of the owned requests this completion finishes: for a send
    /// completion, the request and every earlier (unsignaled) send of this QP, except on
    /// iWARP an earlier READ or atomic, which only its own completion finishes (the device
    /// completes it when its response arrives, after later requests); for a receive,
    /// that receive. Completions of other QPs, of SRQ receives, or of unsafe posts give
    /// nothing. Call it for every completion of this QP you poll, from a plain or an
    /// extended CQ.
    pub fn reclaim<W: PolledWc + ?Sized>(&self, wc: &W) -> Vec<Reclaimed> {
        let mut out = Vec::new();
        self.reclaim_into(wc, &mut out);
        out
    }

    /// [`reclaim`](Self::reclaim) without allocating: appends what the completion hands back
    /// to `out` (in post order) and returns how many. Keep one list per polling loop and
    /// drain it; once it has room, reclaiming costs no allocation.
    pub fn reclaim_into<W: PolledWc + ?Sized>(&self, wc: &W, out: &mut Vec<Reclaimed>) -> usize {
        if wc.polled_qp_num() != self.qp_num() {
            return 0;
        }
        let id = wc.polled_wr_id();
        match owned_kind(id) {
            Some(false) => self.inner.sq.lock().complete_into(id, true, out),
            Some(true) => self.inner.rq.lock().complete_into(id, false, out),
            None => 0,
        }
    }

    /// Number of owned requests in flight on the send and receive queues.
    pub fn in_flight(&self) -> (usize, usize) {
        (self.inner.sq.lock().len(), self.inner.rq.lock().len())
    }

    /// The owned requests still in flight, sends then receives, each oldest first: what a
    /// drain is waiting for. A request whose completion was polled but not passed to
    /// [`reclaim`](Self::reclaim) stays here.
    pub fn outstanding(&self) -> Vec<Outstanding> {
        let mut out: Vec<Outstanding> = self.inner.sq.lock().requests(false).collect();
        out.extend(self.inner.rq.lock().requests(true));
        out
    }

    /// After [`reset`](Self::reset), takes back the buffers of every owned request (the reset
    /// discarded them, so the NIC no longer uses them). Gives nothing in any other state.
    /// Owned posting is refused while the QP is in Reset, so no request handed back here can
    /// have been posted after the reset (some providers accept such a post and carry it over
    /// into the next connection).
    pub fn take_in_flight(&self) -> Vec<Reclaimed> {
        let state = self.inner.state.lock();
        if *state != QpState::Reset {
            return Vec::new();
        }
        let mut all = self.inner.sq.lock().take_all();
        all.extend(self.inner.rq.lock().take_all());
        all
    }
}
