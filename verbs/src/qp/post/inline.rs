//! Inline sends gathered from a list of [`IoSlice`]s: the device copies the bytes while the
//! post call runs, so borrowed memory is safe here and needs no registration.
use std::io::IoSlice;

use verbs_sys as sys;

use super::wr_ex::Build;
use super::{invalid, zeroed_send_wr, QpEx, SendFlags, UdDest, WrOp};
use crate::ah::Ah;
use crate::mr::LocalSlice;
use crate::qp::{Qp, QpType};
use crate::{Error, Result};

/// Inline slices gathered without allocating: a send rarely has more.
const FEW: usize = 4;

/// The SGEs of inline data, in place when there are at most [`FEW`].
enum InlineSges {
    Few([LocalSlice; FEW], usize),
    Many(Vec<LocalSlice>),
}

impl std::ops::Deref for InlineSges {
    type Target = [LocalSlice];
    fn deref(&self) -> &[LocalSlice] {
        match self {
            InlineSges::Few(s, n) => &s[..*n],
            InlineSges::Many(v) => v,
        }
    }
}

/// The SGEs of inline data: the slices' addresses with no lkey (the device copies them).
fn inline_sges(qp: &Qp, data: &[IoSlice<'_>]) -> Result<InlineSges> {
    if data.len() <= FEW {
        let mut few = [NO_SLICE; FEW];
        let n = gather_few(qp, data, &mut few)?;
        return Ok(InlineSges::Few(few, n));
    }
    let len: usize = data.iter().map(|d| d.len()).sum();
    let parts = data.iter().filter(|d| !d.is_empty()).count();
    check_inline(qp, len, parts)?;
    Ok(InlineSges::Many(
        data.iter()
            .filter(|d| !d.is_empty())
            .map(|d| inline_slice(d))
            .collect(),
    ))
}

const NO_SLICE: LocalSlice = LocalSlice {
    addr: 0,
    len: 0,
    lkey: 0,
};

/// The SGE of one inline slice (its length is checked against the inline room before use).
fn inline_slice(d: &IoSlice<'_>) -> LocalSlice {
    LocalSlice {
        addr: d.as_ptr() as u64,
        len: d.len() as u32,
        lkey: 0,
    }
}

/// Gathers the non-empty slices of `data` (at most [`FEW`]) into `out` in one pass, checked
/// as [`inline_sges`] checks them; returns how many.
fn gather_few(qp: &Qp, data: &[IoSlice<'_>], out: &mut [LocalSlice; FEW]) -> Result<usize> {
    let (mut n, mut len) = (0, 0);
    for (d, slot) in data.iter().filter(|d| !d.is_empty()).zip(out.iter_mut()) {
        *slot = inline_slice(d);
        n += 1;
        len += d.len();
    }
    check_inline(qp, len, n)?;
    Ok(n)
}

/// Refuses inline data the QP cannot take: `len` bytes in `parts` slices.
fn check_inline(qp: &Qp, len: usize, parts: usize) -> Result<()> {
    let cap = qp.cap();
    if len > cap.max_inline_data as usize {
        return Err(crate::trace::refusing(Error::InlineTooLong {
            qp_num: qp.qp_num(),
            len,
            max: cap.max_inline_data,
        }));
    }
    if parts > cap.max_send_sge as usize {
        // Devices gather inline data from the request's SGE list too, and refuse a longer one.
        return Err(invalid(
            qp.qp_num(),
            format!(
                "{parts} inline slices exceed max_send_sge {}; join them into fewer slices or \
                 create the QP with a larger max_send_sge",
                cap.max_send_sge
            ),
        ));
    }
    Ok(())
}

/// The request of an inline `op` of `sges` (`flags` with `INLINE`), its SGE list by
/// pointer: `sges` must outlive the post.
fn inline_wr(sges: &[LocalSlice], op: &WrOp, flags: SendFlags) -> sys::ibv_send_wr {
    let mut wr = zeroed_send_wr();
    // ibv_post_send does not write the SGE list; the cast drops const only.
    wr.sg_list = sges.as_ptr() as *mut sys::ibv_sge;
    wr.num_sge = sges.len() as i32;
    wr.send_flags = flags.bits();
    op.fill(&mut wr);
    wr
}

impl Qp {
    /// Posts a SEND or RDMA WRITE (with or without immediate) of the bytes of `data`, copied
    /// by the device during the call (`IBV_SEND_INLINE`): the slices may be any memory and are
    /// free again when this returns. More than the QP's `max_inline_data` is
    /// [`Error::InlineTooLong`]. The request is tracked like an owned one (no buffers, but a
    /// UD address handle is kept until its completion): returns its `wr_id`, whose completion
    /// [`reclaim`](Self::reclaim) accounts for.
    #[doc(alias = "ibv_post_send")]
    #[doc(alias = "IBV_SEND_INLINE")]
    pub fn post_send_inline(
        &self,
        op: WrOp,
        data: &[IoSlice<'_>],
        flags: SendFlags,
        ud: Option<UdDest<'_>>,
    ) -> Result<u64> {
        let sges = inline_sges(self, data)?;
        let flags = flags | SendFlags::INLINE;
        if let Some(u) = &ud {
            self.check_ah(u.ah)?;
        }
        self.check_send(&op, &sges, flags, ud.is_some())?;
        let mut wr = inline_wr(&sges, &op, flags);
        if let Some(u) = &ud {
            wr.wr.ud = sys::ud_t {
                ah: u.ah.as_raw(),
                remote_qpn: u.remote_qpn,
                remote_qkey: u.remote_qkey,
            };
        }
        self.post_inline_tracked(&mut wr, ud.map(|u| u.ah.clone()))
    }

    /// Posts a SEND of the bytes of `data` inline (copied by the device during the call) on
    /// a connected (RC or UC) QP: [`post_send_inline`](Self::post_send_inline) with
    /// [`WrOp::Send`] and no UD destination, checking only what such a request can get
    /// wrong (the QP's type and state, the length), for a sender whose small messages go
    /// this way one by one. `flags` may hold `SIGNALED`, `SOLICITED` and `FENCE` (`INLINE`
    /// is added). Returns its `wr_id`.
    ///
    /// The request holds nothing once posted, so unlike `post_send_inline`'s it is entered in
    /// no table: it does not count in [`in_flight`](Self::in_flight) or
    /// [`outstanding`](Self::outstanding), and [`reclaim`](Self::reclaim) of its completion
    /// hands back the tracked requests posted before it (a send queue completes in order),
    /// nothing for itself.
    #[doc(alias = "ibv_post_send")]
    #[doc(alias = "IBV_SEND_INLINE")]
    pub fn post_inline_send(&self, data: &[IoSlice<'_>], flags: SendFlags) -> Result<u64> {
        self.post_inline_connected(WrOp::Send, data, flags)
    }

    /// [`post_inline_send`](Self::post_inline_send) of a SEND with immediate data `imm`
    /// (host order; delivered to the receiver's completion): the same checks, the same
    /// untracked request.
    #[doc(alias = "ibv_post_send")]
    #[doc(alias = "IBV_WR_SEND_WITH_IMM")]
    pub fn post_inline_send_with_imm(
        &self,
        data: &[IoSlice<'_>],
        imm: u32,
        flags: SendFlags,
    ) -> Result<u64> {
        self.post_inline_connected(WrOp::SendWithImm(imm), data, flags)
    }

    /// The inline SEND (`op`: with or without immediate) of a connected QP, untracked.
    fn post_inline_connected(
        &self,
        op: WrOp,
        data: &[IoSlice<'_>],
        flags: SendFlags,
    ) -> Result<u64> {
        let allowed = SendFlags::SIGNALED | SendFlags::SOLICITED | SendFlags::FENCE;
        if data.len() > FEW || !allowed.contains(flags) {
            // The general path: it gathers any number of slices and names a wrong flag.
            return self.post_send_inline(op, data, flags, None);
        }
        if self.qp_type() == QpType::Ud {
            return Err(invalid(
                self.qp_num(),
                "a UD send needs a destination: post it with post_send_inline and a UdDest".into(),
            ));
        }
        if let Some(why) = self.send_state_refusal() {
            return Err(invalid(self.qp_num(), why));
        }
        let mut few = [NO_SLICE; FEW];
        let n = gather_few(self, data, &mut few)?;
        let mut wr = inline_wr(&few[..n], &op, flags | SendFlags::INLINE);
        // The table's lock is held through the post, so ids follow the queue's order: the
        // in-order reclaim of a later completion relies on it.
        let mut sq = self.lock_send_room(1)?;
        wr.wr_id = sq.next_id(false);
        self.post_chain(std::slice::from_mut(&mut wr))
            .map_err(|(_, e)| e)?;
        Ok(wr.wr_id)
    }

    /// Posts `wr`, a checked inline request, under the send queue's lock and tracks it (with
    /// its UD address handle, kept until the completion): returns its new `wr_id`.
    fn post_inline_tracked(&self, wr: &mut sys::ibv_send_wr, ah: Option<Ah>) -> Result<u64> {
        let mut sq = self.lock_send_room(1)?;
        let id = sq.next_id(false);
        wr.wr_id = id;
        match self.post_chain(std::slice::from_mut(wr)) {
            Ok(()) => {
                sq.insert(id, 0, Default::default(), ah, false);
                Ok(id)
            }
            Err((0, e)) => Err(e),
            Err((_, e)) => {
                // Possibly queued: its completion must still find the entry (and the AH).
                sq.insert(id, 0, Default::default(), ah, false);
                Err(e)
            }
        }
    }
}

impl QpEx {
    /// [`Qp::post_send_inline`] through the `ibv_wr_*` API (`ibv_wr_set_inline_data`).
    #[doc(alias = "ibv_wr_set_inline_data")]
    #[doc(alias = "ibv_wr_set_inline_data_list")]
    pub fn wr_post_inline(
        &self,
        op: WrOp,
        data: &[IoSlice<'_>],
        flags: SendFlags,
        ud: Option<UdDest<'_>>,
    ) -> Result<u64> {
        self.check_op(&op)?;
        let sges = inline_sges(self, data)?;
        let flags = flags | SendFlags::INLINE;
        if let Some(u) = &ud {
            self.check_ah(u.ah)?;
        }
        self.check_send(&op, &sges, flags, ud.is_some())?;
        let mut sq = self.lock_send_room(1)?;
        let id = sq.next_id(false);
        let build = Build {
            id,
            op,
            flags: flags.bits(),
            sges: &sges,
            inline: None,
            ud: ud.map(|u| (u.ah.as_raw(), u.remote_qpn, u.remote_qkey)),
        };
        // SAFETY: inline data is copied during the session; the AH is kept in the in-flight
        // table until the completion.
        let r = unsafe { self.session(std::slice::from_ref(&build)) };
        // Inserted on failure too: ibv_wr_complete may fail after queuing (see wr_post).
        sq.insert(id, 0, Default::default(), ud.map(|u| u.ah.clone()), false);
        r.map(|()| id)
    }
}
