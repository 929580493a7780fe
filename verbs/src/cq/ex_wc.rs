//! One completion of an extended-CQ batch ([`ExWc`]), read field by field with the
//! `ibv_wc_read_*` calls.
use std::fmt;
use std::marker::PhantomData;
use std::ptr::NonNull;

use verbs_sys as sys;

use super::ex::{TIMESTAMP, WALLCLOCK};
use super::{WcError, WcFlags, WcOpcode, WcStatus};

/// The current completion of an [`ExPoll`](super::ExPoll) batch, read field by field from the CQ
/// (`ibv_wc_read_*`). It exists only while the session is positioned on it, which is what
/// lets [`Qp::reclaim`](crate::Qp::reclaim) trust it. Per the verbs contract only `wr_id`,
/// status, `qp_num` and the vendor error are meaningful on a failed completion.
pub struct ExWc<'p> {
    cq: NonNull<sys::ibv_cq_ex>,
    wc_flags: u64,
    /// On rxe (see `wc::fix_rxe_flags`).
    rxe: bool,
    _poll: PhantomData<&'p mut ()>,
}

impl ExWc<'_> {
    /// The completion the CQ is positioned on (only an [`ExPoll`](super::ExPoll) makes one).
    pub(super) fn new(cq: NonNull<sys::ibv_cq_ex>, wc_flags: u64, rxe: bool) -> Self {
        ExWc {
            cq,
            wc_flags,
            rxe,
            _poll: PhantomData,
        }
    }
    fn raw(&self) -> *mut sys::ibv_cq_ex {
        self.cq.as_ptr()
    }
    /// The id given to the request.
    pub fn wr_id(&self) -> u64 {
        // SAFETY: live CQ positioned on a completion; plain field.
        unsafe { (*self.raw()).wr_id }
    }
    fn raw_status(&self) -> u32 {
        // SAFETY: as above.
        unsafe { (*self.raw()).status }
    }
    /// `Ok` on success, else the failure as a value.
    pub fn status(&self) -> Result<(), WcError> {
        let code = self.raw_status();
        if code == sys::ibv_wc_status::IBV_WC_SUCCESS {
            return Ok(());
        }
        Err(WcError {
            status: WcStatus::try_from(code).ok(),
            code,
            vendor_err: self.vendor_err(),
            wr_id: self.wr_id(),
            qp_num: self.qp_num(),
        })
    }
    /// Vendor error syndrome.
    #[doc(alias = "ibv_wc_read_vendor_err")]
    pub fn vendor_err(&self) -> u32 {
        // SAFETY: live CQ positioned on a completion; every extended CQ has this reader.
        unsafe { sys::ibv_wc_read_vendor_err(self.raw()) }
    }
    /// The operation (`None` on failure, where the opcode is undefined, or for an unknown one).
    #[doc(alias = "ibv_wc_read_opcode")]
    pub fn opcode(&self) -> Option<WcOpcode> {
        self.status().ok()?;
        // SAFETY: as above.
        WcOpcode::try_from(unsafe { sys::ibv_wc_read_opcode(self.raw()) }).ok()
    }
    /// Bytes transferred (received bytes for RECV).
    #[doc(alias = "ibv_wc_read_byte_len")]
    pub fn byte_len(&self) -> u32 {
        // SAFETY: as above; BYTE_LEN is among the flags every CqEx is created with.
        unsafe { sys::ibv_wc_read_byte_len(self.raw()) }
    }
    /// Completion flags.
    #[doc(alias = "ibv_wc_read_wc_flags")]
    pub fn flags(&self) -> WcFlags {
        // SAFETY: as above.
        let raw = unsafe { sys::ibv_wc_read_wc_flags(self.raw()) };
        WcFlags::from_bits_retain(if self.rxe {
            super::wc::fix_rxe_flags(raw)
        } else {
            raw
        })
    }
    /// The immediate data, host order, when the completion carries one.
    #[doc(alias = "ibv_wc_read_imm_data")]
    pub fn imm(&self) -> Option<u32> {
        self.flags().contains(WcFlags::WITH_IMM).then(|| {
            // SAFETY: as above; IMM is among the creation flags and WITH_IMM says it is valid.
            u32::from_be(unsafe { sys::ibv_wc_read_imm_data(self.raw()) })
        })
    }
    /// The rkey a received SEND_WITH_INV invalidated (host order), when the completion
    /// carries one.
    #[doc(alias = "ibv_wc_read_invalidated_rkey")]
    pub fn invalidated_rkey(&self) -> Option<u32> {
        self.flags().contains(WcFlags::WITH_INV).then(|| {
            // SAFETY: as above; the reader is the immediate-data one (IMM is among the
            // creation flags) and WITH_INV says it holds the invalidated rkey.
            unsafe { sys::ibv_wc_read_invalidated_rkey(self.raw()) }
        })
    }
    /// The local QP the request belonged to.
    #[doc(alias = "ibv_wc_read_qp_num")]
    pub fn qp_num(&self) -> u32 {
        // SAFETY: as above; QP_NUM is among the creation flags.
        unsafe { sys::ibv_wc_read_qp_num(self.raw()) }
    }
    /// The remote QP that sent it (UD receives).
    #[doc(alias = "ibv_wc_read_src_qp")]
    pub fn src_qp(&self) -> u32 {
        // SAFETY: as above; SRC_QP is among the creation flags.
        unsafe { sys::ibv_wc_read_src_qp(self.raw()) }
    }
    /// Service level.
    #[doc(alias = "ibv_wc_read_sl")]
    pub fn sl(&self) -> u8 {
        // SAFETY: as above; SL is among the creation flags.
        unsafe { sys::ibv_wc_read_sl(self.raw()) }
    }
    /// Source LID (InfiniBand).
    #[doc(alias = "ibv_wc_read_slid")]
    pub fn slid(&self) -> u32 {
        // SAFETY: as above; SLID is among the creation flags.
        unsafe { sys::ibv_wc_read_slid(self.raw()) }
    }
    /// The device's raw completion timestamp (in `hca_core_clock` ticks), when the CQ was
    /// created with [`CqExAttr::completion_timestamp`](super::CqExAttr::completion_timestamp).
    #[doc(alias = "ibv_wc_read_completion_ts")]
    pub fn completion_ts(&self) -> Option<u64> {
        (self.wc_flags & TIMESTAMP != 0).then(|| {
            // SAFETY: as above; the CQ was created with this flag, so the reader exists.
            unsafe { sys::ibv_wc_read_completion_ts(self.raw()) }
        })
    }
    /// Completion time in wall-clock nanoseconds, when the CQ was created with
    /// [`CqExAttr::completion_wallclock`](super::CqExAttr::completion_wallclock).
    #[doc(alias = "ibv_wc_read_completion_wallclock_ns")]
    pub fn completion_wallclock_ns(&self) -> Option<u64> {
        (self.wc_flags & WALLCLOCK != 0).then(|| {
            // SAFETY: as above; the CQ was created with this flag, so the reader exists.
            unsafe { sys::ibv_wc_read_completion_wallclock_ns(self.raw()) }
        })
    }
    /// A plain copy of the fields.
    pub fn to_completion(&self) -> super::Completion {
        super::Completion {
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
}

impl fmt::Debug for ExWc<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.to_completion(), f)
    }
}
