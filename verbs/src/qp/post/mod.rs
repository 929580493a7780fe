//! Work requests and posting.
//!
//! Two ways to post:
//! - **Safe, owned**: [`SendRequest`] / [`RecvRequest`] take their memory by value
//!   ([`RegisteredBuf`](crate::RegisteredBuf) / [`RegisteredBufMut`](crate::RegisteredBufMut)). Posting moves it into the QP's in-flight table;
//!   [`Qp::reclaim`](crate::Qp::reclaim) hands it back when a polled completion proves the NIC is done with it.
//!   The library assigns the `wr_id` (returned by the post call).
//! - **Unsafe, borrowed**: [`SendWr`] / [`RecvWr`] carry plain [`LocalSlice`]s and your own
//!   `wr_id`; [`Qp::post_send_unchecked`](crate::Qp::post_send_unchecked) is `unsafe` because nothing keeps that memory alive
//!   or untouched until the completion.
//!
//! A chain of requests is posted with one call (one doorbell) by the `_batch` variants.

mod bind;
mod fixed;
mod inflight;
mod inline;
mod inline_any;
mod prepared;
mod recv;
mod request;
mod send;
mod small;
mod wr_ex;

use std::sync::atomic::{AtomicU64, Ordering};

use bitflags::bitflags;
use verbs_sys as sys;

use crate::ah::Ah;
use crate::mr::{LocalSlice, RemoteSlice};
use crate::Error;

pub(crate) use bind::BindMw;
pub use fixed::FixedBuffers;
pub use inflight::Outstanding;
pub(crate) use inflight::{owned_kind, InFlight};
pub use prepared::{PreparedRecv, PreparedSend};
pub(crate) use recv::{in_reset_error, post_recv_one, post_recv_owned, post_recv_raw};
pub use request::{PostError, Reclaimed, RecvRequest, SendRequest};
pub use wr_ex::{QpEx, SendOps};

/// `wr_id` bit marking a request posted through the owned (safe) API.
pub const OWNED_WR_ID: u64 = 1 << 63;
/// `wr_id` bit marking an owned receive request.
pub(crate) const RECV_WR_ID: u64 = 1 << 62;
/// `wr_id` bit marking a receive of a [`RecvRing`](crate::RecvRing) (with the owned and receive
/// bits): its slot is in the low 32 bits, its ring's number above them.
pub(crate) const RING_WR_ID: u64 = 1 << 61;

/// A C work request that links into a chain through its `next` field.
pub(crate) trait ChainedWr {
    fn set_next(&mut self, next: *mut Self);
}

impl ChainedWr for sys::ibv_send_wr {
    fn set_next(&mut self, next: *mut Self) {
        self.next = next;
    }
}

impl ChainedWr for sys::ibv_recv_wr {
    fn set_next(&mut self, next: *mut Self) {
        self.next = next;
    }
}

/// Links `wrs` into one chain and posts it with `post` (one doorbell). On failure, returns how
/// many requests the device took before the first one it refused, and the error: a full queue
/// (ENOMEM) as [`Error::QueueFull`], anything else through `other`. A failure that names no
/// refused request counts every request as taken: the provider may have queued them all
/// (rxe queues the chain, then fails ringing the doorbell), and a request wrongly counted as
/// posted only keeps its buffers in the in-flight table, while one wrongly counted as refused
/// would hand back memory the device may still use.
pub(crate) fn post_chain<W: ChainedWr>(
    wrs: &mut [W],
    full: impl FnOnce() -> Error,
    other: impl FnOnce(std::io::Error) -> Error,
    post: impl FnOnce(*mut W, *mut *mut W) -> i32,
) -> Result<(), (usize, Error)> {
    if wrs.is_empty() {
        return Ok(());
    }
    let n = wrs.len();
    let base = wrs.as_mut_ptr();
    for i in 1..n {
        wrs[i - 1].set_next(base.wrapping_add(i));
    }
    wrs[n - 1].set_next(std::ptr::null_mut());
    let mut bad = std::ptr::null_mut();
    let r = post(base, &mut bad);
    if r == 0 {
        return Ok(());
    }
    let taken = if bad.is_null() {
        n
    } else {
        // The provider points `bad` at an element of the chain; plain address arithmetic (not
        // `offset_from`) keeps a stray pointer from being undefined behaviour: it counts as
        // all taken, the safe side.
        ((bad as usize).wrapping_sub(base as usize) / std::mem::size_of::<W>()).min(n)
    };
    let e = sys::errno::check_ret(r).unwrap_err();
    let err = if e.raw_os_error() == Some(libc::ENOMEM) {
        full()
    } else {
        other(e)
    };
    crate::trace::refused(&err, true);
    Err((taken, err))
}

