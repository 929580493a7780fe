//! The registrar contract: slice safety follows what a registration reports it granted, a
//! chunk whose deregistration fails stays mapped, and implementing the contract takes `unsafe`.

use memory::testing::HostRegistrar;
use memory::{ClassConfig, Pool, PoolAccess, PoolConfig};

fn one_class(access: PoolAccess, registrar: &HostRegistrar) -> Pool {
    let config = PoolConfig::new()
        .classes([ClassConfig::new(4096).chunk_size(64 * 1024)])
        .cap_bytes(1 << 20)
        .access(access);
    Pool::new(config, registrar.clone()).unwrap()
}

#[test]
fn rights_granted_beyond_the_request_make_buffers_copy_only() {
    // A registrar that registers a "local-only" chunk with remote write: peers may write it,
    // so it must never be lent out as a slice, whatever the pool asked for.
    let registrar = HostRegistrar::new();
    registrar.grant_extra(PoolAccess::REMOTE_WRITE);
    let pool = one_class(PoolAccess::LOCAL_WRITE, &registrar);
    let mut buf = pool.try_alloc(16).unwrap();
    assert!(buf.is_remotely_writable());
    buf.write(0, b"copied, not lent").unwrap();
    let mut out = [0u8; 16];
    buf.read(0, &mut out).unwrap();
    assert_eq!(&out, b"copied, not lent");
    let deref = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| buf[0]));
    assert!(deref.is_err(), "a remotely writable buffer gave a slice");
}

#[test]
fn rights_granted_as_requested_keep_slices() {
    let registrar = HostRegistrar::new();
    let pool = one_class(
        PoolAccess::LOCAL_WRITE | PoolAccess::REMOTE_READ,
        &registrar,
    );
    let mut buf = pool.try_alloc(4).unwrap();
    assert!(!buf.is_remotely_writable());
    buf.copy_from_slice(b"lent");
    assert_eq!(&buf[..], b"lent");
}

/// Whether `addr` lies in a mapping of this process (`/proc/self/maps`).
pub(crate) fn is_mapped(addr: u64) -> bool {
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    maps.lines().any(|line| {
        let range = line.split_whitespace().next().unwrap();
        let (start, end) = range.split_once('-').unwrap();
        let start = u64::from_str_radix(start, 16).unwrap();
        let end = u64::from_str_radix(end, 16).unwrap();
        (start..end).contains(&addr)
    })
}

#[test]
fn a_chunk_whose_deregistration_fails_stays_mapped() {
    let registrar = HostRegistrar::new();
    registrar.fail_deregister(true);
    let pool = one_class(PoolAccess::LOCAL_WRITE, &registrar);
    let addr = pool.try_alloc(64).unwrap().addr();
    assert!(is_mapped(addr));
    drop(pool);
    assert!(
        is_mapped(addr),
        "the pool unmapped memory the device may still access"
    );
    assert_eq!(registrar.live_registrations(), 1);
}

#[test]
fn a_chunk_refused_for_a_missing_rkey_is_deregistered_not_dropped() {
    // Remote access asked for, no rkey reported: the chunk is refused. Its registration must
    // go through `deregister`, whose failure keeps it (and the memory) alive, not be dropped.
    let registrar = HostRegistrar::new();
    registrar.withhold_rkey(true);
    registrar.fail_deregister(true);
    let pool = one_class(
        PoolAccess::LOCAL_WRITE | PoolAccess::REMOTE_READ,
        &registrar,
    );
    let e = pool.try_alloc(64).unwrap_err();
    let cause = std::error::Error::source(&e).map(ToString::to_string);
    assert!(
        cause.as_deref().is_some_and(|c| c.contains("no rkey")),
        "{e}: {cause:?}"
    );
    assert_eq!(
        registrar.live_registrations(),
        1,
        "a registration that could not be removed was dropped (and its memory unmapped)"
    );
    // When deregistration works, nothing is left.
    registrar.fail_deregister(false);
    pool.try_alloc(64).unwrap_err();
    assert_eq!(registrar.live_registrations(), 1);
    assert_eq!(registrar.registrations(), 2);
}

#[test]
fn a_chunk_whose_deregistration_works_is_unmapped() {
    let registrar = HostRegistrar::new();
    let pool = one_class(PoolAccess::LOCAL_WRITE, &registrar);
    let addr = pool.try_alloc(64).unwrap().addr();
    drop(pool);
    assert!(!is_mapped(addr));
    assert_eq!(registrar.live_registrations(), 0);
}

/// Programs that must not compile (`tests/compile-fail/*.rs`, expected errors beside them).
#[test]
fn implementing_the_registrar_contract_needs_unsafe() {
    if std::env::var_os("CARGO").is_none() {
        testkit::skip(
            "registrar::implementing_the_registrar_contract_needs_unsafe",
            "no Rust toolchain here (CARGO unset); the host tier runs this test",
        );
        return;
    }
    trybuild::TestCases::new().compile_fail("tests/compile-fail/*.rs");
}
