//! The attack on `Qp::reclaim`'s promise that a buffer comes back only once the device is done
//! with it: a large RDMA READ, then a SEND posted behind it. An iWARP device (siw) completes
//! the SEND as soon as it is sent and the READ when its response has arrived, so the SEND's
//! completion comes first; were the READ's sink handed back with it, as an InfiniBand send
//! queue's in-order completions allow, the program would read (or free) memory the device is
//! still writing. Every sink must come back whole, once, with its own completion (device
//! tier; on RoCE the READ simply completes first).
use std::net::SocketAddr;
use std::sync::mpsc;

use cm::{Connector, Listener};
use verbs::{AccessFlags, CompletionBuf, MemoryRegion, RemoteSlice, SendRequest, WcOpcode};

use crate::support::*;

/// Bytes of each READ: long enough that its response is still arriving when the SEND behind
/// it has gone.
const LEN: usize = 4 << 20;
const ROUNDS: usize = 8;

fn pattern(i: usize) -> u8 {
    (i * 7 + i / 4096) as u8 | 1
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn a_read_sink_comes_back_whole_and_only_with_its_own_completion() {
    let listener = Listener::bind(SocketAddr::new(local_ip(), 0), options()).unwrap();
    let addr = listener.local_addr().expect("bound address");
    let (region_tx, region_rx) = mpsc::channel::<RemoteSlice>();
    let (done_tx, done_rx) = mpsc::channel::<()>();
    let server = std::thread::spawn(move || {
        let conn = listener.accept(TIMEOUT).unwrap();
        let mut mr = conn
            .pd()
            .reg_mr(LEN, AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ)
            .unwrap();
        for (i, b) in mr.as_mut_slice().iter_mut().enumerate() {
            *b = pattern(i);
        }
        for _ in 0..ROUNDS {
            post_recv(conn.qp(), conn.pd(), 64);
        }
        region_tx
            .send(RemoteSlice {
                addr: mr.addr(),
                len: LEN as u32,
                rkey: mr.rkey(),
            })
            .unwrap();
        done_rx.recv_timeout(TIMEOUT * 6).expect("the client's end");
        drop(mr);
        conn
    });
    let conn = Connector::new(addr)
        .src(local_ip())
        .options(options())
        .timeout(TIMEOUT)
        .connect()
        .unwrap();
    let remote = region_rx
        .recv_timeout(TIMEOUT)
        .expect("the server's region");
    let mut wcs = CompletionBuf::new(4);
    let mut sends_first = 0;
    for round in 0..ROUNDS {
        let sink = conn.pd().reg_mr(LEN, AccessFlags::LOCAL_WRITE).unwrap();
        let read = conn
            .qp()
            .post_send(
                SendRequest::rdma_read(sink, .., remote)
                    .unwrap()
                    .signaled(true),
            )
            .unwrap();
        let mut note = conn.pd().reg_mr(64, AccessFlags::LOCAL_WRITE).unwrap();
        note.as_mut_slice().fill(round as u8);
        conn.qp()
            .post_send(SendRequest::send(note, ..).unwrap().signaled(true))
            .unwrap();
        let mut sink_back = None;
        let mut completions = Vec::new();
        while completions.len() < 2 {
            let polled = conn.cq().wait_and_poll(&mut wcs, Some(TIMEOUT)).unwrap();
            assert!(
                !polled.is_empty(),
                "round {round}: no completion within {TIMEOUT:?}"
            );
            for wc in &polled {
                wc.status().unwrap_or_else(|e| panic!("round {round}: {e}"));
                completions.push(wc.opcode());
                for mut r in conn.qp().reclaim(wc) {
                    if r.wr_id != read {
                        continue;
                    }
                    assert_eq!(
                        wc.wr_id(),
                        read,
                        "round {round}: the READ's sink came back with another request's \
                         completion ({:?})",
                        wc.opcode()
                    );
                    let sink: MemoryRegion = r.take().expect("the READ's region");
                    assert!(
                        sink_back.is_none(),
                        "round {round}: the sink came back twice"
                    );
                    sink_back = Some(sink);
                }
            }
        }
        if completions.first() == Some(&Some(WcOpcode::Send)) {
            sends_first += 1;
        }
        let sink = sink_back.unwrap_or_else(|| panic!("round {round}: the sink never came back"));
        let bad = sink
            .as_slice()
            .iter()
            .enumerate()
            .filter(|&(i, b)| *b != pattern(i))
            .count();
        assert_eq!(
            bad, 0,
            "round {round}: {bad} of {LEN} bytes not yet written"
        );
    }
    println!("the SEND completed before the READ in {sends_first} of {ROUNDS} rounds");
    done_tx.send(()).unwrap();
    let _server_conn = server.join().unwrap();
}
