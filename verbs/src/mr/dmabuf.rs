//! Memory regions over a dma-buf (`ibv_reg_dmabuf_mr`): memory another driver exports (a GPU's,
//! udmabuf's), registered by file descriptor instead of by address. The region owns the
//! descriptor and closes it only after deregistration.
use std::io;
use std::ops::RangeBounds;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};

use verbs_sys as sys;

use super::{check_access, slice, AccessFlags, LocalSlice, MrInner, RemoteSlice};
use crate::pd::Pd;
use crate::{Capability, Error, Result};

/// `DMA_BUF_MAGIC` (`linux/magic.h`): `fstatfs`'s file-system type of a dma-buf descriptor.
const DMA_BUF_MAGIC: u64 = 0x444d_4142;

/// What to do when the device cannot register dma-bufs, for [`Error::MissingCapability`].
pub(crate) const INSTEAD: &str = "copy the bytes through host memory registered with \
    Pd::reg_mr, or use a kernel (5.12 or later) and device whose driver imports dma-bufs \
    (mlx5 does; rxe and siw do not)";

/// A memory region over `len` bytes of a dma-buf, from [`Pd::reg_dmabuf_mr`]; deregistered on
/// drop, then its descriptor closed.
///
/// The device addresses the bytes as `iova..iova + len` ([`addr`](Self::addr) is the iova):
/// local scatter/gather entries and peers' RDMA use those addresses with the region's keys.
/// What it reaches is the dma-buf's memory at `offset..offset + len`, which is not memory of
/// this process: the region hands out no slices, only descriptors, and it is not a
/// [`RegisteredBuf`](crate::RegisteredBuf), so its [`local`](Self::local) descriptors are posted
/// with the `unsafe` post calls, like a [`RawMr`](crate::RawMr)'s.
pub struct DmabufMr {
    /// The registration, holding the dma-buf's descriptor (closed after deregistration).
    reg: MrInner,
    iova: u64,
    offset: u64,
}

impl std::fmt::Debug for DmabufMr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DmabufMr")
            .field("fd", &self.fd().as_raw_fd())
            .field("offset", &self.offset)
            .field("iova", &self.iova)
            .field("len", &self.len())
            .field("lkey", &self.lkey())
            .field("rkey", &self.rkey())
            .field("access", &self.access())
            .finish()
    }
}

impl Pd {
    /// Registers `len` bytes at `offset` of the dma-buf `fd`, which the device addresses as
    /// `iova..iova + len`, with the rights of `access`.
    ///
    /// The region takes the descriptor and closes it after deregistration, so the dma-buf lives
    /// at least as long as the registration (keep a [`try_clone`](OwnedFd::try_clone) to go on
    /// using it). What the device may touch is the dma-buf's memory at `offset..offset + len`
    /// only: it reads it for local gathers and (with [`AccessFlags::REMOTE_READ`]) peers'
    /// READs, and writes it for local scatters (with [`AccessFlags::LOCAL_WRITE`]) and, with
    /// remote write or atomic rights, whenever a peer holding the rkey chooses. Whatever else
    /// maps that memory (the exporter, a mapping of the memory behind it) sees those writes as
    /// they happen; treat such mappings as shared with the device.
    ///
    /// Refused up front, with [`Error::InvalidDmabuf`] saying what to change: `len` 0,
    /// `offset + len` or `iova + len` past `u64::MAX`, and bytes past the end of the dma-buf
    /// (its size from `lseek(fd, 0, SEEK_END)`, where the descriptor can seek), as well as
    /// [`Error::InvalidAccess`] for the rights [`reg_mr`](Self::reg_mr) refuses. A device that
    /// cannot register dma-bufs (its provider or kernel driver lacks the verb: EOPNOTSUPP,
    /// ENOSYS or EPROTONOSUPPORT) gives [`Error::MissingCapability`] with
    /// [`Capability::DmabufMr`], naming the device; a descriptor that is not a dma-buf, refused
    /// by a device that can, [`Error::InvalidDmabuf`]; any other refusal
    /// [`Error::RegDmabufMr`].
    #[doc(alias = "ibv_reg_dmabuf_mr")]
    pub fn reg_dmabuf_mr(
        &self,
        fd: OwnedFd,
        offset: u64,
        len: usize,
        iova: u64,
        access: AccessFlags,
    ) -> Result<DmabufMr> {
        check_access(access)?;
        let invalid = |problem: String| Error::InvalidDmabuf {
            fd: fd.as_raw_fd(),
            offset,
            len,
            problem,
        };
        check_range(offset, len, iova, file_size(fd.as_fd())).map_err(invalid)?;
        // SAFETY: live PD; the kernel takes its own reference on the dma-buf for the region's
        // life, and the region keeps the descriptor open until it is deregistered.
        let raw = unsafe {
            sys::ibv_reg_dmabuf_mr(
                self.as_raw(),
                offset,
                len,
                iova,
                fd.as_raw_fd(),
                access.bits() as i32,
            )
        };
        let raw = match sys::errno::check_ptr(raw) {
            Ok(raw) => raw,
            Err(source) if is_unsupported(&source) => {
                let ctx = self.context();
                return Err(Error::MissingCapability {
                    device: ctx.name().to_owned(),
                    transport: ctx.transport(),
                    capability: Capability::DmabufMr,
                    instead: INSTEAD,
                });
            }
            Err(source) => {
                return Err(match is_dmabuf(fd.as_fd()) {
                    Ok(false) => invalid(
                        "the descriptor is not a dma-buf: pass one a dma-buf exporter gave \
                         (a GPU driver's export, /dev/udmabuf's UDMABUF_CREATE)"
                            .to_owned(),
                    ),
                    _ => Error::RegDmabufMr {
                        offset,
                        len,
                        source,
                    },
                })
            }
        };
        Ok(DmabufMr {
            reg: MrInner {
                raw,
                access,
                mem: None,
                dmabuf: Some(fd),
                deregistered: false,
                _pd: self.inner.clone(),
            },
            iova,
            offset,
        })
    }
}

