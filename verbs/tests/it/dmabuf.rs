//! dma-buf memory regions: a udmabuf made from a memfd, registered and written by RDMA, the
//! bytes read back through the memfd; or the device's typed refusal; and a descriptor that is
//! not a dma-buf, refused with a typed error on every device.
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use verbs::{AccessFlags, Capability, Error, MemoryRegion, Pd, SendRequest, WcOpcode};

use crate::support::{one, open, Pair, ALL_REMOTE};

const PAGE: usize = 4096;
/// The memfd (and the udmabuf over it): four pages.
const MEMFD_LEN: usize = 4 * PAGE;
/// The region: pages 1 and 2 of the dma-buf, at an iova unlike any address of the process.
const OFFSET: u64 = PAGE as u64;
const LEN: usize = 2 * PAGE;
const IOVA: u64 = 0x7e00_0000_0000;

/// A sealable memfd of [`MEMFD_LEN`] bytes (shrinking sealed, as udmabuf requires), mapped
/// shared: what the device writes into a udmabuf over it shows through the mapping.
struct Memfd {
    fd: OwnedFd,
    map: *mut u8,
}

impl Memfd {
    fn new() -> Memfd {
        let flags = libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING;
        // SAFETY: a NUL-terminated name and memfd_create's flags.
        let raw = unsafe { libc::memfd_create(c"verbs-dmabuf-test".as_ptr(), flags) };
        assert!(raw >= 0, "memfd_create: {}", io::Error::last_os_error());
        // SAFETY: a descriptor just opened, owned by nothing else.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        // SAFETY: open descriptor.
        let r = unsafe { libc::ftruncate(fd.as_raw_fd(), MEMFD_LEN as libc::off_t) };
        assert_eq!(r, 0, "ftruncate: {}", io::Error::last_os_error());
        // SAFETY: open descriptor; F_ADD_SEALS takes an int.
        let r = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_ADD_SEALS, libc::F_SEAL_SHRINK) };
        assert_eq!(r, 0, "F_ADD_SEALS: {}", io::Error::last_os_error());
        // SAFETY: a new shared mapping of the whole memfd, unmapped in Drop.
        let map = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                MEMFD_LEN,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        assert_ne!(
            map,
            libc::MAP_FAILED,
            "mmap: {}",
            io::Error::last_os_error()
        );
        Memfd {
            fd,
            map: map.cast(),
        }
    }

    /// A new descriptor of the memfd.
    fn dup(&self) -> OwnedFd {
        self.fd.try_clone().expect("dup the memfd")
    }

    /// Copies `n` bytes at `offset` out of the mapping (volatile: the device writes it).
    fn read(&self, offset: usize, n: usize) -> Vec<u8> {
        assert!(offset + n <= MEMFD_LEN);
        // SAFETY: in bounds of the live mapping; volatile reads of plain bytes.
        (0..n)
            .map(|i| unsafe { self.map.add(offset + i).read_volatile() })
            .collect()
    }

    /// Copies `src` into the mapping at `offset` (volatile).
    fn write(&self, offset: usize, src: &[u8]) {
        assert!(offset + src.len() <= MEMFD_LEN);
        for (i, b) in src.iter().enumerate() {
            // SAFETY: in bounds of the live mapping; volatile writes of plain bytes.
            unsafe { self.map.add(offset + i).write_volatile(*b) };
        }
    }
}

