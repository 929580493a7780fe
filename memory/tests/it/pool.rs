//! Single-threaded behaviour: keys, descriptors, lengths, errors, growth, cleanup.

use memory::testing::HostRegistrar;
use memory::{Buffer, ClassConfig, Error, HugePages, Pool, PoolAccess, PoolConfig};

use super::small_pool;

#[test]
fn pool_and_buffer_are_thread_safe_types() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Pool>();
    assert_send_sync::<Buffer>();
}

#[test]
fn a_buffer_has_the_requested_length_and_its_class_capacity() {
    let pool = Pool::new(PoolConfig::new(), HostRegistrar::new()).unwrap();
    for (len, class) in [
        (1, 64),
        (64, 64),
        (65, 256),
        (4096, 4096),
        (1 << 20, 1 << 20),
    ] {
        let mut buf = pool.try_alloc(len).unwrap();
        assert_eq!((buf.len(), buf.capacity()), (len, class));
        buf.fill(0xab);
        assert!(buf.iter().all(|&b| b == 0xab));
        assert_eq!(buf.as_ref().len(), len);
    }
    assert_eq!(pool.max_buffer_size(), 1 << 20);
    assert_eq!(pool.class_sizes().len(), 8);
}

#[test]
fn sge_describes_the_buffer() {
    let pool = Pool::new(PoolConfig::new(), HostRegistrar::new()).unwrap();
    let a = pool.try_alloc(100).unwrap();
    let b = pool.try_alloc(100).unwrap();
    let sge = a.sge();
    assert_eq!(sge.addr, a.addr());
    assert_eq!(sge.addr, a.as_ptr() as u64);
    assert_eq!(sge.length, 100);
    assert_eq!(sge.lkey, a.lkey());
    // Same chunk, same key; neighbouring slots.
    assert_eq!(b.lkey(), a.lkey());
    assert_eq!(b.addr().abs_diff(a.addr()), 256);
}

#[test]
fn descriptors_convert_to_verbs_slices() {
    let config = PoolConfig::new().access(PoolAccess::REMOTE_READ);
    let pool = Pool::new(config, HostRegistrar::new()).unwrap();
    let buf = pool.try_alloc(100).unwrap();
    let local = verbs::LocalSlice::from(buf.sge());
    assert_eq!(
        (local.addr, local.len, local.lkey),
        (buf.addr(), 100, buf.lkey())
    );
    let remote = buf.remote().unwrap();
    let slice = verbs::RemoteSlice::from(remote);
    assert_eq!(
        (slice.addr, slice.len, slice.rkey),
        (remote.addr, 100, remote.rkey)
    );
}

/// What a work request posts: the whole slot, whatever the buffer's current length.
#[test]
fn a_posted_buffer_is_described_by_its_whole_slot() {
    use verbs::RegisteredBuf;
    let pool = Pool::new(PoolConfig::new(), HostRegistrar::new()).unwrap();
    let mut buf = pool.try_alloc(100).unwrap();
    let whole = buf.local();
    assert_eq!(
        (whole.addr, whole.len, whole.lkey),
        (buf.addr(), 256, buf.lkey())
    );
    buf.set_len(10).unwrap();
    assert_eq!(buf.local(), whole, "the descriptor does not follow set_len");
}

#[test]
fn local_only_pools_expose_no_remote_key() {
    let pool = Pool::new(PoolConfig::new(), HostRegistrar::new()).unwrap();
    assert_eq!(pool.access(), PoolAccess::LOCAL_WRITE);
    assert_eq!(pool.try_alloc(64).unwrap().remote(), None);
}

#[test]
fn remote_pools_give_a_descriptor_of_the_buffer() {
    for access in [
        PoolAccess::REMOTE_READ,
        PoolAccess::REMOTE_WRITE,
        PoolAccess::REMOTE_ATOMIC,
    ] {
        let config = PoolConfig::new().access(access);
        let pool = Pool::new(config, HostRegistrar::new()).unwrap();
        assert_eq!(pool.access(), access | PoolAccess::LOCAL_WRITE);
        let buf = pool.try_alloc(300).unwrap();
        let remote = buf.remote().expect("remote access pool");
        assert_eq!((remote.addr, remote.len), (buf.addr(), 300));
        assert_ne!(
            remote.rkey,
            buf.lkey(),
            "the host registrar's rkey differs from the lkey"
        );
    }
}