/// The errnos of a provider or kernel without the verb.
fn is_unsupported(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EOPNOTSUPP | libc::ENOSYS | libc::EPROTONOSUPPORT)
    )
}

/// The checks `ibv_reg_dmabuf_mr` would fail with a bare EINVAL: what is wrong and what to do.
fn check_range(
    offset: u64,
    len: usize,
    iova: u64,
    size: Option<u64>,
) -> std::result::Result<(), String> {
    let len64 = len as u64;
    if len == 0 {
        return Err(
            "a region of 0 bytes: pass the length of the bytes the device may access \
                    (at least 1)"
                .to_owned(),
        );
    }
    let Some(end) = offset.checked_add(len64) else {
        return Err(format!(
            "offset + length overflows u64: pass an offset of at most {}",
            u64::MAX - len64
        ));
    };
    if iova.checked_add(len64).is_none() {
        return Err(format!(
            "iova + length overflows u64: pick an iova of at most {}",
            u64::MAX - len64
        ));
    }
    match size {
        Some(size) if end > size => Err(format!(
            "bytes {offset}..{end} end past the descriptor's {size} bytes \
             (lseek SEEK_END): pass an offset and length within them"
        )),
        _ => Ok(()),
    }
}

/// The descriptor's size as `lseek(fd, 0, SEEK_END)` tells it (a dma-buf's size; the size of a
/// regular file), `None` for one that cannot seek. The file position is restored where there
/// is one (a dma-buf has none).
fn file_size(fd: BorrowedFd<'_>) -> Option<u64> {
    let fd = fd.as_raw_fd();
    // SAFETY: lseek on an open descriptor; no memory is involved.
    let (pos, end) = unsafe {
        (
            libc::lseek(fd, 0, libc::SEEK_CUR),
            libc::lseek(fd, 0, libc::SEEK_END),
        )
    };
    if pos >= 0 {
        // SAFETY: as above; back to where the position was.
        unsafe { libc::lseek(fd, pos, libc::SEEK_SET) };
    }
    u64::try_from(end).ok()
}

/// Whether `fd` is a dma-buf: its file system is dma-buf's (`DMA_BUF_MAGIC`).
fn is_dmabuf(fd: BorrowedFd<'_>) -> io::Result<bool> {
    // SAFETY: all-zero is a valid `struct statfs` (plain integers).
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: open descriptor; `st` is valid for writes of a `struct statfs`.
    if unsafe { libc::fstatfs(fd.as_raw_fd(), &mut st) } != 0 {
        return Err(io::Error::last_os_error());
    }
    #[allow(clippy::unnecessary_cast)] // `f_type`'s type differs between targets
    Ok(st.f_type as u64 == DMA_BUF_MAGIC)
}

