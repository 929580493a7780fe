//! Queue pairs (RC, UC, UD): creation, state transitions checked against the transition table,
//! and work-request posting (see [`post`]).
mod attr;
mod init;
mod mcast;
pub mod post;
mod query;
mod state;
mod typed;

use std::mem::MaybeUninit;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use verbs_sys as sys;

pub use attr::{AhAttr, GlobalRoute, QpAttr, QpAttrMask};
pub use init::{QpCap, QpEndpoint, QpInitAttr};
pub use post::{
    FixedBuffers, Outstanding, PostError, PreparedRecv, PreparedSend, QpEx, Reclaimed, RecvRequest,
    RecvWr, SendFlags, SendOps, SendRequest, SendWr, UdDest, WrOp,
};
pub use query::QpQuery;
pub use state::{check_transition, transition, QpState, QpType};
pub use typed::{states, QpIn};

use crate::context::Mtu;
use crate::cq::CqInner;
use crate::mr::AccessFlags;
use crate::pd::{Pd, PdInner};
use crate::srq::SrqInner;
use crate::{Error, Result};
use post::InFlight;

/// A queue pair. Cheap to clone; destroyed when the last handle is gone, after which the
/// buffers of requests still in flight are dropped.
#[derive(Clone)]
pub struct Qp {
    pub(crate) inner: Arc<QpInner>,
}

/// How a QP is destroyed (`ibv_destroy_qp`, or e.g. a CM's own destroy call for a QP it
/// created). It returns whether the QP is gone: on `Err` the device may still use the buffers of
/// requests in flight, so they are leaked, never freed.
pub type QpDestroy = Box<dyn FnOnce(NonNull<sys::ibv_qp>) -> std::io::Result<()> + Send + Sync>;

pub(crate) struct QpInner {
    raw: NonNull<sys::ibv_qp>,
    destroy: Option<QpDestroy>,
    qp_type: QpType,
    qp_num: u32,
    cap: QpCap,
    pub(crate) sq_sig_all: bool,
    has_srq: bool,
    max_rd_atomic: u8,
    /// The device's, for refusing what it lacks before the provider sees it.
    pub(crate) capabilities: crate::Capabilities,
    state: Mutex<QpState>,
    /// Whether the QP is (or may be) in Reset: owned posting is refused then. Changed only
    /// while holding both in-flight tables, so a post (made under its table's lock) happens
    /// entirely before or after a transition into or out of Reset. Some providers accept
    /// posts in Reset and keep them past Reset -> Init; refusing them here is what makes the
    /// table hold, while the QP is in Reset, only requests the reset discarded.
    in_reset: AtomicBool,
    // The state last set under `state`, readable without the lock (index into QpState::ALL):
    // posting checks it on every request.
    state_seen: AtomicU8,
    // Dropped after the QP is destroyed (Drop runs first), so the NIC is done with them.
    sq: Mutex<InFlight>,
    rq: Mutex<InFlight>,
    _srq: Option<Arc<SrqInner>>,
    _send_cq: Arc<CqInner>,
    _recv_cq: Arc<CqInner>,
    _pd: Arc<PdInner>,
}

// SAFETY: a QP handle has no thread affinity; post/modify/query are thread-safe in libibverbs,
// and our bookkeeping (state, in-flight tables) is behind mutexes. The in-flight buffers are
// `Send`.
unsafe impl Send for QpInner {}
// SAFETY: as above.
unsafe impl Sync for QpInner {}

impl Drop for QpInner {
    fn drop(&mut self) {
        let destroyed = match self.destroy.take() {
            Some(destroy) => destroy(self.raw),
            // SAFETY: created by ibv_create_qp, destroyed once. After a successful destroy the
            // NIC no longer touches the in-flight buffers, which are dropped with the fields.
            None => sys::errno::check_ret(unsafe { sys::ibv_destroy_qp(self.raw.as_ptr()) }),
        };
        if destroyed.is_err() {
            // The QP lives on (EBUSY while multicast groups are attached, or whatever the
            // custom destroy reported), so the device may still write the in-flight buffers:
            // leak them rather than free memory it may use.
            std::mem::forget(std::mem::take(self.sq.get_mut()));
            std::mem::forget(std::mem::take(self.rq.get_mut()));
        }
    }
}

