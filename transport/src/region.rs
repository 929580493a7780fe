//! One-sided access: a [`Region`] of memory exposed to peers, named by a small serializable
//! [`Token`] that a peer uses with [`Conn::read`](crate::Conn::read) and
//! [`Conn::write`](crate::Conn::write); the owner revokes it by dropping or
//! [`revoking`](Region::revoke) the region.
//!
//! Token layout (32 bytes, little endian): magic `RDRT` (4), access bits (1: bit 0 read, bit 1
//! write), zero (3), address (8), length (8), rkey (4), zero (4).

use std::fmt;

use parking_lot::Mutex;
use verbs::{AccessFlags, MemoryRegion};

use crate::{Error, Result};

/// What a peer may do with an exposed region.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Access {
    /// RDMA READ only.
    Read,
    /// RDMA WRITE only.
    Write,
    /// Both.
    ReadWrite,
}

impl Access {
    fn bits(self) -> u8 {
        match self {
            Access::Read => 1,
            Access::Write => 2,
            Access::ReadWrite => 3,
        }
    }

    fn from_bits(b: u8) -> Option<Access> {
        match b {
            1 => Some(Access::Read),
            2 => Some(Access::Write),
            3 => Some(Access::ReadWrite),
            _ => None,
        }
    }

    /// Whether peers may read.
    pub fn can_read(self) -> bool {
        self.bits() & 1 != 0
    }

    /// Whether peers may write.
    pub fn can_write(self) -> bool {
        self.bits() & 2 != 0
    }

    pub(crate) fn flags(self) -> AccessFlags {
        let mut f = AccessFlags::LOCAL_WRITE;
        if self.can_read() {
            f |= AccessFlags::REMOTE_READ;
        }
        if self.can_write() {
            f |= AccessFlags::REMOTE_WRITE;
        }
        f
    }
}

/// What a peer needs to access an exposed region: send it any way you like
/// ([`to_bytes`](Self::to_bytes), e.g. in a message) and use it with
/// [`Conn::read`](crate::Conn::read) / [`Conn::write`](crate::Conn::write).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Token {
    pub(crate) addr: u64,
    pub(crate) len: u64,
    pub(crate) rkey: u32,
    pub(crate) access: Access,
}

const MAGIC: [u8; 4] = *b"RDRT";

impl Token {
    /// Encoded length.
    pub const LEN: usize = 32;

    /// Length of the region in bytes.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether the region is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// What the region allows.
    pub fn access(&self) -> Access {
        self.access
    }

    /// The 32-byte encoding.
    pub fn to_bytes(&self) -> [u8; Self::LEN] {
        let mut b = [0u8; Self::LEN];
        b[0..4].copy_from_slice(&MAGIC);
        b[4] = self.access.bits();
        b[8..16].copy_from_slice(&self.addr.to_le_bytes());
        b[16..24].copy_from_slice(&self.len.to_le_bytes());
        b[24..28].copy_from_slice(&self.rkey.to_le_bytes());
        b
    }

    /// Decodes [`to_bytes`](Self::to_bytes); anything else is [`Error::BadToken`].
    pub fn from_bytes(b: &[u8]) -> Result<Token> {
        let b: &[u8; Self::LEN] = b
            .try_into()
            .map_err(|_| Error::BadToken("a token is exactly 32 bytes"))?;
        if b[0..4] != MAGIC {
            return Err(Error::BadToken("not a region token (bad magic)"));
        }
        let access = Access::from_bits(b[4]).ok_or(Error::BadToken("unknown access bits"))?;
        if b[5..8] != [0; 3] || b[28..32] != [0; 4] {
            return Err(Error::BadToken("reserved bytes are not zero"));
        }
        let u64_at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"));
        let addr = u64_at(8);
        let len = u64_at(16);
        if addr.checked_add(len).is_none() {
            return Err(Error::BadToken("address + length overflows"));
        }
        Ok(Token {
            addr,
            len,
            rkey: u32::from_le_bytes(b[24..28].try_into().expect("4 bytes")),
            access,
        })
    }

