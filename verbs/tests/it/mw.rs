//! Memory windows over a loopback RC pair: a window grants exactly its bytes and rights, and
//! invalidation (local, by SEND_WITH_INV, by rebind, by deallocation) revokes them.
use std::sync::Arc;

use verbs::{
    AccessFlags, Context, Cq, Error, MemoryRegion, Mw, MwType, Pd, Qp, QpInitAttr, QpType,
    RecvRequest, RemoteSlice, SendRequest, WcFlags, WcOpcode, WcStatus,
};

use crate::support::{connect, one, open};

const MIB2: usize = 2 << 20;
/// Where the window starts in the region, and how many bytes it grants.
const AT: usize = 4096;
const LEN: usize = 64;

/// Two connected QPs in a given PD: `b` owns the memory, `a` is the peer.
struct Ends {
    cq_a: Cq,
    cq_b: Cq,
    a: Qp,
    b: Qp,
}

fn ends(ctx: &Context, pd: &Pd) -> Ends {
    let cq_a = ctx.create_cq(64, None).unwrap();
    let cq_b = ctx.create_cq(64, None).unwrap();
    let a = pd
        .create_qp(&QpInitAttr::new(QpType::Rc, &cq_a, &cq_a))
        .unwrap();
    let b = pd
        .create_qp(&QpInitAttr::new(QpType::Rc, &cq_b, &cq_b))
        .unwrap();
    connect(ctx, &a, &b);
    Ends { cq_a, cq_b, a, b }
}

/// Bytes the region starts with (and must keep wherever no window granted a write).
fn background(i: usize) -> u8 {
    (i as u8).wrapping_mul(7) ^ 0x5a
}

/// A 2 MiB region that windows may be bound to (the region itself grants no remote rights).
fn region(pd: &Pd) -> Arc<MemoryRegion> {
    let mut mr = pd
        .reg_mr(MIB2, AccessFlags::LOCAL_WRITE | AccessFlags::MW_BIND)
        .unwrap();
    let bytes: Vec<u8> = (0..MIB2).map(background).collect();
    mr.write(0, &bytes).unwrap();
    Arc::new(mr)
}

fn contents(mr: &MemoryRegion) -> Vec<u8> {
    let mut out = vec![0; mr.len()];
    mr.read(0, &mut out).unwrap();
    out
}

/// Binds the type 2 window `mw` on `e.b` and waits for the bind to complete.
fn bind2(e: &Ends, mw: &Mw, mr: &Arc<MemoryRegion>, access: AccessFlags) -> RemoteSlice {
    let req = SendRequest::bind_mw(mw, mr.clone(), AT..AT + LEN, access).unwrap();
    let verbs::WrOp::BindMw(granted) = req.op() else {
        panic!("a bind request")
    };
    let id = e.b.post_send(req).unwrap();
    let (c, _) = one(&e.cq_b, &e.b);
    assert_eq!(
        (c.wr_id, c.status, c.opcode),
        (id, Ok(()), Some(WcOpcode::BindMw))
    );
    assert_eq!(mw.rkey(), granted.rkey);
    assert_eq!(
        (granted.addr, granted.len),
        (mr.addr() + AT as u64, LEN as u32)
    );
    granted
}

/// The peer WRITEs `data` to `to`; the completion's status.
fn write(e: &Ends, pd: &Pd, to: RemoteSlice, data: &[u8]) -> Result<(), WcStatus> {
    let mut src = pd.reg_mr(4096, AccessFlags::LOCAL_WRITE).unwrap();
    src.as_mut_slice()[..data.len()].copy_from_slice(data);
    e.a.post_send(SendRequest::rdma_write(src, 0..data.len(), to).unwrap())
        .unwrap();
    status(&e.cq_a, &e.a)
}

