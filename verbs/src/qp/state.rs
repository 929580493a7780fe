//! QP types and states, and the state transition tables: InfiniBand's of `man ibv_modify_qp`
//! (which attributes each transition requires and allows, per QP type), and iWARP's, whose
//! queue pairs take no P_Key, address vector or PSNs (the iWARP CM connects them).
use super::attr::QpAttrMask as M;
use crate::Transport;
use verbs_sys as sys;

/// Transport service of a QP (`enum ibv_qp_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum QpType {
    /// Reliable connected: all opcodes, acknowledged, in order.
    Rc,
    /// Unreliable connected: SEND and RDMA WRITE, no acks.
    Uc,
    /// Unreliable datagram: SEND to any QP through an address handle, MTU-sized.
    Ud,
}

impl TryFrom<u32> for QpType {
    type Error = u32;
    fn try_from(v: u32) -> Result<Self, u32> {
        use sys::ibv_qp_type as t;
        Ok(match v {
            t::IBV_QPT_RC => Self::Rc,
            t::IBV_QPT_UC => Self::Uc,
            t::IBV_QPT_UD => Self::Ud,
            other => return Err(other),
        })
    }
}

impl From<QpType> for u32 {
    fn from(t: QpType) -> u32 {
        use sys::ibv_qp_type as c;
        match t {
            QpType::Rc => c::IBV_QPT_RC,
            QpType::Uc => c::IBV_QPT_UC,
            QpType::Ud => c::IBV_QPT_UD,
        }
    }
}

/// QP state (`enum ibv_qp_state`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum QpState {
    /// Just created or reset: nothing can be posted.
    Reset,
    /// Initialised: receives can be posted.
    Init,
    /// Ready to receive.
    Rtr,
    /// Ready to send.
    Rts,
    /// Send queue drained.
    Sqd,
    /// Send queue error (UC/UD).
    Sqe,
    /// Error: outstanding requests complete with flush errors.
    Err,
}

impl QpState {
    /// Every state.
    pub const ALL: [QpState; 7] = [
        QpState::Reset,
        QpState::Init,
        QpState::Rtr,
        QpState::Rts,
        QpState::Sqd,
        QpState::Sqe,
        QpState::Err,
    ];

    /// Position in [`ALL`](Self::ALL).
    pub(crate) const fn index(self) -> u8 {
        self as u8
    }
}

impl TryFrom<u32> for QpState {
    type Error = u32;
    fn try_from(v: u32) -> Result<Self, u32> {
        use sys::ibv_qp_state as s;
        Ok(match v {
            s::IBV_QPS_RESET => Self::Reset,
            s::IBV_QPS_INIT => Self::Init,
            s::IBV_QPS_RTR => Self::Rtr,
            s::IBV_QPS_RTS => Self::Rts,
            s::IBV_QPS_SQD => Self::Sqd,
            s::IBV_QPS_SQE => Self::Sqe,
            s::IBV_QPS_ERR => Self::Err,
            other => return Err(other),
        })
    }
}

impl From<QpState> for u32 {
    fn from(s: QpState) -> u32 {
        use sys::ibv_qp_state as c;
        match s {
            QpState::Reset => c::IBV_QPS_RESET,
            QpState::Init => c::IBV_QPS_INIT,
            QpState::Rtr => c::IBV_QPS_RTR,
            QpState::Rts => c::IBV_QPS_RTS,
            QpState::Sqd => c::IBV_QPS_SQD,
            QpState::Sqe => c::IBV_QPS_SQE,
            QpState::Err => c::IBV_QPS_ERR,
        }
    }
}

/// Attributes a transition requires and those it also allows (besides `STATE`, always
/// required, and `CUR_STATE`, always allowed) on a device of `transport`. `None`: the
/// transition does not exist.
pub fn transition(
    transport: Transport,
    qp_type: QpType,
    from: QpState,
    to: QpState,
) -> Option<(M, M)> {
    match transport {
        Transport::Iwarp => iwarp_transition(qp_type, from, to),
        _ => ib_transition(qp_type, from, to),
    }
}

/// iWARP's table: RC only; what the RDMA CM sets (access flags into Init and Rtr, the port
/// throughout; the kernel's `iw_cm_init_qp_attr`), and nothing of InfiniBand's path.
fn iwarp_transition(qp_type: QpType, from: QpState, to: QpState) -> Option<(M, M)> {
    use QpState::*;
    let none = M::empty();
    if qp_type != QpType::Rc {
        return None;
    }
    Some(match (from, to) {
        (_, Reset) | (_, Err) => (none, none),
        (Reset, Init) => (M::ACCESS_FLAGS, M::PORT),
        (Init, Init) | (Init, Rtr) | (Rtr, Rts) => (none, M::ACCESS_FLAGS | M::PORT),
        (Rts, Rts) | (Sqd, Rts) => (none, M::ACCESS_FLAGS),
        (Rts, Sqd) => (none, M::EN_SQD_ASYNC_NOTIFY),
        _ => return None,
    })
}

