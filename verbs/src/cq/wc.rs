//! Work completions: status (as an error value), opcode, flags and the completion itself.
use std::fmt;

use bitflags::bitflags;
use verbs_sys as sys;

c_enum! {
    /// Why a work request failed (`enum ibv_wc_status`, without `IBV_WC_SUCCESS`).
    WcStatus: u32 {
        /// Local length error (e.g. a RECV buffer too small for the message).
        LocLenErr = sys::ibv_wc_status::IBV_WC_LOC_LEN_ERR,
        /// Local QP operation error.
        LocQpOpErr = sys::ibv_wc_status::IBV_WC_LOC_QP_OP_ERR,
        /// Local EE context operation error.
        LocEecOpErr = sys::ibv_wc_status::IBV_WC_LOC_EEC_OP_ERR,
        /// Local protection error (bad lkey or address).
        LocProtErr = sys::ibv_wc_status::IBV_WC_LOC_PROT_ERR,
        /// Flushed: the QP was in error when the request was processed.
        WrFlushErr = sys::ibv_wc_status::IBV_WC_WR_FLUSH_ERR,
        /// Memory window bind error.
        MwBindErr = sys::ibv_wc_status::IBV_WC_MW_BIND_ERR,
        /// Bad response.
        BadRespErr = sys::ibv_wc_status::IBV_WC_BAD_RESP_ERR,
        /// Local access error.
        LocAccessErr = sys::ibv_wc_status::IBV_WC_LOC_ACCESS_ERR,
        /// Remote invalid request.
        RemInvReqErr = sys::ibv_wc_status::IBV_WC_REM_INV_REQ_ERR,
        /// Remote access error: bad rkey, rights or bounds at the responder.
        RemAccessErr = sys::ibv_wc_status::IBV_WC_REM_ACCESS_ERR,
        /// Remote operation error.
        RemOpErr = sys::ibv_wc_status::IBV_WC_REM_OP_ERR,
        /// Transport retries exhausted (peer unreachable).
        RetryExcErr = sys::ibv_wc_status::IBV_WC_RETRY_EXC_ERR,
        /// Receiver-not-ready retries exhausted (no RECV posted at the peer).
        RnrRetryExcErr = sys::ibv_wc_status::IBV_WC_RNR_RETRY_EXC_ERR,
        /// Local RDD violation.
        LocRddViolErr = sys::ibv_wc_status::IBV_WC_LOC_RDD_VIOL_ERR,
        /// Remote invalid RD request.
        RemInvRdReqErr = sys::ibv_wc_status::IBV_WC_REM_INV_RD_REQ_ERR,
        /// Remote aborted.
        RemAbortErr = sys::ibv_wc_status::IBV_WC_REM_ABORT_ERR,
        /// Invalid EE context number.
        InvEecnErr = sys::ibv_wc_status::IBV_WC_INV_EECN_ERR,
        /// Invalid EE context state.
        InvEecStateErr = sys::ibv_wc_status::IBV_WC_INV_EEC_STATE_ERR,
        /// Fatal error.
        FatalErr = sys::ibv_wc_status::IBV_WC_FATAL_ERR,
        /// Response timeout.
        RespTimeoutErr = sys::ibv_wc_status::IBV_WC_RESP_TIMEOUT_ERR,
        /// General error.
        GeneralErr = sys::ibv_wc_status::IBV_WC_GENERAL_ERR,
        /// Tag matching error.
        TmErr = sys::ibv_wc_status::IBV_WC_TM_ERR,
        /// Tag matching rendezvous incomplete.
        TmRndvIncomplete = sys::ibv_wc_status::IBV_WC_TM_RNDV_INCOMPLETE,
    }
}

