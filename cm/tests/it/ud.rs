//! UD over rdma_cm between the two hosts: the client learns the server's QP from the
//! `Established` event, the server learns the client from its datagram; data both ways,
//! verified byte for byte.
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use cm::{Error, UdConnector, UdEndpoint, UdListener};
use verbs::{
    AccessFlags, Completion, CompletionBuf, MemoryRegion, RecvRequest, SendRequest, WcOpcode,
    GRH_LEN,
};

use crate::support::*;

pub(crate) fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(13).wrapping_add(seed))
        .collect()
}

/// Waits for one completion on the endpoint's CQ; returns it, the reclaimed region (if any)
/// and, for a receive, the raw completion's source-AH material (GRH bytes).
pub(crate) fn wait_one_ud(
    ep: &UdEndpoint,
) -> (Completion, Option<MemoryRegion>, Option<verbs::Ah>) {
    let mut buf = CompletionBuf::new(1);
    let deadline = Instant::now() + TIMEOUT;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        assert!(!left.is_zero(), "no UD completion within {TIMEOUT:?}");
        let polled = ep.cq().wait_and_poll(&mut buf, Some(left)).unwrap();
        let Some(wc) = polled.first() else { continue };
        let c = wc.to_completion();
        let mr = ep
            .qp()
            .reclaim(wc)
            .pop()
            .and_then(|mut r| r.take::<MemoryRegion>().ok());
        // For a receive: an address handle back to its sender, from the completion and GRH.
        let ah = match (&mr, c.opcode) {
            (Some(m), Some(WcOpcode::Recv)) => Some(
                ep.pd()
                    .create_ah_from_wc(ep.id().port_num(), wc, &m.as_slice()[..GRH_LEN])
                    .unwrap(),
            ),
            _ => None,
        };
        return (c, mr, ah);
    }
}

pub(crate) fn post_recv_ud(ep: &UdEndpoint, len: usize) {
    let mr = ep
        .pd()
        .reg_mr(GRH_LEN + len, AccessFlags::LOCAL_WRITE)
        .unwrap();
    ep.qp()
        .post_recv(RecvRequest::new(mr, ..).unwrap())
        .unwrap();
}

pub(crate) fn send_ud(ep: &UdEndpoint, data: &[u8], ah: &verbs::Ah, qpn: u32, qkey: u32) {
    let mut mr = ep
        .pd()
        .reg_mr(data.len(), AccessFlags::LOCAL_WRITE)
        .unwrap();
    mr.as_mut_slice().copy_from_slice(data);
    let req = SendRequest::send(mr, ..).unwrap().ud(ah, qpn, qkey);
    ep.qp().post_send(req).unwrap();
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn ud_request_answer_and_datagrams_both_ways_between_hosts() {
    if lacks(testkit::test_name!(), verbs::Capability::UnreliableDatagram) {
        return;
    }
    let listener = UdListener::bind(SocketAddr::new(peer_ip(), port(40))).unwrap();
    let addr = listener.local_addr().unwrap();
    let question = pattern(700, 1);
    let answer = pattern(300, 2);
    let (q2, a2) = (question.clone(), answer.clone());
    let (tx, rx) = std::sync::mpsc::channel();
    let server = std::thread::spawn(move || {
        let (ep, data) = listener
            .accept(TIMEOUT, |ep| {
                post_recv_ud(ep, 1024);
                Ok(())
            })
            .unwrap();
        assert!(data.starts_with(b"ud hello"), "{data:?}");
        tx.send((ep.qp().qp_num(), ep.qkey())).unwrap();
        let (c, mr, ah) = wait_one_ud(&ep);
        assert_eq!((c.status, c.opcode), (Ok(()), Some(WcOpcode::Recv)));
        assert_eq!(c.byte_len as usize, GRH_LEN + q2.len());
        assert_eq!(
            &mr.unwrap().as_slice()[GRH_LEN..GRH_LEN + q2.len()],
            &q2[..]
        );
        // Answer the client, known only from its datagram.
        send_ud(&ep, &a2, &ah.unwrap(), c.src_qp, ep.qkey());
        let (c, _, _) = wait_one_ud(&ep);
        assert_eq!((c.status, c.opcode), (Ok(()), Some(WcOpcode::Send)));
    });

    let (ep, peer) = UdConnector::new(addr)
        .src(local_ip())
        .private_data(b"ud hello")
        .unwrap()
        .timeout(TIMEOUT)
        .connect()
        .unwrap();
    let (server_qpn, server_qkey) = rx.recv_timeout(TIMEOUT).unwrap();
    assert_eq!(
        peer.qp_num, server_qpn,
        "the Established event names the server's QP"
    );
    assert_eq!(peer.qkey, server_qkey);
    assert_eq!(ep.qkey(), server_qkey);

    post_recv_ud(&ep, 1024);
    send_ud(&ep, &question, &peer.ah, peer.qp_num, peer.qkey);
    let mut got_send = false;
    let mut got_answer = false;
    for _ in 0..2 {
        let (c, mr, _) = wait_one_ud(&ep);
        assert_eq!(c.status, Ok(()));
        match c.opcode {
            Some(WcOpcode::Send) => got_send = true,
            Some(WcOpcode::Recv) => {
                assert_eq!(c.byte_len as usize, GRH_LEN + answer.len());
                assert_eq!(c.src_qp, server_qpn);
                let m = mr.unwrap();
                assert_eq!(&m.as_slice()[GRH_LEN..GRH_LEN + answer.len()], &answer[..]);
                got_answer = true;
            }
            other => panic!("unexpected completion {other:?}"),
        }
    }
    assert!(got_send && got_answer);
    server.join().unwrap();
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn ud_request_to_nobody_is_a_typed_error_in_time() {
    let started = Instant::now();
    let e = UdConnector::new(SocketAddr::new(peer_ip(), port(41)))
        .src(local_ip())
        .timeout(Duration::from_secs(5))
        .connect()
        .unwrap_err();
    if local_transport() == verbs::Transport::Iwarp {
        // No UD on iWARP: refused before anything is sent, naming the device's transport.
        let Error::Verbs(v) = &e else { panic!("{e:?}") };
        assert_eq!(
            v.missing_capability(),
            Some(verbs::Capability::UnreliableDatagram),
            "{e:?}"
        );
        assert!(e.to_string().contains("iWARP"), "{e}");
        return;
    }
    assert!(
        matches!(e, Error::Unreachable { .. } | Error::Rejected { .. }),
        "{e:?}"
    );
    assert!(started.elapsed() < Duration::from_secs(6));
}
