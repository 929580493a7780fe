//! Anonymous memory for chunks: `mmap`, optionally with huge pages, unmapped on drop.

use std::fmt;
use std::io;
use std::ptr::{self, NonNull};
use std::sync::OnceLock;

use crate::{Error, HugePages, Result};

/// Huge page size used when /proc/meminfo does not say.
const FALLBACK_HUGE_PAGE: usize = 2 << 20;

/// One anonymous, private, zero-filled mapping backing a chunk.
///
/// Registrars get it by reference to register `len()` bytes at `as_ptr()`; it never hands out
/// references to its bytes, only the pointer.
pub struct ChunkMemory {
    ptr: NonNull<u8>,
    len: usize,
    mapped_len: usize,
    huge_pages: bool,
    /// Set when the registration could not be removed: the mapping is then never unmapped.
    leaked: bool,
}

// SAFETY: ChunkMemory owns its mapping and only exposes the address; the bytes are reached
// through slot tokens (module docs of `registered`), so moving or sharing the handle is fine.
unsafe impl Send for ChunkMemory {}
// SAFETY: as above; `&ChunkMemory` allows no access to the bytes.
unsafe impl Sync for ChunkMemory {}

impl ChunkMemory {
    /// Map `len` bytes (`len > 0`), with huge pages as preferred.
    pub(crate) fn map(len: usize, huge_pages: HugePages) -> Result<Self> {
        assert!(len > 0, "empty chunk");
        let allocate = |source| Error::Allocate { len, source };
        match huge_pages {
            HugePages::Off => Self::map_normal(len).map_err(allocate),
            HugePages::Prefer => Self::map_huge(len)
                .or_else(|_| {
                    let memory = Self::map_normal(len)?;
                    memory.advise_transparent_huge_pages();
                    Ok(memory)
                })
                .map_err(allocate),
            HugePages::Require => Self::map_huge(len).map_err(|e| {
                allocate(io::Error::new(
                    e.kind(),
                    format!(
                        "no huge pages available ({e}); reserve some in /proc/sys/vm/nr_hugepages"
                    ),
                ))
            }),
        }
    }

    fn map_normal(len: usize) -> io::Result<Self> {
        Self::map_raw(len, len, 0, false)
    }

    fn map_huge(len: usize) -> io::Result<Self> {
        let page = huge_page_size();
        let mapped_len = len
            .checked_next_multiple_of(page)
            .ok_or_else(|| io::Error::from(io::ErrorKind::OutOfMemory))?;
        Self::map_raw(len, mapped_len, libc::MAP_HUGETLB, true)
    }

    fn map_raw(len: usize, mapped_len: usize, extra: libc::c_int, huge: bool) -> io::Result<Self> {
        // SAFETY: an anonymous private mapping at an address the kernel picks aliases nothing;
        // the arguments are valid for any length (the kernel rejects what it cannot map).
        let addr = unsafe {
            libc::mmap(
                ptr::null_mut(),
                mapped_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | extra,
                -1,
                0,
            )
        };
        if addr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let ptr =
            NonNull::new(addr.cast::<u8>()).ok_or_else(|| io::Error::other("mmap gave null"))?;
        Ok(Self {
            ptr,
            len,
            mapped_len,
            huge_pages: huge,
            leaked: false,
        })
    }

    fn advise_transparent_huge_pages(&self) {
        // SAFETY: the range is this mapping; MADV_HUGEPAGE only changes how it is backed, not
        // its contents. Failure (no THP support) is harmless and ignored.
        unsafe {
            libc::madvise(
                self.ptr.as_ptr().cast(),
                self.mapped_len,
                libc::MADV_HUGEPAGE,
            );
        }
    }

    /// Start of the memory, to register.
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    pub(crate) fn as_non_null(&self) -> NonNull<u8> {
        self.ptr
    }

    /// Start of the memory as the device sees it (the virtual address).
    pub fn addr(&self) -> u64 {
        self.ptr.as_ptr() as u64
    }