/// InfiniBand's (and RoCE's) table, of `man ibv_modify_qp`.
fn ib_transition(qp_type: QpType, from: QpState, to: QpState) -> Option<(M, M)> {
    use QpState::*;
    use QpType::*;
    let none = M::empty();
    Some(match (from, to) {
        (_, Reset) | (_, Err) => (none, none),
        (Reset, Init) => match qp_type {
            Rc | Uc => (M::PKEY_INDEX | M::PORT | M::ACCESS_FLAGS, none),
            Ud => (M::PKEY_INDEX | M::PORT | M::QKEY, none),
        },
        (Init, Init) => match qp_type {
            Rc | Uc => (none, M::PKEY_INDEX | M::PORT | M::ACCESS_FLAGS),
            Ud => (none, M::PKEY_INDEX | M::PORT | M::QKEY),
        },
        (Init, Rtr) => match qp_type {
            Rc => (
                M::AV
                    | M::PATH_MTU
                    | M::DEST_QPN
                    | M::RQ_PSN
                    | M::MAX_DEST_RD_ATOMIC
                    | M::MIN_RNR_TIMER,
                M::ALT_PATH | M::ACCESS_FLAGS | M::PKEY_INDEX,
            ),
            Uc => (
                M::AV | M::PATH_MTU | M::DEST_QPN | M::RQ_PSN,
                M::ALT_PATH | M::ACCESS_FLAGS | M::PKEY_INDEX,
            ),
            Ud => (none, M::PKEY_INDEX | M::QKEY),
        },
        (Rtr, Rts) => match qp_type {
            Rc => (
                M::SQ_PSN | M::TIMEOUT | M::RETRY_CNT | M::RNR_RETRY | M::MAX_QP_RD_ATOMIC,
                M::ALT_PATH | M::ACCESS_FLAGS | M::MIN_RNR_TIMER | M::PATH_MIG_STATE,
            ),
            Uc => (M::SQ_PSN, M::ALT_PATH | M::ACCESS_FLAGS | M::PATH_MIG_STATE),
            Ud => (M::SQ_PSN, M::QKEY),
        },
        (Rts, Rts) => match qp_type {
            Rc => (
                none,
                M::ACCESS_FLAGS | M::ALT_PATH | M::PATH_MIG_STATE | M::MIN_RNR_TIMER,
            ),
            Uc => (none, M::ACCESS_FLAGS | M::ALT_PATH | M::PATH_MIG_STATE),
            Ud => (none, M::QKEY),
        },
        (Rts, Sqd) => (none, M::EN_SQD_ASYNC_NOTIFY),
        (Sqd, Rts) => match qp_type {
            Rc => (
                none,
                M::ACCESS_FLAGS | M::ALT_PATH | M::PATH_MIG_STATE | M::MIN_RNR_TIMER,
            ),
            Uc => (none, M::ACCESS_FLAGS | M::ALT_PATH | M::PATH_MIG_STATE),
            Ud => (none, M::QKEY),
        },
        (Sqe, Rts) => match qp_type {
            Rc => return None,
            Uc => (none, M::ACCESS_FLAGS),
            Ud => (none, M::QKEY),
        },
        _ => return None,
    })
}