/// Ids of owned requests are unique in the process, so a completion names exactly one request.
/// Queues take them [`ID_BLOCK`] at a time ([`IdBlock`]).
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// Ids a queue takes from [`NEXT_ID`] at once. A counter every post increments would move
/// between cores with every post of queues driven from different threads (the two ends of a
/// ping-pong in one process): under emulation such an increment costs about 300 ns against
/// 10 ns for a counter only one thread touches.
const ID_BLOCK: u64 = 4096;

/// The ids a queue's table hands out: a block of [`NEXT_ID`], taken under the table's lock, so
/// a table's ids increase in post order and no two requests of the process share one. It
/// remembers the blocks it took that may still have requests in flight, so a completion can be
/// told to be of this queue's posting ([`issued`](Self::issued)) and not another queue's with
/// the same QP number (on another device, whose ids come from the same process-wide count).
#[derive(Debug, Default)]
pub(crate) struct IdBlock {
    next: u64,
    end: u64,
    /// The first number of each block taken, oldest first, back to the oldest that may still
    /// hold a request in flight ([`forget_before`](Self::forget_before)).
    taken: std::collections::VecDeque<u64>,
}

/// The bits of an owned request's id that say what it is, above its number.
const KIND_BITS: u64 = OWNED_WR_ID | RECV_WR_ID | RING_WR_ID;

impl IdBlock {
    /// The next id, with the owned bit and, for a receive, the receive bit.
    pub(crate) fn take(&mut self, recv: bool) -> u64 {
        if self.next == self.end {
            self.next = NEXT_ID.fetch_add(ID_BLOCK, Ordering::Relaxed);
            self.end = self.next + ID_BLOCK;
            self.taken.push_back(self.next & !KIND_BITS);
        }
        let n = self.next & !KIND_BITS;
        self.next += 1;
        OWNED_WR_ID | if recv { RECV_WR_ID } else { 0 } | n
    }

    /// Whether `id` is one this queue handed out (in a block it still remembers).
    pub(crate) fn issued(&self, id: u64) -> bool {
        let n = id & !KIND_BITS;
        n < self.next & !KIND_BITS
            && self
                .taken
                .iter()
                .rev()
                .any(|&start| n >= start && n - start < ID_BLOCK)
    }

    /// Forgets the blocks wholly older than `oldest`, the queue's oldest request still in
    /// flight (`None`: none, so only the current block stays): no completion of theirs can
    /// finish anything any more.
    pub(crate) fn forget_before(&mut self, oldest: Option<u64>) {
        let floor = oldest.map_or(self.next, |id| id) & !KIND_BITS;
        while self.taken.len() > 1 && self.taken[1] <= floor {
            self.taken.pop_front();
        }
    }
}

bitflags! {
    /// Send request flags (`enum ibv_send_flags`).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
    pub struct SendFlags: u32 {
        /// Wait for earlier READ/atomics to complete first.
        const FENCE = 1;
        /// Produce a completion.
        const SIGNALED = 1 << 1;
        /// Ask for a solicited event at the receiver.
        const SOLICITED = 1 << 2;
        /// Copy the data into the request at post time (no lkey needed).
        const INLINE = 1 << 3;
        /// Offload IP checksum.
        const IP_CSUM = 1 << 4;
    }
}