/// The peer READs `from`; the bytes or the completion's status.
fn read(e: &Ends, pd: &Pd, from: RemoteSlice) -> Result<Vec<u8>, WcStatus> {
    let dst = pd.reg_mr(4096, AccessFlags::LOCAL_WRITE).unwrap();
    e.a.post_send(SendRequest::rdma_read(dst, 0..from.len as usize, from).unwrap())
        .unwrap();
    let (c, mut bufs) = one(&e.cq_a, &e.a);
    c.status.map_err(|w| w.status.expect("a known status"))?;
    let dst: MemoryRegion = bufs[0].take().unwrap();
    Ok(dst.as_slice()[..from.len as usize].to_vec())
}

fn status(cq: &Cq, qp: &Qp) -> Result<(), WcStatus> {
    let (c, _) = one(cq, qp);
    c.status.map_err(|w| w.status.expect("a known status"))
}

fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n).map(|i| seed.wrapping_add(i as u8)).collect()
}

/// Asserts the region holds its background everywhere but `written` at the window.
fn assert_only_window_written(mr: &MemoryRegion, written: Option<&[u8]>) {
    let got = contents(mr);
    let mut want: Vec<u8> = (0..MIB2).map(background).collect();
    if let Some(w) = written {
        want[AT..AT + w.len()].copy_from_slice(w);
    }
    let diff = got.iter().zip(&want).position(|(g, w)| g != w);
    assert_eq!(
        diff, None,
        "the region differs from what the window allowed"
    );
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn device_has_both_window_types() {
    if crate::support::lacks(testkit::test_name!(), verbs::Capability::MemoryWindows) {
        return;
    }
    let attr = open().query_device().unwrap();
    assert!(attr.has_mw(), "no memory windows: max_mw {}", attr.max_mw());
    assert!(attr.has_mw_type2(), "no type 2 windows");
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn window_grants_read_and_write_of_exactly_its_bytes() {
    if crate::support::lacks(testkit::test_name!(), verbs::Capability::MemoryWindows) {
        return;
    }
    let ctx = open();
    let pd = ctx.alloc_pd().unwrap();
    let e = ends(&ctx, &pd);
    let mr = region(&pd);
    let mw = pd.alloc_mw(MwType::Type2).unwrap();
    let g = bind2(
        &e,
        &mw,
        &mr,
        AccessFlags::REMOTE_READ | AccessFlags::REMOTE_WRITE,
    );
    let data = pattern(LEN, 1);
    assert_eq!(write(&e, &pd, g, &data), Ok(()));
    assert_only_window_written(&mr, Some(&data));
    assert_eq!(read(&e, &pd, g), Ok(data.clone()));
    // The region's own key grants nothing remote.
    let by_mr = RemoteSlice {
        rkey: mr.rkey(),
        ..g
    };
    assert_eq!(
        write(&e, &pd, by_mr, &pattern(LEN, 9)),
        Err(WcStatus::RemAccessErr)
    );
    assert_only_window_written(&mr, Some(&data));
}

/// Whether the device is rxe (Soft-RoCE reports vendor id 0xffffff).
fn is_rxe(ctx: &Context) -> bool {
    ctx.query_device().unwrap().as_raw().vendor_id == 0xff_ffff
}

/// A write that starts inside the window but ends past it, or starts past it.
fn out_of_window_write_fails(test: &str, offset: u64, len: usize) {
    let ctx = open();
    let pd = ctx.alloc_pd().unwrap();
    let e = ends(&ctx, &pd);
    let mr = region(&pd);
    let mw = pd.alloc_mw(MwType::Type2).unwrap();
    let g = bind2(&e, &mw, &mr, AccessFlags::REMOTE_WRITE);
    let forged = RemoteSlice {
        addr: g.addr + offset,
        len: len as u32,
        rkey: g.rkey,
    };
    let r = write(&e, &pd, forged, &pattern(len, 3));
    if r.is_ok() && is_rxe(&ctx) {
        // rxe checks an access through a window against the bounds of the window's region,
        // not of the window (rxe_resp.c check_rkey): it lacks window bounds.
        testkit::skip(
            test,
            "rxe does not enforce memory-window bounds (it checks the region's): \
             a write outside the window was accepted",
        );
        return;
    }
    assert_eq!(r, Err(WcStatus::RemAccessErr));
    assert_only_window_written(&mr, None);
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn write_past_the_window_fails_and_leaves_memory_untouched() {
    if crate::support::lacks(testkit::test_name!(), verbs::Capability::MemoryWindows) {
        return;
    }
    out_of_window_write_fails(
        "write_past_the_window_fails_and_leaves_memory_untouched",
        LEN as u64,
        1,
    );
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn write_one_byte_longer_than_the_window_fails() {
    if crate::support::lacks(testkit::test_name!(), verbs::Capability::MemoryWindows) {
        return;
    }
    out_of_window_write_fails("write_one_byte_longer_than_the_window_fails", 0, LEN + 1);
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn read_through_a_write_only_window_fails() {
    if crate::support::lacks(testkit::test_name!(), verbs::Capability::MemoryWindows) {
        return;
    }
    let ctx = open();
    let pd = ctx.alloc_pd().unwrap();
    let e = ends(&ctx, &pd);
    let mr = region(&pd);
    let mw = pd.alloc_mw(MwType::Type2).unwrap();
    let g = bind2(&e, &mw, &mr, AccessFlags::REMOTE_WRITE);
    assert_eq!(read(&e, &pd, g), Err(WcStatus::RemAccessErr));
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn local_invalidate_revokes_the_window() {
    if crate::support::lacks(testkit::test_name!(), verbs::Capability::MemoryWindows) {
        return;
    }
    let ctx = open();
    let pd = ctx.alloc_pd().unwrap();
    let e = ends(&ctx, &pd);
    let mr = region(&pd);
    let mw = pd.alloc_mw(MwType::Type2).unwrap();
    let g = bind2(&e, &mw, &mr, AccessFlags::REMOTE_WRITE);
    let first = pattern(LEN, 1);
    assert_eq!(write(&e, &pd, g, &first), Ok(()));

    let id = e.b.post_send(SendRequest::local_inv(&mw)).unwrap();
    let (c, bufs) = one(&e.cq_b, &e.b);
    assert_eq!(
        (c.wr_id, c.status, c.opcode),
        (id, Ok(()), Some(WcOpcode::LocalInv))
    );
    // The request held the region until its completion; the window holds it no more.
    assert!(mw.bound_region().is_none());
    drop(bufs);
    assert_eq!(Arc::strong_count(&mr), 1);

    assert_eq!(
        write(&e, &pd, g, &pattern(LEN, 2)),
        Err(WcStatus::RemAccessErr)
    );
    assert_only_window_written(&mr, Some(&first));
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn send_with_invalidate_revokes_and_the_receiver_sees_the_rkey() {
    if crate::support::lacks(testkit::test_name!(), verbs::Capability::MemoryWindows) {
        return;
    }
    let ctx = open();
    let pd = ctx.alloc_pd().unwrap();
    let e = ends(&ctx, &pd);
    let mr = region(&pd);
    let mw = pd.alloc_mw(MwType::Type2).unwrap();
    let g = bind2(&e, &mw, &mr, AccessFlags::REMOTE_WRITE);

    let rx = pd.reg_mr(4096, AccessFlags::LOCAL_WRITE).unwrap();
    let rid = e.b.post_recv(RecvRequest::new(rx, ..).unwrap()).unwrap();
    let msg = pd.reg_mr(4096, AccessFlags::LOCAL_WRITE).unwrap();
    e.a.post_send(SendRequest::send_with_inv(msg, 0..16, g.rkey).unwrap())
        .unwrap();
    assert_eq!(status(&e.cq_a, &e.a), Ok(()));
    let (c, _) = one(&e.cq_b, &e.b);
    assert_eq!(
        (c.wr_id, c.status, c.opcode),
        (rid, Ok(()), Some(WcOpcode::Recv))
    );
    assert!(c.flags.contains(WcFlags::WITH_INV), "{c:?}");
    assert!(!c.flags.contains(WcFlags::IP_CSUM_OK), "{c:?}");
    assert_eq!(c.invalidated_rkey, Some(g.rkey));
    assert!(mw.release_region().is_some());

    assert_eq!(
        write(&e, &pd, g, &pattern(LEN, 2)),
        Err(WcStatus::RemAccessErr)
    );
    assert_only_window_written(&mr, None);
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn type2_window_rebinds_after_invalidation_with_a_new_key() {
    if crate::support::lacks(testkit::test_name!(), verbs::Capability::MemoryWindows) {
        return;
    }
    let ctx = open();
    let pd = ctx.alloc_pd().unwrap();
    let e = ends(&ctx, &pd);
    let mr = region(&pd);
    let mw = pd.alloc_mw(MwType::Type2).unwrap();
    let g1 = bind2(&e, &mw, &mr, AccessFlags::REMOTE_WRITE);
    e.b.post_send(SendRequest::local_inv(&mw)).unwrap();
    assert_eq!(status(&e.cq_b, &e.b), Ok(()));
    let g2 = bind2(&e, &mw, &mr, AccessFlags::REMOTE_WRITE);
    assert_ne!(g1.rkey, g2.rkey);
    let data = pattern(LEN, 4);
    assert_eq!(write(&e, &pd, g2, &data), Ok(()));
    assert_only_window_written(&mr, Some(&data));
    // The first key no longer names the window.
    assert_eq!(
        write(&e, &pd, g1, &pattern(LEN, 5)),
        Err(WcStatus::RemAccessErr)
    );
    assert_only_window_written(&mr, Some(&data));
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn type1_bind_rebind_and_unbind() {
    if crate::support::lacks(testkit::test_name!(), verbs::Capability::MemoryWindows) {
        return;
    }
    let ctx = open();
    let pd = ctx.alloc_pd().unwrap();
    let mr = region(&pd);
    let mw = pd.alloc_mw(MwType::Type1).unwrap();
    let e = ends(&ctx, &pd);
    let (id, g1) =
        e.b.bind_mw(
            &mw,
            &mr,
            AT..AT + LEN,
            AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ,
        )
        .unwrap();
    let (c, _) = one(&e.cq_b, &e.b);
    assert_eq!(
        (c.wr_id, c.status, c.opcode),
        (id, Ok(()), Some(WcOpcode::BindMw))
    );
    assert_eq!(
        (g1.addr, g1.len, g1.rkey),
        (mr.addr() + AT as u64, LEN as u32, mw.rkey())
    );
    let data = pattern(LEN, 6);
    assert_eq!(write(&e, &pd, g1, &data), Ok(()));
    assert_eq!(read(&e, &pd, g1), Ok(data.clone()));

    // Rebind (through the other QP: a type 1 window belongs to no QP) to the next 64 bytes,
    // read-only.
    let (_, g2) =
        e.a.bind_mw(&mw, &mr, AT + LEN..AT + 2 * LEN, AccessFlags::REMOTE_READ)
            .unwrap();
    assert_eq!(status(&e.cq_a, &e.a), Ok(()));
    assert_ne!(g1.rkey, g2.rkey);
    let want: Vec<u8> = (AT + LEN..AT + 2 * LEN).map(background).collect();
    assert_eq!(read(&e, &pd, g2), Ok(want));
    // The old binding is gone.
    assert_eq!(read(&e, &pd, g1), Err(WcStatus::RemAccessErr));

    // Unbind, on a fresh pair (the failed read above moved `a` to the error state).
    let e = ends(&ctx, &pd);
    let id = e.b.unbind_mw(&mw).unwrap().expect("the window was bound");
    let (c, bufs) = one(&e.cq_b, &e.b);
    assert_eq!((c.wr_id, c.status), (id, Ok(())));
    drop(bufs);
    assert!(mw.bound_region().is_none());
    assert_eq!(Arc::strong_count(&mr), 1);
    assert_eq!(read(&e, &pd, g2), Err(WcStatus::RemAccessErr));
    assert_only_window_written(&mr, Some(&data));
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn a_bound_window_keeps_its_memory_and_dealloc_revokes_it() {
    if crate::support::lacks(testkit::test_name!(), verbs::Capability::MemoryWindows) {
        return;
    }
    for mw_type in [MwType::Type1, MwType::Type2] {
        let ctx = open();
        let pd = ctx.alloc_pd().unwrap();
        let e = ends(&ctx, &pd);
        let mr = region(&pd);
        let mw = pd.alloc_mw(mw_type).unwrap();
        let g = match mw_type {
            MwType::Type1 => {
                let (_, g) =
                    e.b.bind_mw(&mw, &mr, AT..AT + LEN, AccessFlags::REMOTE_WRITE)
                        .unwrap();
                assert_eq!(status(&e.cq_b, &e.b), Ok(()));
                g
            }
            MwType::Type2 => bind2(&e, &mw, &mr, AccessFlags::REMOTE_WRITE),
        };
        // Our handle of the region goes; the window keeps the memory the peer may write.
        let weak = Arc::downgrade(&mr);
        drop(mr);
        assert!(
            weak.upgrade().is_some(),
            "{mw_type:?}: the window holds its region"
        );
        assert_eq!(write(&e, &pd, g, &pattern(LEN, 8)), Ok(()));
        // Deallocating the bound window revokes it and releases the region.
        drop(mw);
        assert!(
            weak.upgrade().is_none(),
            "{mw_type:?}: the region is released"
        );
        assert_eq!(
            write(&e, &pd, g, &pattern(LEN, 9)),
            Err(WcStatus::RemAccessErr),
            "{mw_type:?}"
        );
    }
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn bad_binds_are_typed_errors() {
    if crate::support::lacks(testkit::test_name!(), verbs::Capability::MemoryWindows) {
        return;
    }
    let ctx = open();
    let pd = ctx.alloc_pd().unwrap();
    let e = ends(&ctx, &pd);
    let mr = region(&pd);
    let plain = Arc::new(pd.reg_mr(4096, AccessFlags::LOCAL_WRITE).unwrap());
    let readonly = Arc::new(pd.reg_mr(4096, AccessFlags::MW_BIND).unwrap());
    let t1 = pd.alloc_mw(MwType::Type1).unwrap();
    let t2 = pd.alloc_mw(MwType::Type2).unwrap();
    let w = AccessFlags::REMOTE_WRITE;
    let msg = |r: Result<SendRequest, Error>| match r {
        Err(Error::InvalidBind { reason, .. }) => reason,
        other => panic!("expected InvalidBind, got {other:?}"),
    };
    assert!(msg(SendRequest::bind_mw(&t2, plain.clone(), 0..64, w)).contains("MW_BIND"));
    assert!(msg(SendRequest::bind_mw(&t2, readonly, 0..64, w)).contains("LOCAL_WRITE"));
    assert!(msg(SendRequest::bind_mw(&t1, mr.clone(), 0..64, w)).contains("Qp::bind_mw"));
    assert!(msg(SendRequest::bind_mw(&t2, mr.clone(), 0..0, w)).contains("invalidate"));
    assert!(msg(SendRequest::bind_mw(
        &t2,
        mr.clone(),
        0..64,
        AccessFlags::LOCAL_WRITE
    ))
    .contains("REMOTE_READ"));
    assert!(matches!(
        SendRequest::bind_mw(&t2, mr.clone(), MIB2 - 8..MIB2 + 8, w),
        Err(Error::OutOfBounds { .. })
    ));
    assert!(matches!(
        e.b.bind_mw(&t2, &mr, 0..64, w),
        Err(Error::InvalidBind { .. })
    ));
    // A window of another PD.
    let other = ctx.alloc_pd().unwrap().alloc_mw(MwType::Type1).unwrap();
    assert!(matches!(
        e.b.bind_mw(&other, &mr, 0..64, w),
        Err(Error::InvalidBind { .. })
    ));
    // A bind request made by hand names no window: refused, not posted.
    let forged = SendRequest::new(verbs::WrOp::BindMw(mr.remote(0..64).unwrap()));
    assert!(matches!(
        e.b.post_send(forged).map_err(|p| p.error),
        Err(Error::InvalidWorkRequest { .. })
    ));
    assert_eq!(e.b.in_flight(), (0, 0));
}