/// Checks `mask` against the table of `transport` for `from -> to`; `Err` says what is wrong.
pub fn check_transition(
    transport: Transport,
    qp_type: QpType,
    from: QpState,
    to: QpState,
    mask: M,
) -> Result<(), String> {
    let (required, optional) = transition(transport, qp_type, from, to).ok_or_else(|| {
        format!("is not a transition of a {qp_type:?} QP on a device of transport {transport:?}")
    })?;
    let required = required | M::STATE;
    let allowed = required | optional | M::CUR_STATE;
    let missing = required - mask;
    if !missing.is_empty() {
        return Err(format!("lacks required attributes {missing:?}"));
    }
    let extra = mask - allowed;
    if !extra.is_empty() {
        return Err(format!("does not allow attributes {extra:?}"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const IB: Transport = Transport::Ib;

    #[test]
    fn conversions_round_trip() {
        for s in QpState::ALL {
            assert_eq!(QpState::try_from(u32::from(s)), Ok(s));
            assert_eq!(QpState::ALL[usize::from(s.index())], s);
        }
        for t in [QpType::Rc, QpType::Uc, QpType::Ud] {
            assert_eq!(QpType::try_from(u32::from(t)), Ok(t));
        }
        assert_eq!(QpState::try_from(7), Err(7));
        assert_eq!(QpType::try_from(1), Err(1));
    }

    #[test]
    fn the_classic_rc_bring_up_is_valid_and_lacks_are_caught() {
        let init = M::STATE | M::PKEY_INDEX | M::PORT | M::ACCESS_FLAGS;
        assert!(check_transition(IB, QpType::Rc, QpState::Reset, QpState::Init, init).is_ok());
        let e = check_transition(
            IB,
            QpType::Rc,
            QpState::Reset,
            QpState::Init,
            M::STATE | M::PORT,
        )
        .unwrap_err();
        assert!(
            e.contains("PKEY_INDEX") && e.contains("ACCESS_FLAGS"),
            "{e}"
        );
        // A UD QP takes a Q_Key, not access flags.
        assert!(check_transition(IB, QpType::Ud, QpState::Reset, QpState::Init, init).is_err());
        assert!(check_transition(IB, QpType::Rc, QpState::Reset, QpState::Rts, M::STATE).is_err());
        assert!(check_transition(IB, QpType::Rc, QpState::Rts, QpState::Err, M::STATE).is_ok());
    }

    #[test]
    fn an_iwarp_qp_comes_up_with_what_the_rdma_cm_sets_and_no_p_key() {
        let iw = Transport::Iwarp;
        let (rc, init) = (QpType::Rc, M::STATE | M::ACCESS_FLAGS | M::PORT);
        // What rdma_init_qp_attr gives an iWARP QP: Init and Rtr with access flags and the
        // port, Rts with the port.
        assert!(check_transition(iw, rc, QpState::Reset, QpState::Init, init).is_ok());
        assert!(check_transition(iw, rc, QpState::Init, QpState::Rtr, init).is_ok());
        let rts = M::STATE | M::PORT;
        assert!(check_transition(iw, rc, QpState::Rtr, QpState::Rts, rts).is_ok());
        // The same Init on InfiniBand lacks the P_Key index.
        let e = check_transition(IB, rc, QpState::Reset, QpState::Init, init).unwrap_err();
        assert!(e.contains("PKEY_INDEX"), "{e}");
        // iWARP has no P_Key, path or PSN, and no UD or UC.
        let e = check_transition(iw, rc, QpState::Reset, QpState::Init, init | M::PKEY_INDEX)
            .unwrap_err();
        assert!(e.contains("PKEY_INDEX"), "{e}");
        assert!(check_transition(iw, rc, QpState::Init, QpState::Rtr, init | M::AV).is_err());
        let e = check_transition(iw, QpType::Ud, QpState::Reset, QpState::Init, init).unwrap_err();
        assert!(e.contains("Iwarp"), "{e}");
        assert!(check_transition(iw, rc, QpState::Reset, QpState::Init, M::STATE).is_err());
    }

    fn state() -> impl Strategy<Value = QpState> {
        prop::sample::select(QpState::ALL.to_vec())
    }
    fn qp_type() -> impl Strategy<Value = QpType> {
        prop::sample::select(vec![QpType::Rc, QpType::Uc, QpType::Ud])
    }
    fn transport() -> impl Strategy<Value = Transport> {
        prop::sample::select(vec![Transport::Ib, Transport::Iwarp])
    }

    proptest! {
        /// The check accepts exactly the masks between "required" and "required + optional".
        #[test]
        fn check_matches_the_table(
            tr in transport(),
            t in qp_type(),
            from in state(),
            to in state(),
            bits: u32,
        ) {
            let mask = M::from_bits_truncate(bits) | M::STATE;
            let ok = check_transition(tr, t, from, to, mask).is_ok();
            let expected = match transition(tr, t, from, to) {
                None => false,
                Some((req, opt)) => mask.contains(req)
                    && (req | opt | M::STATE | M::CUR_STATE).contains(mask),
            };
            prop_assert_eq!(ok, expected);
        }

        /// Moving to Reset or Err is always possible with the state alone (on iWARP, of
        /// the RC QPs it has).
        #[test]
        fn reset_and_error_from_anywhere(t in qp_type(), from in state()) {
            for tr in [Transport::Ib, Transport::Iwarp] {
                if tr == Transport::Iwarp && t != QpType::Rc {
                    continue;
                }
                prop_assert!(check_transition(tr, t, from, QpState::Reset, M::STATE).is_ok());
                prop_assert!(check_transition(tr, t, from, QpState::Err, M::STATE).is_ok());
            }
        }
    }
}