    /// Bytes to register.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always false: chunks are never empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// True if backed by explicit huge pages (`MAP_HUGETLB`).
    pub fn is_huge_pages(&self) -> bool {
        self.huge_pages
    }

    /// Never unmap this memory: its registration could not be removed, so the device may still
    /// access it.
    pub(crate) fn leak(&mut self) {
        self.leaked = true;
    }
}

impl Drop for ChunkMemory {
    fn drop(&mut self) {
        if self.leaked {
            return;
        }
        // SAFETY: unmaps exactly the mapping made in `map_raw`; no slot of it is live, since
        // every SlotMemory keeps its chunk, and so this memory, alive.
        let rc = unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.mapped_len) };
        debug_assert_eq!(rc, 0, "munmap failed: {}", io::Error::last_os_error());
    }
}

impl fmt::Debug for ChunkMemory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ChunkMemory")
            .field("addr", &format_args!("{:#x}", self.addr()))
            .field("len", &self.len)
            .field("huge_pages", &self.huge_pages)
            .finish()
    }
}

/// The default huge page size (`Hugepagesize:` in /proc/meminfo).
fn huge_page_size() -> usize {
    static SIZE: OnceLock<usize> = OnceLock::new();
    *SIZE.get_or_init(|| {
        std::fs::read_to_string("/proc/meminfo")
            .ok()
            .and_then(|info| parse_huge_page_size(&info))
            .unwrap_or(FALLBACK_HUGE_PAGE)
    })
}

/// How many huge pages the system has reserved (`HugePages_Total:` in /proc/meminfo), if it
/// says.
pub(crate) fn reserved_huge_pages() -> Option<u64> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    parse_reserved_huge_pages(&info)
}

fn parse_reserved_huge_pages(meminfo: &str) -> Option<u64> {
    let line = meminfo
        .lines()
        .find(|l| l.starts_with("HugePages_Total:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

fn parse_huge_page_size(meminfo: &str) -> Option<usize> {
    let line = meminfo.lines().find(|l| l.starts_with("Hugepagesize:"))?;
    let mut words = line.split_whitespace().skip(1);
    let kib: usize = words.next()?.parse().ok()?;
    (words.next()? == "kB").then_some(kib * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_huge_page_size() {
        let info = "MemTotal: 1 kB\nHugepagesize:       2048 kB\nHugetlb: 0 kB\n";
        assert_eq!(parse_huge_page_size(info), Some(2 << 20));
        assert_eq!(
            parse_huge_page_size("Hugepagesize: 1048576 kB"),
            Some(1 << 30)
        );
        assert_eq!(parse_huge_page_size("MemTotal: 1 kB"), None);
        let info = "HugePages_Total:       8\nHugePages_Free:        8\n";
        assert_eq!(parse_reserved_huge_pages(info), Some(8));
        assert_eq!(parse_reserved_huge_pages("MemTotal: 1 kB"), None);
    }

    #[test]
    fn maps_normal_memory_of_the_requested_length() {
        let memory = ChunkMemory::map(3 * 4096 + 64, HugePages::Off).unwrap();
        assert_eq!(memory.len(), 3 * 4096 + 64);
        assert!(!memory.is_huge_pages());
        assert!(!memory.is_empty());
        assert_eq!(memory.addr() % 4096, 0, "page aligned");
    }

    #[test]
    fn prefer_falls_back_to_normal_pages() {
        // Works whether or not this machine has huge pages reserved.
        let memory = ChunkMemory::map(2 << 20, HugePages::Prefer).unwrap();
        assert_eq!(memory.len(), 2 << 20);
        if memory.is_huge_pages() {
            assert_eq!(memory.addr() % huge_page_size() as u64, 0);
        }
    }

    #[test]
    fn require_fails_clearly_without_huge_pages() {
        match ChunkMemory::map(2 << 20, HugePages::Require) {
            Ok(memory) => assert!(memory.is_huge_pages()),
            Err(Error::Allocate { len, source }) => {
                assert_eq!(len, 2 << 20);
                assert!(source.to_string().contains("nr_hugepages"), "{source}");
            }
            Err(other) => panic!("unexpected error {other:?}"),
        }
    }
}
