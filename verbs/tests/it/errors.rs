//! Errors as values: remote access errors, a full send queue, bad names, ports and GID
//! indices; and the process keeps working afterwards.
use verbs::{
    AccessFlags, Context, Error, MemoryRegion, QpCap, QpState, QpType, RemoteSlice, SendFlags,
    SendRequest, SendWr, WcStatus, WrOp,
};

use crate::support::{one, open, Pair, ALL_REMOTE, PORT};

fn write_expecting(p: &Pair, remote: RemoteSlice) -> (verbs::Completion, usize) {
    let src = p.pd.reg_mr(4096, AccessFlags::LOCAL_WRITE).unwrap();
    p.a.post_send(
        SendRequest::new(WrOp::RdmaWrite(remote))
            .sge(src, 0..64)
            .unwrap(),
    )
    .unwrap();
    let (c, back) = one(&p.cq_a, &p.a);
    (c, back.len())
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn bad_rkey_gives_remote_access_error() {
    if crate::support::lacks(testkit::test_name!(), verbs::Capability::ManualConnect) {
        return;
    }
    let p = Pair::rc();
    let target =
        p.pd.reg_mr(4096, AccessFlags::LOCAL_WRITE | ALL_REMOTE)
            .unwrap();
    let mut remote = target.remote(0..64).unwrap();
    remote.rkey ^= 0x5a5a_0000;
    let (c, returned) = write_expecting(&p, remote);
    let e = c.status.unwrap_err();
    assert_eq!(e.status, Some(WcStatus::RemAccessErr), "{e}");
    assert_eq!(
        returned, 1,
        "the buffer comes back with the failed completion"
    );
    // The requester QP is now in error.
    assert_eq!(p.a.query_state().unwrap(), QpState::Err);
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn out_of_bounds_remote_address_gives_remote_access_error() {
    if crate::support::lacks(testkit::test_name!(), verbs::Capability::ManualConnect) {
        return;
    }
    let p = Pair::rc();
    let target =
        p.pd.reg_mr(4096, AccessFlags::LOCAL_WRITE | ALL_REMOTE)
            .unwrap();
    // Past the end of the peer's region (the descriptor is forged: slicing would refuse it).
    let remote = RemoteSlice {
        addr: target.addr() + 4096 - 16,
        len: 64,
        rkey: target.rkey(),
    };
    let (c, _) = write_expecting(&p, remote);
    assert_eq!(c.status.unwrap_err().status, Some(WcStatus::RemAccessErr));
    // The target's memory is untouched.
    let mut tail = [1u8; 16];
    target.read(4080, &mut tail).unwrap();
    assert_eq!(tail, [0; 16]);
}

/// With no receive posted at the peer, SENDs wait (RNR, infinite retries) and fill the queue.
#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn full_send_queue_is_typed_backpressure() {
    if crate::support::lacks(testkit::test_name!(), verbs::Capability::ManualConnect) {
        return;
    }
    let cap = QpCap {
        max_send_wr: 4,
        max_inline_data: 16,
        ..QpCap::default()
    };
    let p = Pair::new(QpType::Rc, cap);
    let depth = p.a.cap().max_send_wr;
    let mut ids = Vec::new();
    let refused = loop {
        let src: MemoryRegion = p.pd.reg_mr(4096, AccessFlags::LOCAL_WRITE).unwrap();
        match p.a.post_send(SendRequest::send(src, 0..8).unwrap()) {
            Ok(id) => ids.push(id),
            Err(e) => break e,
        }
        assert!(
            ids.len() <= depth as usize,
            "posted past the queue depth {depth}"
        );
    };
    assert_eq!(ids.len(), depth as usize);
    assert!(refused.error.is_queue_full(), "{:?}", refused.error);
    match refused.error {
        Error::QueueFull {
            qp_num,
            queue,
            depth: d,
        } => {
            assert_eq!((qp_num, queue, d), (p.a.qp_num(), "send", depth))
        }
        ref other => panic!("{other:?}"),
    }
    // The refused request's buffer is handed back.
    assert_eq!(refused.unposted.into_buffers().len(), 1);

    // The unchecked path hits the device's own limit (ENOMEM) and reports the same.
    let q = Pair::new(QpType::Rc, cap);
    let data = [0u8; 8];
    let sge = [verbs::LocalSlice {
        addr: data.as_ptr() as u64,
        len: 8,
        lkey: 0,
    }];
    let mut posted = 0;
    let err = loop {
        // SAFETY: inline sends copy the data during the call.
        let r = unsafe {
            q.a.post_send_unchecked(&[SendWr {
                wr_id: posted,
                op: WrOp::Send,
                sges: &sge,
                flags: SendFlags::INLINE | SendFlags::SIGNALED,
                ud: None,
            }])
        };
        match r {
            Ok(()) => posted += 1,
            Err(e) => break e,
        }
        assert!(
            posted <= 4 * u64::from(depth) + 16,
            "the device never refused"
        );
    };
    assert!(err.is_queue_full(), "{err:?}");
    assert!(posted >= u64::from(depth));
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn clear_errors_for_bad_names_ports_and_gid_indices() {
    let e = Context::open("no-such-rdma-device").unwrap_err();
    assert!(matches!(e, Error::NoSuchDevice { .. }), "{e:?}");
    assert!(
        e.to_string().contains(&testkit::device().name),
        "lists what exists: {e}"
    );

    let ctx = open();
    let ports = ctx.query_device().unwrap().phys_port_cnt();
    let e = ctx.query_port(PORT + 40).unwrap_err();
    assert!(
        matches!(&e, Error::NoSuchPort { port: 41, ports: n, device } if *n == ports && *device == ctx.name()),
        "{e:?}"
    );
    let text = e.to_string();
    assert!(
        text.contains("has no port 41") && text.contains(&format!("1..={ports}")),
        "{text}"
    );
    assert!(matches!(
        ctx.query_port(0).unwrap_err(),
        Error::NoSuchPort { port: 0, .. }
    ));

    // The last index a source GID can have: past a short table, else (rxe: 1024) empty.
    let e = ctx.query_gid(PORT, u8::MAX).unwrap_err();
    assert!(matches!(e, Error::QueryGid { index: 255, .. }), "{e:?}");

    let e = ctx
        .roce_v2_gid(PORT, "203.0.113.9".parse().unwrap())
        .unwrap_err();
    assert!(matches!(e, Error::NoGidForAddr { .. }), "{e:?}");

    // A transition the table forbids is refused before reaching the kernel.
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(8, None).unwrap();
    let qp = pd
        .create_qp(&verbs::QpInitAttr::new(QpType::Rc, &cq, &cq))
        .unwrap();
    let e = qp.to_rts(0).unwrap_err();
    assert!(
        matches!(
            e,
            Error::InvalidTransition {
                from: QpState::Reset,
                to: QpState::Rts,
                ..
            }
        ),
        "{e:?}"
    );
    // Only an iWARP QP's RTS may be recorded as made by the CM, and only from Init or RTR:
    // this one's (in Reset) is refused on any transport.
    let e = qp.established_by_cm().unwrap_err();
    assert!(
        matches!(
            e,
            Error::InvalidTransition {
                from: QpState::Reset,
                to: QpState::Rts,
                ..
            }
        ) && e.to_string().contains("iWARP"),
        "{e:?}"
    );
    assert_eq!(qp.state(), QpState::Reset);
    // Posting before RTS is refused too.
    let src = pd.reg_mr(64, AccessFlags::LOCAL_WRITE).unwrap();
    let e = qp
        .post_send(SendRequest::send(src, ..).unwrap())
        .unwrap_err();
    assert!(
        matches!(e.error, Error::InvalidWorkRequest { .. }),
        "{:?}",
        e.error
    );

    // An iWARP QP takes Init (no P_Key there) but no manual connect: refused with the typed
    // error naming the transport and what to do instead.
    if ctx.transport() == verbs::Transport::Iwarp {
        let qp = pd
            .create_qp(&verbs::QpInitAttr::new(QpType::Rc, &cq, &cq))
            .unwrap();
        qp.to_init(PORT, AccessFlags::REMOTE_WRITE).unwrap();
        let (sgid, gid) = crate::support::gid(&ctx);
        let me = verbs::QpEndpoint {
            qp_num: qp.qp_num(),
            psn: 0,
            lid: 0,
            gid,
        };
        let e = qp
            .to_rtr(&me, PORT, Some(sgid), verbs::Mtu::Mtu1024)
            .unwrap_err();
        assert_eq!(
            e.missing_capability(),
            Some(verbs::Capability::ManualConnect),
            "{e:?}"
        );
        let text = e.to_string();
        assert!(text.contains("iWARP") && text.contains("RDMA CM"), "{text}");
        assert_eq!(qp.state(), QpState::Init);
        return;
    }
    // And everything still works.
    let p = Pair::rc();
    let target =
        p.pd.reg_mr(4096, AccessFlags::LOCAL_WRITE | ALL_REMOTE)
            .unwrap();
    let (c, _) = write_expecting(&p, target.remote(0..64).unwrap());
    assert_eq!(c.status, Ok(()));
}

/// A source GID index past the table, or at an empty entry, is named as such instead of the
/// bare EINVAL of `ibv_modify_qp`; a QP with a good index still connects afterwards.
#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn bad_source_gid_index_is_named_at_rtr() {
    if crate::support::lacks(testkit::test_name!(), verbs::Capability::ManualConnect) {
        return;
    }
    let ctx = open();
    let len = ctx.query_port(PORT).unwrap().gid_tbl_len();
    let table = ctx.gid_table().unwrap();
    let (_, gid) = crate::support::gid(&ctx);
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(8, None).unwrap();
    let qp = pd
        .create_qp(&verbs::QpInitAttr::new(QpType::Rc, &cq, &cq))
        .unwrap();
    qp.to_init(PORT, AccessFlags::empty()).unwrap();
    let me = verbs::QpEndpoint {
        qp_num: qp.qp_num(),
        psn: 0,
        lid: 0,
        gid,
    };
    // Past the end of the table, when the table is shorter than 256 entries (rxe: 1024, so
    // there the first unused entry stands in).
    let bad = match u8::try_from(len) {
        Ok(past) => past,
        Err(_) => (0..=u8::MAX)
            .find(|i| !table.iter().any(|e| e.port == PORT && e.index == *i))
            .expect("an unused GID entry below 256"),
    };
    let e = qp
        .to_rtr(&me, PORT, Some(bad), verbs::Mtu::Mtu1024)
        .unwrap_err();
    match &e {
        Error::InvalidGidIndex {
            qp_num,
            port,
            index,
            problem,
        } => {
            assert_eq!((*qp_num, *port, *index), (qp.qp_num(), PORT, bad));
            let expected = if u32::from(bad) >= len {
                "past the end of the table"
            } else {
                "empty entry"
            };
            assert!(problem.contains(expected), "{problem}");
        }
        other => panic!("expected InvalidGidIndex, got {other:?}"),
    }
    assert!(e.to_string().contains("roce_v2_gid"), "{e}");
    // Refused before the kernel: the QP is still in Init and a good index works.
    assert_eq!(qp.query_state().unwrap(), QpState::Init);
    let (good, _) = crate::support::gid(&ctx);
    qp.to_rtr(&me, PORT, Some(good), verbs::Mtu::Mtu1024)
        .unwrap();
    // Address handles are checked the same way.
    let e = pd
        .create_ah(&verbs::AhAttr::roce(PORT, gid, bad))
        .unwrap_err();
    assert!(
        matches!(e, Error::InvalidGidIndex { index, .. } if index == bad),
        "{e:?}"
    );
}

/// Remote write without local write: a typed error naming the missing flag, not EINVAL.
#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn remote_write_without_local_write_is_refused_with_the_fix() {
    let ctx = open();
    let pd = ctx.alloc_pd().unwrap();
    for access in [
        AccessFlags::REMOTE_WRITE,
        AccessFlags::REMOTE_ATOMIC | AccessFlags::REMOTE_READ,
    ] {
        let e = pd.reg_mr(4096, access).unwrap_err();
        assert!(
            matches!(e, Error::InvalidAccess { access: a, .. } if a == access),
            "{e:?}"
        );
        assert!(e.to_string().contains("LOCAL_WRITE"), "{e}");
    }
    // With it, the same registration works; remote read alone needs no local write.
    pd.reg_mr(4096, AccessFlags::REMOTE_WRITE | AccessFlags::LOCAL_WRITE)
        .unwrap();
    pd.reg_mr(4096, AccessFlags::REMOTE_READ).unwrap();
}

/// A work-completion error and the errors of failed calls carry their cause in words.
#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn failed_completions_and_calls_say_why() {
    if crate::support::lacks(testkit::test_name!(), verbs::Capability::ManualConnect) {
        return;
    }
    let p = Pair::rc();
    let target =
        p.pd.reg_mr(4096, AccessFlags::LOCAL_WRITE | ALL_REMOTE)
            .unwrap();
    let mut remote = target.remote(0..64).unwrap();
    remote.rkey ^= 0x5a5a_0000;
    let (c, _) = write_expecting(&p, remote);
    let text = c.status.unwrap_err().to_string();
    assert!(
        text.contains("remote access error") && text.contains("rkey"),
        "{text}"
    );
    // The errno of a failed call is its source, and the message does not repeat it: a
    // printed chain shows each cause once.
    let e = open().query_gid(PORT, u8::MAX).unwrap_err();
    let source = std::error::Error::source(&e)
        .expect("has a source")
        .to_string();
    assert!(
        e.to_string().contains("GID index 255") && !e.to_string().contains(&source),
        "{e} / {source}"
    );
}