#[test]
fn set_len_stays_within_the_capacity() {
    let pool = Pool::new(PoolConfig::new(), HostRegistrar::new()).unwrap();
    let mut buf = pool.try_alloc(10).unwrap();
    buf.set_len(64).unwrap();
    assert_eq!((buf.len(), buf.sge().length), (64, 64));
    buf.set_len(0).unwrap();
    assert!(buf.is_empty());
    match buf.set_len(65) {
        Err(Error::TooLarge { requested, max }) => assert_eq!((requested, max), (65, 64)),
        other => panic!("expected TooLarge, got {other:?}"),
    }
    assert_eq!(buf.len(), 0);
}

#[test]
fn zero_and_oversized_requests_are_refused() {
    let pool = Pool::new(
        PoolConfig::new().class_sizes([64, 128]),
        HostRegistrar::new(),
    )
    .unwrap();
    assert!(matches!(pool.try_alloc(0), Err(Error::ZeroLength)));
    assert!(matches!(
        pool.try_alloc(129),
        Err(Error::TooLarge {
            requested: 129,
            max: 128
        })
    ));
    let wait = std::time::Duration::from_secs(5);
    assert!(matches!(pool.alloc(0, wait), Err(Error::ZeroLength)));
    assert!(matches!(pool.alloc(129, wait), Err(Error::TooLarge { .. })));
    assert_eq!(
        pool.stats().chunks,
        0,
        "nothing registered for refused requests"
    );
}

#[test]
fn invalid_configs_are_rejected_by_new() {
    let config = PoolConfig::new().class_sizes([64, 100]);
    assert!(matches!(
        Pool::new(config, HostRegistrar::new()),
        Err(Error::InvalidConfig { .. })
    ));
}

/// Configurations that could never allocate fail in `Pool::new`, before any registration,
/// naming the offending value: chunks past the pool's cap or the class's, a chunk that is not
/// a multiple of its class, chunks past what the registrar can register.
#[test]
fn configs_that_cannot_work_fail_at_new_not_at_the_first_allocation() {
    let reason = |config: PoolConfig, registrar: &HostRegistrar| match Pool::new(
        config,
        registrar.clone(),
    ) {
        Err(Error::InvalidConfig { reason }) => reason,
        Err(other) => panic!("expected InvalidConfig, got {other:?}"),
        Ok(_) => panic!("a config that cannot work was accepted"),
    };
    let registrar = HostRegistrar::new();
    let class = ClassConfig::new(4096);
    // The default 1 MiB class has 16 MiB chunks: a 4 MiB cap could never hold one.
    let text = reason(PoolConfig::new().cap_bytes(4 << 20), &registrar);
    assert!(text.contains("exceeds the pool's cap of 4194304"), "{text}");
    let text = reason(
        PoolConfig::new().classes([class.chunk_size(1 << 20).cap_bytes(64 << 10)]),
        &registrar,
    );
    assert!(text.contains("smaller than its chunk size"), "{text}");
    let text = reason(
        PoolConfig::new().classes([class.chunk_size(2048)]),
        &registrar,
    );
    assert!(
        text.contains("not a positive multiple of the class size"),
        "{text}"
    );

    // A registrar that registers at most 1 MiB: the default 2 MiB chunks cannot be made.
    registrar.max_chunk_bytes(1 << 20);
    let text = reason(PoolConfig::new().class_sizes([64, 4096]), &registrar);
    assert!(
        text.contains(
            "chunk size 2097152 of class 64 exceeds the test registrar's limit (1048576 bytes)"
        ),
        "{text}"
    );
    // Chunks within the limit are fine.
    let pool = Pool::new(
        PoolConfig::new().classes([class.chunk_size(1 << 20)]),
        registrar.clone(),
    )
    .unwrap();
    drop(pool.try_alloc(4096).unwrap());
    assert_eq!(
        registrar.registrations(),
        1,
        "only the pool that works registered"
    );
}

