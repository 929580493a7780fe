//! The network misbehaves: messages and RPC calls between the two hosts while netem drops,
//! delays, reorders, duplicates or corrupts packets on both ends of the veth pair. Each scenario
//! asserts nothing was lost or corrupted and that a new connection works after it.
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use transport::Conn;

use super::*;

/// Message sizes, cycled: eager, a full frame, and rendezvous. Every lost packet costs the
/// device a retransmission timeout, so the volume is kept small (about 1.5 MB).
const SIZES: [usize; 3] = [64, 4000, 64 << 10];
const MESSAGES: u64 = 60;
const CALLS: u64 = 40;
const CALL_LEN: usize = 1000;
/// Bound of every wait under faults: retransmissions make everything slower.
const FAULT_TIMEOUT: Duration = Duration::from_secs(120);

/// `MESSAGES` messages one way, checked in order by the server, then `CALLS` calls whose
/// echoed responses the client checks. Returns the tally and the connections.
fn traffic(server: Conn, client: Conn) -> (Tally, Conn, Conn) {
    let started = Instant::now();
    let receiver = std::thread::spawn(move || {
        let (mut received, mut corrupted) = (0, 0);
        for seq in 0..MESSAGES {
            let len = SIZES[seq as usize % SIZES.len()];
            let Ok(m) = server.recv(FAULT_TIMEOUT) else {
                break;
            };
            if m.to_vec() == payload(seq, len) {
                received += len as u64;
            } else {
                corrupted += m.len() as u64;
            }
        }
        for _ in 0..CALLS {
            let Ok(req) = server.recv_request(FAULT_TIMEOUT) else {
                break;
            };
            let echo = req.message().to_vec();
            if req.respond(&echo).is_err() {
                break;
            }
        }
        (received, corrupted, server)
    });
    let mut t = Tally::default();
    for seq in 0..MESSAGES {
        let len = SIZES[seq as usize % SIZES.len()];
        t.sent += len as u64;
        client
            .send_timeout(&payload(seq, len), FAULT_TIMEOUT)
            .unwrap_or_else(|e| panic!("send {seq}: {e}"));
    }
    for i in 0..CALLS {
        let req = payload(1 << 40 | i, CALL_LEN);
        t.sent += 2 * CALL_LEN as u64;
        match client.call(&req, FAULT_TIMEOUT) {
            Ok(resp) if resp.to_vec() == req => t.received += 2 * CALL_LEN as u64,
            Ok(resp) => t.corrupted += CALL_LEN as u64 + resp.len() as u64,
            Err(e) => panic!("call {i}: {e}"),
        }
    }
    let (received, corrupted, server) = receiver.join().expect("receiver");
    t.received += received;
    t.corrupted += corrupted;
    t.secs = started.elapsed().as_secs_f64();
    (t, server, client)
}

/// Goodput of the traffic on a clean network, measured once per process.
fn clean_goodput() -> f64 {
    static CLEAN: OnceLock<f64> = OnceLock::new();
    *CLEAN.get_or_init(|| {
        let (server, client) = pair();
        let (t, _s, _c) = traffic(server, client);
        assert_eq!((t.lost(), t.corrupted), (0, 0), "clean run: {t:?}");
        t.goodput()
    })
}

/// Traffic under a netem discipline; then, with it removed, a new connection still works.
fn under_netem(name: &'static str, spec: &str) {
    let clean = clean_goodput();
    let (server, client) = pair();
    let (tally, ..) = {
        let _netem = Netem::new(spec);
        traffic(server, client)
    };
    let kept_serving = echo_once();
    let mut figures = Figures::new(name, "messages 64 B-64 KiB + RPC 1000 B", tally);
    figures.kept_serving = kept_serving;
    figures.goodput_vs_clean = Some(tally.goodput() / clean);
    figures.record();
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn loss_1_percent_loses_nothing() {
    under_netem("loss 1%", "loss 1%");
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn loss_5_percent_loses_nothing() {
    under_netem("loss 5%", "loss 5%");
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn delay_with_jitter_loses_nothing() {
    under_netem("delay 5 ms jitter 2 ms", "delay 5ms 2ms");
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn reordering_loses_nothing() {
    under_netem("reorder 25%", "delay 2ms reorder 25% 50%");
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn duplication_loses_nothing() {
    under_netem("duplicate 5%", "duplicate 5%");
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn corruption_loses_nothing() {
    under_netem("corrupt 1%", "corrupt 1%");
}
