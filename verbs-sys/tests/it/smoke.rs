//! Smoke test on a real device: list, open, allocate a PD, register 1 MiB, query port 1.
use std::ffi::CStr;
use std::io;
use std::os::raw::c_int;

use verbs_sys::*;

const MIB: usize = 1 << 20;

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn open_alloc_pd_reg_mr_query_port() {
    let want = testkit::device().name;
    let mut num: c_int = 0;
    // SAFETY: `num` is a valid out-pointer; the list is freed below with ibv_free_device_list.
    let list = unsafe { ibv_get_device_list(&mut num) };
    assert!(
        !list.is_null(),
        "ibv_get_device_list: {}",
        io::Error::last_os_error()
    );
    // SAFETY: a non-null list holds `num` device pointers followed by a null one.
    let devices = unsafe { std::slice::from_raw_parts(list, num as usize) };
    let names: Vec<String> = devices
        .iter()
        .map(|&d| {
            // SAFETY: `d` comes from the device list, which is alive; the name is a C string
            // owned by the device.
            unsafe { CStr::from_ptr(ibv_get_device_name(d)) }
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    let idx = names
        .iter()
        .position(|n| *n == want)
        .unwrap_or_else(|| panic!("device {want} not in the device list {names:?}"));

    // SAFETY: the device pointer is from the live list; the context is closed below.
    let ctx = unsafe { ibv_open_device(devices[idx]) };
    assert!(
        !ctx.is_null(),
        "ibv_open_device({want}): {}",
        io::Error::last_os_error()
    );

    // SAFETY: `ctx` is an open context; the PD is deallocated below.
    let pd = unsafe { ibv_alloc_pd(ctx) };
    assert!(
        !pd.is_null(),
        "ibv_alloc_pd: {}",
        io::Error::last_os_error()
    );

    let mut buf = vec![0u8; MIB];
    // SAFETY: `pd` is valid and `buf` (1 MiB) outlives the MR, which is deregistered below
    // before `buf` is dropped.
    let mr = unsafe {
        ibv_reg_mr(
            pd,
            buf.as_mut_ptr().cast(),
            buf.len(),
            ibv_access_flags::IBV_ACCESS_LOCAL_WRITE.0 as c_int,
        )
    };
    assert!(
        !mr.is_null(),
        "ibv_reg_mr(1 MiB): {}",
        io::Error::last_os_error()
    );
    // SAFETY: `mr` is a valid MR returned above.
    let (len, lkey) = unsafe { ((*mr).length, (*mr).lkey) };
    assert_eq!(len, MIB);
    assert_ne!(lkey, 0);

    // SAFETY: ibv_port_attr is plain data; all-zero is a valid value to be overwritten.
    let mut attr: ibv_port_attr = unsafe { std::mem::zeroed() };
    // SAFETY: `ctx` is open and `attr` is a valid out-pointer of the right size.
    let rc = unsafe { ___ibv_query_port(ctx, 1, &mut attr) };
    assert_eq!(
        rc,
        0,
        "ibv_query_port(1): {}",
        io::Error::from_raw_os_error(rc)
    );
    assert_eq!(
        attr.state,
        ibv_port_state::IBV_PORT_ACTIVE,
        "port 1 of {want} is not ACTIVE"
    );

    // SAFETY: each object is released once, children before parents.
    unsafe {
        assert_eq!(ibv_dereg_mr(mr), 0);
        assert_eq!(ibv_dealloc_pd(pd), 0);
        assert_eq!(ibv_close_device(ctx), 0);
        ibv_free_device_list(list);
    }
    drop(buf);
}