/// Huge pages required where none are reserved: refused by `Pool::new`.
#[test]
fn required_huge_pages_without_any_reserved_fail_at_new() {
    let reserved = std::fs::read_to_string("/proc/meminfo")
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("HugePages_Total:"))
        .map(|v| v.trim().parse::<u64>().unwrap())
        .unwrap_or(0);
    let config = PoolConfig::new()
        .class_sizes([4096])
        .huge_pages(HugePages::Require);
    match Pool::new(config, HostRegistrar::new()) {
        Err(Error::InvalidConfig { reason }) => {
            assert_eq!(reserved, 0, "refused though {reserved} are reserved");
            assert!(
                reason.contains("nr_hugepages") && reason.contains("Prefer"),
                "{reason}"
            );
        }
        Err(other) => panic!("expected InvalidConfig, got {other:?}"),
        Ok(_) => assert!(reserved > 0, "accepted without huge pages"),
    }
}

#[test]
fn exhaustion_is_a_typed_error_and_the_pool_recovers() {
    let (pool, registrar) = small_pool(64, 4, 2);
    let held: Vec<_> = (0..8).map(|_| pool.try_alloc(64).unwrap()).collect();
    match pool.try_alloc(1) {
        Err(Error::Exhausted {
            class_size,
            cap_bytes,
        }) => assert_eq!((class_size, cap_bytes), (64, 512)),
        other => panic!("expected Exhausted, got {other:?}"),
    }
    assert_eq!(registrar.registrations(), 2);
    drop(held);
    let again: Vec<_> = (0..8).map(|_| pool.try_alloc(64).unwrap()).collect();
    assert_eq!(
        registrar.registrations(),
        2,
        "freed buffers are reused, not re-registered"
    );
    assert_eq!(again.len(), 8);
}

#[test]
fn a_class_cap_binds_before_the_pool_cap() {
    let config = PoolConfig::new()
        .classes([
            ClassConfig::new(64).chunk_size(128).cap_bytes(256),
            ClassConfig::new(128).chunk_size(128),
        ])
        .cap_bytes(1024);
    let pool = Pool::new(config, HostRegistrar::new()).unwrap();
    let small: Vec<_> = (0..4).map(|_| pool.try_alloc(64).unwrap()).collect();
    assert!(matches!(
        pool.try_alloc(64),
        Err(Error::Exhausted {
            class_size: 64,
            cap_bytes: 256
        })
    ));
    // The other class still grows, up to the rest of the pool cap.
    let large: Vec<_> = (0..6).map(|_| pool.try_alloc(128).unwrap()).collect();
    assert!(matches!(
        pool.try_alloc(128),
        Err(Error::Exhausted {
            class_size: 128,
            cap_bytes: 1024
        })
    ));
    assert_eq!(pool.stats().bytes_registered, 1024);
    drop((small, large));
}

#[test]
fn a_failed_registration_gives_its_bytes_back_to_the_cap() {
    // The cap holds exactly one chunk: if the failed attempt kept its reservation, the retry
    // would be reported as exhaustion.
    let (pool, registrar) = small_pool(64, 2, 1);
    registrar.refuse(true);
    assert!(matches!(
        pool.try_alloc(64),
        Err(Error::Register { len: 128, .. })
    ));
    assert_eq!(pool.stats().bytes_registered, 0);
    registrar.refuse(false);
    let buf = pool.try_alloc(64).unwrap();
    assert_eq!(pool.stats().bytes_registered, 128);
    drop(buf);
}

#[test]
fn stats_count_chunks_buffers_and_high_water_marks() {
    let (pool, _registrar) = small_pool(256, 4, 4);
    let mut held: Vec<_> = (0..6).map(|_| pool.try_alloc(200).unwrap()).collect();
    held.truncate(2);
    let stats = pool.stats();
    assert_eq!(stats.chunks, 2);
    assert_eq!(stats.bytes_registered, 2048);
    assert_eq!(stats.cap_bytes, 4096);
    assert_eq!(stats.bytes_in_use, 512);
    assert_eq!(stats.high_water_bytes_bound(), 6 * 256);
    assert_eq!(stats.huge_page_chunks, 0);
    assert_eq!(stats.buffers_in_use(), 2);
    let class = stats.classes[0];
    assert_eq!(
        (
            class.size,
            class.chunks,
            class.capacity,
            class.in_use,
            class.free,
            class.high_water
        ),
        (256, 2, 8, 2, 6, 6)
    );
}

