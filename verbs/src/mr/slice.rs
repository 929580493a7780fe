//! Plain descriptors of registered memory: [`LocalSlice`] (a scatter/gather entry) and
//! [`RemoteSlice`] (what a peer needs for RDMA READ/WRITE/atomics).
use std::ops::{Bound, RangeBounds};

use crate::{Error, Result};

/// Address, length and lkey of registered local memory: one scatter/gather entry
/// (`struct ibv_sge`). A plain value; posting it is `unsafe` because it does not keep the memory
/// alive.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(C)]
pub struct LocalSlice {
    /// Start address.
    pub addr: u64,
    /// Length in bytes.
    pub len: u32,
    /// Local key of the region.
    pub lkey: u32,
}

/// Address, length and rkey of a (usually peer's) registered region: the target of RDMA READ,
/// WRITE and atomics. A plain value to exchange out of band; the peer's NIC checks it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct RemoteSlice {
    /// Start address (in the peer's address space).
    pub addr: u64,
    /// Length in bytes.
    pub len: u32,
    /// Remote key of the region.
    pub rkey: u32,
}

/// Resolves `range` against a buffer of `len` bytes: `(start, length)`; the length must fit a
/// scatter/gather entry (u32).
pub(crate) fn check_range(range: impl RangeBounds<usize>, len: usize) -> Result<(usize, u32)> {
    let start = match range.start_bound() {
        Bound::Included(&s) => s,
        Bound::Excluded(&s) => s.saturating_add(1),
        Bound::Unbounded => 0,
    };
    let end = match range.end_bound() {
        Bound::Included(&e) => e.saturating_add(1),
        Bound::Excluded(&e) => e,
        Bound::Unbounded => len,
    };
    if start > end || end > len {
        return Err(Error::OutOfBounds { start, end, len });
    }
    let n = u32::try_from(end - start).map_err(|_| Error::OutOfBounds { start, end, len })?;
    Ok((start, n))
}

impl LocalSlice {
    /// A sub-range, bounds-checked.
    pub fn slice(&self, range: impl RangeBounds<usize>) -> Result<LocalSlice> {
        let (start, len) = check_range(range, self.len as usize)?;
        Ok(LocalSlice {
            addr: self.addr + start as u64,
            len,
            lkey: self.lkey,
        })
    }
}

impl RemoteSlice {
    /// Encoded size of [`to_bytes`](Self::to_bytes).
    pub const WIRE_SIZE: usize = 16;

    /// A sub-range, bounds-checked.
    pub fn slice(&self, range: impl RangeBounds<usize>) -> Result<RemoteSlice> {
        let (start, len) = check_range(range, self.len as usize)?;
        Ok(RemoteSlice {
            addr: self.addr + start as u64,
            len,
            rkey: self.rkey,
        })
    }

    /// Network-order encoding for out-of-band exchange: addr (8), len (4), rkey (4).
    pub fn to_bytes(&self) -> [u8; 16] {
        let mut b = [0; 16];
        b[..8].copy_from_slice(&self.addr.to_be_bytes());
        b[8..12].copy_from_slice(&self.len.to_be_bytes());
        b[12..].copy_from_slice(&self.rkey.to_be_bytes());
        b
    }

    /// Decodes [`to_bytes`](Self::to_bytes).
    pub fn from_bytes(b: [u8; 16]) -> Self {
        RemoteSlice {
            addr: u64::from_be_bytes(b[..8].try_into().expect("8 bytes")),
            len: u32::from_be_bytes(b[8..12].try_into().expect("4 bytes")),
            rkey: u32::from_be_bytes(b[12..].try_into().expect("4 bytes")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn ranges() {
        assert_eq!(check_range(.., 10).unwrap(), (0, 10));
        assert_eq!(check_range(2..=4, 10).unwrap(), (2, 3));
        assert_eq!(check_range(10.., 10).unwrap(), (10, 0));
        assert!(check_range(5..11, 10).is_err());
        #[allow(clippy::reversed_empty_ranges)]
        let r = check_range(6..5, 10);
        assert!(r.is_err());
    }

    proptest! {
        #[test]
        fn sub_slices_stay_inside(start in 0usize..200, len in 0usize..200, total in 0u32..150) {
            let s = LocalSlice { addr: 4096, len: total, lkey: 7 };
            match s.slice(start..start + len) {
                Ok(sub) => {
                    prop_assert!(sub.addr >= s.addr);
                    prop_assert!(sub.addr + u64::from(sub.len) <= s.addr + u64::from(s.len));
                    prop_assert_eq!(sub.lkey, 7);
                }
                Err(_) => prop_assert!(start + len > total as usize),
            }
        }

        #[test]
        fn remote_wire_round_trip(addr: u64, len: u32, rkey: u32) {
            let r = RemoteSlice { addr, len, rkey };
            prop_assert_eq!(RemoteSlice::from_bytes(r.to_bytes()), r);
        }
    }
}