/// The operation of a send-queue request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WrOp {
    /// SEND: consumes a RECV at the peer.
    Send,
    /// SEND with 32-bit immediate data (host order here).
    SendWithImm(u32),
    /// RDMA WRITE into `remote`.
    RdmaWrite(RemoteSlice),
    /// RDMA WRITE with immediate: also consumes a RECV at the peer, which sees `imm`.
    RdmaWriteWithImm(RemoteSlice, u32),
    /// RDMA READ from `remote` into the local SGEs.
    RdmaRead(RemoteSlice),
    /// 64-bit compare-and-swap at `remote.addr` (8-byte aligned); the old value lands in the
    /// local 8-byte SGE.
    AtomicCmpSwap {
        /// Target (only `addr` and `rkey` are used; `len` must be ≥ 8).
        remote: RemoteSlice,
        /// Value to compare with.
        compare: u64,
        /// Value written if equal.
        swap: u64,
    },
    /// 64-bit fetch-and-add at `remote.addr`; the old value lands in the local SGE.
    AtomicFetchAdd {
        /// Target.
        remote: RemoteSlice,
        /// Value added.
        add: u64,
    },
    /// Bind of a type 2 memory window: the slice it will grant (its address, length and new
    /// rkey). Only [`SendRequest::bind_mw`] makes a postable one.
    BindMw(RemoteSlice),
    /// Local invalidate of this rkey (a type 2 window's).
    LocalInv(u32),
    /// SEND that also invalidates the peer's rkey (RC only).
    SendWithInv(u32),
}

impl WrOp {
    /// Whether the NIC writes the local memory (READ and atomics).
    pub fn writes_local(&self) -> bool {
        matches!(
            self,
            WrOp::RdmaRead(_) | WrOp::AtomicCmpSwap { .. } | WrOp::AtomicFetchAdd { .. }
        )
    }
    /// The capability a device needs for this operation, beyond a plain RC QP.
    pub(crate) fn needs(&self) -> Option<crate::Capability> {
        match self {
            WrOp::AtomicCmpSwap { .. } | WrOp::AtomicFetchAdd { .. } => {
                Some(crate::Capability::Atomics)
            }
            WrOp::SendWithImm(_) | WrOp::RdmaWriteWithImm(..) => {
                Some(crate::Capability::ImmediateData)
            }
            WrOp::BindMw(_) => Some(crate::Capability::MemoryWindows),
            _ => None,
        }
    }
    pub(crate) fn is_atomic(&self) -> bool {
        matches!(
            self,
            WrOp::AtomicCmpSwap { .. } | WrOp::AtomicFetchAdd { .. }
        )
    }
    pub(crate) fn remote(&self) -> Option<RemoteSlice> {
        match *self {
            WrOp::Send
            | WrOp::SendWithImm(_)
            | WrOp::BindMw(_)
            | WrOp::LocalInv(_)
            | WrOp::SendWithInv(_) => None,
            WrOp::RdmaWrite(r) | WrOp::RdmaWriteWithImm(r, _) | WrOp::RdmaRead(r) => Some(r),
            WrOp::AtomicCmpSwap { remote, .. } | WrOp::AtomicFetchAdd { remote, .. } => {
                Some(remote)
            }
        }
    }
    pub(crate) fn fill(&self, wr: &mut sys::ibv_send_wr) {
        use sys::ibv_wr_opcode as o;
        let (opcode, imm) = match *self {
            WrOp::Send => (o::IBV_WR_SEND, None),
            WrOp::SendWithImm(i) => (o::IBV_WR_SEND_WITH_IMM, Some(i)),
            WrOp::RdmaWrite(_) => (o::IBV_WR_RDMA_WRITE, None),
            WrOp::RdmaWriteWithImm(_, i) => (o::IBV_WR_RDMA_WRITE_WITH_IMM, Some(i)),
            WrOp::RdmaRead(_) => (o::IBV_WR_RDMA_READ, None),
            WrOp::AtomicCmpSwap { .. } => (o::IBV_WR_ATOMIC_CMP_AND_SWP, None),
            WrOp::AtomicFetchAdd { .. } => (o::IBV_WR_ATOMIC_FETCH_AND_ADD, None),
            WrOp::BindMw(_) => (o::IBV_WR_BIND_MW, None),
            WrOp::LocalInv(_) => (o::IBV_WR_LOCAL_INV, None),
            WrOp::SendWithInv(_) => (o::IBV_WR_SEND_WITH_INV, None),
        };
        wr.opcode = opcode;
        if let WrOp::LocalInv(rkey) | WrOp::SendWithInv(rkey) = *self {
            wr.imm_data_invalidated_rkey_union.invalidated_rkey = rkey;
        }
        if let Some(i) = imm {
            wr.imm_data_invalidated_rkey_union.imm_data = i.to_be();
        }
        match *self {
            WrOp::RdmaWrite(r) | WrOp::RdmaWriteWithImm(r, _) | WrOp::RdmaRead(r) => {
                wr.wr.rdma = sys::rdma_t {
                    remote_addr: r.addr,
                    rkey: r.rkey,
                }
            }
            WrOp::AtomicCmpSwap {
                remote,
                compare,
                swap,
            } => {
                wr.wr.atomic = sys::atomic_t {
                    remote_addr: remote.addr,
                    compare_add: compare,
                    swap,
                    rkey: remote.rkey,
                }
            }
            WrOp::AtomicFetchAdd { remote, add } => {
                wr.wr.atomic = sys::atomic_t {
                    remote_addr: remote.addr,
                    compare_add: add,
                    swap: 0,
                    rkey: remote.rkey,
                }
            }
            // A bind's fields come from its request (`BindMw::fill`).
            WrOp::Send
            | WrOp::SendWithImm(_)
            | WrOp::BindMw(_)
            | WrOp::LocalInv(_)
            | WrOp::SendWithInv(_) => {}
        }
    }
}

