//! The `ibv_wr_*` posting API of extended QPs (`ibv_create_qp_ex` with `send_ops_flags`):
//! [`QpEx`], with the ownership rules of ordinary posting (owned requests stay in the
//! in-flight table until reclaimed; borrowed memory is `unsafe`).
use std::ops::Deref;
use std::ptr::NonNull;

use bitflags::bitflags;
use verbs_sys as sys;

use super::{check_borrowed_wr_id, invalid, PostError, SendFlags, SendRequest, SendWr, WrOp};
use crate::mr::LocalSlice;
use crate::pd::Pd;
use crate::qp::{Qp, QpCap, QpInitAttr};
use crate::{Error, Result};

bitflags! {
    /// The operations an extended QP may post (`enum ibv_qp_create_send_ops_flags`).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
    pub struct SendOps: u64 {
        /// RDMA WRITE.
        const RDMA_WRITE = 1;
        /// RDMA WRITE with immediate.
        const RDMA_WRITE_WITH_IMM = 1 << 1;
        /// SEND.
        const SEND = 1 << 2;
        /// SEND with immediate.
        const SEND_WITH_IMM = 1 << 3;
        /// RDMA READ.
        const RDMA_READ = 1 << 4;
        /// Atomic compare-and-swap.
        const ATOMIC_CMP_AND_SWP = 1 << 5;
        /// Atomic fetch-and-add.
        const ATOMIC_FETCH_AND_ADD = 1 << 6;
        /// Local invalidate.
        const LOCAL_INV = 1 << 7;
        /// Memory window bind (posted through [`Qp::post_send`] only).
        const BIND_MW = 1 << 8;
        /// SEND with invalidate.
        const SEND_WITH_INV = 1 << 9;
    }
}

impl SendOps {
    /// The flag an operation needs.
    pub fn of(op: &WrOp) -> SendOps {
        match op {
            WrOp::Send => SendOps::SEND,
            WrOp::SendWithImm(_) => SendOps::SEND_WITH_IMM,
            WrOp::RdmaWrite(_) => SendOps::RDMA_WRITE,
            WrOp::RdmaWriteWithImm(..) => SendOps::RDMA_WRITE_WITH_IMM,
            WrOp::RdmaRead(_) => SendOps::RDMA_READ,
            WrOp::AtomicCmpSwap { .. } => SendOps::ATOMIC_CMP_AND_SWP,
            WrOp::AtomicFetchAdd { .. } => SendOps::ATOMIC_FETCH_AND_ADD,
            WrOp::BindMw(_) => SendOps::BIND_MW,
            WrOp::LocalInv(_) => SendOps::LOCAL_INV,
            WrOp::SendWithInv(_) => SendOps::SEND_WITH_INV,
        }
    }
}

/// A QP created with `ibv_create_qp_ex` whose send queue is fed through the `ibv_wr_*`
/// builder calls. Everything else (state transitions, receives, [`reclaim`](Qp::reclaim))
/// is the [`Qp`] it dereferences to; plain posting works on it too.
#[derive(Clone)]
pub struct QpEx {
    qp: Qp,
    ex: NonNull<sys::ibv_qp_ex>,
    ops: SendOps,
}

// SAFETY: the ibv_qp_ex is part of the QP the `Qp` owns; every ibv_wr_* session runs under
// the send queue's in-flight lock, so sessions never interleave.
unsafe impl Send for QpEx {}
// SAFETY: as above.
unsafe impl Sync for QpEx {}

impl std::fmt::Debug for QpEx {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QpEx")
            .field("qp", &self.qp)
            .field("ops", &self.ops)
            .finish()
    }
}

impl Deref for QpEx {
    type Target = Qp;
    fn deref(&self) -> &Qp {
        &self.qp
    }
}

