//! Extended completion queues (`ibv_create_cq_ex`): a batch poll (`ibv_start_poll` /
//! `ibv_next_poll` / `ibv_end_poll`) as a lending, borrow-checked session, and completion
//! timestamps where the device has them.
use std::fmt;
use std::marker::PhantomData;
use std::ptr::NonNull;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use verbs_sys as sys;

use super::{CompletionChannel, Cq, CqInner, ExWc};
use crate::context::Context;
use crate::{Error, Result};

/// What [`Context::create_cq_ex`] creates (`struct ibv_cq_init_attr_ex`).
///
/// Every extended CQ reports the standard fields (byte count, immediate data, QP number,
/// source QP, SLID, SL, DLID path bits); timestamps are asked for separately, since few
/// devices have them.
#[derive(Debug, Default)]
pub struct CqExAttr {
    cqe: u32,
    channel: Option<CompletionChannel>,
    comp_vector: u32,
    timestamp: bool,
    wallclock: bool,
}

impl CqExAttr {
    /// A CQ of at least `cqe` entries, without channel, on completion vector 0.
    pub fn new(cqe: u32) -> Self {
        CqExAttr {
            cqe,
            ..Self::default()
        }
    }
    /// Signals events on this channel (which the CQ then owns).
    pub fn channel(mut self, channel: CompletionChannel) -> Self {
        self.channel = Some(channel);
        self
    }
    /// Completion vector for events (below [`Context::num_comp_vectors`]).
    pub fn comp_vector(mut self, vector: u32) -> Self {
        self.comp_vector = vector;
        self
    }
    /// Reports the device's raw completion timestamp (`IBV_WC_EX_WITH_COMPLETION_TIMESTAMP`).
    pub fn completion_timestamp(mut self, yes: bool) -> Self {
        self.timestamp = yes;
        self
    }
    /// Reports the completion time in wall-clock nanoseconds
    /// (`IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK`).
    pub fn completion_wallclock(mut self, yes: bool) -> Self {
        self.wallclock = yes;
        self
    }
}

use sys::ibv_create_cq_wc_flags as wcf;

/// The fields every extended CQ reports (rdma-core's `IBV_WC_STANDARD_FLAGS`).
const STANDARD: u64 = wcf::IBV_WC_EX_WITH_BYTE_LEN.0 as u64
    | wcf::IBV_WC_EX_WITH_IMM.0 as u64
    | wcf::IBV_WC_EX_WITH_QP_NUM.0 as u64
    | wcf::IBV_WC_EX_WITH_SRC_QP.0 as u64
    | wcf::IBV_WC_EX_WITH_SLID.0 as u64
    | wcf::IBV_WC_EX_WITH_SL.0 as u64
    | wcf::IBV_WC_EX_WITH_DLID_PATH_BITS.0 as u64;
pub(super) const TIMESTAMP: u64 = wcf::IBV_WC_EX_WITH_COMPLETION_TIMESTAMP.0 as u64;
pub(super) const WALLCLOCK: u64 = wcf::IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK.0 as u64;

fn unsupported(what: &'static str) -> Error {
    Error::Unsupported {
        what,
        source: std::io::Error::from_raw_os_error(libc::EOPNOTSUPP),
    }
}

/// An extended completion queue. Polled in batches through [`start_poll`](Self::start_poll);
/// usable wherever a QP takes a CQ ([`QpInitAttr::new`](crate::QpInitAttr::new)), and its
/// completions hand buffers back through [`Qp::reclaim`](crate::Qp::reclaim).
///
/// Not `Clone`: a batch poll holds the CQ's lock in the provider until it ends, so the handle
/// that polls is the only one, and polling takes it by `&mut`.
///
/// ```no_run
/// use verbs::{Context, CqExAttr, QpInitAttr, QpType};
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let (ctx, _) = Context::open_by_addr("10.77.0.1".parse()?)?; // the device serving it
/// let pd = ctx.alloc_pd()?;
/// let mut cq = ctx.create_cq_ex(CqExAttr::new(64))?;
/// let qp = pd.create_qp(&QpInitAttr::new(QpType::Rc, &cq, &cq))?;
/// // ... connect and post ...
/// if let Some(mut batch) = cq.start_poll()? {
///     while let Some(wc) = batch.next()? {
///         println!("{:#x}: {:?}, {} bytes", wc.wr_id(), wc.status(), wc.byte_len());
///         for buf in qp.reclaim(&wc) {
///             drop(buf); // the request's buffers, back from the device
///         }
///     }
/// } // the batch ends here (ibv_end_poll)
/// # Ok(())
/// # }
/// ```
pub struct CqEx {
    // Shares the CQ's lifetime machinery (children hold it, destroy, event acks).
    cq: Cq,
    ex: NonNull<sys::ibv_cq_ex>,
    wc_flags: u64,
    one_per_batch: bool,
}

// SAFETY: the handle has no thread affinity; polling needs `&mut self`, and the other
// methods (notify, event wait) are thread-safe in libibverbs.
unsafe impl Send for CqEx {}
// SAFETY: as above: shared access never polls.
unsafe impl Sync for CqEx {}

