//! The pool's `tracing` events (target `memory`), captured by a subscriber of the test's own:
//! growth, exhaustion (throttled), reclaim and a failed registration, with their fields.

use memory::testing::HostRegistrar;
use memory::{ClassConfig, Error, Pool, PoolConfig};
use testkit::tracing_capture::capture;
use tracing::Level;

/// Classes of 64 B and 1 KiB, each chunk 4 KiB, a cap of two chunks.
fn two_classes() -> (Pool, HostRegistrar) {
    let registrar = HostRegistrar::new();
    let config = PoolConfig::new()
        .classes([
            ClassConfig::new(64).chunk_size(4096),
            ClassConfig::new(1024).chunk_size(4096),
        ])
        .cap_bytes(2 * 4096);
    (Pool::new(config, registrar.clone()).unwrap(), registrar)
}

#[test]
fn growth_exhaustion_and_reclaim_are_events() {
    let (pool, _registrar) = two_classes();
    let (_, events) = capture("memory", || {
        // Two chunks of the small class fill the cap; the next allocation is refused twice,
        // reported once (the second within the second is counted for the next report).
        let held: Vec<_> = (0..128).map(|_| pool.try_alloc(64).unwrap()).collect();
        for _ in 0..2 {
            assert!(matches!(pool.try_alloc(64), Err(Error::Exhausted { .. })));
        }
        // Freed, the small class's chunks are idle: the large class takes one's bytes.
        drop(held);
        drop(pool.try_alloc(1024).unwrap());
    });
    let grew: Vec<_> = events
        .iter()
        .filter(|e| e.message == "pool grew by a chunk")
        .collect();
    assert_eq!(grew.len(), 3, "{events:#?}");
    for (g, (class, registered)) in
        grew.iter()
            .zip([("64", "4096"), ("64", "8192"), ("1024", "8192")])
    {
        assert_eq!(g.level, Level::DEBUG);
        assert_eq!(g.field("class"), Some(class), "{g:?}");
        assert_eq!(g.field("bytes"), Some("4096"), "{g:?}");
        assert_eq!(g.field("registered"), Some(registered), "{g:?}");
        assert_eq!(g.field("cap"), Some("8192"), "{g:?}");
    }
    let exhausted: Vec<_> = events
        .iter()
        .filter(|e| e.message.starts_with("pool exhausted"))
        .collect();
    assert_eq!(exhausted.len(), 1, "{events:#?}");
    let e = exhausted[0];
    assert_eq!(e.level, Level::WARN);
    assert_eq!(e.field("class"), Some("64"));
    assert_eq!(e.field("cap"), Some("8192"));
    assert_eq!(e.field("cap_of"), Some("pool"));
    let reclaimed: Vec<_> = events
        .iter()
        .filter(|e| e.message == "idle chunk reclaimed")
        .collect();
    assert_eq!(reclaimed.len(), 1, "{events:#?}");
    let r = reclaimed[0];
    assert_eq!(r.level, Level::DEBUG);
    assert_eq!(
        (r.field("class"), r.field("for_class"), r.field("bytes")),
        (Some("64"), Some("1024"), Some("4096"))
    );
}

#[test]
fn a_class_cap_and_a_failed_registration_are_warnings() {
    let registrar = HostRegistrar::new();
    let config = PoolConfig::new()
        .classes([ClassConfig::new(64).chunk_size(4096).cap_bytes(4096)])
        .cap_bytes(1 << 20);
    let pool = Pool::new(config, registrar.clone()).unwrap();
    let (_, events) = capture("memory", || {
        registrar.refuse(true);
        assert!(pool.try_alloc(64).is_err());
        registrar.refuse(false);
        let held: Vec<_> = (0..64).map(|_| pool.try_alloc(64).unwrap()).collect();
        assert!(matches!(pool.try_alloc(64), Err(Error::Exhausted { .. })));
        drop(held);
    });
    let failed = events
        .iter()
        .find(|e| e.message == "pool could not grow")
        .unwrap_or_else(|| panic!("no growth failure in {events:#?}"));
    assert_eq!(failed.level, Level::WARN);
    assert_eq!(failed.field("class"), Some("64"));
    assert!(failed.field("error").is_some());
    let e = events
        .iter()
        .find(|e| e.message.starts_with("pool exhausted"))
        .unwrap_or_else(|| panic!("no exhaustion in {events:#?}"));
    assert_eq!(
        (e.field("class"), e.field("cap"), e.field("cap_of")),
        (Some("64"), Some("4096"), Some("class"))
    );
}
