//! QP attributes for `ibv_modify_qp`: [`QpAttr`], whose setters (named after the C fields) set
//! the matching [`QpAttrMask`] bit, and the address vector [`AhAttr`].
use bitflags::bitflags;
use verbs_sys as sys;

use super::state::QpState;
use crate::context::{Gid, Mtu};
use crate::mr::AccessFlags;

bitflags! {
    /// Which attributes an `ibv_modify_qp` call sets (`enum ibv_qp_attr_mask`).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
    pub struct QpAttrMask: u32 {
        /// `qp_state`.
        const STATE = 1;
        /// `cur_qp_state`.
        const CUR_STATE = 1 << 1;
        /// `en_sqd_async_notify`.
        const EN_SQD_ASYNC_NOTIFY = 1 << 2;
        /// `qp_access_flags`.
        const ACCESS_FLAGS = 1 << 3;
        /// `pkey_index`.
        const PKEY_INDEX = 1 << 4;
        /// `port_num`.
        const PORT = 1 << 5;
        /// `qkey`.
        const QKEY = 1 << 6;
        /// `ah_attr`.
        const AV = 1 << 7;
        /// `path_mtu`.
        const PATH_MTU = 1 << 8;
        /// `timeout`.
        const TIMEOUT = 1 << 9;
        /// `retry_cnt`.
        const RETRY_CNT = 1 << 10;
        /// `rnr_retry`.
        const RNR_RETRY = 1 << 11;
        /// `rq_psn`.
        const RQ_PSN = 1 << 12;
        /// `max_rd_atomic`.
        const MAX_QP_RD_ATOMIC = 1 << 13;
        /// `alt_ah_attr` and friends.
        const ALT_PATH = 1 << 14;
        /// `min_rnr_timer`.
        const MIN_RNR_TIMER = 1 << 15;
        /// `sq_psn`.
        const SQ_PSN = 1 << 16;
        /// `max_dest_rd_atomic`.
        const MAX_DEST_RD_ATOMIC = 1 << 17;
        /// `path_mig_state`.
        const PATH_MIG_STATE = 1 << 18;
        /// `cap`.
        const CAP = 1 << 19;
        /// `dest_qp_num`.
        const DEST_QPN = 1 << 20;
        /// `rate_limit`.
        const RATE_LIMIT = 1 << 25;
    }
}

/// Global routing header of an address vector (`struct ibv_global_route`): required on RoCE.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GlobalRoute {
    /// Destination GID.
    pub dgid: Gid,
    /// Flow label.
    pub flow_label: u32,
    /// Index of the local GID to send from (picks RoCE v1/v2 and the source IP).
    pub sgid_index: u8,
    /// Hop limit (TTL).
    pub hop_limit: u8,
    /// Traffic class.
    pub traffic_class: u8,
}

impl GlobalRoute {
    /// A GRH to `dgid` from local GID `sgid_index`, hop limit 64.
    pub fn new(dgid: Gid, sgid_index: u8) -> Self {
        GlobalRoute {
            dgid,
            flow_label: 0,
            sgid_index,
            hop_limit: 64,
            traffic_class: 0,
        }
    }
}

/// Address vector (`struct ibv_ah_attr`): where a QP sends to (connected QPs) or an address
/// handle points (UD).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AhAttr {
    /// Destination LID (0 on RoCE).
    pub dlid: u16,
    /// Service level.
    pub sl: u8,
    /// Source path bits.
    pub src_path_bits: u8,
    /// Static rate.
    pub static_rate: u8,
    /// Local port.
    pub port_num: u8,
    /// Global route; `Some` makes it global (needed on RoCE).
    pub grh: Option<GlobalRoute>,
}

impl AhAttr {
    /// A RoCE address vector: port, destination GID and local GID index.
    pub fn roce(port_num: u8, dgid: Gid, sgid_index: u8) -> Self {
        AhAttr {
            dlid: 0,
            sl: 0,
            src_path_bits: 0,
            static_rate: 0,
            port_num,
            grh: Some(GlobalRoute::new(dgid, sgid_index)),
        }
    }

    pub(crate) fn to_sys(self) -> sys::ibv_ah_attr {
        let grh = self.grh.unwrap_or(GlobalRoute {
            dgid: Gid::ZERO,
            flow_label: 0,
            sgid_index: 0,
            hop_limit: 0,
            traffic_class: 0,
        });
        sys::ibv_ah_attr {
            grh: sys::ibv_global_route {
                dgid: grh.dgid.to_sys(),
                flow_label: grh.flow_label,
                sgid_index: grh.sgid_index,
                hop_limit: grh.hop_limit,
                traffic_class: grh.traffic_class,
            },
            dlid: self.dlid,
            sl: self.sl,
            src_path_bits: self.src_path_bits,
            static_rate: self.static_rate,
            is_global: u8::from(self.grh.is_some()),
            port_num: self.port_num,
        }
    }
}

