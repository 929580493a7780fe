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
    let ctx = open();
    let pd = ctx.alloc_pd().unwrap();
    let mr = pd
        .reg_mr(4096, AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE)
        .unwrap();
    let _ = mr.as_slice();
}