impl fmt::Debug for CqEx {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CqEx")
            .field("cqe", &self.cq.cqe())
            .field("timestamps", &(self.wc_flags & TIMESTAMP != 0))
            .field("wallclock", &(self.wc_flags & WALLCLOCK != 0))
            .finish()
    }
}

impl Context {
    /// Creates an extended CQ. Asking for timestamps the device does not have
    /// ([`DeviceAttrEx::completion_timestamp_mask`](crate::DeviceAttrEx::completion_timestamp_mask)
    /// is 0, or for wall-clock time, `hca_core_clock` too) is [`Error::Unsupported`], as is a
    /// provider without extended CQs.
    ///
    /// On rxe each [`ExPoll`] batch holds one completion: its provider before rdma-core 61
    /// corrupts the CQ when `ibv_next_poll` runs past the last completion.
    #[doc(alias = "ibv_create_cq_ex")]
    pub fn create_cq_ex(&self, attr: CqExAttr) -> Result<CqEx> {
        let mut wc_flags = STANDARD;
        if attr.timestamp || attr.wallclock {
            let dev = self.query_device_ex()?;
            if dev.completion_timestamp_mask() == 0 {
                return Err(unsupported(
                    "completion timestamps (the device reports no completion_timestamp_mask)",
                ));
            }
            if attr.wallclock && dev.hca_core_clock() == 0 {
                return Err(unsupported(
                    "wall-clock completion timestamps (the device reports no hca_core_clock)",
                ));
            }
        }
        if attr.timestamp {
            wc_flags |= TIMESTAMP;
        }
        if attr.wallclock {
            wc_flags |= WALLCLOCK;
        }
        // rxe before rdma-core 61 advances the consumer index twice when ibv_next_poll runs
        // past the last completion and ibv_end_poll follows (as the contract requires),
        // corrupting the CQ; there every batch is one completion, and next_poll is never
        // called.
        let one_per_batch = self.is_rxe();
        let cqe = attr.cqe;
        let ch = attr.channel.map(|c| c.inner);
        // SAFETY: all-zero is a valid ibv_cq_init_attr_ex (null pointers, no mask).
        let mut raw_attr: sys::ibv_cq_init_attr_ex = unsafe { std::mem::zeroed() };
        raw_attr.cqe = cqe.min(i32::MAX as u32);
        raw_attr.channel = ch.as_ref().map_or(std::ptr::null_mut(), |c| c.raw.as_ptr());
        raw_attr.comp_vector = attr.comp_vector;
        raw_attr.wc_flags = wc_flags;
        // SAFETY: open context; the attribute struct is complete; the channel (if any) belongs
        // to this context and outlives the CQ (CqInner drops it after destroying the CQ).
        let raw = unsafe { sys::ibv_create_cq_ex(self.as_raw(), &mut raw_attr) };
        let create_err = |source: std::io::Error| {
            if source.raw_os_error() == Some(libc::EOPNOTSUPP) {
                unsupported("extended CQs (ibv_create_cq_ex) with these completion fields")
            } else {
                Error::CreateCq { cqe, source }
            }
        };
        let raw = sys::errno::check_ptr(raw).map_err(create_err)?;
        // SAFETY: an ibv_cq_ex starts with the ibv_cq fields: the same object as an ibv_cq.
        let cq_raw = unsafe { sys::ibv_cq_ex_to_cq(raw.as_ptr()) };
        let cq_raw = NonNull::new(cq_raw).expect("ibv_cq_ex_to_cq of a live CQ is not null");
        // SAFETY: live CQ; `cqe` is the real size.
        let real = unsafe { (*cq_raw.as_ptr()).cqe } as u32;
        Ok(CqEx {
            cq: Cq {
                // Destroyed by ibv_destroy_cq on the ibv_cq view, as rdma-core documents.
                inner: Arc::new(CqInner {
                    raw: cq_raw,
                    channel: ch,
                    unacked: Mutex::new(0),
                    cqe: real,
                    rxe: one_per_batch,
                    _ctx: self.inner.clone(),
                }),
            },
            ex: raw,
            wc_flags,
            one_per_batch,
        })
    }
}

impl CqEx {
    /// The raw `ibv_cq_ex`, valid while this handle (or a QP using the CQ) lives.
    pub fn as_raw(&self) -> *mut sys::ibv_cq_ex {
        self.ex.as_ptr()
    }
    /// Number of entries (may exceed what was asked for).
    pub fn cqe(&self) -> u32 {
        self.cq.cqe()
    }
    /// Whether completions carry the device timestamp.
    pub fn has_completion_timestamp(&self) -> bool {
        self.wc_flags & TIMESTAMP != 0
    }
    /// Whether completions carry wall-clock time.
    pub fn has_completion_wallclock(&self) -> bool {
        self.wc_flags & WALLCLOCK != 0
    }
    pub(crate) fn cq(&self) -> &Cq {
        &self.cq
    }