impl Drop for Memfd {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`, unmapped once.
        unsafe { libc::munmap(self.map.cast(), MEMFD_LEN) };
    }
}

/// `struct udmabuf_create` (`linux/udmabuf.h`).
#[repr(C)]
struct UdmabufCreate {
    memfd: u32,
    flags: u32,
    offset: u64,
    size: u64,
}
/// `UDMABUF_FLAGS_CLOEXEC`.
const UDMABUF_FLAGS_CLOEXEC: u32 = 1;
/// `UDMABUF_CREATE`: `_IOW('u', 0x42, struct udmabuf_create)`.
const UDMABUF_CREATE: u32 = 0x4018_7542;

/// A dma-buf over the whole memfd, from `/dev/udmabuf`; `Err` with what is missing when this
/// kernel has no udmabuf.
fn udmabuf(memfd: &Memfd) -> Result<OwnedFd, String> {
    let dev = match File::options().read(true).write(true).open("/dev/udmabuf") {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Err(format!(
                "no /dev/udmabuf ({e}): kernel {} has no udmabuf (CONFIG_UDMABUF), so no dma-buf \
                 to register",
                kernel_release()
            ))
        }
        Err(e) => panic!("cannot open /dev/udmabuf: {e}"),
    };
    let arg = UdmabufCreate {
        memfd: memfd.fd.as_raw_fd() as u32,
        flags: UDMABUF_FLAGS_CLOEXEC,
        offset: 0,
        size: MEMFD_LEN as u64,
    };
    // SAFETY: UDMABUF_CREATE reads a `struct udmabuf_create`, which `arg` is.
    let raw = unsafe { libc::ioctl(dev.as_raw_fd(), UDMABUF_CREATE as _, &arg) };
    assert!(raw >= 0, "UDMABUF_CREATE: {}", io::Error::last_os_error());
    // SAFETY: the ioctl returned a new descriptor, owned by nothing else.
    Ok(unsafe { OwnedFd::from_raw_fd(raw) })
}

fn kernel_release() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_owned())
        .unwrap_or_else(|e| format!("(release unknown: {e})"))
}

/// What `ibv_reg_dmabuf_mr` itself says to `fd`: the errno, or `None` if it registered.
fn raw_errno(pd: &Pd, fd: &OwnedFd) -> Option<io::Error> {
    let access = AccessFlags::LOCAL_WRITE.bits() as i32;
    // SAFETY: live PD and open descriptor; a region it makes is deregistered at once.
    let mr =
        unsafe { verbs::sys::ibv_reg_dmabuf_mr(pd.as_raw(), 0, PAGE, 0, fd.as_raw_fd(), access) };
    if mr.is_null() {
        return Some(io::Error::last_os_error());
    }
    // SAFETY: registered just now, deregistered once.
    unsafe { verbs::sys::ibv_dereg_mr(mr) };
    None
}

/// Whether `e` is the device's typed refusal of dma-buf regions, naming it; panics on any
/// other refusal.
fn refused_by_device(e: &Error, device: &str) -> bool {
    match e {
        Error::MissingCapability {
            device: named,
            capability: Capability::DmabufMr,
            ..
        } => {
            assert_eq!(named, device, "{e}");
            let text = e.to_string();
            assert!(
                text.contains(device) && text.contains("ibv_reg_dmabuf_mr"),
                "{text}"
            );
            assert_eq!(e.missing_capability(), Some(Capability::DmabufMr));
            true
        }
        _ => false,
    }
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn dmabuf_region_is_used_or_refused_by_name() {
    let ctx = open();
    let device = ctx.name().to_owned();
    let manual = ctx.capabilities().unwrap().has(Capability::ManualConnect);
    let pair = manual.then(Pair::rc);
    let pd = match &pair {
        Some(p) => p.pd.clone(),
        None => ctx.alloc_pd().unwrap(),
    };
    let memfd = Memfd::new();
    let access = AccessFlags::LOCAL_WRITE | ALL_REMOTE;

    // What can be told up front is refused before the device is asked, on every device.
    for (offset, len, iova, what) in [
        (0, 0, 0, "0 bytes"),
        (u64::MAX - 10, PAGE, 0, "offset + length overflows"),
        (0, PAGE, u64::MAX - 10, "iova + length overflows"),
        (
            OFFSET,
            MEMFD_LEN,
            0,
            "end past the descriptor's 16384 bytes",
        ),
    ] {
        match pd.reg_dmabuf_mr(memfd.dup(), offset, len, iova, access) {
            Err(e @ Error::InvalidDmabuf { .. }) => {
                assert!(e.to_string().contains(what), "{e}")
            }
            other => panic!("{what}: {other:?}"),
        }
    }

    // A descriptor that is not a dma-buf: the device's refusal of dma-buf regions where it has
    // none, else the fd named as no dma-buf. Never a region.
    let said = match raw_errno(&pd, &memfd.fd) {
        Some(e) => format!("ibv_reg_dmabuf_mr itself said: {e}"),
        None => "ibv_reg_dmabuf_mr itself registered it".to_owned(),
    };
    match pd.reg_dmabuf_mr(memfd.dup(), OFFSET, LEN, IOVA, access) {
        Err(e) if refused_by_device(&e, &device) => {
            eprintln!("{device} refuses dma-buf regions: {e} ({said})")
        }
        Err(e @ Error::InvalidDmabuf { .. }) => {
            assert!(e.to_string().contains("not a dma-buf"), "{e}");
            eprintln!("{device} registers dma-bufs, and refused a memfd: {e}");
        }
        other => panic!("a memfd registered as a dma-buf on {device}: {other:?} ({said})"),
    }

    // A real dma-buf over the memfd.
    let dmabuf = match udmabuf(&memfd) {
        Ok(fd) => fd,
        Err(missing) => {
            testkit::skip_part("registering a udmabuf", &missing);
            return;
        }
    };
    let mr = match pd.reg_dmabuf_mr(dmabuf, OFFSET, LEN, IOVA, access) {
        Ok(mr) => mr,
        Err(e) if refused_by_device(&e, &device) => {
            eprintln!("{device} refused the udmabuf: {e}");
            testkit::skip_part("using a dma-buf region", &e.to_string());
            return;
        }
        Err(e) => panic!("{device} refused the udmabuf: {e:?}"),
    };
    eprintln!("{device} registered the udmabuf: {mr:?}");
    assert_eq!((mr.addr(), mr.offset(), mr.len()), (IOVA, OFFSET, LEN));
    let remote = mr.remote(100..100 + 5000).unwrap();
    assert_eq!((remote.addr, remote.rkey), (IOVA + 100, mr.rkey()));
    assert_eq!(mr.local(..).unwrap().addr, IOVA);
    let Some(p) = pair else {
        testkit::skip_part(
            "RDMA into the dma-buf region",
            "the device connects queue pairs only through the RDMA CM",
        );
        return;
    };

    // RDMA WRITE from host memory into the region: the bytes show in the memfd at OFFSET.
    let data: Vec<u8> = (0..5000u32).map(|i| (i * 7 + 3) as u8).collect();
    let mut source = p.pd.reg_mr(5000, AccessFlags::LOCAL_WRITE).unwrap();
    source.as_mut_slice().copy_from_slice(&data);
    let id =
        p.a.post_send(SendRequest::rdma_write(source, .., remote).unwrap())
            .unwrap();
    let (c, _) = one(&p.cq_a, &p.a);
    assert_eq!(
        (c.wr_id, c.status, c.opcode),
        (id, Ok(()), Some(WcOpcode::RdmaWrite))
    );
    assert_eq!(memfd.read(OFFSET as usize + 100, 5000), data);
    assert!(memfd.read(0, OFFSET as usize + 100).iter().all(|&b| b == 0));

    // RDMA READ out of it: bytes written through the memfd come back.
    memfd.write(OFFSET as usize + LEN - 64, b"read back through the dma-buf");
    let dst = p.pd.reg_mr(64, AccessFlags::LOCAL_WRITE).unwrap();
    let id =
        p.a.post_send(SendRequest::rdma_read(dst, .., mr.remote(LEN - 64..).unwrap()).unwrap())
            .unwrap();
    let (c, mut back) = one(&p.cq_a, &p.a);
    assert_eq!(
        (c.wr_id, c.status, c.opcode),
        (id, Ok(()), Some(WcOpcode::RdmaRead))
    );
    let dst: MemoryRegion = back[0].take().unwrap();
    assert!(dst.as_slice().starts_with(b"read back through the dma-buf"));

    // Deregistering hands the descriptor back, still a dma-buf of the memfd's size.
    let fd = mr.deregister().map_err(|(_, e)| e).unwrap();
    // SAFETY: open descriptor; a dma-buf reports its size at SEEK_END.
    let size = unsafe { libc::lseek(fd.as_raw_fd(), 0, libc::SEEK_END) };
    assert_eq!(size, MEMFD_LEN as libc::off_t);
}
