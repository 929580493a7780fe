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
    let e = ctx.query_port(PORT + 40).unwrap_err();
    assert!(matches!(e, Error::QueryPort { port: 41, .. }), "{e:?}");

    let len = ctx.query_port(PORT).unwrap().gid_tbl_len();
    let e = ctx.query_gid(PORT, len + 5).unwrap_err();
    assert!(matches!(e, Error::QueryGid { .. }), "{e:?}");

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

    // And everything still works.
    let p = Pair::rc();
    let target =
        p.pd.reg_mr(4096, AccessFlags::LOCAL_WRITE | ALL_REMOTE)
            .unwrap();
    let (c, _) = write_expecting(&p, target.remote(0..64).unwrap());
    assert_eq!(c.status, Ok(()));
}
