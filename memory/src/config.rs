//! Pool configuration: size classes, chunk sizes, caps, access flags, huge pages.

use crate::{Error, Result};

/// Smallest chunk registered for a class unless configured otherwise (one 2 MiB huge page).
pub const DEFAULT_MIN_CHUNK: usize = 2 << 20;
/// A default chunk holds at least this many buffers, so large classes still amortise registration.
pub const DEFAULT_MIN_SLOTS_PER_CHUNK: usize = 16;
/// Default cap on the bytes a pool registers in total.
pub const DEFAULT_CAP_BYTES: usize = 1 << 30;
/// Largest class size accepted (a scatter/gather length is 32 bits; keep well inside it).
pub const MAX_CLASS_SIZE: usize = 1 << 30;
/// Class sizes must be multiples of this (a cache line; also keeps atomics 8-byte aligned).
pub const CLASS_ALIGN: usize = 64;

bitflags::bitflags! {
    /// What the pool's registrations allow. Remote keys expose only what the pool was created for.
    ///
    /// `LOCAL_WRITE` is always set: the NIC must be able to write received data into buffers, and
    /// the verbs require it alongside remote write and atomics. The bit values are those of
    /// `ibv_access_flags`.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub struct PoolAccess: u32 {
        /// The local NIC may write into buffers (receives, RDMA READ results). Always set.
        const LOCAL_WRITE = 1;
        /// Peers may RDMA WRITE into buffers.
        const REMOTE_WRITE = 1 << 1;
        /// Peers may RDMA READ from buffers.
        const REMOTE_READ = 1 << 2;
        /// Peers may perform atomic operations on buffers.
        const REMOTE_ATOMIC = 1 << 3;
    }
}

impl PoolAccess {
    /// True if any remote access is allowed, so buffers carry a remote key.
    pub fn is_remote(self) -> bool {
        self.intersects(Self::REMOTE_READ | Self::REMOTE_WRITE | Self::REMOTE_ATOMIC)
    }
}

impl Default for PoolAccess {
    fn default() -> Self {
        Self::LOCAL_WRITE
    }
}

/// Whether chunks are backed by huge pages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum HugePages {
    /// Normal pages.
    #[default]
    Off,
    /// Huge pages (`MAP_HUGETLB`) when the system has some reserved, else normal pages with a
    /// transparent-huge-page hint.
    Prefer,
    /// Huge pages or fail with [`Error::Allocate`] (reserve them via /proc/sys/vm/nr_hugepages).
    Require,
}

/// One size class: the buffer size, and optionally its chunk size and its own cap.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClassConfig {
    size: usize,
    chunk_size: Option<usize>,
    cap_bytes: Option<usize>,
}

impl ClassConfig {
    /// A class of buffers of `size` bytes, with the default chunk size and no cap of its own.
    pub fn new(size: usize) -> Self {
        Self {
            size,
            chunk_size: None,
            cap_bytes: None,
        }
    }

    /// Bytes registered per chunk of this class: at least `size` and a multiple of it.
    /// Default: `max(size * 16, 2 MiB)`, rounded up to a multiple of `size`.
    pub fn chunk_size(mut self, bytes: usize) -> Self {
        self.chunk_size = Some(bytes);
        self
    }

    /// Most bytes this class may register (in addition to the pool's total cap).
    pub fn cap_bytes(mut self, bytes: usize) -> Self {
        self.cap_bytes = Some(bytes);
        self
    }

    /// Buffer size of the class.
    pub fn size(&self) -> usize {
        self.size
    }
}

/// Configuration of a [`Pool`](crate::Pool), validated by [`Pool::new`](crate::Pool::new).
///
/// ```
/// use memory::{ClassConfig, HugePages, PoolAccess, PoolConfig};
///
/// let config = PoolConfig::new()
///     .class_sizes([64, 4096, 1 << 20])
///     .cap_bytes(256 << 20)
///     .access(PoolAccess::REMOTE_READ | PoolAccess::REMOTE_WRITE)
///     .huge_pages(HugePages::Prefer);
/// assert!(config.get_access().contains(PoolAccess::LOCAL_WRITE));
///
/// // A class with its own chunk size and cap.
/// let config = config.classes([ClassConfig::new(256).chunk_size(1 << 20).cap_bytes(4 << 20)]);
/// assert_eq!(config.get_classes().len(), 1);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolConfig {
    classes: Vec<ClassConfig>,
    cap_bytes: usize,
    access: PoolAccess,
    huge_pages: HugePages,
}

