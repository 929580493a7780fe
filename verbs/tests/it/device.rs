//! Devices, context queries, the GID table.
use std::net::IpAddr;

use verbs::{AtomicCap, Context, GidType, LinkLayer, NodeType, PortState};

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
    assert_eq!(me.node_type, NodeType::Ca);
    let ctx = open();
    assert_eq!(ctx.name(), dev.name);
    let attr = ctx.query_device().unwrap();
    assert_eq!(attr.node_guid(), me.guid);
    assert!(attr.phys_port_cnt() >= 1);
    assert!(attr.max_qp_wr() >= 16 && attr.max_sge() >= 1 && attr.max_cqe() >= 16);
    // rxe does atomics among its own QPs.
    assert_ne!(attr.atomic_cap(), AtomicCap::None);
    let ex = ctx.query_device_ex().unwrap();
    assert_eq!(ex.orig().node_guid(), attr.node_guid());
    assert_eq!(ex.orig().max_qp_wr(), attr.max_qp_wr());
    let port = ctx.query_port(PORT).unwrap();
    assert_eq!(port.state(), Some(PortState::Active));
    assert_eq!(port.link_layer(), Some(LinkLayer::Ethernet));
    assert!(port.gid_tbl_len() > 0);
    assert!(port.active_mtu().is_some());
    let _ = Context::open_first().unwrap();
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn gid_table_has_the_roce_v2_ipv4_mapped_gid() {
    let dev = testkit::device();
    let ctx = open();
    let table = ctx.gid_table().unwrap();
    assert!(!table.is_empty());
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
    assert_eq!(me.gid.gid_type, Some(GidType::RoceV2));
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