impl QpInner {
    /// The device context of the QP's PD.
    pub(crate) fn pd_context_raw(&self) -> *mut sys::ibv_context {
        self._pd.ctx.raw.as_ptr()
    }
}

impl std::fmt::Debug for Qp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Qp")
            .field("qp_num", &self.inner.qp_num)
            .field("qp_type", &self.inner.qp_type)
            .field("state", &self.state())
            .finish()
    }
}

impl Pd {
    /// Checks that `init`'s CQs and SRQ belong to this PD's device context, and returns the
    /// `max_rd_atomic` a QP of this device gets.
    pub(crate) fn check_qp_init(&self, init: &QpInitAttr<'_>) -> Result<u8> {
        let ctx = self.context();
        let caps = ctx.capabilities_or_assumed();
        let needs = match init.qp_type {
            QpType::Ud => Some(crate::Capability::UnreliableDatagram),
            QpType::Uc => Some(crate::Capability::UnreliableConnected),
            _ => None,
        };
        if let Some(c) = needs {
            caps.require(ctx.name(), c)?;
        }
        // Objects of another context are handles in another file descriptor's namespace and
        // structs of maybe another provider: the kernel and the provider would misread them.
        let ctx = self.inner.ctx.raw.as_ptr();
        if init.send_cq.inner.context_raw() != ctx
            || init.recv_cq.inner.context_raw() != ctx
            || init.srq.is_some_and(|s| s.inner.context_raw() != ctx)
        {
            return Err(Error::CreateQp {
                qp_type: init.qp_type,
                source: std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    "the CQs and the SRQ must belong to the PD's device context",
                ),
            });
        }
        Ok(caps.max_rd_atomic)
    }

    /// Creates a queue pair in the Reset state.
    #[doc(alias = "ibv_create_qp")]
    pub fn create_qp(&self, init: &QpInitAttr<'_>) -> Result<Qp> {
        let max_rd_atomic = self.check_qp_init(init)?;
        let mut raw_init = init.to_raw();
        // SAFETY: live PD and CQs (and SRQ) of the same context (checked); the struct is fully
        // set.
        let raw = unsafe { sys::ibv_create_qp(self.as_raw(), &mut raw_init) };
        let raw = sys::errno::check_ptr(raw).map_err(|source| Error::CreateQp {
            qp_type: init.qp_type,
            source,
        })?;
        // ibv_create_qp wrote the granted sizes back into raw_init.cap.
        let c = raw_init.cap;
        let cap = QpCap::from(c);
        // SAFETY: just created with exactly these objects; destroyed by ibv_destroy_qp.
        Ok(unsafe { Qp::from_raw(raw, self, init, cap, max_rd_atomic, None) })
    }
}

