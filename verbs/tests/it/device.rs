//! Devices, context queries, the GID table.
use std::net::IpAddr;

use verbs::{AtomicCap, Context, GidType, LinkLayer, Mtu, NodeType, PortState};

use crate::support::{open, PORT};

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn lists_and_opens_the_test_device() {
    let dev = testkit::device();
    let list = verbs::devices().unwrap();
    let me = list
        .iter()
        .find(|d| d.name == dev.name)
        .expect("test device listed");
    let ctx = open();
    assert_eq!(ctx.name(), dev.name);
    // rxe speaks InfiniBand's transport over Ethernet (RoCE), a channel adapter; siw speaks
    // iWARP, an RDMA NIC.
    let node = match ctx.transport() {
        verbs::Transport::Ib => NodeType::Ca,
        verbs::Transport::Iwarp => NodeType::Rnic,
        other => panic!("unexpected transport {other:?}"),
    };
    assert_eq!(me.node_type, node);
    let attr = ctx.query_device().unwrap();
    assert_eq!(attr.node_guid(), me.guid);
    assert!(attr.phys_port_cnt() >= 1);
    assert!(attr.max_qp_wr() >= 16 && attr.max_sge() >= 1 && attr.max_cqe() >= 16);
    // rxe does atomics among its own QPs; an iWARP device says whether it has them, and the
    // capabilities follow what it says.
    let caps = ctx.capabilities().unwrap();
    assert_eq!(caps.transport(), ctx.transport());
    assert_eq!(caps.atomic_cap(), attr.atomic_cap());
    assert_eq!(
        caps.has(verbs::Capability::Atomics),
        attr.atomic_cap() != AtomicCap::None
    );
    if ctx.transport() == verbs::Transport::Ib {
        assert_ne!(attr.atomic_cap(), AtomicCap::None);
        assert_eq!(caps.missing().count(), 0, "rxe has every capability");
    }
    let ex = ctx.query_device_ex().unwrap();
    assert_eq!(ex.orig().node_guid(), attr.node_guid());
    assert_eq!(ex.orig().max_qp_wr(), attr.max_qp_wr());
    let port = ctx.query_port(PORT).unwrap();
    assert_eq!(port.state(), PortState::Active);
    assert_eq!(port.link_layer(), LinkLayer::Ethernet);
    assert!(port.gid_tbl_len() > 0);
    assert!(matches!(
        port.active_mtu(),
        Mtu::Mtu256 | Mtu::Mtu512 | Mtu::Mtu1024 | Mtu::Mtu2048 | Mtu::Mtu4096
    ));
    assert!(port.max_mtu() >= port.active_mtu());
    let _ = Context::open_first().unwrap();
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn gid_table_has_the_roce_v2_ipv4_mapped_gid() {
    let dev = testkit::device();
    let ctx = open();
    let table = ctx.gid_table().unwrap();
    assert!(!table.is_empty());
    if ctx.transport() == verbs::Transport::Iwarp {
        // An iWARP device has one GID, from its netdev's MAC, and no RoCE v2 GID: asking for
        // one names the address.
        let e = ctx.roce_v2_gid(PORT, IpAddr::V4(dev.addr)).unwrap_err();
        assert!(matches!(e, verbs::Error::NoGidForAddr { .. }), "{e:?}");
        assert_eq!(table.len(), 1, "{table:#?}");
        assert!(!table[0].gid.is_zero());
        return;
    }
    let e = ctx.roce_v2_gid(PORT, IpAddr::V4(dev.addr)).unwrap();
    assert_eq!(e.index, dev.gid_index, "table: {table:#?}");
    assert_eq!(e.gid_type, Some(GidType::RoceV2));
    assert_eq!(e.gid.to_ipv4_mapped(), Some(dev.addr));
    let one = ctx.query_gid(PORT, e.index).unwrap();
    assert_eq!(one, e);
    // The same entry shows up in the table.
    assert!(table.contains(&e));
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn opens_the_device_that_serves_an_address() {
    let dev = testkit::device();
    let addr = IpAddr::V4(dev.addr);
    let (ctx, me) = Context::open_by_addr(addr).unwrap();
    assert_eq!(ctx.name(), dev.name);
    assert_eq!((me.device.as_str(), me.addr), (dev.name.as_str(), addr));
    assert_eq!((me.gid.port, me.gid.index), (PORT, dev.gid_index));
    if ctx.transport() == verbs::Transport::Ib {
        assert_eq!(me.gid.gid_type, Some(GidType::RoceV2));
    }
    assert_eq!(verbs::device_for_addr(addr).unwrap(), me);
    // The peer's device serves the peer's address (another device in the two-host guest).
    let peer = testkit::peer().device;
    let theirs = verbs::device_for_addr(IpAddr::V4(peer.addr)).unwrap();
    assert_eq!(theirs.device, peer.name);
    assert_eq!(theirs.gid.index, peer.gid_index);
    let all = verbs::rdma_addresses().unwrap();
    assert!(all.contains(&me) && all.contains(&theirs), "{all:?}");

    // An address no device serves: the error lists those that are served.
    let nowhere: IpAddr = "203.0.113.9".parse().unwrap();
    let e = Context::open_by_addr(nowhere).unwrap_err();
    assert!(
        matches!(e, verbs::Error::NoDeviceForAddr { addr, .. } if addr == nowhere),
        "{e:?}"
    );
    let text = e.to_string();
    assert!(
        text.contains(&dev.addr.to_string()) && text.contains(&dev.name),
        "{text}"
    );
}

/// The crate's quick start, on the test device's address: no device name, no GID index, no
/// casts; the port's attributes are values.
#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn the_quick_start_runs_as_written() {
    if crate::support::lacks(testkit::test_name!(), verbs::Capability::ManualConnect) {
        return;
    }
    use std::time::Duration;
    use verbs::{AccessFlags, MemoryRegion, QpEndpoint, QpInitAttr, QpType, SendRequest};

    let (ctx, me) = Context::open_by_addr(IpAddr::V4(testkit::device().addr)).unwrap();
    let port = me.gid.port;
    let mtu = ctx.query_port(port).unwrap().active_mtu();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(16, None).unwrap();
    let qp = pd
        .create_qp(&QpInitAttr::new(QpType::Rc, &cq, &cq))
        .unwrap();
    let target = pd
        .reg_mr(4096, AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE)
        .unwrap();
    let mut source = pd.reg_mr(4096, AccessFlags::LOCAL_WRITE).unwrap();
    source.as_mut_slice()[..5].copy_from_slice(b"hello");
    let this_qp = QpEndpoint {
        qp_num: qp.qp_num(),
        psn: 0,
        lid: 0,
        gid: me.gid.gid,
    };
    qp.to_init(port, AccessFlags::REMOTE_WRITE).unwrap();
    qp.to_rtr(&this_qp, port, Some(me.gid.index), mtu).unwrap();
    qp.to_rts(0).unwrap();
    let wr_id = qp
        .post_send(SendRequest::rdma_write(source, 0..5, target.remote(0..5).unwrap()).unwrap())
        .unwrap();
    let wc = cq.wait_one(Duration::from_secs(5)).unwrap();
    assert_eq!(wc.wr_id(), wr_id);
    wc.status().unwrap();
    let source: MemoryRegion = qp.reclaim(&wc)[0].take().unwrap();
    assert_eq!(&source.as_slice()[..5], b"hello");
    let mut out = [0u8; 5];
    target.read(0, &mut out).unwrap();
    assert_eq!(&out, b"hello");
}

/// Each capability the device lacks is refused up front, as `Error::MissingCapability` naming
/// the device's transport; each it has is not (the verb may still fail for other reasons, as
/// these QPs are not connected).
#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn what_the_device_lacks_is_a_typed_error_naming_its_transport() {
    use verbs::{Capability, QpInitAttr, QpType, RemoteSlice, SendRequest, WrOp};
    let ctx = open();
    let caps = ctx.capabilities().unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(8, None).unwrap();
    let rc = pd
        .create_qp(&QpInitAttr::new(QpType::Rc, &cq, &cq))
        .unwrap();
    let remote = RemoteSlice {
        addr: 0,
        len: 8,
        rkey: 0,
    };
    let post = |op: WrOp| {
        let buf = pd.reg_mr(8, verbs::AccessFlags::LOCAL_WRITE).unwrap();
        let req = match op {
            WrOp::AtomicFetchAdd { .. } => SendRequest::fetch_and_add(buf, 0, remote, 1),
            _ => SendRequest::new(op).sge(buf, ..),
        };
        rc.post_send(req.unwrap().signaled(true))
            .map(drop)
            .map_err(|e| e.error)
    };
    for c in Capability::ALL {
        let result = match c {
            Capability::UnreliableDatagram => pd
                .create_qp(&QpInitAttr::new(QpType::Ud, &cq, &cq))
                .map(drop),
            Capability::UnreliableConnected => pd
                .create_qp(&QpInitAttr::new(QpType::Uc, &cq, &cq))
                .map(drop),
            Capability::Atomics => post(WrOp::AtomicFetchAdd { remote, add: 1 }),
            Capability::MemoryWindows => pd.alloc_mw(verbs::MwType::Type1).map(drop),
            Capability::ImmediateData => post(WrOp::SendWithImm(7)),
            Capability::ManualConnect => {
                let me = verbs::QpEndpoint {
                    qp_num: rc.qp_num(),
                    psn: 0,
                    lid: 0,
                    gid: crate::support::gid(&ctx).1,
                };
                rc.to_init(PORT, verbs::AccessFlags::empty())
                    .and_then(|()| {
                        rc.to_rtr(&me, PORT, Some(crate::support::gid(&ctx).0), Mtu::Mtu1024)
                    })
            }
            // Known only by registering a dma-buf: dmabuf.rs.
            Capability::DmabufMr => continue,
            other => panic!("a capability this test does not know: {other:?}"),
        };
        let missing = result.as_ref().err().and_then(|e| e.missing_capability());
        if caps.has(c) {
            assert_eq!(missing, None, "{c}: {result:?}");
        } else {
            let e = result.expect_err("refused");
            assert_eq!(missing, Some(c), "{c}: {e:?}");
            let text = e.to_string();
            assert!(
                text.contains(ctx.name()) && text.contains(&ctx.transport().to_string()),
                "{text}"
            );
        }
    }
}
