//! Receives of one buffer type on a shared receive queue, each in a slot its `wr_id` names.
//!
//! [`Srq::post_recv`] takes a [`RecvRequest`](crate::RecvRequest) of any buffers and finds
//! them again by searching its table of owned requests: general, and paid on every receive.
//! A program that posts one whole buffer of one type per receive, again and again (a
//! message transport's receive path), can have the slot instead: posting stores the buffer in
//! a free slot and puts the slot's number in the `wr_id`; the completion takes it back out by
//! that number. Nothing is searched, nothing is type-erased, nothing allocates.
//!
//! The slots belong to the SRQ as much as to the ring: they are dropped after the SRQ is
//! destroyed (or leaked with it), so a buffer the device may still write is never freed, even
//! if the ring is dropped first.
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use verbs_sys as sys;

use crate::cq::PolledWc;
use crate::mr::RegisteredBufMut;
use crate::qp::post::{self, PostError, OWNED_WR_ID, RECV_WR_ID, RING_WR_ID};
use crate::srq::Srq;
use crate::{Error, Result};

/// Bits of a ring receive's `wr_id` that hold its ring's number (above the slot's 32).
const RING_NO_MASK: u64 = (1 << 29) - 1;

/// The numbers rings take, so a completion of one ring's receive never matches another's.
static NEXT_RING: AtomicU32 = AtomicU32::new(1);

/// The slots of one ring: a buffer per posted receive, and the free slots' numbers.
struct Slots<B> {
    bufs: Vec<Option<B>>,
    free: Vec<u32>,
}

/// Whole-buffer receives of type `B` posted on a shared receive queue
/// ([`Srq::recv_ring`]): [`post`](Self::post) and [`reclaim`](Self::reclaim) address the
/// buffer by the slot number its `wr_id` carries.
///
/// The ring reserves its capacity in the SRQ: receives posted through the SRQ itself may fill
/// only the rest. Dropping the ring keeps its posted buffers until the SRQ is destroyed.
///
/// ```no_run
/// # fn demo(pd: &verbs::Pd, cq: &verbs::Cq, pool: Vec<verbs::MemoryRegion>) -> verbs::Result<()> {
/// let srq = pd.create_srq(64, 1)?;
/// let ring = srq.recv_ring::<verbs::MemoryRegion>(64)?;
/// for buf in pool {
///     ring.post(buf).map_err(|e| e.error)?;
/// }
/// let mut wcs = verbs::CompletionBuf::new(16);
/// for wc in cq.poll(&mut wcs)?.iter() {
///     if let Some(buf) = ring.reclaim(wc) {
///         // `wc.byte_len()` bytes of `buf` hold the message; post it again when done.
///         ring.post(buf).map_err(|e| e.error)?;
///     }
/// }
/// # Ok(()) }
/// ```
pub struct RecvRing<B> {
    srq: Srq,
    /// The ring's number, shifted into place in a `wr_id`, with the owned, receive and ring
    /// bits.
    id_base: u64,
    slots: Arc<Mutex<Slots<B>>>,
    capacity: u32,
}

impl<B> std::fmt::Debug for RecvRing<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecvRing")
            .field("capacity", &self.capacity)
            .field("posted", &self.posted())
            .finish()
    }
}

impl Srq {
    /// A ring of `capacity` whole-buffer receives of type `B` on this SRQ ([`RecvRing`]). The
    /// capacity is reserved in the SRQ for the SRQ's life; it fails with
    /// [`Error::InvalidWorkRequest`] when the SRQ has less left unreserved.
    pub fn recv_ring<B: RegisteredBufMut>(&self, capacity: u32) -> Result<RecvRing<B>> {
        let max_wr = self.max_wr();
        let reserved =
            self.inner
                .ring_reserved
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |r| {
                    r.checked_add(capacity).filter(|&total| total <= max_wr)
                });
        if let Err(already) = reserved {
            return Err(Error::InvalidWorkRequest {
                qp_num: 0,
                reason: format!(
                    "a receive ring of {capacity} does not fit the SRQ: it holds {max_wr} \
                     receives, {already} of them reserved by other rings; create the SRQ deeper \
                     or the ring smaller"
                ),
            });
        }
        let slots = Arc::new(Mutex::new(Slots::<B> {
            bufs: (0..capacity).map(|_| None).collect(),
            free: (0..capacity).rev().collect(),
        }));
        self.inner.ring_slots.lock().push(slots.clone());
        let ring_no = u64::from(NEXT_RING.fetch_add(1, Ordering::Relaxed)) & RING_NO_MASK;
        Ok(RecvRing {
            srq: self.clone(),
            id_base: OWNED_WR_ID | RECV_WR_ID | RING_WR_ID | ring_no << 32,
            slots,
            capacity,
        })
    }
}