impl Qp {
    /// Wraps a QP created elsewhere, e.g. by `rdma_create_qp` on this crate's PD and CQs, so it
    /// gets this crate's posting and bookkeeping. The tracked state starts as Reset: after
    /// the creator moved it (rdma_connect/rdma_accept), call [`query_state`](Self::query_state).
    /// `max_rd_atomic` is what [`to_rtr`](Self::to_rtr)/[`to_rts`](Self::to_rts) would use.
    ///
    /// # Safety
    /// `raw` must be a live QP of `init`'s type created in `pd` with `init`'s CQs and SRQ and
    /// (at least) the queue sizes `cap`; ownership passes to the returned handle, which
    /// destroys it with `destroy` (or `ibv_destroy_qp` when `None`) exactly once, when the last
    /// handle is dropped. Nobody else may destroy it, and its state may change only through
    /// the returned handle, except transitions its creator makes before anything is posted
    /// (call [`query_state`](Self::query_state) after them: owned posting is refused until the
    /// handle knows the QP is out of Reset).
    pub unsafe fn from_raw(
        raw: NonNull<sys::ibv_qp>,
        pd: &Pd,
        init: &QpInitAttr<'_>,
        cap: QpCap,
        max_rd_atomic: u8,
        destroy: Option<QpDestroy>,
    ) -> Qp {
        // SAFETY: live QP per the caller; qp_num is a plain field.
        let qp_num = unsafe { (*raw.as_ptr()).qp_num };
        let capabilities = pd.context().capabilities_or_assumed();
        Qp {
            inner: Arc::new(QpInner {
                raw,
                destroy,
                qp_type: init.qp_type,
                qp_num,
                cap,
                sq_sig_all: init.sq_sig_all,
                has_srq: init.srq.is_some(),
                max_rd_atomic,
                capabilities,
                state: Mutex::new(QpState::Reset),
                in_reset: AtomicBool::new(true),
                state_seen: AtomicU8::new(QpState::Reset.index()),
                sq: Mutex::new(InFlight::with_depth(cap.max_send_wr)),
                rq: Mutex::new(InFlight::with_depth(cap.max_recv_wr)),
                _srq: init.srq.map(|s| s.inner.clone()),
                _send_cq: init.send_cq.inner.clone(),
                _recv_cq: init.recv_cq.inner.clone(),
                _pd: pd.inner.clone(),
            }),
        }
    }
}

impl Qp {
    /// The raw `ibv_qp`, valid while this handle lives.
    pub fn as_raw(&self) -> *mut sys::ibv_qp {
        self.inner.raw.as_ptr()
    }
    /// QP number.
    pub fn qp_num(&self) -> u32 {
        self.inner.qp_num
    }
    /// Transport type.
    pub fn qp_type(&self) -> QpType {
        self.inner.qp_type
    }
    /// `Ok` if the QP's device has `capability`, else
    /// [`Error::MissingCapability`].
    pub fn require(&self, capability: crate::Capability) -> Result<()> {
        self.inner
            .capabilities
            .require(self.inner._pd.ctx.name(), capability)
    }

    /// The transport of the QP's device (InfiniBand and RoCE, or iWARP: see
    /// [`Transport`](crate::Transport)).
    pub fn transport(&self) -> crate::Transport {
        self.inner._pd.ctx.transport()
    }
    /// Whether every send is signaled regardless of its flags.
    pub fn sq_sig_all(&self) -> bool {
        self.inner.sq_sig_all
    }
    /// Queue sizes granted by the device.
    pub fn cap(&self) -> QpCap {
        self.inner.cap
    }
    /// The state as of the last transition made through this handle (see
    /// [`query_state`](Self::query_state) for the device's view: errors move a QP to Err on
    /// their own).
    pub fn state(&self) -> QpState {
        QpState::ALL[usize::from(self.inner.state_seen.load(Ordering::Acquire))]
    }

    /// Records `s` as the state; called with the state lock held.
    fn set_state(&self, state: &mut QpState, s: QpState) {
        *state = s;
        self.inner.state_seen.store(s.index(), Ordering::Release);
    }

    /// Records that the RDMA CM moved this iWARP QP to RTS as its connection was established
    /// (the iWARP CM does, without this handle; and a device such as siw reports no state to
    /// [`query_state`](Self::query_state)). Refused with [`Error::InvalidTransition`] unless
    /// the QP is on an iWARP device and in Init or RTR.
    pub fn established_by_cm(&self) -> Result<()> {
        let mut state = self.inner.state.lock();
        let from = *state;
        if self.transport() != crate::Transport::Iwarp
            || !matches!(from, QpState::Init | QpState::Rtr)
        {
            return Err(Error::InvalidTransition {
                qp_num: self.qp_num(),
                from,
                to: QpState::Rts,
                problem: format!(
                    "is made by the CM only on iWARP, from Init or RTR (this QP: {:?}, {from:?})",
                    self.transport()
                ),
            });
        }
        self.set_state(&mut state, QpState::Rts);
        Ok(())
    }

