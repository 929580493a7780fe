//! Receives of one buffer type on a shared receive queue, each in a slot its `wr_id` names.
//!
//! [`Srq::post_recv`] takes a [`RecvRequest`](crate::RecvRequest) of any buffers and finds
//! them again by searching its table of owned requests: general, and paid on every receive.
//! A program that posts one whole buffer of one type per receive, again and again (a
//! message transport's receive path), can have the slot instead: posting stores the buffer in
//! a free slot and puts the slot's number in the `wr_id`; the completion takes it back out by
//! that number. Nothing is searched, nothing is type-erased, nothing allocates.
//!
//! A `wr_id` names one posting, never two: its low bits are the slot, and the rest come from
//! a process-wide count of postings that never wraps (a ring takes its numbers a block at a
//! time, one number per slot in each block, and a slot posted again takes the next block's).
//! [`RecvRing::reclaim`] hands a buffer back only for the exact `wr_id` of its posting, so a
//! completion kept and passed again, after its slot was posted anew, gets nothing.
//!
//! The slots belong to the SRQ as much as to the ring: they are dropped after the SRQ is
//! destroyed (or leaked with it), so a buffer the device may still write is never freed, even
//! if the ring is dropped first.
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use verbs_sys as sys;

use crate::cq::PolledWc;
use crate::mr::RegisteredBufMut;
use crate::qp::post::{self, PostError, OWNED_WR_ID, RECV_WR_ID, RING_WR_ID};
use crate::srq::Srq;
use crate::{Error, Result};

/// The bits every ring receive's `wr_id` has set.
const RING_BITS: u64 = OWNED_WR_ID | RECV_WR_ID | RING_WR_ID;

/// The bits of a ring receive's `wr_id` below [`RING_BITS`]: its posting number.
const NUMBER_MASK: u64 = RING_WR_ID - 1;

/// The next posting number no ring has taken. Starts at 1, so no posting has number 0 (a
/// slot never posted records 0). Never wraps: a ring that finds it used up refuses to post.
static NEXT_NUMBER: AtomicU64 = AtomicU64::new(1);

/// Takes from `next` the next block of `1 << bits` posting numbers, aligned to its size (so a
/// slot's number in it is the block's base plus the slot); `None` once the numbers are used
/// up.
fn take_block(next: &AtomicU64, bits: u32) -> Option<u64> {
    let size = 1u64 << bits;
    let end_of = |n: u64| {
        let start = n.checked_next_multiple_of(size)?;
        start
            .checked_add(size)
            .filter(|&end| end - 1 <= NUMBER_MASK)
    };
    let before = next
        .fetch_update(Ordering::Relaxed, Ordering::Relaxed, end_of)
        .ok()?;
    before.checked_next_multiple_of(size)
}

/// The slots of one ring: a buffer per posted receive, the free slots' numbers, and the
/// `wr_id` each slot was last posted with.
struct Slots<B> {
    bufs: Vec<Option<B>>,
    free: Vec<u32>,
    /// The `wr_id` of each slot's latest posting (0: never posted).
    ids: Vec<u64>,
    /// The base of the block of posting numbers the ring posts from now (0: none yet).
    block: u64,
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
    /// How many low bits of a posting number name the slot.
    slot_bits: u32,
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
            ids: vec![0; capacity as usize],
            block: 0,
        }));
        self.inner.ring_slots.lock().push(slots.clone());
        Ok(RecvRing {
            srq: self.clone(),
            slot_bits: capacity.max(1).next_power_of_two().trailing_zeros(),
            slots,
            capacity,
        })
    }
}

impl<B: RegisteredBufMut> RecvRing<B> {
    /// Posts a receive into the whole of `buf`; returns its `wr_id`, which no other posting
    /// of the process has. A full ring fails with [`Error::QueueFull`], a refusal of the
    /// device with [`Error::PostRecv`], a process that has used up its 2^61 posting numbers
    /// with [`Error::InvalidWorkRequest`]; each hands `buf` back in the error (`unposted`),
    /// unless the device may have queued it anyway: then the ring keeps it until its
    /// completion or the SRQ's destruction, `unposted` is `None` and `posted` names its
    /// `wr_id`.
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
        let Some(&slot) = slots.free.last() else {
            return Err(fail(crate::trace::refusing(self.full()), buf));
        };
        // A slot posts each block's number once: posted from this block already, it moves on.
        if slots.block == 0 || slots.ids[slot as usize] & NUMBER_MASK >= slots.block {
            match take_block(&NEXT_NUMBER, self.slot_bits) {
                Some(block) => slots.block = block,
                None => return Err(fail(crate::trace::refusing(numbers_used_up()), buf)),
            }
        }
        slots.free.pop();
        let wr_id = RING_BITS | slots.block | u64::from(slot);
        slots.ids[slot as usize] = wr_id;
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
    /// `wc` completes no receive of this ring, or one whose buffer was handed back already
    /// (each posting's `wr_id` is its own, so a completion passed twice gets nothing the
    /// second time, even after its slot was posted again). A completion with an error status
    /// hands the buffer back too: the device is done with it.
    pub fn reclaim<W: PolledWc + ?Sized>(&self, wc: &W) -> Option<B> {
        let id = wc.polled_wr_id();
        if id & RING_BITS != RING_BITS {
            return None;
        }
        let slot = (id & ((1 << self.slot_bits) - 1)) as usize;
        let mut slots = self.slots.lock();
        if slots.ids.get(slot) != Some(&id) {
            return None;
        }
        let buf = slots.bufs[slot].take()?;
        slots.free.push(slot as u32);
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

/// The error of a post that finds the process's posting numbers used up.
fn numbers_used_up() -> Error {
    Error::InvalidWorkRequest {
        qp_num: 0,
        reason: "this process has posted 2^61 ring receives, every wr_id a receive ring can \
                 give: post through Srq::post_recv instead"
            .into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_are_aligned_disjoint_and_never_wrap() {
        let next = AtomicU64::new(1);
        let a = take_block(&next, 3).unwrap();
        let b = take_block(&next, 0).unwrap();
        let c = take_block(&next, 4).unwrap();
        assert_eq!(
            (a, b, c),
            (8, 16, 32),
            "aligned to their sizes, one after another"
        );
        // Near the end: the last block that fits is handed out, then none.
        let next = AtomicU64::new(NUMBER_MASK - 7);
        assert_eq!(take_block(&next, 3), Some(NUMBER_MASK - 7));
        assert_eq!(take_block(&next, 3), None);
        assert_eq!(take_block(&next, 0), None, "used up for every size");
        let next = AtomicU64::new(u64::MAX - 2);
        assert_eq!(take_block(&next, 2), None, "no overflow");
    }
}