c_enum! {
    /// What a successful completion completed (`enum ibv_wc_opcode`).
    WcOpcode: u32 {
        /// SEND / SEND_WITH_IMM.
        Send = sys::ibv_wc_opcode::IBV_WC_SEND,
        /// RDMA WRITE / WRITE_WITH_IMM (requester side).
        RdmaWrite = sys::ibv_wc_opcode::IBV_WC_RDMA_WRITE,
        /// RDMA READ.
        RdmaRead = sys::ibv_wc_opcode::IBV_WC_RDMA_READ,
        /// Atomic compare-and-swap.
        CompSwap = sys::ibv_wc_opcode::IBV_WC_COMP_SWAP,
        /// Atomic fetch-and-add.
        FetchAdd = sys::ibv_wc_opcode::IBV_WC_FETCH_ADD,
        /// Memory window bind.
        BindMw = sys::ibv_wc_opcode::IBV_WC_BIND_MW,
        /// Local invalidate.
        LocalInv = sys::ibv_wc_opcode::IBV_WC_LOCAL_INV,
        /// TCP segmentation offload send.
        Tso = sys::ibv_wc_opcode::IBV_WC_TSO,
        /// A received SEND.
        Recv = sys::ibv_wc_opcode::IBV_WC_RECV,
        /// A received RDMA WRITE_WITH_IMM (consumes a RECV, carries the immediate).
        RecvRdmaWithImm = sys::ibv_wc_opcode::IBV_WC_RECV_RDMA_WITH_IMM,
    }
}

bitflags! {
    /// Completion flags (`enum ibv_wc_flags`).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
    pub struct WcFlags: u32 {
        /// A GRH precedes the data in the receive buffer (UD).
        const GRH = 1;
        /// The completion carries immediate data.
        const WITH_IMM = 1 << 1;
        /// IP checksum verified.
        const IP_CSUM_OK = 1 << 2;
        /// The completion carries an invalidated rkey.
        const WITH_INV = 1 << 3;
        /// Tag matching sync request.
        const TM_SYNC_REQ = 1 << 4;
        /// Tag matched.
        const TM_MATCH = 1 << 5;
        /// Tag matching data valid.
        const TM_DATA_VALID = 1 << 6;
    }
}

/// rxe writes the kernel's `IB_WC_WITH_INVALIDATE` (1 << 2) where userspace reads
/// `IBV_WC_IP_CSUM_OK`, and never reports a checksum: on rxe that bit without `WITH_INV` means
/// "with invalidate". (A provider that translates sets `WITH_INV` itself and is left alone.)
pub(crate) fn fix_rxe_flags(flags: u32) -> u32 {
    let (csum, inv) = (WcFlags::IP_CSUM_OK.bits(), WcFlags::WITH_INV.bits());
    if flags & csum != 0 && flags & inv == 0 {
        (flags & !csum) | inv
    } else {
        flags
    }
}

impl WcStatus {
    /// What the status means, in words (as `ibv_wc_status_str`), with the likely cause where
    /// there is a usual one.
    pub fn describe(self) -> &'static str {
        use WcStatus::*;
        match self {
            LocLenErr => "local length error: a receive buffer is smaller than the message, or a send is longer than the port allows",
            LocQpOpErr => "local QP operation error: the request does not fit the QP (e.g. more SGEs or inline data than it was created for)",
            LocEecOpErr => "local EE context operation error",
            LocProtErr => "local protection error: an SGE's lkey, address or rights do not match a region of this QP's PD",
            WrFlushErr => "flushed: the QP was in the error state (after an earlier failure or a disconnect), the request was not executed",
            MwBindErr => "memory window bind error",
            BadRespErr => "bad response from the peer",
            LocAccessErr => "local access error: the region lacks the rights the operation needs (e.g. LOCAL_WRITE for a READ target)",
            RemInvReqErr => "remote invalid request: the peer's QP cannot take this operation (opcode not allowed, message too long for its receive)",
            RemAccessErr => "remote access error: the peer refused the rkey, the address range or the rights (REMOTE_WRITE/READ/ATOMIC) of its region",
            RemOpErr => "remote operation error: the peer could not complete the operation",
            RetryExcErr => "transport retry counter exceeded: the peer is gone or unreachable (no ACK within the retries)",
            RnrRetryExcErr => "RNR retry counter exceeded: the peer had no receive posted for too long",
            LocRddViolErr => "local RDD violation",
            RemInvRdReqErr => "remote invalid RD request",
            RemAbortErr => "remote aborted",
            InvEecnErr => "invalid EE context number",
            InvEecStateErr => "invalid EE context state",
            FatalErr => "fatal error of the device",
            RespTimeoutErr => "response timeout",
            GeneralErr => "general error",
            TmErr => "tag matching error",
            TmRndvIncomplete => "tag matching rendezvous incomplete",
        }
    }
}

impl fmt::Display for WcStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.describe())
    }
}

