//! Buffers: RAII handles to a slot of registered memory, returned to the pool on drop.

use std::fmt;
use std::ops::{Deref, DerefMut};
use std::sync::Arc;

use crate::pool::ClassShared;
use crate::registered::SlotMemory;
use crate::{Error, Result};

/// A scatter/gather entry for a work request: where the buffer's bytes are and their local key
/// (`struct ibv_sge`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Sge {
    /// Virtual address of the first byte.
    pub addr: u64,
    /// Number of bytes.
    pub length: u32,
    /// Local key of the registration.
    pub lkey: u32,
}

/// What a peer needs to RDMA READ, WRITE or use atomics on a buffer: address, length, remote key.
///
/// The key belongs to the whole chunk's registration, so a peer holding it can reach the rest
/// of the chunk too, within the access the pool was created with. Give remote keys only to
/// peers trusted with the pool's memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct RemoteDescriptor {
    /// Virtual address of the first byte.
    pub addr: u64,
    /// Number of bytes.
    pub len: u32,
    /// Remote key of the registration.
    pub rkey: u32,
}

impl From<Sge> for verbs::LocalSlice {
    fn from(sge: Sge) -> Self {
        verbs::LocalSlice {
            addr: sge.addr,
            len: sge.length,
            lkey: sge.lkey,
        }
    }
}

/// The target of an RDMA WRITE, READ or atomic posted with the verbs layer
/// (`verbs::WrOp::RdmaWrite(descriptor.into())`).
impl From<RemoteDescriptor> for verbs::RemoteSlice {
    fn from(remote: RemoteDescriptor) -> Self {
        verbs::RemoteSlice {
            addr: remote.addr,
            len: remote.len,
            rkey: remote.rkey,
        }
    }
}

/// A buffer of registered memory from a [`Pool`](crate::Pool).
///
/// Derefs to its first `len()` bytes; its [`capacity`](Self::capacity) is its
/// class size. Dropping it, on any thread, returns it to the pool and wakes one thread waiting
/// in [`Pool::alloc`](crate::Pool::alloc). Contents are not cleared between uses.
///
/// To give a buffer to the NIC, move it into a verbs work request (it is a
/// `verbs::RegisteredBuf`); it comes back with the completion (`Qp::reclaim`), so it cannot be
/// dropped or touched while the NIC uses it. The request's range is taken from the whole slot,
/// so give `..buf.len()` to send the buffer's contents.
///
/// In a pool with remote write or atomic rights ([`PoolAccess::REMOTE_WRITE`],
/// [`PoolAccess::REMOTE_ATOMIC`]) a peer may write the buffer at any time, so it has no slice
/// view: use [`read`](Self::read) and [`write`](Self::write), which copy.
///
/// # Panics
/// Dereferencing (`&buf[..]`, `as_ref`, `as_mut`) panics in a pool with remote write or atomic
/// rights.
///
/// [`PoolAccess::REMOTE_WRITE`]: crate::PoolAccess::REMOTE_WRITE
/// [`PoolAccess::REMOTE_ATOMIC`]: crate::PoolAccess::REMOTE_ATOMIC
pub struct Buffer {
    /// `None` only while dropping.
    slot: Option<SlotMemory>,
    len: usize,
    /// `None` only while dropping.
    class: Option<Arc<ClassShared>>,
}

impl Buffer {
    pub(crate) fn new(class: Arc<ClassShared>, slot: SlotMemory, len: usize) -> Self {
        debug_assert!(len <= slot.capacity());
        Self {
            slot: Some(slot),
            len,
            class: Some(class),
        }
    }

    fn slot(&self) -> &SlotMemory {
        self.slot.as_ref().expect("a live buffer has its slot")
    }

    /// Its length: the bytes it derefs to (and that `read`/`write` reach).
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether its length is zero.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bytes the buffer can hold: its class size.
    pub fn capacity(&self) -> usize {
        self.slot().capacity()
    }

    /// Change the length, up to the capacity (e.g. to the byte count of a receive completion).
    /// Bytes exposed by growing hold whatever the slot held before.
    pub fn set_len(&mut self, len: usize) -> Result<()> {
        let capacity = self.capacity();
        if len > capacity {
            return Err(Error::TooLarge {
                requested: len,
                max: capacity,
            });
        }
        self.len = len;
        Ok(())
    }

