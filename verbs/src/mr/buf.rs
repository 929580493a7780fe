//! A page-aligned, zeroed heap buffer that never moves or grows: the memory of an owned region.
use std::alloc::{self, Layout};
use std::ptr::NonNull;

use crate::{Error, Result};

const PAGE: usize = 4096;

pub(crate) struct AlignedBuf {
    ptr: NonNull<u8>,
    layout: Layout,
}

// SAFETY: a uniquely owned heap allocation, like Box<[u8]>.
unsafe impl Send for AlignedBuf {}
// SAFETY: shared access only reads (slices) or goes through &mut for writes, like Box<[u8]>.
unsafe impl Sync for AlignedBuf {}

impl AlignedBuf {
    pub(crate) fn zeroed(len: usize) -> Result<Self> {
        // A zero-length region is useless and Layout cannot allocate it; refuse it clearly.
        let layout = Layout::from_size_align(len, PAGE)
            .ok()
            .filter(|l| l.size() > 0)
            .ok_or(Error::Alloc { len })?;
        // SAFETY: non-zero size.
        let ptr = unsafe { alloc::alloc_zeroed(layout) };
        let ptr = NonNull::new(ptr).ok_or(Error::Alloc { len })?;
        Ok(AlignedBuf { ptr, layout })
    }

    pub(crate) fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    pub(crate) fn len(&self) -> usize {
        self.layout.size()
    }

    pub(crate) fn as_slice(&self) -> &[u8] {
        // SAFETY: `len` initialised (zeroed) bytes owned by self; callers ensure the NIC does
        // not write them concurrently (see MemoryRegion).
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len()) }
    }

    pub(crate) fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as above, and `&mut self` makes the access unique.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len()) }
    }

    /// Volatile copy out of `offset..offset + dst.len()` (bounds checked by the caller).
    pub(crate) fn read_volatile(&self, offset: usize, dst: &mut [u8]) {
        assert!(offset + dst.len() <= self.len());
        for (i, d) in dst.iter_mut().enumerate() {
            // SAFETY: in bounds (asserted); volatile because a peer may write concurrently.
            *d = unsafe { self.ptr.as_ptr().add(offset + i).read_volatile() };
        }
    }

    /// Volatile copy into `offset..offset + src.len()` (bounds checked by the caller).
    pub(crate) fn write_volatile(&mut self, offset: usize, src: &[u8]) {
        assert!(offset + src.len() <= self.len());
        for (i, s) in src.iter().enumerate() {
            // SAFETY: in bounds (asserted); exclusive through &mut self.
            unsafe { self.ptr.as_ptr().add(offset + i).write_volatile(*s) };
        }
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        // SAFETY: allocated in `zeroed` with this layout.
        unsafe { alloc::dealloc(self.ptr.as_ptr(), self.layout) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn page_aligned_zeroed_and_refuses_empty() {
        let mut b = AlignedBuf::zeroed(10_000).unwrap();
        assert_eq!(b.as_ptr() as usize % PAGE, 0);
        assert!(b.as_slice().iter().all(|&x| x == 0));
        b.write_volatile(9_998, &[1, 2]);
        let mut out = [0; 3];
        b.read_volatile(9_997, &mut out);
        assert_eq!(out, [0, 1, 2]);
        assert!(AlignedBuf::zeroed(0).is_err());
    }
}
