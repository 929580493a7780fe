//! Completion queues: polling into a caller-owned buffer (a lending view of typed
//! completions), and event-driven waiting through a completion channel without lost wakeups.
mod any;
mod channel;
mod ex;
mod ex_wc;
mod vector;
mod wc;

use std::io;
use std::os::fd::RawFd;
use std::ptr::NonNull;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use verbs_sys as sys;

pub use any::{AsCq, PolledWc};
pub use channel::CompletionChannel;
pub use ex::{CqEx, CqExAttr, ExPoll};
pub use ex_wc::ExWc;
pub use wc::{Completion, WcError, WcFlags, WcOpcode, WcStatus, WorkCompletion};

use crate::context::{Context, ContextInner};
use crate::{Error, Result};
use channel::ChannelInner;

/// Events acknowledged in one `ibv_ack_cq_events` call (acking takes a mutex in libibverbs).
const ACK_BATCH: u32 = 64;

/// A completion queue. Cheap to clone; destroyed when the last handle and the last QP using it
/// are gone. Polling from several threads is allowed (libibverbs locks the CQ).
#[derive(Clone)]
pub struct Cq {
    pub(crate) inner: Arc<CqInner>,
}

pub(crate) struct CqInner {
    pub(crate) raw: NonNull<sys::ibv_cq>,
    // Dropped after the CQ is destroyed (Drop runs before fields are dropped).
    channel: Option<ChannelInner>,
    unacked: Mutex<u32>,
    cqe: u32,
    /// On rxe, whose completions carry the kernel's value of "with invalidate" (see
    /// `wc::fix_rxe_flags`).
    pub(crate) rxe: bool,
    _ctx: Arc<ContextInner>,
}

impl CqInner {
    /// The device context the CQ was created on.
    pub(crate) fn context_raw(&self) -> *mut sys::ibv_context {
        self._ctx.raw.as_ptr()
    }
}

// SAFETY: a CQ handle has no thread affinity; poll/notify/ack are thread-safe in libibverbs,
// and our own mutable state (unacked count) is behind a mutex.
unsafe impl Send for CqInner {}
// SAFETY: as above.
unsafe impl Sync for CqInner {}

impl Drop for CqInner {
    fn drop(&mut self) {
        let n = *self.unacked.get_mut();
        if n > 0 {
            // SAFETY: live CQ; these events were read from its channel and not yet acked
            // (ibv_destroy_cq would wait for them forever).
            unsafe { sys::ibv_ack_cq_events(self.raw.as_ptr(), n) };
        }
        // SAFETY: created by ibv_create_cq; every QP using it holds an Arc of this inner.
        unsafe { sys::ibv_destroy_cq(self.raw.as_ptr()) };
    }
}

impl std::fmt::Debug for Cq {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cq")
            .field("cqe", &self.inner.cqe)
            .field(
                "channel",
                &self.inner.channel.as_ref().map(ChannelInner::fd),
            )
            .finish()
    }
}

impl Context {
    /// Creates a CQ of at least `cqe` entries, optionally bound to a completion channel (which
    /// it then owns).
    #[doc(alias = "ibv_create_cq")]
    pub fn create_cq(&self, cqe: u32, channel: Option<CompletionChannel>) -> Result<Cq> {
        let ch = channel.map(|c| c.inner);
        let ch_ptr = ch.as_ref().map_or(std::ptr::null_mut(), |c| c.raw.as_ptr());
        let n = i32::try_from(cqe).unwrap_or(i32::MAX);
        // SAFETY: open context; the channel (if any) belongs to the same context and outlives
        // the CQ (it is dropped after it).
        let raw = unsafe { sys::ibv_create_cq(self.as_raw(), n, std::ptr::null_mut(), ch_ptr, 0) };
        let raw = sys::errno::check_ptr(raw).map_err(|source| Error::CreateCq { cqe, source })?;
        // SAFETY: live CQ; `cqe` is the real size.
        let real = unsafe { (*raw.as_ptr()).cqe } as u32;
        Ok(Cq {
            inner: Arc::new(CqInner {
                raw,
                channel: ch,
                unacked: Mutex::new(0),
                cqe: real,
                rxe: self.is_rxe(),
                _ctx: self.inner.clone(),
            }),
        })
    }
}

/// Caller-owned space for polled completions. Reuse one per polling loop.
pub struct CompletionBuf {
    wcs: Vec<WorkCompletion>,
}

impl std::fmt::Debug for CompletionBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CompletionBuf")
            .field("capacity", &self.wcs.len())
            .finish()
    }
}

impl CompletionBuf {
    /// Room for `n` completions per poll (at least one).
    pub fn new(n: usize) -> Self {
        let wcs = (0..n.max(1))
            // SAFETY: ibv_wc is integers plus an integer union: all-zero is a valid value.
            .map(|_| WorkCompletion(unsafe { std::mem::zeroed() }))
            .collect();
        CompletionBuf { wcs }
    }
    /// How many completions one poll can return.
    pub fn capacity(&self) -> usize {
        self.wcs.len()
    }
    fn view(&self, n: usize) -> Polled<'_> {
        Polled {
            wcs: &self.wcs[..n],
        }
    }
}

