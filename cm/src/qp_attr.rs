//! Turning the raw attributes `rdma_init_qp_attr` computes into a verbs [`QpAttr`], so the QP's
//! transitions go through verbs' checked `Qp::modify`.
use std::io;

use verbs::{AccessFlags, AhAttr, Gid, GlobalRoute, Mtu, QpAttr, QpAttrMask as M, QpState};
use verbs_sys as sys;

/// The [`QpAttr`] setting exactly the fields `mask` names in `raw`.
pub(crate) fn qp_attr_from_raw(raw: &sys::ibv_qp_attr, mask: u32) -> io::Result<QpAttr> {
    let mask = M::from_bits_truncate(mask);
    let bad = |what: &str, v: u32| io::Error::other(format!("unknown {what} {v}"));
    let mut a = QpAttr::new();
    if mask.contains(M::STATE) {
        a = a.qp_state(QpState::try_from(raw.qp_state).map_err(|v| bad("QP state", v))?);
    }
    if mask.contains(M::ACCESS_FLAGS) {
        a = a.qp_access_flags(AccessFlags::from_bits_truncate(raw.qp_access_flags));
    }
    if mask.contains(M::PKEY_INDEX) {
        a = a.pkey_index(raw.pkey_index);
    }
    if mask.contains(M::PORT) {
        a = a.port_num(raw.port_num);
    }
    if mask.contains(M::QKEY) {
        a = a.qkey(raw.qkey);
    }
    if mask.contains(M::AV) {
        let av = &raw.ah_attr;
        let grh = (av.is_global != 0).then_some(GlobalRoute {
            // SAFETY: every bit pattern of the ibv_gid union is a valid byte array.
            dgid: Gid(unsafe { av.grh.dgid.raw }),
            flow_label: av.grh.flow_label,
            sgid_index: av.grh.sgid_index,
            hop_limit: av.grh.hop_limit,
            traffic_class: av.grh.traffic_class,
        });
        a = a.ah_attr(AhAttr {
            dlid: av.dlid,
            sl: av.sl,
            src_path_bits: av.src_path_bits,
            static_rate: av.static_rate,
            port_num: av.port_num,
            grh,
        });
    }
    if mask.contains(M::PATH_MTU) {
        a = a.path_mtu(Mtu::try_from(raw.path_mtu).map_err(|v| bad("MTU", v))?);
    }
    if mask.contains(M::TIMEOUT) {
        a = a.timeout(raw.timeout);
    }
    if mask.contains(M::RETRY_CNT) {
        a = a.retry_cnt(raw.retry_cnt);
    }
    if mask.contains(M::RNR_RETRY) {
        a = a.rnr_retry(raw.rnr_retry);
    }
    if mask.contains(M::RQ_PSN) {
        a = a.rq_psn(raw.rq_psn);
    }
    if mask.contains(M::SQ_PSN) {
        a = a.sq_psn(raw.sq_psn);
    }
    if mask.contains(M::MAX_QP_RD_ATOMIC) {
        a = a.max_rd_atomic(raw.max_rd_atomic);
    }
    if mask.contains(M::MAX_DEST_RD_ATOMIC) {
        a = a.max_dest_rd_atomic(raw.max_dest_rd_atomic);
    }
    if mask.contains(M::MIN_RNR_TIMER) {
        a = a.min_rnr_timer(raw.min_rnr_timer);
    }
    if mask.contains(M::DEST_QPN) {
        a = a.dest_qp_num(raw.dest_qp_num);
    }
    Ok(a)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_exactly_the_masked_fields() {
        // SAFETY: all-zero is a valid ibv_qp_attr.
        let mut raw: sys::ibv_qp_attr = unsafe { std::mem::zeroed() };
        raw.qp_state = QpState::Rtr.into();
        raw.path_mtu = 3;
        raw.dest_qp_num = 77;
        raw.rq_psn = 5;
        raw.max_dest_rd_atomic = 4;
        raw.min_rnr_timer = 12;
        raw.ah_attr.is_global = 1;
        raw.ah_attr.port_num = 1;
        raw.ah_attr.grh.sgid_index = 1;
        raw.qkey = 99; // not in the mask: must not be set
        let mask = M::STATE
            | M::AV
            | M::PATH_MTU
            | M::DEST_QPN
            | M::RQ_PSN
            | M::MAX_DEST_RD_ATOMIC
            | M::MIN_RNR_TIMER;
        let a = qp_attr_from_raw(&raw, mask.bits()).unwrap();
        assert_eq!(a.mask(), mask);
        assert_eq!(a.state(), Some(QpState::Rtr));
        assert_eq!(a.as_raw().dest_qp_num, 77);
        assert_eq!(a.as_raw().ah_attr.grh.sgid_index, 1);
        assert_eq!(a.as_raw().qkey, 0);
    }

    #[test]
    fn unknown_state_is_an_error() {
        // SAFETY: all-zero is a valid ibv_qp_attr.
        let mut raw: sys::ibv_qp_attr = unsafe { std::mem::zeroed() };
        raw.qp_state = 99;
        assert!(qp_attr_from_raw(&raw, M::STATE.bits()).is_err());
    }
}