    /// The state according to the device (and updates [`state`](Self::state)).
    #[doc(alias = "ibv_query_qp")]
    pub fn query_state(&self) -> Result<QpState> {
        let mut attr = MaybeUninit::<sys::ibv_qp_attr>::zeroed();
        let mut init = MaybeUninit::<sys::ibv_qp_init_attr>::zeroed();
        // SAFETY: live QP; valid out-pointers.
        let r = unsafe {
            sys::ibv_query_qp(
                self.as_raw(),
                attr.as_mut_ptr(),
                QpAttrMask::STATE.bits() as i32,
                init.as_mut_ptr(),
            )
        };
        sys::errno::check_ret(r).map_err(|source| Error::QueryQp {
            qp_num: self.qp_num(),
            source,
        })?;
        // SAFETY: zeroed then filled; all-integer struct.
        let raw_state = unsafe { attr.assume_init() }.qp_state;
        let s = QpState::try_from(raw_state).map_err(|v| Error::QueryQp {
            qp_num: self.qp_num(),
            source: std::io::Error::other(format!("unknown QP state {v}")),
        })?;
        let mut state = self.inner.state.lock();
        if s == QpState::Err && *state != QpState::Err {
            crate::trace::qp_found_in_error(self.qp_num(), *state);
        }
        self.set_state(&mut state, s);
        self.set_in_reset(s == QpState::Reset);
        Ok(s)
    }

    /// Records whether the QP is in Reset, excluding posts meanwhile (see `in_reset`). Lock
    /// order: state, then send table, then receive table.
    fn set_in_reset(&self, yes: bool) {
        let _sq = self.inner.sq.lock();
        let _rq = self.inner.rq.lock();
        self.inner.in_reset.store(yes, Ordering::Release);
    }

    /// Whether owned posting is refused because the QP is (or may be) in Reset. Read it under
    /// the lock of the table the post goes into.
    pub(crate) fn in_reset(&self) -> &AtomicBool {
        &self.inner.in_reset
    }

    /// Applies `attr` (which must set the target state). The attribute mask is checked against
    /// the transition table first, so a missing or forbidden attribute is a typed
    /// [`Error::InvalidTransition`] rather than an EINVAL from the kernel.
    #[doc(alias = "ibv_modify_qp")]
    pub fn modify(&self, attr: &QpAttr) -> Result<()> {
        let mut state = self.inner.state.lock();
        let from = if attr.mask().contains(QpAttrMask::CUR_STATE) {
            QpState::try_from(attr.raw.cur_qp_state).unwrap_or(*state)
        } else {
            *state
        };
        let Some(to) = attr.state() else {
            return Err(Error::InvalidTransition {
                qp_num: self.qp_num(),
                from,
                to: from,
                problem: "needs a target state (qp_state)".into(),
            });
        };
        let transport = self.inner._pd.ctx.transport();
        check_transition(transport, self.qp_type(), from, to, attr.mask()).map_err(|problem| {
            Error::InvalidTransition {
                qp_num: self.qp_num(),
                from,
                to,
                problem,
            }
        })?;
        let mut raw = attr.raw_copy();
        if attr.mask().contains(QpAttrMask::AV) && raw.ah_attr.is_global != 0 {
            let ctx = crate::Context {
                inner: self.inner._pd.ctx.clone(),
            };
            ctx.check_sgid_index(
                self.qp_num(),
                raw.ah_attr.port_num,
                raw.ah_attr.grh.sgid_index,
            )?;
        }
        // Into or out of Reset: no owned post may slip in between the device's transition and
        // the flag's (a post made in Reset would outlive the reset on some providers).
        let tables = (to == QpState::Reset || from == QpState::Reset || *state == QpState::Reset)
            .then(|| (self.inner.sq.lock(), self.inner.rq.lock()));
        // SAFETY: live QP; `raw` is a complete attribute struct and the mask names its set
        // fields.
        let r = unsafe { sys::ibv_modify_qp(self.as_raw(), &mut raw, attr.mask().bits() as i32) };
        if let Err(source) = sys::errno::check_ret(r) {
            let e = Error::ModifyQp {
                qp_num: self.qp_num(),
                to,
                source,
            };
            crate::trace::modify_failed(self.qp_num(), from, to, &e);
            return Err(e);
        }
        if to == QpState::Err {
            crate::trace::qp_to_error(self.qp_num(), from);
        }
        if tables.is_some() {
            self.inner
                .in_reset
                .store(to == QpState::Reset, Ordering::Release);
        }
        drop(tables);
        self.set_state(&mut state, to);
        Ok(())
    }