/// The completions of one poll, borrowed from the [`CompletionBuf`]: the buffer cannot be
/// polled into again while they are in use.
#[derive(Debug)]
pub struct Polled<'a> {
    wcs: &'a [WorkCompletion],
}

impl<'a> std::ops::Deref for Polled<'a> {
    type Target = [WorkCompletion];
    fn deref(&self) -> &[WorkCompletion] {
        self.wcs
    }
}

impl<'a> IntoIterator for Polled<'a> {
    type Item = &'a WorkCompletion;
    type IntoIter = std::slice::Iter<'a, WorkCompletion>;
    fn into_iter(self) -> Self::IntoIter {
        self.wcs.iter()
    }
}

impl<'a> IntoIterator for &Polled<'a> {
    type Item = &'a WorkCompletion;
    type IntoIter = std::slice::Iter<'a, WorkCompletion>;
    fn into_iter(self) -> Self::IntoIter {
        self.wcs.iter()
    }
}

impl Cq {
    /// The raw `ibv_cq`, valid while this handle lives.
    pub fn as_raw(&self) -> *mut sys::ibv_cq {
        self.inner.raw.as_ptr()
    }

    /// Number of entries (may exceed what was asked for).
    pub fn cqe(&self) -> u32 {
        self.inner.cqe
    }

    fn poll_n(&self, buf: &mut CompletionBuf) -> Result<usize> {
        self.poll_into(&mut buf.wcs)
    }

    /// Polls at most `wcs.len()` completions into `wcs`.
    fn poll_into(&self, wcs: &mut [WorkCompletion]) -> Result<usize> {
        let max = i32::try_from(wcs.len()).unwrap_or(i32::MAX);
        // SAFETY: live CQ; `wcs` has room for `max` entries; WorkCompletion is a transparent
        // wrapper of ibv_wc.
        let n = unsafe { sys::ibv_poll_cq(self.as_raw(), max, wcs.as_mut_ptr().cast()) };
        if n > 0 && self.inner.rxe {
            for wc in &mut wcs[..n as usize] {
                wc.0.wc_flags = wc::fix_rxe_flags(wc.0.wc_flags);
            }
        }
        if n < 0 {
            // ibv_poll_cq returns a negative value on error without a defined errno.
            return Err(Error::PollCq(io::Error::from_raw_os_error(if n == -1 {
                libc::EIO
            } else {
                -n
            })));
        }
        Ok(n as usize)
    }