impl DmabufMr {
    /// The address the device knows the first byte by: the iova it was registered with.
    pub fn addr(&self) -> u64 {
        self.iova
    }
    /// Where the region starts in the dma-buf.
    pub fn offset(&self) -> u64 {
        self.offset
    }
    /// Length of the registered bytes.
    pub fn len(&self) -> usize {
        self.reg.mr().length
    }
    /// Whether the region is empty (never: a region has at least one byte).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Local key: names this region in local scatter/gather entries.
    pub fn lkey(&self) -> u32 {
        self.reg.mr().lkey
    }
    /// Remote key: lets a peer access the region (with the rights of [`Self::access`]).
    pub fn rkey(&self) -> u32 {
        self.reg.mr().rkey
    }
    /// The rights it was registered with.
    pub fn access(&self) -> AccessFlags {
        self.reg.access
    }
    /// The dma-buf's descriptor, open while the region lives.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.reg
            .dmabuf
            .as_ref()
            .expect("a dma-buf region holds its descriptor")
            .as_fd()
    }
    /// The raw `ibv_mr` (whose `addr` libibverbs sets to the offset, not the iova), valid while
    /// this region lives.
    pub fn as_raw(&self) -> *mut sys::ibv_mr {
        self.reg.raw.as_ptr()
    }
    /// A local descriptor (iova, length, lkey) of `range`, bounds-checked.
    pub fn local(&self, range: impl RangeBounds<usize>) -> Result<LocalSlice> {
        let (start, len) = slice::check_range(range, self.len())?;
        Ok(LocalSlice {
            addr: self.iova + start as u64,
            len,
            lkey: self.lkey(),
        })
    }
    /// A remote descriptor (iova, length, rkey) of `range` to give to a peer, bounds-checked.
    pub fn remote(&self, range: impl RangeBounds<usize>) -> Result<RemoteSlice> {
        let (start, len) = slice::check_range(range, self.len())?;
        Ok(RemoteSlice {
            addr: self.iova + start as u64,
            len,
            rkey: self.rkey(),
        })
    }

    /// Deregisters now and gives the dma-buf's descriptor back (dropping deregisters too, but
    /// cannot tell whether it worked).
    ///
    /// On failure (e.g. `EBUSY`: a memory window is still bound to the region) the region is
    /// still registered and comes back with the error.
    #[doc(alias = "ibv_dereg_mr")]
    #[allow(clippy::result_large_err)] // as `RawMr::deregister`: a rare path, the region by value
    pub fn deregister(mut self) -> std::result::Result<OwnedFd, (DmabufMr, Error)> {
        match self.reg.dereg() {
            Ok(()) => Ok(self
                .reg
                .dmabuf
                .take()
                .expect("a dma-buf region holds its descriptor")),
            Err(source) => Err((self, Error::DeregMr(source))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_the_verb_would_refuse_are_named_with_the_fix() {
        let e = check_range(0, 0, 0, Some(4096)).unwrap_err();
        assert!(e.contains("0 bytes") && e.contains("at least 1"), "{e}");
        let e = check_range(u64::MAX - 10, 4096, 0, None).unwrap_err();
        assert!(e.contains("offset + length overflows"), "{e}");
        assert!(e.contains(&(u64::MAX - 4096).to_string()), "{e}");
        let e = check_range(0, 4096, u64::MAX - 100, None).unwrap_err();
        assert!(e.contains("iova + length overflows"), "{e}");
        let e = check_range(4096, 4097, 0, Some(8192)).unwrap_err();
        assert!(e.contains("4096..8193") && e.contains("8192 bytes"), "{e}");
        assert!(check_range(4096, 4096, 1 << 40, Some(8192)).is_ok());
        assert!(check_range(1 << 50, 4096, 0, None).is_ok(), "size unknown");
    }

    #[test]
    fn only_the_errnos_of_a_missing_verb_are_a_missing_capability() {
        for errno in [libc::EOPNOTSUPP, libc::ENOSYS, libc::EPROTONOSUPPORT] {
            assert!(is_unsupported(&io::Error::from_raw_os_error(errno)));
        }
        for errno in [libc::EINVAL, libc::EBADF, libc::ENOMEM, libc::EFAULT] {
            assert!(!is_unsupported(&io::Error::from_raw_os_error(errno)));
        }
    }

    #[test]
    fn a_memfd_is_not_a_dmabuf_and_its_size_is_found() {
        // SAFETY: a NUL-terminated name; the flags are memfd_create's.
        let raw = unsafe { libc::memfd_create(c"verbs-dmabuf-test".as_ptr(), libc::MFD_CLOEXEC) };
        assert!(raw >= 0, "{}", io::Error::last_os_error());
        // SAFETY: a descriptor just opened, owned by nothing else.
        let fd = unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(raw) };
        // SAFETY: open descriptor.
        assert_eq!(unsafe { libc::ftruncate(fd.as_raw_fd(), 3 * 4096) }, 0);
        // SAFETY: open descriptor; moves the position so that its restoring shows.
        let moved = unsafe { libc::lseek(fd.as_raw_fd(), 100, libc::SEEK_SET) };
        assert_eq!(moved, 100);
        assert_eq!(file_size(fd.as_fd()), Some(3 * 4096));
        // SAFETY: open descriptor.
        let pos = unsafe { libc::lseek(fd.as_raw_fd(), 0, libc::SEEK_CUR) };
        assert_eq!(pos, 100, "the position is restored");
        assert!(!is_dmabuf(fd.as_fd()).unwrap());
    }
}