    /// Reset → Init for a connected QP: port, P_Key index 0, and what peers may do
    /// (`access`: REMOTE_WRITE, REMOTE_READ, REMOTE_ATOMIC).
    pub fn to_init(&self, port: u8, access: AccessFlags) -> Result<()> {
        let attr = QpAttr::new()
            .qp_state(QpState::Init)
            .port_num(port)
            .qp_access_flags(access);
        // iWARP has no partitions: its Init takes no P_Key index.
        self.modify(&if self.transport() == crate::Transport::Iwarp {
            attr
        } else {
            attr.pkey_index(0)
        })
    }

    /// Reset → Init for a UD QP: port, P_Key index 0 and Q_Key.
    pub fn to_init_ud(&self, port: u8, qkey: u32) -> Result<()> {
        self.modify(
            &QpAttr::new()
                .qp_state(QpState::Init)
                .pkey_index(0)
                .port_num(port)
                .qkey(qkey),
        )
    }

    /// Init → RTR. For RC/UC: connect to `remote` through `port` with path `mtu`; on RoCE
    /// (`sgid_index` given) with a GRH to the remote GID. For UD the other arguments are unused.
    pub fn to_rtr(
        &self,
        remote: &QpEndpoint,
        port: u8,
        sgid_index: Option<u8>,
        mtu: Mtu,
    ) -> Result<()> {
        let mut attr = QpAttr::new().qp_state(QpState::Rtr);
        if self.qp_type() != QpType::Ud {
            self.require(crate::Capability::ManualConnect)?;
            let av = match sgid_index {
                Some(sgid) => AhAttr::roce(port, remote.gid, sgid),
                None => AhAttr {
                    dlid: remote.lid,
                    sl: 0,
                    src_path_bits: 0,
                    static_rate: 0,
                    port_num: port,
                    grh: None,
                },
            };
            attr = attr
                .ah_attr(av)
                .path_mtu(mtu)
                .dest_qp_num(remote.qp_num)
                .rq_psn(remote.psn);
            if self.qp_type() == QpType::Rc {
                attr = attr
                    .max_dest_rd_atomic(self.inner.max_rd_atomic)
                    .min_rnr_timer(12);
            }
        }
        self.modify(&attr)
    }

    /// RTR → RTS with send PSN `sq_psn` (RC: timeout 14, 7 retries, infinite RNR retries,
    /// as many outstanding READ/atomics as the device allows up to 16).
    pub fn to_rts(&self, sq_psn: u32) -> Result<()> {
        let mut attr = QpAttr::new().qp_state(QpState::Rts).sq_psn(sq_psn);
        if self.qp_type() == QpType::Rc {
            attr = attr
                .timeout(14)
                .retry_cnt(7)
                .rnr_retry(7)
                .max_rd_atomic(self.inner.max_rd_atomic);
        }
        self.modify(&attr)
    }

    /// Moves the QP to Err: outstanding requests complete with flush errors (reclaim them).
    pub fn to_error(&self) -> Result<()> {
        self.modify(&QpAttr::new().qp_state(QpState::Err))
    }

    /// Moves the QP to Reset: outstanding requests are discarded without completions; take
    /// their buffers back with [`take_in_flight`](Self::take_in_flight). Owned requests are
    /// refused until the QP leaves Reset.
    pub fn reset(&self) -> Result<()> {
        self.modify(&QpAttr::new().qp_state(QpState::Reset))
    }
}