impl Default for PoolConfig {
    fn default() -> Self {
        Self::new()
    }
}

impl PoolConfig {
    /// Classes of 64 B, 256 B, 1 KiB, 4 KiB, 16 KiB, 64 KiB, 256 KiB and 1 MiB; a 1 GiB cap;
    /// local access only; normal pages.
    pub fn new() -> Self {
        Self {
            classes: (0..8).map(|i| ClassConfig::new(64 << (2 * i))).collect(),
            cap_bytes: DEFAULT_CAP_BYTES,
            access: PoolAccess::LOCAL_WRITE,
            huge_pages: HugePages::Off,
        }
    }

    /// Replace the size classes by classes of these sizes with default chunk sizes and no caps.
    /// Sizes must be ascending multiples of 64 (powers of two are the usual choice).
    pub fn class_sizes(self, sizes: impl IntoIterator<Item = usize>) -> Self {
        self.classes(sizes.into_iter().map(ClassConfig::new))
    }

    /// Replace the size classes.
    pub fn classes(mut self, classes: impl IntoIterator<Item = ClassConfig>) -> Self {
        self.classes = classes.into_iter().collect();
        self
    }

    /// Most bytes the pool registers in total; it grows chunk by chunk up to this.
    pub fn cap_bytes(mut self, bytes: usize) -> Self {
        self.cap_bytes = bytes;
        self
    }

    /// Access granted by the registrations. `LOCAL_WRITE` is always added.
    pub fn access(mut self, access: PoolAccess) -> Self {
        self.access = access | PoolAccess::LOCAL_WRITE;
        self
    }

    /// Huge-page backing of chunks.
    pub fn huge_pages(mut self, huge_pages: HugePages) -> Self {
        self.huge_pages = huge_pages;
        self
    }

    /// The configured classes.
    pub fn get_classes(&self) -> &[ClassConfig] {
        &self.classes
    }

    /// The total cap in bytes.
    pub fn get_cap_bytes(&self) -> usize {
        self.cap_bytes
    }

    /// The access flags (always including `LOCAL_WRITE`).
    pub fn get_access(&self) -> PoolAccess {
        self.access
    }

    /// The huge-page preference.
    pub fn get_huge_pages(&self) -> HugePages {
        self.huge_pages
    }

    /// Check the configuration and resolve defaults.
    pub(crate) fn validate(&self) -> Result<Vec<ValidClass>> {
        let invalid = |reason: String| Err(Error::InvalidConfig { reason });
        if self.classes.is_empty() {
            return invalid("no size classes".into());
        }
        if self.cap_bytes == 0 {
            return invalid("the pool's cap is 0 bytes".into());
        }
        let mut out = Vec::with_capacity(self.classes.len());
        let mut previous = 0;
        for class in &self.classes {
            let size = class.size;
            if size < CLASS_ALIGN || size % CLASS_ALIGN != 0 {
                return invalid(format!(
                    "class size {size} is not a positive multiple of {CLASS_ALIGN}"
                ));
            }
            if size > MAX_CLASS_SIZE {
                return invalid(format!(
                    "class size {size} exceeds the maximum of {MAX_CLASS_SIZE}"
                ));
            }
            if size <= previous {
                return invalid(format!(
                    "class sizes must be strictly ascending: {size} follows {previous}"
                ));
            }
            previous = size;
            let chunk = match class.chunk_size {
                Some(chunk) => {
                    if chunk < size || chunk % size != 0 {
                        return invalid(format!(
                            "chunk size {chunk} of class {size} is not a positive multiple of the class size"
                        ));
                    }
                    chunk
                }
                None => default_chunk_size(size),
            };
            let slots = chunk / size;
            let Ok(slots) = u32::try_from(slots) else {
                return invalid(format!(
                    "chunk size {chunk} of class {size} holds more than 2^32 buffers"
                ));
            };
            if chunk > self.cap_bytes {
                return invalid(format!(
                    "chunk size {chunk} of class {size} exceeds the pool's cap of {} bytes",
                    self.cap_bytes
                ));
            }
            if let Some(cap) = class.cap_bytes {
                if cap < chunk {
                    return invalid(format!(
                        "cap {cap} of class {size} is smaller than its chunk size {chunk}"
                    ));
                }
            }
            out.push(ValidClass {
                size,
                chunk_bytes: chunk,
                slots_per_chunk: slots,
                cap_bytes: class.cap_bytes,
            });
        }
        Ok(out)
    }
}