#[test]
fn buffers_outlive_their_pool_and_release_everything_last() {
    let (pool, registrar) = small_pool(64, 2, 2);
    let mut buf = pool.try_alloc(64).unwrap();
    drop(pool);
    buf.fill(9);
    assert!(buf.iter().all(|&b| b == 9));
    assert_eq!(registrar.live_registrations(), 1);
    drop(buf);
    assert_eq!(
        registrar.live_registrations(),
        0,
        "deregistered once the last buffer is gone"
    );
}

#[test]
fn clones_share_the_pool() {
    let (pool, registrar) = small_pool(64, 1, 1);
    let clone = pool.clone();
    let buf = pool.try_alloc(1).unwrap();
    assert!(matches!(clone.try_alloc(1), Err(Error::Exhausted { .. })));
    drop(buf);
    assert!(clone.try_alloc(1).is_ok());
    assert_eq!(registrar.registrations(), 1);
    assert!(format!("{pool:?}").contains("Pool"));
}

#[test]
fn huge_page_preference_falls_back_to_normal_pages() {
    let config = PoolConfig::new()
        .class_sizes([4096])
        .huge_pages(HugePages::Prefer);
    let pool = Pool::new(config, HostRegistrar::new()).unwrap();
    let mut buf = pool.try_alloc(4096).unwrap();
    buf.fill(1);
    let stats = pool.stats();
    assert_eq!(stats.chunks, 1);
    assert!(stats.huge_page_chunks <= 1);
}

#[test]
fn moving_a_buffer_keeps_its_memory_in_place() {
    // What lets a buffer be moved into a work request and back: the bytes never move.
    let pool = Pool::new(PoolConfig::new(), HostRegistrar::new()).unwrap();
    let mut buf = pool.try_alloc(128).unwrap();
    buf.fill(3);
    let sge = buf.sge();
    let boxed = Box::new(buf);
    let back = std::thread::spawn(move || *boxed).join().unwrap();
    assert_eq!(back.sge(), sge);
    assert!(back.iter().all(|&b| b == 3));
}

#[test]
fn buffers_peers_may_write_give_copies_not_slices() {
    for access in [PoolAccess::REMOTE_WRITE, PoolAccess::REMOTE_ATOMIC] {
        let pool = Pool::new(PoolConfig::new().access(access), HostRegistrar::new()).unwrap();
        let mut buf = pool.try_alloc(100).unwrap();
        assert!(buf.is_remotely_writable());
        assert_eq!(buf.len(), 100, "the length needs no slice");
        buf.write(10, b"abc").unwrap();
        let mut out = [0; 4];
        buf.read(9, &mut out).unwrap();
        assert_eq!(out, [0, b'a', b'b', b'c']);
        assert!(buf.read(98, &mut out).is_err(), "past the buffer's length");
        assert!(buf.write(usize::MAX, b"x").is_err());
        // A slice would race with the device writing on a peer's behalf.
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| buf[0]));
        assert!(r.is_err(), "{access:?}: a remotely writable buffer derefs");
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| buf.fill(1)));
        assert!(
            r.is_err(),
            "{access:?}: a remotely writable buffer derefs mutably"
        );
    }
    // Remote read alone leaves the slices.
    let pool = Pool::new(
        PoolConfig::new().access(PoolAccess::REMOTE_READ),
        HostRegistrar::new(),
    )
    .unwrap();
    let mut buf = pool.try_alloc(8).unwrap();
    assert!(!buf.is_remotely_writable());
    buf.copy_from_slice(b"12345678");
    let mut out = [0; 8];
    buf.read(0, &mut out).unwrap();
    assert_eq!(&out, &buf[..]);
}