/// A failed work request, as a value: status, vendor error, and which request. Its message
/// says what the status means.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error(
    "work request {wr_id:#x} on QP {qp_num} failed: {} (status {code}, vendor error {vendor_err:#x})",
    .status.map_or("unknown status", WcStatus::describe)
)]
pub struct WcError {
    /// The status; `None` for a code newer than this crate (see `code`).
    pub status: Option<WcStatus>,
    /// The raw status code.
    pub code: u32,
    /// Vendor-specific error syndrome.
    pub vendor_err: u32,
    /// The failed request's id.
    pub wr_id: u64,
    /// Its QP.
    pub qp_num: u32,
}

/// One completion as polled from a CQ: a view of the CQ entry, only obtainable by polling.
///
/// Being unforgeable is what lets `Qp::reclaim` trust it to hand back buffers. Copy what you
/// need with [`to_completion`](Self::to_completion). Per the verbs contract only `wr_id`,
/// status, `qp_num` and `vendor_err` are meaningful on a failed completion.
#[repr(transparent)]
pub struct WorkCompletion(pub(crate) sys::ibv_wc);

impl WorkCompletion {
    /// The id given to the request.
    pub fn wr_id(&self) -> u64 {
        self.0.wr_id
    }
    /// `Ok` on success, else the failure as a value.
    pub fn status(&self) -> Result<(), WcError> {
        if self.0.status == sys::ibv_wc_status::IBV_WC_SUCCESS {
            return Ok(());
        }
        Err(WcError {
            status: WcStatus::try_from(self.0.status).ok(),
            code: self.0.status,
            vendor_err: self.0.vendor_err,
            wr_id: self.0.wr_id,
            qp_num: self.0.qp_num,
        })
    }
    /// Whether the request succeeded.
    pub fn is_success(&self) -> bool {
        self.status().is_ok()
    }
    /// The operation (`None` on failure, where the opcode is undefined, or for an unknown one).
    pub fn opcode(&self) -> Option<WcOpcode> {
        self.status().ok()?;
        WcOpcode::try_from(self.0.opcode).ok()
    }
    /// Bytes transferred (received bytes for RECV).
    pub fn byte_len(&self) -> u32 {
        self.0.byte_len
    }
    /// Completion flags.
    pub fn flags(&self) -> WcFlags {
        WcFlags::from_bits_retain(self.0.wc_flags)
    }
    /// The immediate data, host order, when the completion carries one.
    pub fn imm(&self) -> Option<u32> {
        self.flags().contains(WcFlags::WITH_IMM).then(|| {
            // SAFETY: WITH_IMM says imm_data is the valid union member; any u32 is valid.
            u32::from_be(unsafe { self.0.imm_data_invalidated_rkey_union.imm_data })
        })
    }
    /// The rkey a received SEND_WITH_INV invalidated (host order), when the completion
    /// carries one ([`WcFlags::WITH_INV`]).
    pub fn invalidated_rkey(&self) -> Option<u32> {
        // SAFETY: both members of the union are u32, so either read is defined; WITH_INV
        // says this one is meaningful.
        let rkey = unsafe { self.0.imm_data_invalidated_rkey_union.invalidated_rkey };
        self.flags().contains(WcFlags::WITH_INV).then_some(rkey)
    }
    /// The local QP the request belonged to.
    pub fn qp_num(&self) -> u32 {
        self.0.qp_num
    }
    /// The remote QP that sent it (UD receives).
    pub fn src_qp(&self) -> u32 {
        self.0.src_qp
    }
    /// Source LID (InfiniBand).
    pub fn slid(&self) -> u16 {
        self.0.slid
    }
    /// Service level.
    pub fn sl(&self) -> u8 {
        self.0.sl
    }
    /// P_Key index (GSI QPs).
    pub fn pkey_index(&self) -> u16 {
        self.0.pkey_index
    }
    /// A plain copy of the fields.
    pub fn to_completion(&self) -> Completion {
        Completion {
            wr_id: self.wr_id(),
            status: self.status(),
            opcode: self.opcode(),
            byte_len: self.byte_len(),
            imm: self.imm(),
            invalidated_rkey: self.invalidated_rkey(),
            qp_num: self.qp_num(),
            src_qp: self.src_qp(),
            flags: self.flags(),
        }
    }
    /// The raw entry.
    pub fn as_raw(&self) -> &sys::ibv_wc {
        &self.0
    }
}