/// Attributes for `ibv_modify_qp`. Each setter is named after the C field and also sets its
/// mask bit, so the mask always says exactly which fields were set.
pub struct QpAttr {
    pub(crate) raw: sys::ibv_qp_attr,
    mask: QpAttrMask,
}

impl Clone for QpAttr {
    fn clone(&self) -> Self {
        QpAttr {
            raw: self.raw_copy(),
            mask: self.mask,
        }
    }
}

impl Default for QpAttr {
    fn default() -> Self {
        QpAttr {
            // SAFETY: ibv_qp_attr is integers and integer unions: all-zero is valid.
            raw: unsafe { std::mem::zeroed() },
            mask: QpAttrMask::empty(),
        }
    }
}

impl std::fmt::Debug for QpAttr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QpAttr")
            .field("mask", &self.mask)
            .field("state", &self.state())
            .finish_non_exhaustive()
    }
}

macro_rules! setters {
    ($($(#[$m:meta])* $name:ident: $ty:ty => $field:ident, $bit:ident;)*) => {
        $(
            $(#[$m])*
            pub fn $name(mut self, v: $ty) -> Self {
                self.raw.$field = v.into();
                self.mask |= QpAttrMask::$bit;
                self
            }
        )*
    };
}

impl QpAttr {
    /// No attributes set.
    pub fn new() -> Self {
        Self::default()
    }

    /// The attributes set so far.
    pub fn mask(&self) -> QpAttrMask {
        self.mask
    }

    /// The target state, if set.
    pub fn state(&self) -> Option<QpState> {
        self.mask
            .contains(QpAttrMask::STATE)
            .then(|| QpState::try_from(self.raw.qp_state).ok())
            .flatten()
    }

    /// Target state (`qp_state`).
    pub fn qp_state(mut self, s: QpState) -> Self {
        self.raw.qp_state = s.into();
        self.mask |= QpAttrMask::STATE;
        self
    }

    /// Assumed current state (`cur_qp_state`).
    pub fn cur_qp_state(mut self, s: QpState) -> Self {
        self.raw.cur_qp_state = s.into();
        self.mask |= QpAttrMask::CUR_STATE;
        self
    }

    /// What remote peers may do to this QP's memory (`qp_access_flags`).
    pub fn qp_access_flags(mut self, a: AccessFlags) -> Self {
        self.raw.qp_access_flags = a.bits();
        self.mask |= QpAttrMask::ACCESS_FLAGS;
        self
    }

    /// Path MTU (`path_mtu`).
    pub fn path_mtu(mut self, m: Mtu) -> Self {
        self.raw.path_mtu = u32::from(m);
        self.mask |= QpAttrMask::PATH_MTU;
        self
    }

    /// Address vector of the remote end (`ah_attr`).
    pub fn ah_attr(mut self, av: AhAttr) -> Self {
        self.raw.ah_attr = av.to_sys();
        self.mask |= QpAttrMask::AV;
        self
    }

    setters! {
        /// P_Key index (`pkey_index`).
        pkey_index: u16 => pkey_index, PKEY_INDEX;
        /// Local port (`port_num`).
        port_num: u8 => port_num, PORT;
        /// Q_Key for UD (`qkey`).
        qkey: u32 => qkey, QKEY;
        /// Local ack timeout exponent, 4.096 µs · 2^t (`timeout`).
        timeout: u8 => timeout, TIMEOUT;
        /// Transport retries (`retry_cnt`, ≤ 7).
        retry_cnt: u8 => retry_cnt, RETRY_CNT;
        /// RNR retries (`rnr_retry`, 7 = infinite).
        rnr_retry: u8 => rnr_retry, RNR_RETRY;
        /// Receive PSN: the peer's first send PSN (`rq_psn`).
        rq_psn: u32 => rq_psn, RQ_PSN;
        /// Send PSN (`sq_psn`).
        sq_psn: u32 => sq_psn, SQ_PSN;
        /// Outstanding READ/atomic requests as initiator (`max_rd_atomic`).
        max_rd_atomic: u8 => max_rd_atomic, MAX_QP_RD_ATOMIC;
        /// Outstanding READ/atomic requests as target (`max_dest_rd_atomic`).
        max_dest_rd_atomic: u8 => max_dest_rd_atomic, MAX_DEST_RD_ATOMIC;
        /// Minimum RNR NAK timer code (`min_rnr_timer`).
        min_rnr_timer: u8 => min_rnr_timer, MIN_RNR_TIMER;
        /// Remote QP number (`dest_qp_num`).
        dest_qp_num: u32 => dest_qp_num, DEST_QPN;
        /// Ask for an event when the send queue is drained (`en_sqd_async_notify`).
        en_sqd_async_notify: u8 => en_sqd_async_notify, EN_SQD_ASYNC_NOTIFY;
        /// Packet pacing rate limit in kbps (`rate_limit`).
        rate_limit: u32 => rate_limit, RATE_LIMIT;
    }

    /// A bitwise copy of the raw struct (rdma-sys does not derive `Clone` for it).
    pub(crate) fn raw_copy(&self) -> sys::ibv_qp_attr {
        // SAFETY: ibv_qp_attr is plain old data (integers and integer unions).
        unsafe { std::ptr::read(&self.raw) }
    }

    /// The raw struct.
    pub fn as_raw(&self) -> &sys::ibv_qp_attr {
        &self.raw
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Applies setter number `i` and returns the bit it must set.
    fn apply(a: QpAttr, i: u8) -> (QpAttr, QpAttrMask) {
        match i % 19 {
            0 => (a.qp_state(QpState::Init), QpAttrMask::STATE),
            1 => (a.cur_qp_state(QpState::Rtr), QpAttrMask::CUR_STATE),
            2 => (
                a.qp_access_flags(AccessFlags::REMOTE_READ),
                QpAttrMask::ACCESS_FLAGS,
            ),
            3 => (a.path_mtu(Mtu::Mtu1024), QpAttrMask::PATH_MTU),
            4 => (a.ah_attr(AhAttr::roce(1, Gid::ZERO, 1)), QpAttrMask::AV),
            5 => (a.pkey_index(0), QpAttrMask::PKEY_INDEX),
            6 => (a.port_num(1), QpAttrMask::PORT),
            7 => (a.qkey(0x1111), QpAttrMask::QKEY),
            8 => (a.timeout(14), QpAttrMask::TIMEOUT),
            9 => (a.retry_cnt(7), QpAttrMask::RETRY_CNT),
            10 => (a.rnr_retry(7), QpAttrMask::RNR_RETRY),
            11 => (a.rq_psn(1), QpAttrMask::RQ_PSN),
            12 => (a.sq_psn(2), QpAttrMask::SQ_PSN),
            13 => (a.max_rd_atomic(1), QpAttrMask::MAX_QP_RD_ATOMIC),
            14 => (a.max_dest_rd_atomic(1), QpAttrMask::MAX_DEST_RD_ATOMIC),
            15 => (a.min_rnr_timer(12), QpAttrMask::MIN_RNR_TIMER),
            16 => (a.dest_qp_num(17), QpAttrMask::DEST_QPN),
            17 => (a.en_sqd_async_notify(1), QpAttrMask::EN_SQD_ASYNC_NOTIFY),
            _ => (a.rate_limit(100), QpAttrMask::RATE_LIMIT),
        }
    }

    proptest! {
        /// Whatever setters are called, in any order, the mask is exactly their bits.
        #[test]
        fn mask_equals_the_fields_set(calls in prop::collection::vec(any::<u8>(), 0..30)) {
            let mut a = QpAttr::new();
            let mut expected = QpAttrMask::empty();
            for i in calls {
                let (next, bit) = apply(a, i);
                a = next;
                expected |= bit;
            }
            prop_assert_eq!(a.mask(), expected);
        }
    }

    #[test]
    fn fields_land_in_the_raw_struct() {
        let a = QpAttr::new()
            .qp_state(QpState::Rtr)
            .dest_qp_num(0x12)
            .ah_attr(AhAttr::roce(1, Gid([9; 16]), 3))
            .path_mtu(Mtu::Mtu1024);
        assert_eq!(a.state(), Some(QpState::Rtr));
        assert_eq!(a.raw.dest_qp_num, 0x12);
        assert_eq!(a.raw.ah_attr.is_global, 1);
        assert_eq!(a.raw.ah_attr.grh.sgid_index, 3);
        assert_eq!(a.raw.path_mtu, sys::ibv_mtu::IBV_MTU_1024);
        assert_eq!(QpAttr::new().state(), None);
    }
}