impl Pd {
    /// Creates a QP in the Reset state whose sends are posted with the `ibv_wr_*` API
    /// ([`QpEx::wr_post`]) for the operations in `ops`. A provider without extended QPs
    /// gives [`Error::Unsupported`].
    #[doc(alias = "ibv_create_qp_ex")]
    #[doc(alias = "ibv_qp_to_qp_ex")]
    pub fn create_qp_ex(&self, init: &QpInitAttr<'_>, ops: SendOps) -> Result<QpEx> {
        let max_rd_atomic = self.check_qp_init(init)?;
        let ctx = self.inner.ctx.raw.as_ptr();
        let base = init.to_raw();
        // SAFETY: all-zero is a valid ibv_qp_init_attr_ex (null pointers, no mask).
        let mut raw: sys::ibv_qp_init_attr_ex = unsafe { std::mem::zeroed() };
        raw.send_cq = base.send_cq;
        raw.recv_cq = base.recv_cq;
        raw.srq = base.srq;
        raw.cap = base.cap;
        raw.qp_type = base.qp_type;
        raw.sq_sig_all = base.sq_sig_all;
        raw.pd = self.as_raw();
        raw.comp_mask = sys::ibv_qp_init_attr_mask::IBV_QP_INIT_ATTR_PD.0
            | sys::ibv_qp_init_attr_mask::IBV_QP_INIT_ATTR_SEND_OPS_FLAGS.0;
        raw.send_ops_flags = ops.bits();
        let create_err = |source: std::io::Error| {
            if source.raw_os_error() == Some(libc::EOPNOTSUPP) {
                Error::Unsupported {
                    what: "extended QPs (ibv_create_qp_ex with send_ops_flags)",
                    source,
                }
            } else {
                Error::CreateQp {
                    qp_type: init.qp_type,
                    source,
                }
            }
        };
        // SAFETY: open context; PD, CQs and SRQ of that context (checked) and alive for the
        // call; the struct is complete and its mask names the set fields.
        let qp = unsafe { sys::ibv_create_qp_ex(ctx, &mut raw) };
        let qp = sys::errno::check_ptr(qp).map_err(create_err)?;
        // SAFETY: a live QP created with send_ops_flags: it has an ibv_qp_ex.
        let ex = unsafe { sys::ibv_qp_to_qp_ex(qp.as_ptr()) };
        let Some(ex) = NonNull::new(ex) else {
            // SAFETY: just created, never shared: destroyed once here.
            unsafe { sys::ibv_destroy_qp(qp.as_ptr()) };
            return Err(create_err(std::io::Error::from_raw_os_error(
                libc::EOPNOTSUPP,
            )));
        };
        let cap = QpCap::from(raw.cap);
        // SAFETY: just created in this PD with exactly `init`'s objects and at least `cap`;
        // destroyed by ibv_destroy_qp through the handle.
        let qp = unsafe { Qp::from_raw(qp, self, init, cap, max_rd_atomic, None) };
        Ok(QpEx { qp, ex, ops })
    }
}

/// One request for the `ibv_wr_*` builders: the operation, its SGEs (or inline data), its
/// UD address.
pub(super) struct Build<'a> {
    pub(super) id: u64,
    pub(super) op: WrOp,
    pub(super) flags: u32,
    pub(super) sges: &'a [LocalSlice],
    pub(super) inline: Option<&'a [u8]>,
    pub(super) ud: Option<(*mut sys::ibv_ah, u32, u32)>,
}

impl QpEx {
    /// The operations this QP was created for.
    pub fn send_ops(&self) -> SendOps {
        self.ops
    }
    /// The raw `ibv_qp_ex`, valid while this handle lives.
    pub fn as_raw_ex(&self) -> *mut sys::ibv_qp_ex {
        self.ex.as_ptr()
    }
    /// The plain QP handle.
    pub fn qp(&self) -> &Qp {
        &self.qp
    }

    pub(super) fn check_op(&self, op: &WrOp) -> Result<()> {
        if let WrOp::BindMw(_) = op {
            return Err(invalid(
                self.qp_num(),
                "window binds are posted with Qp::post_send, not the ibv_wr_* session".into(),
            ));
        }
        if self.ops.contains(SendOps::of(op)) {
            return Ok(());
        }
        Err(invalid(
            self.qp_num(),
            format!(
                "{op:?}: the QP was not created for this operation (send ops {:?})",
                self.ops
            ),
        ))
    }