/// Default chunk size of a class: `max(size * 16, 2 MiB)` rounded up to a multiple of `size`.
pub fn default_chunk_size(size: usize) -> usize {
    let want = size
        .saturating_mul(DEFAULT_MIN_SLOTS_PER_CHUNK)
        .max(DEFAULT_MIN_CHUNK);
    want.div_ceil(size).saturating_mul(size)
}

/// A class after validation, with its chunk size resolved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ValidClass {
    pub(crate) size: usize,
    pub(crate) chunk_bytes: usize,
    pub(crate) slots_per_chunk: u32,
    pub(crate) cap_bytes: Option<usize>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reason(config: &PoolConfig) -> String {
        match config.validate() {
            Err(Error::InvalidConfig { reason }) => reason,
            other => panic!("expected InvalidConfig, got {other:?}"),
        }
    }

    #[test]
    fn default_config_is_valid_and_spans_64_bytes_to_1_mib() {
        let classes = PoolConfig::new().validate().unwrap();
        assert_eq!(classes.first().unwrap().size, 64);
        assert_eq!(classes.last().unwrap().size, 1 << 20);
        for class in &classes {
            assert_eq!(class.chunk_bytes % class.size, 0);
            assert!(class.chunk_bytes >= DEFAULT_MIN_CHUNK);
            assert!(class.slots_per_chunk as usize >= DEFAULT_MIN_SLOTS_PER_CHUNK);
        }
        // 1 MiB buffers: 16 per chunk.
        assert_eq!(classes.last().unwrap().chunk_bytes, 16 << 20);
    }

    #[test]
    fn default_chunk_rounds_to_a_multiple_of_the_class() {
        assert_eq!(default_chunk_size(64), 2 << 20);
        assert_eq!(default_chunk_size(192), (2usize << 20).div_ceil(192) * 192);
        assert_eq!(default_chunk_size(4 << 20), 64 << 20);
    }

    #[test]
    fn rejects_empty_unaligned_unsorted_and_oversized_classes() {
        assert!(reason(&PoolConfig::new().class_sizes([])).contains("no size classes"));
        assert!(reason(&PoolConfig::new().class_sizes([32])).contains("multiple of 64"));
        assert!(reason(&PoolConfig::new().class_sizes([100])).contains("multiple of 64"));
        assert!(reason(&PoolConfig::new().class_sizes([0])).contains("multiple of 64"));
        assert!(reason(&PoolConfig::new().class_sizes([128, 64])).contains("ascending"));
        assert!(reason(&PoolConfig::new().class_sizes([64, 64])).contains("ascending"));
        assert!(reason(&PoolConfig::new().class_sizes([2 << 30])).contains("maximum"));
        // Multiples of 64 that are not powers of two are fine.
        assert!(PoolConfig::new()
            .class_sizes([64, 192, 320])
            .validate()
            .is_ok());
    }

    #[test]
    fn rejects_bad_chunks_and_caps() {
        let class = ClassConfig::new(4096);
        let c = |cc: ClassConfig| PoolConfig::new().classes([cc]);
        assert!(reason(&c(class.chunk_size(2048))).contains("multiple of the class"));
        assert!(reason(&c(class.chunk_size(6000))).contains("multiple of the class"));
        assert!(reason(&c(class.chunk_size(8192).cap_bytes(4096))).contains("smaller than"));
        assert!(reason(&c(class.chunk_size(8 << 20)).cap_bytes(4 << 20)).contains("pool's cap"));
        assert!(reason(&PoolConfig::new().cap_bytes(0)).contains("cap is 0"));
        let ok = c(class.chunk_size(8192).cap_bytes(16384))
            .validate()
            .unwrap();
        assert_eq!(
            ok,
            vec![ValidClass {
                size: 4096,
                chunk_bytes: 8192,
                slots_per_chunk: 2,
                cap_bytes: Some(16384)
            }]
        );
    }

    #[test]
    fn local_write_is_always_granted() {
        let config = PoolConfig::new().access(PoolAccess::REMOTE_READ);
        assert_eq!(
            config.get_access(),
            PoolAccess::LOCAL_WRITE | PoolAccess::REMOTE_READ
        );
        assert!(config.get_access().is_remote());
        assert!(!PoolConfig::new()
            .access(PoolAccess::empty())
            .get_access()
            .is_remote());
        assert_eq!(
            PoolConfig::new().access(PoolAccess::empty()).get_access(),
            PoolAccess::LOCAL_WRITE
        );
    }
}
