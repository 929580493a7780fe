//! Memory regions: owned buffers, descriptors, bounds.
use verbs::{AccessFlags, Error, RegisteredBuf};

use crate::support::open;

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn owned_region_descriptors_are_bounds_checked() {
    let ctx = open();
    let pd = ctx.alloc_pd().unwrap();
    let mut mr = pd
        .reg_mr(10_000, AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ)
        .unwrap();
    assert_eq!(mr.len(), 10_000);
    assert_eq!(mr.addr() % 4096, 0);
    assert!(mr.as_slice().iter().all(|&b| b == 0));
    mr.as_mut_slice()[9_999] = 1;
    let l = mr.local(100..200).unwrap();
    assert_eq!((l.addr, l.len, l.lkey), (mr.addr() + 100, 100, mr.lkey()));
    let r = mr.remote(..).unwrap();
    assert_eq!((r.addr, r.len, r.rkey), (mr.addr(), 10_000, mr.rkey()));
    assert!(matches!(
        mr.local(9_000..10_001),
        Err(Error::OutOfBounds { .. })
    ));
    assert!(matches!(r.slice(5..20_000), Err(Error::OutOfBounds { .. })));
    assert_eq!(RegisteredBuf::local(&mr), mr.local(..).unwrap());
    assert!(pd.reg_mr(0, AccessFlags::LOCAL_WRITE).is_err());
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
#[should_panic(expected = "remote write")]
fn remotely_writable_region_has_no_slice_view() {
    let _quiet = testkit::QuietPanics::new();
    let ctx = open();
    let pd = ctx.alloc_pd().unwrap();
    let mr = pd
        .reg_mr(4096, AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE)
        .unwrap();
    let _ = mr.as_slice();
}

/// Binds a type 1 memory window over `mr` on `qp` (signaled, `wr_id` 7) and waits for it; `None`
/// if the device has no memory windows.
fn bind_window(
    p: &crate::support::Pair,
    mr: *mut verbs::sys::ibv_mr,
    addr: u64,
    len: u64,
) -> Option<*mut verbs::sys::ibv_mw> {
    use verbs::sys;
    // SAFETY: live PD; the window is deallocated by the caller.
    let mw = unsafe { sys::ibv_alloc_mw(p.pd.as_raw(), sys::ibv_mw_type::IBV_MW_TYPE_1) };
    if mw.is_null() {
        return None;
    }
    let mut bind = sys::ibv_mw_bind {
        wr_id: 7,
        send_flags: verbs::SendFlags::SIGNALED.bits(),
        bind_info: sys::ibv_mw_bind_info {
            mr,
            addr,
            length: len,
            mw_access_flags: (AccessFlags::REMOTE_WRITE | AccessFlags::LOCAL_WRITE).bits(),
        },
    };
    // SAFETY: live RC QP in RTS, live window and region of its PD.
    let r = unsafe { sys::ibv_bind_mw(p.a.as_raw(), mw, &mut bind) };
    if r != 0 {
        // SAFETY: allocated above, bound to nothing.
        unsafe { sys::ibv_dealloc_mw(mw) };
        return None;
    }
    crate::support::drain(&p.cq_a, 1, |wc| assert_eq!(wc.status(), Ok(())));
    Some(mw)
}

/// A region with a memory window bound cannot be deregistered (rxe refuses): a peer can still
/// write it through the window, so dropping the region must not free its memory.
#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn a_region_a_window_keeps_registered_is_not_freed() {
    if crate::support::lacks(testkit::test_name!(), verbs::Capability::MemoryWindows) {
        return;
    }
    use verbs::{sys, RemoteSlice, SendRequest};
    const TEST: &str = "a_region_a_window_keeps_registered_is_not_freed";
    let p = crate::support::Pair::rc();
    let access = AccessFlags::LOCAL_WRITE | AccessFlags::MW_BIND;

    // First show the device refuses to deregister under a bound window, with caller memory.
    let probe = Box::leak(vec![0u8; 4096].into_boxed_slice());
    // SAFETY: live PD; the memory is leaked, so it outlives the registration.
    let raw = unsafe {
        sys::ibv_reg_mr(
            p.pd.as_raw(),
            probe.as_mut_ptr().cast(),
            4096,
            access.bits() as i32,
        )
    };
    assert!(!raw.is_null());
    let Some(mw) = bind_window(&p, raw, probe.as_ptr() as u64, 4096) else {
        testkit::skip(TEST, "the device has no type 1 memory windows");
        // SAFETY: registered above, no window bound.
        unsafe { sys::ibv_dereg_mr(raw) };
        return;
    };
    // SAFETY: live registration; if this succeeds it is gone, and only the window remains.
    let refused = unsafe { sys::ibv_dereg_mr(raw) } != 0;
    // SAFETY: allocated by bind_window; then the region (if still registered) goes.
    unsafe {
        sys::ibv_dealloc_mw(mw);
        if refused {
            assert_eq!(sys::ibv_dereg_mr(raw), 0);
        }
    }
    if !refused {
        testkit::skip(TEST, "the device deregisters regions under bound windows");
        return;
    }

    // Now an owned region: its handle goes while the window keeps it registered.
    let region = p.pd.reg_mr(4096, access).unwrap();
    let (raw, addr) = (region.as_raw(), region.addr());
    let mw = bind_window(&p, raw, addr, 4096).expect("bound before");
    // SAFETY: live window.
    let rkey = unsafe { (*mw).rkey };
    drop(region);
    let mut src = p.pd.reg_mr(64, AccessFlags::LOCAL_WRITE).unwrap();
    src.as_mut_slice()[..5].copy_from_slice(b"still");
    let target = RemoteSlice {
        addr,
        len: 4096,
        rkey,
    };
    p.b.post_send(SendRequest::rdma_write(src, ..5, target).unwrap())
        .unwrap();
    let (c, _) = crate::support::one(&p.cq_b, &p.b);
    assert_eq!(c.status, Ok(()), "the window still reaches the region");
    // SAFETY: the region's buffer was leaked, not freed, because deregistration failed; the
    // write above completed, so nothing writes it now.
    let seen = unsafe { std::slice::from_raw_parts(addr as *const u8, 5) };
    assert_eq!(seen, b"still");
    // SAFETY: the window, then the registration the handle could not remove.
    unsafe {
        sys::ibv_dealloc_mw(mw);
        assert_eq!(sys::ibv_dereg_mr(raw), 0);
    }
}