    /// Virtual address of the first byte.
    pub fn addr(&self) -> u64 {
        self.slot().addr()
    }

    /// Local key of the registration holding the buffer.
    pub fn lkey(&self) -> u32 {
        self.slot().lkey()
    }

    /// The scatter/gather entry covering the buffer's current length.
    pub fn sge(&self) -> Sge {
        let slot = self.slot();
        Sge {
            addr: slot.addr(),
            // Class sizes are at most 1 GiB (validated), so the length fits.
            length: self.len as u32,
            lkey: slot.lkey(),
        }
    }

    /// Whether a peer may write the buffer at any time (its pool has remote write or atomic
    /// rights): then it gives no slices, only copies ([`read`](Self::read),
    /// [`write`](Self::write)).
    pub fn is_remotely_writable(&self) -> bool {
        self.slot().remotely_writable()
    }

    /// Copies `dst.len()` bytes at `offset` out of the buffer's first [`len`](Self::len)
    /// bytes (volatile reads: correct even while a peer writes the buffer, though the bytes
    /// may then be torn).
    pub fn read(&self, offset: usize, dst: &mut [u8]) -> Result<()> {
        self.check_range(offset, dst.len())?;
        self.slot().read_volatile(offset, dst);
        Ok(())
    }

    /// Copies `src` into the buffer's first [`len`](Self::len) bytes at `offset` (volatile
    /// writes).
    pub fn write(&mut self, offset: usize, src: &[u8]) -> Result<()> {
        self.check_range(offset, src.len())?;
        self.slot
            .as_mut()
            .expect("a live buffer has its slot")
            .write_volatile(offset, src);
        Ok(())
    }

    fn check_range(&self, offset: usize, n: usize) -> Result<()> {
        match offset.checked_add(n) {
            Some(end) if end <= self.len => Ok(()),
            _ => Err(Error::TooLarge {
                requested: offset.saturating_add(n),
                max: self.len,
            }),
        }
    }

    /// The descriptor a peer needs for remote access to the buffer's current length;
    /// `None` if the pool allows no remote access.
    ///
    /// Handing out the key exposes the buffer's whole chunk for as long as the peer keeps it,
    /// which the pool cannot know: a chunk whose key was handed out stays registered until the
    /// pool and its buffers are gone, and is never reclaimed for another class.
    pub fn remote(&self) -> Option<RemoteDescriptor> {
        let slot = self.slot();
        slot.expose_rkey().map(|rkey| RemoteDescriptor {
            addr: slot.addr(),
            len: self.len as u32,
            rkey,
        })
    }
}

impl Deref for Buffer {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        self.slot().as_slice(self.len)
    }
}

impl DerefMut for Buffer {
    fn deref_mut(&mut self) -> &mut [u8] {
        let len = self.len;
        self.slot
            .as_mut()
            .expect("a live buffer has its slot")
            .as_mut_slice(len)
    }
}

impl AsRef<[u8]> for Buffer {
    fn as_ref(&self) -> &[u8] {
        self
    }
}

impl AsMut<[u8]> for Buffer {
    fn as_mut(&mut self) -> &mut [u8] {
        self
    }
}

impl Drop for Buffer {
    fn drop(&mut self) {
        if let (Some(slot), Some(class)) = (self.slot.take(), self.class.take()) {
            ClassShared::put(class, slot);
        }
    }
}

impl fmt::Debug for Buffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Buffer")
            .field("addr", &format_args!("{:#x}", self.addr()))
            .field("len", &self.len)
            .field("capacity", &self.capacity())
            .field("lkey", &self.lkey())
            .field("rkey", &self.slot().rkey())
            .finish()
    }
}

#[cfg(all(test, feature = "serde"))]
mod serde_tests {
    use super::RemoteDescriptor;

    #[test]
    fn remote_descriptor_round_trips_through_json() {
        let d = RemoteDescriptor {
            addr: 0x7f12_3400_0000,
            len: 65536,
            rkey: 0xdead,
        };
        let json = serde_json::to_string(&d).unwrap();
        assert_eq!(json, r#"{"addr":139716158554112,"len":65536,"rkey":57005}"#);
        assert_eq!(serde_json::from_str::<RemoteDescriptor>(&json).unwrap(), d);
        assert!(serde_json::from_str::<RemoteDescriptor>(r#"{"addr":1,"len":2}"#).is_err());
    }
}