    /// Starts a batch poll: `None` when the CQ is empty (nothing to end), else the session,
    /// positioned on the first completion. Completions are read through
    /// [`ExPoll::next`]; the batch ends (`ibv_end_poll`) when the session is dropped.
    #[doc(alias = "ibv_start_poll")]
    pub fn start_poll(&mut self) -> Result<Option<ExPoll<'_>>> {
        let mut attr = sys::ibv_poll_cq_attr { comp_mask: 0 };
        // SAFETY: live extended CQ, polled by this `&mut` handle only; valid attr.
        let r = unsafe { sys::ibv_start_poll(self.as_raw(), &mut attr) };
        match r {
            0 => Ok(Some(ExPoll {
                cq: self.ex,
                wc_flags: self.wc_flags,
                one_per_batch: self.one_per_batch,
                state: Pos::Fresh,
                _cq: PhantomData,
            })),
            // Empty: per the verbs contract, ibv_end_poll must not be called.
            libc::ENOENT => Ok(None),
            e => Err(Error::PollCq(std::io::Error::from_raw_os_error(e))),
        }
    }

    /// Polls until a batch has at least one completion or `timeout` passes (busy-polling).
    #[doc(alias = "ibv_start_poll")]
    pub fn start_poll_timeout(&mut self, timeout: Duration) -> Result<Option<ExPoll<'_>>> {
        let deadline = std::time::Instant::now() + timeout;
        let mut attr = sys::ibv_poll_cq_attr { comp_mask: 0 };
        loop {
            // SAFETY: as in start_poll.
            let r = unsafe { sys::ibv_start_poll(self.as_raw(), &mut attr) };
            match r {
                0 => break,
                libc::ENOENT if std::time::Instant::now() < deadline => std::hint::spin_loop(),
                libc::ENOENT => return Ok(None),
                e => return Err(Error::PollCq(std::io::Error::from_raw_os_error(e))),
            }
        }
        Ok(Some(ExPoll {
            cq: self.ex,
            wc_flags: self.wc_flags,
            one_per_batch: self.one_per_batch,
            state: Pos::Fresh,
            _cq: PhantomData,
        }))
    }

    /// Arms the CQ (see [`Cq::req_notify`]).
    #[doc(alias = "ibv_req_notify_cq")]
    pub fn req_notify(&self, solicited_only: bool) -> Result<()> {
        self.cq.req_notify(solicited_only)
    }

    /// Waits for an event on the CQ's channel (see [`Cq::get_event`]).
    #[doc(alias = "ibv_get_cq_event")]
    pub fn get_event(&self, timeout: Option<Duration>) -> Result<bool> {
        self.cq.get_event(timeout)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pos {
    /// On the completion ibv_start_poll read, not yet handed out.
    Fresh,
    /// The last completion was handed out; the next one needs ibv_next_poll.
    Used,
    /// ibv_next_poll found no more (or failed): nothing more to read.
    Done,
}

/// One batch poll of an extended CQ. It borrows the CQ mutably, hands out one completion at a
/// time (each borrowing the session, so it cannot outlive the next step), and ends the batch
/// when dropped. Not `Send`: the provider's CQ lock is held for the batch.
pub struct ExPoll<'cq> {
    cq: NonNull<sys::ibv_cq_ex>,
    wc_flags: u64,
    one_per_batch: bool,
    state: Pos,
    _cq: PhantomData<(&'cq mut CqEx, *const ())>,
}

impl fmt::Debug for ExPoll<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ExPoll")
            .field("state", &self.state)
            .finish_non_exhaustive()
    }
}

impl ExPoll<'_> {
    /// The next completion of the batch, or `None` when the batch ends (start another for
    /// completions that arrived since). Not an `Iterator`: each completion borrows the
    /// session. On rxe a batch is one completion (see [`Context::create_cq_ex`]).
    #[doc(alias = "ibv_next_poll")]
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> Result<Option<ExWc<'_>>> {
        match self.state {
            Pos::Fresh => {}
            Pos::Done => return Ok(None),
            Pos::Used if self.one_per_batch => {
                self.state = Pos::Done;
                return Ok(None);
            }
            Pos::Used => {
                // SAFETY: live CQ inside a started batch (ended only on drop).
                let r = unsafe { sys::ibv_next_poll(self.cq.as_ptr()) };
                match r {
                    0 => {}
                    libc::ENOENT => {
                        self.state = Pos::Done;
                        return Ok(None);
                    }
                    e => {
                        // The batch still ends with ibv_end_poll (on drop), per the contract.
                        self.state = Pos::Done;
                        return Err(Error::PollCq(std::io::Error::from_raw_os_error(e)));
                    }
                }
            }
        }
        self.state = Pos::Used;
        Ok(Some(ExWc::new(self.cq, self.wc_flags, self.one_per_batch)))
    }
}

impl Drop for ExPoll<'_> {
    fn drop(&mut self) {
        // SAFETY: ibv_start_poll succeeded for this session (an empty CQ makes no session),
        // and the batch is ended exactly once.
        unsafe { sys::ibv_end_poll(self.cq.as_ptr()) };
    }
}
