//! Multicast over rdma_cm: one sender on this host, two receivers on the peer host, each
//! datagram verified byte for byte at both; a receiver that left gets nothing more.
use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, Instant};

use cm::UdEndpoint;
use verbs::{
    AccessFlags, CompletionBuf, MemoryRegion, QpCap, RecvRequest, SendRequest, WcOpcode, GRH_LEN,
};

use crate::support::*;

const GROUP: IpAddr = IpAddr::V4(Ipv4Addr::new(239, 77, 0, 9));

fn endpoint(ip: IpAddr) -> UdEndpoint {
    let cap = QpCap {
        max_send_wr: 16,
        max_recv_wr: 16,
        ..QpCap::default()
    };
    UdEndpoint::bind(ip, cap, 64).unwrap()
}

fn post_recvs(ep: &UdEndpoint, n: usize) {
    for _ in 0..n {
        let mr = ep
            .pd()
            .reg_mr(GRH_LEN + 512, AccessFlags::LOCAL_WRITE)
            .unwrap();
        ep.qp()
            .post_recv(RecvRequest::new(mr, ..).unwrap())
            .unwrap();
    }
}

/// The next completion of `ep` of opcode `want` within `timeout` (others are reclaimed and
/// skipped), with its buffer.
fn next_of(
    ep: &UdEndpoint,
    want: WcOpcode,
    timeout: Duration,
) -> Option<(verbs::Completion, Option<MemoryRegion>)> {
    let deadline = Instant::now() + timeout;
    let mut buf = CompletionBuf::new(1);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return None;
        }
        let polled = ep.cq().wait_and_poll(&mut buf, Some(left)).unwrap();
        let Some(wc) = polled.first() else { continue };
        let c = wc.to_completion();
        let mr = ep
            .qp()
            .reclaim(wc)
            .pop()
            .and_then(|mut r| r.take::<MemoryRegion>().ok());
        assert_eq!(c.status, Ok(()), "{c:?}");
        if c.opcode == Some(want) {
            return Some((c, mr));
        }
    }
}

fn send_to_group(ep: &UdEndpoint, peer: &cm::UdPeer, data: &[u8]) {
    let mut mr = ep
        .pd()
        .reg_mr(data.len(), AccessFlags::LOCAL_WRITE)
        .unwrap();
    mr.as_mut_slice().copy_from_slice(data);
    let req = SendRequest::send(mr, ..)
        .unwrap()
        .ud(&peer.ah, peer.qp_num, peer.qkey);
    ep.qp().post_send(req).unwrap();
    next_of(ep, WcOpcode::Send, TIMEOUT).expect("send completion");
}

fn expect_datagram(ep: &UdEndpoint, from_qpn: u32, data: &[u8]) {
    let (c, mr) = next_of(ep, WcOpcode::Recv, TIMEOUT).expect("the group's datagram");
    assert_eq!(c.byte_len as usize, GRH_LEN + data.len());
    assert_eq!(c.src_qp, from_qpn);
    assert_eq!(&mr.unwrap().as_slice()[GRH_LEN..GRH_LEN + data.len()], data);
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn one_sender_two_receivers_and_a_clean_leave() {
    if lacks(testkit::test_name!(), verbs::Capability::UnreliableDatagram) {
        return;
    }
    let sender = endpoint(local_ip());
    let r1 = endpoint(peer_ip());
    let r2 = endpoint(peer_ip());
    post_recvs(&r1, 2);
    post_recvs(&r2, 2);
    let m1 = r1.join_multicast(GROUP, TIMEOUT).unwrap();
    let m2 = r2.join_multicast(GROUP, TIMEOUT).unwrap();
    let ms = sender.join_multicast(GROUP, TIMEOUT).unwrap();
    assert_eq!(ms.peer().qp_num, 0xff_ffff);
    assert_eq!(m1.mgid(), ms.mgid());
    // RoCE: the group's GID is its IPv4-mapped address.
    assert_eq!(&ms.mgid().0[12..], &[239, 77, 0, 9]);

    let first: Vec<u8> = (0..300u32).map(|i| (i * 7 + 1) as u8).collect();
    send_to_group(&sender, ms.peer(), &first);
    expect_datagram(&r1, sender.qp().qp_num(), &first);
    expect_datagram(&r2, sender.qp().qp_num(), &first);

    // r2 leaves; the next datagram reaches r1 only.
    m2.leave().unwrap();
    let second = b"after the leave".to_vec();
    send_to_group(&sender, ms.peer(), &second);
    expect_datagram(&r1, sender.qp().qp_num(), &second);
    assert!(
        next_of(&r2, WcOpcode::Recv, Duration::from_millis(300)).is_none(),
        "a receiver that left still got a datagram"
    );
    drop(m1);
    drop(ms);
}