    /// Polls without waiting: the completions available now, up to the buffer's capacity.
    #[doc(alias = "ibv_poll_cq")]
    pub fn poll<'b>(&self, buf: &'b mut CompletionBuf) -> Result<Polled<'b>> {
        let n = self.poll_n(buf)?;
        Ok(buf.view(n))
    }

    /// Arms the CQ: the next completion (only solicited ones if `solicited_only`) produces an
    /// event on its channel.
    #[doc(alias = "ibv_req_notify_cq")]
    pub fn req_notify(&self, solicited_only: bool) -> Result<()> {
        // SAFETY: live CQ.
        let r = unsafe { sys::ibv_req_notify_cq(self.as_raw(), i32::from(solicited_only)) };
        sys::errno::check_ret(r).map_err(Error::ReqNotifyCq)
    }

    /// The completion channel's fd, for a reactor (`None` without a channel).
    pub fn channel_fd(&self) -> Option<RawFd> {
        self.inner.channel.as_ref().map(ChannelInner::fd)
    }

    /// Waits up to `timeout` for an event on this CQ's channel and consumes it (acknowledged
    /// in batches, at the latest when the CQ is destroyed). Returns whether an event came.
    /// Re-arm and poll afterwards, or use [`wait_and_poll`](Self::wait_and_poll).
    #[doc(alias = "ibv_get_cq_event")]
    pub fn get_event(&self, timeout: Option<Duration>) -> Result<bool> {
        let ch = self.inner.channel.as_ref().ok_or_else(|| {
            Error::GetCqEvent(io::Error::new(
                io::ErrorKind::InvalidInput,
                "this CQ has no completion channel",
            ))
        })?;
        let deadline = timeout.map(|t| Instant::now() + t);
        loop {
            let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
            if !sys::fd::wait_readable(ch.fd(), left).map_err(Error::GetCqEvent)? {
                return Ok(false);
            }
            let mut cq = std::ptr::null_mut();
            let mut ctx = std::ptr::null_mut();
            // SAFETY: live channel; valid out-pointers; the fd is non-blocking.
            let r = unsafe { sys::ibv_get_cq_event(ch.raw.as_ptr(), &mut cq, &mut ctx) };
            match sys::errno::check_neg(r) {
                Ok(_) => break,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) => return Err(Error::GetCqEvent(e)),
            }
        }
        // The channel belongs to this CQ alone, so the event is ours to ack.
        let mut unacked = self.inner.unacked.lock();
        *unacked += 1;
        if *unacked >= ACK_BATCH {
            // SAFETY: live CQ; acking events read from its channel.
            unsafe { sys::ibv_ack_cq_events(self.as_raw(), *unacked) };
            *unacked = 0;
        }
        Ok(true)
    }

    /// Acknowledges the events consumed so far now (otherwise done in batches).
    #[doc(alias = "ibv_ack_cq_events")]
    pub fn ack_events(&self) {
        let mut unacked = self.inner.unacked.lock();
        if *unacked > 0 {
            // SAFETY: live CQ; acking events read from its channel.
            unsafe { sys::ibv_ack_cq_events(self.as_raw(), *unacked) };
            *unacked = 0;
        }
    }

    /// Event-driven poll that never loses a wakeup: poll; if empty, arm, poll again (a
    /// completion may have arrived before arming), and only then sleep on the channel; after
    /// an event, poll again. Returns the completions, or none if `timeout` passed.
    pub fn wait_and_poll<'b>(
        &self,
        buf: &'b mut CompletionBuf,
        timeout: Option<Duration>,
    ) -> Result<Polled<'b>> {
        let deadline = timeout.map(|t| Instant::now() + t);
        let n = loop {
            let n = self.poll_n(buf)?;
            if n > 0 {
                break n;
            }
            self.req_notify(false)?;
            let n = self.poll_n(buf)?;
            if n > 0 {
                break n;
            }
            let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
            if !self.get_event(left)? {
                break self.poll_n(buf)?;
            }
        };
        Ok(buf.view(n))
    }

    /// Waits up to `timeout` for exactly `n` completions and returns them. It never polls more
    /// than `n`: completions beyond them stay in the CQ for the next call, so none is lost to
    /// a caller that handles only what it asked for. With a completion channel it sleeps
    /// between completions (without lost wakeups, as [`wait_and_poll`](Self::wait_and_poll)),
    /// else it busy-polls.
    ///
    /// Fewer than `n` only when `timeout` passed: the completions that did arrive are returned
    /// (they are out of the CQ; reclaim them), so check `len()`. `n` larger than the buffer is
    /// [`Error::CompletionBufTooSmall`].
    pub fn wait_n<'b>(
        &self,
        buf: &'b mut CompletionBuf,
        n: usize,
        timeout: Duration,
    ) -> Result<Polled<'b>> {
        if n > buf.capacity() {
            return Err(Error::CompletionBufTooSmall {
                wanted: n,
                capacity: buf.capacity(),
            });
        }
        let got = self.wait_into(&mut buf.wcs[..n], timeout)?;
        Ok(buf.view(got))
    }

    /// Waits up to `timeout` for one completion (polling exactly one, so later ones stay in
    /// the CQ). Nothing within `timeout` is [`Error::CompletionTimeout`]. The completion is
    /// yours to keep: pass it to [`Qp::reclaim`](crate::Qp::reclaim) for its buffers.
    pub fn wait_one(&self, timeout: Duration) -> Result<WorkCompletion> {
        // SAFETY: ibv_wc is integers plus an integer union: all-zero is a valid value.
        let mut wc = [WorkCompletion(unsafe { std::mem::zeroed() })];
        match self.wait_into(&mut wc, timeout)? {
            1 => {
                let [wc] = wc;
                Ok(wc)
            }
            _ => Err(Error::CompletionTimeout {
                wanted: 1,
                got: 0,
                after: timeout,
            }),
        }
    }

    /// Fills `wcs` with completions, polling never more than the room left, until it is full
    /// or `timeout` passes; returns how many came.
    fn wait_into(&self, wcs: &mut [WorkCompletion], timeout: Duration) -> Result<usize> {
        let deadline = Instant::now() + timeout;
        let n = wcs.len();
        let mut got = self.poll_into(wcs)?;
        while got < n {
            let left = deadline.saturating_duration_since(Instant::now());
            if self.inner.channel.is_some() {
                // Arm, then poll again before sleeping: a completion that came before arming
                // raises no event.
                self.req_notify(false)?;
                let more = self.poll_into(&mut wcs[got..])?;
                if more > 0 {
                    got += more;
                    continue;
                }
                if left.is_zero() {
                    break;
                }
                self.get_event(Some(left))?;
            } else if left.is_zero() {
                break;
            } else {
                std::hint::spin_loop();
            }
            got += self.poll_into(&mut wcs[got..])?;
        }
        Ok(got)
    }

    /// Busy-polls until at least one completion arrives or `timeout` passes.
    pub fn poll_timeout<'b>(
        &self,
        buf: &'b mut CompletionBuf,
        timeout: Duration,
    ) -> Result<Polled<'b>> {
        let deadline = Instant::now() + timeout;
        let n = loop {
            let n = self.poll_n(buf)?;
            if n > 0 || Instant::now() >= deadline {
                break n;
            }
            std::hint::spin_loop();
        };
        Ok(buf.view(n))
    }
}