impl fmt::Debug for WorkCompletion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.to_completion(), f)
    }
}

/// A plain copy of a [`WorkCompletion`]'s fields (cannot be used to reclaim buffers).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Completion {
    /// The request id.
    pub wr_id: u64,
    /// Success or the failure.
    pub status: Result<(), WcError>,
    /// The operation (success only).
    pub opcode: Option<WcOpcode>,
    /// Bytes transferred.
    pub byte_len: u32,
    /// Immediate data, host order.
    pub imm: Option<u32>,
    /// The rkey a received SEND_WITH_INV invalidated.
    pub invalidated_rkey: Option<u32>,
    /// Local QP number.
    pub qp_num: u32,
    /// Source QP number (UD).
    pub src_qp: u32,
    /// Flags.
    pub flags: WcFlags,
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn rxe_invalidate_flag_is_read_as_with_inv() {
        let (grh, csum, inv) = (WcFlags::GRH, WcFlags::IP_CSUM_OK, WcFlags::WITH_INV);
        let fixed = |f: WcFlags| WcFlags::from_bits_retain(fix_rxe_flags(f.bits()));
        assert_eq!(fixed(grh | csum), grh | inv);
        // Translated already, or nothing to translate: left alone.
        assert_eq!(fixed(grh | inv), grh | inv);
        assert_eq!(fixed(csum | inv), csum | inv);
        assert_eq!(fixed(grh | WcFlags::WITH_IMM), grh | WcFlags::WITH_IMM);
    }

    proptest! {
        #[test]
        fn status_and_opcode_round_trip(v in 0u32..300) {
            if let Ok(s) = WcStatus::try_from(v) {
                prop_assert_eq!(u32::from(s), v);
            } else {
                prop_assert!(v == 0 || v > 23);
            }
            if let Ok(o) = WcOpcode::try_from(v) {
                prop_assert_eq!(u32::from(o), v);
            }
        }
    }

    fn wc(status: u32, flags: u32, imm_be: u32) -> WorkCompletion {
        // SAFETY: ibv_wc is plain integers and an integer union; all-zero is valid.
        let mut raw: sys::ibv_wc = unsafe { std::mem::zeroed() };
        raw.wr_id = 42;
        raw.status = status;
        raw.opcode = sys::ibv_wc_opcode::IBV_WC_RECV;
        raw.wc_flags = flags;
        raw.vendor_err = 0x99;
        raw.imm_data_invalidated_rkey_union.imm_data = imm_be;
        WorkCompletion(raw)
    }

    #[test]
    fn fields_decode() {
        let ok = wc(0, 2, 0x1234_5678u32.to_be());
        assert!(ok.is_success());
        assert_eq!(ok.imm(), Some(0x1234_5678));
        assert_eq!(ok.opcode(), Some(WcOpcode::Recv));
        let no_imm = wc(0, 0, 5);
        assert_eq!(no_imm.imm(), None);
        let err = wc(10, 0, 0).status().unwrap_err();
        assert_eq!(err.status, Some(WcStatus::RemAccessErr));
        assert_eq!((err.vendor_err, err.wr_id), (0x99, 42));
        assert_eq!(wc(10, 0, 0).opcode(), None);
        assert_eq!(wc(77, 0, 0).status().unwrap_err().status, None);
    }

    #[test]
    fn failures_print_their_status_in_words() {
        let text = wc(10, 0, 0).status().unwrap_err().to_string();
        assert!(
            text.contains("remote access error") && text.contains("rkey"),
            "{text}"
        );
        assert!(
            text.contains("0x2a") && text.contains("status 10"),
            "{text}"
        );
        let retry = wc(12, 0, 0).status().unwrap_err().to_string();
        assert!(retry.contains("retry counter exceeded: the peer is gone or unreachable"));
        assert!(wc(77, 0, 0)
            .status()
            .unwrap_err()
            .to_string()
            .contains("unknown status"));
        // Every status has words of its own.
        let all: Vec<&str> = (1..=23u32)
            .filter_map(|c| WcStatus::try_from(c).ok())
            .map(WcStatus::describe)
            .collect();
        assert_eq!(all.len(), 23);
        let mut unique = all.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), all.len());
    }
}
