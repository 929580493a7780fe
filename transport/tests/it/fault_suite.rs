//! The fault suite: messages and RPC calls between the two hosts, every byte verified, while
//! the network between them misbehaves: packet loss, delay with jitter, reordering,
//! duplication and corruption on both ends of the veth pair (`tc qdisc ... netem`).
//!
//! Each scenario asserts nothing was lost or corrupted and that a new connection works after
//! it, and records its figures; with `TRANSPORT_FAULTS_REPORT` naming a directory, it writes them
//! there as `<scenario>.json` (`cargo xtask faults` collects them into one report).
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use transport::Conn;

use crate::support::*;

/// Message sizes, cycled: eager, a full frame, and rendezvous. Every lost packet costs the
/// device a retransmission timeout, so the volume is kept small (about 1.5 MB).
const SIZES: [usize; 3] = [64, 4000, 64 << 10];
const MESSAGES: u64 = 60;
const CALLS: u64 = 40;
const CALL_LEN: usize = 1000;
/// Bound of every wait under faults: retransmissions make everything slower.
const FAULT_TIMEOUT: Duration = Duration::from_secs(120);

/// What one run of traffic moved and how it arrived.
#[derive(Debug, Default, Clone, Copy)]
struct Tally {
    sent: u64,
    received: u64,
    corrupted: u64,
    secs: f64,
}

impl Tally {
    fn lost(&self) -> u64 {
        self.sent - self.received - self.corrupted
    }

    fn goodput(&self) -> f64 {
        self.received as f64 / self.secs
    }
}

/// The payload of message `seq`: its sequence number, then a pattern of it.
fn payload(seq: u64, len: usize) -> Vec<u8> {
    let mut v = pattern(seq, len.max(8));
    v[..8].copy_from_slice(&seq.to_le_bytes());
    v
}

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

/// The network device under an RDMA device's GID (its end of the veth pair).
fn netdev(dev: &testkit::TestDevice) -> String {
    let path = format!(
        "/sys/class/infiniband/{}/ports/1/gid_attrs/ndevs/{}",
        dev.name, dev.gid_index
    );
    std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{path}: {e}"))
        .trim()
        .to_owned()
}

fn both_netdevs() -> [String; 2] {
    [netdev(&testkit::device()), netdev(&testkit::peer().device)]
}

fn run(program: &str, args: &[&str]) {
    let out = Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{program}: {e}"));
    assert!(
        out.status.success(),
        "{program} {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A netem discipline on both ends of the link while alive.
struct Netem([String; 2]);

impl Netem {
    fn new(spec: &str) -> Netem {
        let devs = both_netdevs();
        for d in &devs {
            let mut args = vec!["qdisc", "replace", "dev", d, "root", "netem"];
            args.extend(spec.split_whitespace());
            run("tc", &args);
        }
        Netem(devs)
    }
}

impl Drop for Netem {
    fn drop(&mut self) {
        for d in &self.0 {
            let _ = Command::new("tc")
                .args(["qdisc", "del", "dev", d, "root"])
                .status();
        }
    }
}

/// One scenario's figures, as the report has them.
struct Figures {
    name: &'static str,
    traffic: &'static str,
    tally: Tally,
    kept_serving: bool,
    goodput_vs_clean: f64,
}

impl Figures {
    fn pass(&self) -> bool {
        self.tally.lost() == 0 && self.tally.corrupted == 0 && self.kept_serving
    }

    /// Writes the figures for the report (when asked for) and asserts the scenario passed.
    fn record(self) {
        let t = self.tally;
        let json = serde_json::json!({
            "device": format!("{},{}", testkit::device().name, testkit::peer().device.name),
            "name": self.name,
            "traffic": self.traffic,
            "bytes_sent": t.sent,
            "bytes_received": t.received,
            "bytes_lost": t.lost(),
            "bytes_corrupted": t.corrupted,
            // No scenario here ends a connection, so there is nothing to detect.
            "detect_ms": null,
            "kept_serving": self.kept_serving,
            "goodput_vs_clean": self.goodput_vs_clean,
            "pass": self.pass(),
        });
        eprintln!("fault scenario: {json}");
        if let Some(dir) = std::env::var_os("TRANSPORT_FAULTS_REPORT") {
            let dir = std::path::PathBuf::from(dir);
            std::fs::create_dir_all(&dir).expect("report directory");
            let file = dir.join(format!("{}.json", self.name.replace(' ', "_")));
            std::fs::write(&file, json.to_string()).expect("write the figures");
        }
        assert!(self.pass(), "{}: {json}", self.name);
    }
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
    Figures {
        name,
        traffic: "messages 64 B-64 KiB + RPC 1000 B",
        tally,
        kept_serving,
        goodput_vs_clean: tally.goodput() / clean,
    }
    .record();
}

/// Whether a new connection carries a message both ways.
fn echo_once() -> bool {
    let (server, client) = pair();
    let data = pattern(99, 3000);
    client.send(&data).is_ok()
        && server
            .recv(TIMEOUT)
            .is_ok_and(|m| m.to_vec() == data && server.send(&m.to_vec()).is_ok())
        && client.recv(TIMEOUT).is_ok_and(|m| m.to_vec() == data)
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