impl<B: RegisteredBufMut> RecvRing<B> {
    /// Posts a receive into the whole of `buf`; returns its `wr_id`. A full ring fails with
    /// [`Error::QueueFull`], a refusal of the device with [`Error::PostRecv`]; either hands
    /// `buf` back in the error (`unposted`), unless the device may have queued it anyway: then
    /// the ring keeps it until its completion or the SRQ's destruction, `unposted` is `None`
    /// and `posted` names its `wr_id`.
    #[doc(alias = "ibv_post_srq_recv")]
    // The error hands the buffer back; it is rare, so its size is fine.
    #[allow(clippy::result_large_err)]
    pub fn post(&self, buf: B) -> std::result::Result<u64, PostError<Option<B>>> {
        let fail = |error, buf| PostError {
            error,
            unposted: Some(buf),
            posted: Vec::new(),
        };
        let local = buf.local();
        let mut sge = sys::ibv_sge {
            addr: local.addr,
            length: local.len,
            lkey: local.lkey,
        };
        let mut slots = self.slots.lock();
        let Some(slot) = slots.free.pop() else {
            return Err(fail(self.full(), buf));
        };
        let wr_id = self.id_base | u64::from(slot);
        let mut wr = [sys::ibv_recv_wr {
            wr_id,
            next: std::ptr::null_mut(),
            sg_list: &mut sge,
            num_sge: 1,
        }];
        let posted = post::post_chain(
            &mut wr,
            || self.full(),
            |source| Error::PostRecv { qp_num: 0, source },
            // SAFETY: live SRQ (the ring holds it); a one-request chain whose entry describes
            // the whole of `buf`, registered memory that stays put while `buf` lives
            // (`RegisteredBuf`). `buf` goes into the slot below, under the same lock, before
            // any completion can name it, and stays there until that completion or the SRQ's
            // destruction (the SRQ keeps the slots); while there nothing else can reach its
            // bytes (`RegisteredBufMut`).
            |wr, bad| unsafe { sys::ibv_post_srq_recv(self.srq.as_raw(), wr, bad) },
        );
        match posted {
            Ok(()) => {
                slots.bufs[slot as usize] = Some(buf);
                Ok(wr_id)
            }
            Err((0, error)) => {
                slots.free.push(slot);
                Err(fail(error, buf))
            }
            // Failed, but possibly queued (see `post_chain`): the slot keeps the buffer.
            Err((_, error)) => {
                slots.bufs[slot as usize] = Some(buf);
                Err(PostError {
                    error,
                    unposted: None,
                    posted: vec![wr_id],
                })
            }
        }
    }
}

impl<B> RecvRing<B> {
    /// The buffer of this ring's receive that `wc` (from any QP using the SRQ) completes, free
    /// to read (the first `wc.byte_len()` bytes hold the message) or post again; `None` when
    /// `wc` completes no receive of this ring. A completion with an error status hands the
    /// buffer back too: the device is done with it.
    pub fn reclaim<W: PolledWc + ?Sized>(&self, wc: &W) -> Option<B> {
        let id = wc.polled_wr_id();
        if id & !u64::from(u32::MAX) != self.id_base {
            return None;
        }
        let slot = id as u32;
        let mut slots = self.slots.lock();
        let buf = slots.bufs.get_mut(slot as usize)?.take()?;
        slots.free.push(slot);
        Some(buf)
    }

    /// Receives posted and not yet reclaimed.
    pub fn posted(&self) -> usize {
        let slots = self.slots.lock();
        slots.bufs.len() - slots.free.len()
    }

    /// How many receives the ring holds at most (reserved in its SRQ).
    pub fn capacity(&self) -> u32 {
        self.capacity
    }

    /// The SRQ the ring posts on.
    pub fn srq(&self) -> &Srq {
        &self.srq
    }

    fn full(&self) -> Error {
        Error::QueueFull {
            qp_num: 0,
            queue: "receive ring",
            depth: self.capacity,
        }
    }
}