    /// Runs one `ibv_wr_start` .. `ibv_wr_complete` session over `reqs`. Call with the send
    /// table locked, so sessions (and plain posts) never interleave.
    ///
    /// # Safety
    /// The memory of every request must satisfy [`Qp::post_send_unchecked`]'s contract.
    pub(super) unsafe fn session(&self, reqs: &[Build<'_>]) -> Result<()> {
        let qp = self.ex.as_ptr();
        // SAFETY: live extended QP; the session is exclusive (send table locked).
        unsafe { sys::ibv_wr_start(qp) };
        for r in reqs {
            // SAFETY: inside the session; plain fields of the live ibv_qp_ex, set before the
            // builder as the API requires.
            unsafe {
                (*qp).wr_id = r.id;
                (*qp).wr_flags = r.flags;
            }
            // SAFETY: inside the session; the QP was created with this operation's flag
            // (check_op), so the provider set its builder.
            unsafe {
                match r.op {
                    WrOp::Send => sys::ibv_wr_send(qp),
                    WrOp::SendWithImm(i) => sys::ibv_wr_send_imm(qp, i.to_be()),
                    WrOp::RdmaWrite(rs) => sys::ibv_wr_rdma_write(qp, rs.rkey, rs.addr),
                    WrOp::RdmaWriteWithImm(rs, i) => {
                        sys::ibv_wr_rdma_write_imm(qp, rs.rkey, rs.addr, i.to_be())
                    }
                    WrOp::RdmaRead(rs) => sys::ibv_wr_rdma_read(qp, rs.rkey, rs.addr),
                    WrOp::AtomicCmpSwap {
                        remote,
                        compare,
                        swap,
                    } => sys::ibv_wr_atomic_cmp_swp(qp, remote.rkey, remote.addr, compare, swap),
                    WrOp::AtomicFetchAdd { remote, add } => {
                        sys::ibv_wr_atomic_fetch_add(qp, remote.rkey, remote.addr, add)
                    }
                    WrOp::LocalInv(rkey) => sys::ibv_wr_local_inv(qp, rkey),
                    WrOp::SendWithInv(rkey) => sys::ibv_wr_send_inv(qp, rkey),
                    // Refused by check_op: a bind needs its request's window and region.
                    WrOp::BindMw(_) => unreachable!("binds are refused before the session"),
                }
            }
            if let WrOp::LocalInv(_) = r.op {
                // Carries no data.
                continue;
            }
            if let Some((ah, qpn, qkey)) = r.ud {
                // SAFETY: inside the session, after the builder; a live AH of this context
                // (checked) kept alive by the request until its completion.
                unsafe { sys::ibv_wr_set_ud_addr(qp, ah, qpn, qkey) };
            }
            let inline_list = r.flags & SendFlags::INLINE.bits() != 0 && r.inline.is_none();
            match r.inline {
                // SAFETY: inside the session; the data is copied during the call.
                Some(d) => unsafe {
                    sys::ibv_wr_set_inline_data(qp, d.as_ptr().cast_mut().cast(), d.len())
                },
                None if inline_list => {
                    // Gathered here rather than with ibv_wr_set_inline_data_list: rxe before
                    // rdma-core 64 posts a list as zero bytes. The device copies it anyway.
                    let data: Vec<u8> = r
                        .sges
                        .iter()
                        .filter(|s| s.len > 0)
                        // SAFETY: readable memory per the caller's contract (inline SGEs
                        // describe plain memory the device copies at post time).
                        .flat_map(|s| unsafe {
                            std::slice::from_raw_parts(s.addr as *const u8, s.len as usize)
                        })
                        .copied()
                        .collect();
                    // SAFETY: inside the session; the data is copied during the call.
                    unsafe {
                        sys::ibv_wr_set_inline_data(qp, data.as_ptr().cast_mut().cast(), data.len())
                    }
                }
                // SAFETY: inside the session; LocalSlice is laid out as ibv_sge (asserted in
                // the post module); the memory is the caller's contract.
                None => unsafe {
                    sys::ibv_wr_set_sge_list(qp, r.sges.len(), r.sges.as_ptr().cast())
                },
            }
        }
        // SAFETY: ends the session started above.
        let rc = unsafe { sys::ibv_wr_complete(qp) };
        sys::errno::check_ret(rc).map_err(|source| {
            let e = if source.raw_os_error() == Some(libc::ENOMEM) {
                self.queue_full("send", self.cap().max_send_wr)
            } else {
                Error::PostSend {
                    qp_num: self.qp_num(),
                    source,
                }
            };
            crate::trace::refused(&e, true);
            e
        })
    }

    /// Posts owned send requests in one `ibv_wr_start` / `ibv_wr_complete` session (one
    /// doorbell); returns their ids. (On rxe before a fix newer than rdma-core 64, SGEs of
    /// different lengths in one request fail: see the crate docs' limitations.) As with [`Qp::post_send_batch`], the buffers come back
    /// through [`Qp::reclaim`], and a request that fails validation, a full queue or a QP in
    /// Reset posts nothing. If `ibv_wr_complete` itself fails, the device may have queued the
    /// batch, so the requests stay in flight (their ids are in [`PostError::posted`]).
    #[doc(alias = "ibv_wr_start")]
    #[doc(alias = "ibv_wr_complete")]
    pub fn wr_post(&self, reqs: Vec<SendRequest>) -> Result<Vec<u64>, PostError<Vec<SendRequest>>> {
        let fail = |error, reqs| PostError {
            error,
            unposted: reqs,
            posted: Vec::new(),
        };
        if let Some(e) = reqs.iter().find_map(|r| {
            self.check_op(&r.op)
                .and_then(|()| self.check_request(r))
                .err()
        }) {
            return Err(fail(e, reqs));
        }
        let mut sq = match self.lock_send_room(reqs.len()) {
            Ok(sq) => sq,
            Err(e) => return Err(fail(e, reqs)),
        };
        let ids: Vec<u64> = reqs.iter().map(|_| sq.next_id(false)).collect();
        let builds: Vec<Build<'_>> = reqs
            .iter()
            .zip(&ids)
            .map(|(r, &id)| Build {
                id,
                op: r.op,
                flags: r.flags.bits(),
                sges: r.sges.as_slice(),
                inline: r.inline.as_deref(),
                ud: r
                    .ud
                    .as_ref()
                    .map(|(ah, qpn, qkey)| (ah.as_raw(), *qpn, *qkey)),
            })
            .collect();
        // SAFETY: the memory of owned requests is moved into the in-flight table below and
        // stays there until reclaimed (or the QP is destroyed); AHs likewise.
        let r = unsafe { self.session(&builds) };
        drop(builds);
        match r {
            Ok(()) => {
                for (r, id) in reqs.into_iter().zip(&ids) {
                    let own = self.qp.completes_alone(&r.op);
                    sq.insert(*id, r.tag, r.owners, r.ud.map(|u| u.0), own);
                }
                Ok(ids)
            }
            Err(error) => {
                // Possibly queued: keep every buffer (see post_chain for the reasoning).
                let ops: Vec<WrOp> = reqs.iter().map(|r| r.op).collect();
                for (r, id) in reqs.into_iter().zip(&ids) {
                    let own = self.qp.completes_alone(&r.op);
                    sq.insert(*id, r.tag, r.owners, r.ud.map(|u| u.0), own);
                }
                Err(PostError {
                    error,
                    unposted: ops.into_iter().map(SendRequest::new).collect(),
                    posted: ids,
                })
            }
        }
    }

    /// Posts borrowed send requests in one `ibv_wr_*` session.
    ///
    /// # Safety
    /// As for [`Qp::post_send_unchecked`]: until each request's completion is polled (or the
    /// QP is reset or destroyed), its memory must stay allocated, registered and untouched
    /// as that contract says, and the address handle of a UD request alive.
    #[doc(alias = "ibv_wr_start")]
    #[doc(alias = "ibv_wr_complete")]
    pub unsafe fn wr_post_unchecked(&self, wrs: &[SendWr<'_>]) -> Result<()> {
        for w in wrs {
            check_borrowed_wr_id(self.qp_num(), w.wr_id)?;
            self.check_op(&w.op)?;
            if let Some(ud) = &w.ud {
                self.check_ah(ud.ah)?;
            }
            self.check_send(&w.op, w.sges, w.flags, w.ud.is_some())?;
        }
        let builds: Vec<Build<'_>> = wrs
            .iter()
            .map(|w| Build {
                id: w.wr_id,
                op: w.op,
                flags: w.flags.bits(),
                sges: w.sges,
                inline: None,
                ud: w.ud.map(|u| (u.ah.as_raw(), u.remote_qpn, u.remote_qkey)),
            })
            .collect();
        let _sq = self.qp.inner.sq.lock();
        // SAFETY: the caller's contract covers the memory and the AHs.
        unsafe { self.session(&builds) }
    }
}
