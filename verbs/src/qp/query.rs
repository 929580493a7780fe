//! The full `ibv_query_qp`: every attribute of a QP and the attributes it was created with.
use std::mem::MaybeUninit;

use verbs_sys as sys;

use super::{Qp, QpAttrMask, QpCap, QpState, QpType};
use crate::context::{Gid, Mtu};
use crate::mr::AccessFlags;
use crate::{Error, Result};

/// What [`Qp::query`] returns: the QP's current attributes (`struct ibv_qp_attr`) and its
/// creation attributes (`struct ibv_qp_init_attr`), decoded.
pub struct QpQuery {
    attr: sys::ibv_qp_attr,
    init: sys::ibv_qp_init_attr,
}

impl std::fmt::Debug for QpQuery {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QpQuery")
            .field("state", &self.state())
            .field("qp_type", &self.qp_type())
            .field("path_mtu", &self.path_mtu())
            .field("dest_qp_num", &self.dest_qp_num())
            .field("sq_psn", &self.sq_psn())
            .field("rq_psn", &self.rq_psn())
            .field("qkey", &self.qkey())
            .field("access", &self.access_flags())
            .field("port_num", &self.port_num())
            .field("cap", &self.cap())
            .finish_non_exhaustive()
    }
}

impl QpQuery {
    /// Current state (`None` for a value newer than this crate).
    pub fn state(&self) -> Option<QpState> {
        QpState::try_from(self.attr.qp_state).ok()
    }
    /// Path MTU (connected QPs, from RTR on).
    pub fn path_mtu(&self) -> Option<Mtu> {
        Mtu::try_from(self.attr.path_mtu).ok()
    }
    /// Q_Key (UD).
    pub fn qkey(&self) -> u32 {
        self.attr.qkey
    }
    /// Expected PSN of the next incoming packet.
    pub fn rq_psn(&self) -> u32 {
        self.attr.rq_psn
    }
    /// PSN of the next outgoing packet.
    pub fn sq_psn(&self) -> u32 {
        self.attr.sq_psn
    }
    /// Remote QP number (connected QPs).
    pub fn dest_qp_num(&self) -> u32 {
        self.attr.dest_qp_num
    }
    /// What peers may do.
    pub fn access_flags(&self) -> AccessFlags {
        AccessFlags::from_bits_retain(self.attr.qp_access_flags)
    }
    /// Queue sizes (from the attributes, as the device reports them now).
    pub fn cap(&self) -> QpCap {
        QpCap::from(self.attr.cap)
    }
    /// P_Key index.
    pub fn pkey_index(&self) -> u16 {
        self.attr.pkey_index
    }
    /// Physical port.
    pub fn port_num(&self) -> u8 {
        self.attr.port_num
    }
    /// Local ACK timeout exponent (RC).
    pub fn timeout(&self) -> u8 {
        self.attr.timeout
    }
    /// Transport retries (RC).
    pub fn retry_cnt(&self) -> u8 {
        self.attr.retry_cnt
    }
    /// RNR retries (RC; 7 is infinite).
    pub fn rnr_retry(&self) -> u8 {
        self.attr.rnr_retry
    }
    /// Minimum RNR NAK timer (RC).
    pub fn min_rnr_timer(&self) -> u8 {
        self.attr.min_rnr_timer
    }
    /// Outstanding READ/atomics this QP initiates.
    pub fn max_rd_atomic(&self) -> u8 {
        self.attr.max_rd_atomic
    }
    /// Outstanding READ/atomics this QP accepts.
    pub fn max_dest_rd_atomic(&self) -> u8 {
        self.attr.max_dest_rd_atomic
    }
    /// Destination GID of the primary path (RoCE; zero without a GRH).
    pub fn dest_gid(&self) -> Gid {
        // SAFETY: raw bytes of the union; every bit pattern is a valid [u8; 16].
        Gid(unsafe { self.attr.ah_attr.grh.dgid.raw })
    }
    /// Source GID index of the primary path.
    pub fn sgid_index(&self) -> u8 {
        self.attr.ah_attr.grh.sgid_index
    }
    /// Transport type it was created with.
    pub fn qp_type(&self) -> Option<QpType> {
        QpType::try_from(self.init.qp_type).ok()
    }
    /// Queue sizes it was created with.
    pub fn init_cap(&self) -> QpCap {
        QpCap::from(self.init.cap)
    }
    /// Whether every send is signaled.
    pub fn sq_sig_all(&self) -> bool {
        self.init.sq_sig_all != 0
    }
    /// The raw attributes.
    pub fn attr_raw(&self) -> &sys::ibv_qp_attr {
        &self.attr
    }
    /// The raw creation attributes (its CQ/SRQ pointers are the QP's own).
    pub fn init_raw(&self) -> &sys::ibv_qp_init_attr {
        &self.init
    }
}

/// Every attribute of the base verbs (STATE through DEST_QPN); rxe refuses the query with
/// EOPNOTSUPP when RATE_LIMIT is asked for too.
const QUERY_MASK: QpAttrMask = QpAttrMask::all().difference(QpAttrMask::RATE_LIMIT);

impl Qp {
    /// Every attribute of the QP and its creation attributes, as the device reports them
    /// (and updates [`state`](Self::state)).
    #[doc(alias = "ibv_query_qp")]
    pub fn query(&self) -> Result<QpQuery> {
        let mut attr = MaybeUninit::<sys::ibv_qp_attr>::zeroed();
        let mut init = MaybeUninit::<sys::ibv_qp_init_attr>::zeroed();
        // SAFETY: live QP; valid out-pointers.
        let r = unsafe {
            sys::ibv_query_qp(
                self.as_raw(),
                attr.as_mut_ptr(),
                QUERY_MASK.bits() as i32,
                init.as_mut_ptr(),
            )
        };
        sys::errno::check_ret(r).map_err(|source| Error::QueryQp {
            qp_num: self.qp_num(),
            source,
        })?;
        // SAFETY: zeroed then filled; integers, pointers and unions of those.
        let attr = unsafe { attr.assume_init() };
        // SAFETY: as above.
        let init = unsafe { init.assume_init() };
        let q = QpQuery { attr, init };
        // Keep the tracked state in step, as query_state does.
        self.query_state()?;
        Ok(q)
    }
}