/// Destination of a UD send.
#[derive(Debug, Clone, Copy)]
pub struct UdDest<'a> {
    /// Address handle of the destination port.
    pub ah: &'a Ah,
    /// Destination QP number.
    pub remote_qpn: u32,
    /// Destination Q_Key.
    pub remote_qkey: u32,
}

/// A borrowed send request for [`Qp::post_send_unchecked`](crate::Qp::post_send_unchecked).
#[derive(Debug, Clone, Copy)]
pub struct SendWr<'a> {
    /// Your id, returned in the completion (must not have the [`OWNED_WR_ID`] bit).
    pub wr_id: u64,
    /// The operation.
    pub op: WrOp,
    /// Local memory (with [`SendFlags::INLINE`], any readable memory: it is copied at post).
    pub sges: &'a [LocalSlice],
    /// Flags.
    pub flags: SendFlags,
    /// Destination, for UD QPs only.
    pub ud: Option<UdDest<'a>>,
}

/// A borrowed receive request for [`Qp::post_recv_unchecked`](crate::Qp::post_recv_unchecked).
#[derive(Debug, Clone, Copy)]
pub struct RecvWr<'a> {
    /// Your id (must not have the [`OWNED_WR_ID`] bit).
    pub wr_id: u64,
    /// Where to scatter the message.
    pub sges: &'a [LocalSlice],
}

pub(crate) fn invalid(qp_num: u32, reason: String) -> Error {
    crate::trace::refusing(Error::InvalidWorkRequest { qp_num, reason })
}

/// Refuses the id of a borrowed request that has the bit reserved for owned requests.
pub(crate) fn check_borrowed_wr_id(qp_num: u32, wr_id: u64) -> crate::Result<()> {
    if wr_id & OWNED_WR_ID != 0 {
        return Err(invalid(
            qp_num,
            "wr_id has the reserved OWNED_WR_ID bit".into(),
        ));
    }
    Ok(())
}

/// Borrowed (unchecked) chains up to this long are built on the stack, not in a `Vec`.
pub(crate) const STACK_CHAIN: usize = 8;