    /// Checks that `len` bytes at `offset` lie inside the region and `op` is allowed.
    pub(crate) fn check(&self, op: &'static str, offset: u64, len: u64) -> Result<u64> {
        let allowed = match op {
            "read" => self.access.can_read(),
            _ => self.access.can_write(),
        };
        if !allowed {
            return Err(Error::AccessDenied { op });
        }
        self.check_range(offset, len).map(|()| self.addr + offset)
    }

    /// Checks that `len` bytes at `offset` lie inside the region (whatever its access).
    fn check_range(&self, offset: u64, len: u64) -> Result<()> {
        match offset.checked_add(len) {
            Some(end) if end <= self.len => Ok(()),
            _ => Err(Error::OutOfRange {
                offset,
                len,
                region_len: self.len,
            }),
        }
    }
}

/// Memory exposed to peers. Read and write it with copies ([`read`](Self::read),
/// [`write`](Self::write)): a peer may write it at any time, so it never lends out slices.
/// Both take `&self`, so a region shared between threads (in an `Arc`) needs no lock of
/// yours; local copies into and out of it take turns, a peer's accesses do not wait.
/// Dropping it, or [`revoke`](Self::revoke), deregisters it: from then on a peer's access
/// with its token fails with a remote access error (which also ends that peer's connection,
/// as RC does for any remote access error).
pub struct Region {
    /// Locked for each local copy (verbs writes a region through `&mut`).
    pub(crate) mr: Mutex<MemoryRegion>,
    pub(crate) token: Token,
}

impl Region {
    /// The token to give to peers.
    pub fn token(&self) -> Token {
        self.token
    }

    /// Length in bytes.
    pub fn len(&self) -> u64 {
        self.token.len
    }

    /// Whether the region is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Copies bytes out of the region at `offset`. Outside it: [`Error::OutOfRange`].
    pub fn read(&self, offset: u64, dst: &mut [u8]) -> Result<()> {
        let at = self.local_range(offset, dst.len())?;
        Ok(self.mr.lock().read(at, dst)?)
    }

    /// Copies `src` into the region at `offset`. Outside it: [`Error::OutOfRange`].
    pub fn write(&self, offset: u64, src: &[u8]) -> Result<()> {
        let at = self.local_range(offset, src.len())?;
        Ok(self.mr.lock().write(at, src)?)
    }

    /// The offset of a local copy of `len` bytes at `offset`, checked against the region.
    fn local_range(&self, offset: u64, len: usize) -> Result<usize> {
        self.token
            .check_range(offset, len as u64)
            .map(|()| offset as usize)
    }

    /// Revokes the token: the memory is deregistered and freed.
    pub fn revoke(self) {
        drop(self);
    }
}

impl fmt::Debug for Region {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Region")
            .field("token", &self.token)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn token_round_trips_and_checks_ranges() {
        let t = Token {
            addr: 0x1000,
            len: 64,
            rkey: 7,
            access: Access::Read,
        };
        assert_eq!(Token::from_bytes(&t.to_bytes()).unwrap(), t);
        assert_eq!(t.check("read", 0, 64).unwrap(), 0x1000);
        assert_eq!(t.check("read", 60, 4).unwrap(), 0x103c);
        assert!(matches!(
            t.check("read", 60, 5),
            Err(Error::OutOfRange { .. })
        ));
        assert!(matches!(
            t.check("read", u64::MAX, 2),
            Err(Error::OutOfRange { .. })
        ));
        assert!(matches!(
            t.check("write", 0, 1),
            Err(Error::AccessDenied { op: "write" })
        ));
    }

    proptest! {
        #[test]
        fn decoding_arbitrary_bytes_never_panics(b in proptest::collection::vec(any::<u8>(), 0..40)) {
            let _ = Token::from_bytes(&b);
        }
    }
}
