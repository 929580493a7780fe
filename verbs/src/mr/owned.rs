//! Registered memory that can be posted safely: the [`RegisteredBuf`] and
//! [`RegisteredBufMut`] traits, implemented by owned regions and open to other crates (a
//! registered-memory pool implements them for its buffers).
use std::sync::Arc;

use super::{LocalSlice, MemoryRegion};

/// Owned registered memory that a safe post may read.
///
/// A value is moved into a work request when it is posted and handed back when the request's
/// completion is reclaimed (`Qp::reclaim`), or dropped only after the QP is destroyed. That is
/// what makes posting it safe: nothing can free or reuse the memory while the NIC uses it.
///
/// # Safety
/// Implementors guarantee that, for as long as the value lives (wherever it is moved to):
/// 1. [`local`](Self::local) always returns the same descriptor, whose bytes stay allocated at
///    the same address (no reallocation, no move of the backing memory);
/// 2. the descriptor's `lkey` names a registration covering those bytes that stays registered
///    (the value keeps it alive, e.g. by holding the region or an `Arc` of it);
/// 3. no safe code can write those bytes while the value is owned by a work request (the NIC
///    may read them at any moment).
pub unsafe trait RegisteredBuf: Send + 'static {
    /// The whole buffer as a scatter/gather entry.
    fn local(&self) -> LocalSlice;
}

/// Owned registered memory that a safe post may also let the NIC write (RECV, RDMA READ and
/// atomic destinations).
///
/// # Safety
/// In addition to the [`RegisteredBuf`] contract: while the value is owned by a work request,
/// no code can read or write its bytes by any other path (the value is the only access), so
/// the NIC's writes cannot race with the program.
pub unsafe trait RegisteredBufMut: RegisteredBuf {}

// SAFETY: the region owns its page-aligned buffer (never moved, freed after deregistration)
// and its registration; access to the bytes goes through the region, which the request owns.
unsafe impl RegisteredBuf for MemoryRegion {
    fn local(&self) -> LocalSlice {
        LocalSlice {
            addr: self.addr(),
            len: u32::try_from(self.len()).unwrap_or(u32::MAX),
            lkey: self.lkey(),
        }
    }
}
// SAFETY: moving the region into the request makes the request its only access path.
unsafe impl RegisteredBufMut for MemoryRegion {}

// SAFETY: a shared region is kept alive by the Arc; shared handles only allow reading (or
// volatile copies), and `as_mut_slice`/`write` need `&mut`, which an `Arc` with another owner
// (the request) cannot give. So the NIC reading it races with no write.
unsafe impl RegisteredBuf for Arc<MemoryRegion> {
    fn local(&self) -> LocalSlice {
        RegisteredBuf::local(&**self)
    }
}

// SAFETY: the box owns the value; its contract carries over.
unsafe impl<T: RegisteredBuf> RegisteredBuf for Box<T> {
    fn local(&self) -> LocalSlice {
        RegisteredBuf::local(&**self)
    }
}
// SAFETY: as above.
unsafe impl<T: RegisteredBufMut> RegisteredBufMut for Box<T> {}