/// The raw work requests of one borrowed chain: on the stack up to [`STACK_CHAIN`] (so a single
/// unchecked post allocates nothing), else in a `Vec`. A single request, the common case, has
/// a variant of its own: it clears one raw request, not eight (a send request is 128 bytes).
pub(crate) enum Chain<W> {
    One(W),
    Stack([W; STACK_CHAIN], usize),
    Heap(Vec<W>),
}

impl<W> Chain<W> {
    /// `n` requests, each `empty()` until filled in.
    pub(crate) fn new(n: usize, empty: impl Fn() -> W) -> Chain<W> {
        if n == 1 {
            Chain::One(empty())
        } else if n <= STACK_CHAIN {
            Chain::Stack(std::array::from_fn(|_| empty()), n)
        } else {
            Chain::Heap((0..n).map(|_| empty()).collect())
        }
    }

    pub(crate) fn as_mut_slice(&mut self) -> &mut [W] {
        match self {
            Chain::One(wr) => std::slice::from_mut(wr),
            Chain::Stack(wrs, n) => &mut wrs[..*n],
            Chain::Heap(wrs) => wrs,
        }
    }
}

pub(crate) fn zeroed_send_wr() -> sys::ibv_send_wr {
    // SAFETY: ibv_send_wr is integers, raw pointers and unions of those: all-zero is valid.
    unsafe { std::mem::zeroed() }
}

// LocalSlice is laid out like ibv_sge, so borrowed SGE lists are passed without copying.
const _: () = {
    assert!(std::mem::size_of::<LocalSlice>() == std::mem::size_of::<sys::ibv_sge>());
    assert!(std::mem::align_of::<LocalSlice>() == std::mem::align_of::<sys::ibv_sge>());
    assert!(std::mem::offset_of!(LocalSlice, addr) == std::mem::offset_of!(sys::ibv_sge, addr));
    assert!(std::mem::offset_of!(LocalSlice, len) == std::mem::offset_of!(sys::ibv_sge, length));
    assert!(std::mem::offset_of!(LocalSlice, lkey) == std::mem::offset_of!(sys::ibv_sge, lkey));
};

#[cfg(test)]
mod tests {
    use super::*;

    fn chain() -> [sys::ibv_recv_wr; 3] {
        [0, 1, 2].map(|i| sys::ibv_recv_wr {
            wr_id: i,
            next: std::ptr::null_mut(),
            sg_list: std::ptr::null_mut(),
            num_sge: 0,
        })
    }

    fn post(
        wrs: &mut [sys::ibv_recv_wr],
        ret: i32,
        refused: Option<usize>,
    ) -> Result<(), (usize, Error)> {
        post_chain(
            wrs,
            || Error::QueueFull {
                qp_num: 1,
                queue: "receive",
                depth: 3,
            },
            |source| Error::PostRecv { qp_num: 1, source },
            |first, bad| {
                if let Some(i) = refused {
                    // SAFETY: `bad` is the valid out-pointer post_chain passes.
                    unsafe { *bad = first.wrapping_add(i) };
                }
                ret
            },
        )
    }

    #[test]
    fn a_failed_post_counts_what_the_device_may_hold() {
        let mut wrs = chain();
        assert!(post(&mut wrs, 0, None).is_ok());
        let second: *mut sys::ibv_recv_wr = &mut wrs[1];
        assert_eq!(wrs[0].next, second);
        assert!(wrs[2].next.is_null());
        // The refused request is named: those before it were taken.
        let r = post(&mut wrs, libc::ENOMEM, Some(1));
        assert!(matches!(r, Err((1, Error::QueueFull { .. }))), "{r:?}");
        // A pointer outside the chain counts as all taken.
        let r = post(&mut wrs, libc::EINVAL, Some(7));
        assert!(matches!(r, Err((3, Error::PostRecv { .. }))), "{r:?}");
        // None named (rxe: the chain was queued, then ringing the doorbell failed): all may
        // be queued, so all count as taken and keep their buffers.
        let r = post(&mut wrs, libc::EIO, None);
        assert!(matches!(r, Err((3, Error::PostRecv { .. }))), "{r:?}");
    }
}
