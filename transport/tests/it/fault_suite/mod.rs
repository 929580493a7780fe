//! The fault suite: traffic between the two hosts with every byte verified while something
//! goes wrong, each scenario recording its figures (bytes sent, received, lost and corrupted,
//! time to detect, whether the survivor kept serving, how much the devices' port counters
//! grew: [`DeviceCounters`]). With `TRANSPORT_FAULTS_REPORT` naming a directory, each scenario
//! writes them there as `<scenario>.json`; `cargo xtask faults` collects them into one report.
//!
//! - [`netem`]: packet loss, delay with jitter, reordering, duplication and corruption on both
//!   ends of the veth pair (`tc qdisc ... netem`).
//! - [`kill`]: the peer process SIGKILLed mid-transfer, as server and as client.
//! - [`link`]: the link blackholed for 1 s and for longer than the keepalive bound.
//! - [`keys`]: one-sided access with bad keys (an rkey naming nothing, a token forged past
//!   the exposed bytes, a read of a write-only region, a revoked key), refused by the device.
//! - [`malformed`]: a peer on raw verbs, admitted by the handshake, sends garbage and broken
//!   frames; each such connection ends with the protocol error while others keep serving.
//! - [`exhaustion`]: the data pool exhausted, the send queue full, a peer that stops reading:
//!   backpressure or typed errors, then every byte delivered once.
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Instant;

use transport::{Conn, Endpoint, Listener};

use crate::support::*;

mod exhaustion;
mod keys;
mod kill;
mod link;
mod malformed;
mod netem;

/// What one run of traffic moved and how it arrived.
#[derive(Debug, Default, Clone, Copy)]
pub struct Tally {
    pub sent: u64,
    pub received: u64,
    pub corrupted: u64,
    pub secs: f64,
}

impl Tally {
    pub fn lost(&self) -> u64 {
        self.sent - self.received - self.corrupted
    }

    pub fn goodput(&self) -> f64 {
        self.received as f64 / self.secs
    }
}

/// The payload of message `seq`: its sequence number, then a pattern of it.
pub fn payload(seq: u64, len: usize) -> Vec<u8> {
    let mut v = pattern(seq, len.max(8));
    v[..8].copy_from_slice(&seq.to_le_bytes());
    v
}

/// Whether the device under test is iWARP: a WRITE completes once sent, and the peer's
/// device refuses a bad access by ending the connection (a TERMINATE) instead of answering
/// the request with an error.
pub fn iwarp() -> bool {
    verbs::Context::open(&testkit::device().name)
        .expect("open the test device")
        .transport()
        == verbs::Transport::Iwarp
}

/// The network device under an RDMA device (its end of the veth pair).
pub fn netdev(dev: &testkit::TestDevice) -> String {
    dev.netdev()
}

pub fn both_netdevs() -> [String; 2] {
    [netdev(&testkit::device()), netdev(&testkit::peer().device)]
}

pub fn run(program: &str, args: &[&str]) {
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
pub struct Netem([String; 2]);

impl Netem {
    pub fn new(spec: &str) -> Netem {
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

/// The port counters of both hosts' devices (port 1), read at one moment: a scenario reads
/// them when it starts, and its figures report how much each grew.
pub struct DeviceCounters(Vec<verbs::PortCounters>);

impl DeviceCounters {
    pub fn read() -> DeviceCounters {
        let devices = [testkit::device().name, testkit::peer().device.name];
        DeviceCounters(
            devices
                .iter()
                .map(|dev| {
                    verbs::Context::open(dev)
                        .and_then(|ctx| ctx.port_counters(1))
                        .unwrap_or_else(|e| panic!("counters of {dev}: {e}"))
                })
                .collect(),
        )
    }

    /// How much each counter grew since `before`, per port: `{"rxe0/1": {"sent_pkts": 812,
    /// ...}, ...}` (`hw_counters` and `counters` alike: on rxe and siw no name is in both).
    /// The kernel keeps what it read for sysfs for a moment (`lifespan`), so this waits that
    /// out first.
    pub fn grown_since(before: &DeviceCounters) -> serde_json::Value {
        let wait = before.0.iter().filter_map(|c| c.lifespan()).max();
        std::thread::sleep(wait.unwrap_or_default() * 2);
        let now = DeviceCounters::read();
        let ports = now.0.iter().zip(&before.0).map(|(now, before)| {
            let grew = now.since(before);
            let counters = grew.iter().map(|c| (c.name.to_owned(), c.value.into()));
            (
                format!("{}/{}", grew.device(), grew.port()),
                serde_json::Value::Object(counters.collect()),
            )
        });
        serde_json::Value::Object(ports.collect())
    }

    /// Whether the devices show any counters (siw shows none).
    pub fn is_empty(&self) -> bool {
        self.0.iter().all(|c| c.is_empty())
    }
}

/// The sum over both ports of the named counters in what [`DeviceCounters::grown_since`]
/// gives.
pub fn grown_total(grown: &serde_json::Value, names: &[&str]) -> u64 {
    let ports = grown.as_object().into_iter().flat_map(|m| m.values());
    ports
        .flat_map(|port| names.iter().filter_map(|n| port[*n].as_u64()))
        .sum()
}

/// One scenario's figures, as the report has them.
pub struct Figures {
    pub name: &'static str,
    pub traffic: &'static str,
    pub tally: Tally,
    /// From the fault to the first typed error, for scenarios that end a connection.
    pub detect_ms: Option<f64>,
    /// Whether a connection made after the fault (or one that lived through it) still works.
    pub kept_serving: bool,
    pub goodput_vs_clean: Option<f64>,
    /// What else the scenario checked (it passes only if this holds too), and its own figures.
    pub checks: Vec<(&'static str, bool)>,
    pub extra: serde_json::Value,
    /// Why the scenario could not be judged on this device (it lacks what the scenario
    /// needs): recorded, counted as skipped, never as passed.
    pub skipped: Option<String>,
    /// The devices' counters when the scenario started: the record has how much each grew
    /// (`device_counters`).
    pub counters_before: Option<DeviceCounters>,
}

impl Figures {
    /// The figures of scenario `name`, which must be listed in `scenarios.txt` (the list
    /// `cargo xtask faults` reports from).
    pub fn new(name: &'static str, traffic: &'static str, tally: Tally) -> Figures {
        assert!(
            include_str!("scenarios.txt").lines().any(|l| l == name),
            "fault scenario {name:?} is not listed in tests/it/fault_suite/scenarios.txt"
        );
        Figures {
            name,
            traffic,
            tally,
            detect_ms: None,
            kept_serving: false,
            goodput_vs_clean: None,
            checks: Vec::new(),
            extra: serde_json::Value::Null,
            skipped: None,
            counters_before: None,
        }
    }

    pub fn pass(&self) -> bool {
        self.tally.lost() == 0
            && self.tally.corrupted == 0
            && self.kept_serving
            && self.checks.iter().all(|(_, ok)| *ok)
    }

    /// Writes the figures for the report (when asked for) and asserts the scenario passed.
    pub fn record(self) {
        let t = self.tally;
        let mut json = serde_json::json!({
            "device": format!("{},{}", testkit::device().name, testkit::peer().device.name),
            "name": self.name,
            "traffic": self.traffic,
            "bytes_sent": t.sent,
            "bytes_received": t.received,
            "bytes_lost": t.lost(),
            "bytes_corrupted": t.corrupted,
            "detect_ms": self.detect_ms,
            "kept_serving": self.kept_serving,
            "goodput_vs_clean": self.goodput_vs_clean,
            "checks": self.checks.iter().map(|(what, ok)| serde_json::json!({"check": what, "ok": ok})).collect::<Vec<_>>(),
            "pass": self.pass(),
        });
        if let Some(before) = &self.counters_before {
            json["device_counters"] = DeviceCounters::grown_since(before);
        }
        if let serde_json::Value::Object(extra) = &self.extra {
            for (k, v) in extra {
                json[k] = v.clone();
            }
        }
        if let Some(why) = &self.skipped {
            json["skipped"] = why.clone().into();
            json["pass"] = true.into();
            testkit::skip(self.name, why);
        }
        eprintln!("fault scenario: {json}");
        if let Some(dir) = std::env::var_os("TRANSPORT_FAULTS_REPORT") {
            let dir = std::path::PathBuf::from(dir);
            std::fs::create_dir_all(&dir).expect("report directory");
            let file = dir.join(format!("{}.json", file_name(self.name)));
            std::fs::write(&file, json.to_string()).expect("write the figures");
        }
        assert!(
            self.skipped.is_some() || self.pass(),
            "{}: {json}",
            self.name
        );
    }
}

/// The file a scenario's figures go to, without the extension (`cargo xtask faults` reads it
/// by the same rule).
pub fn file_name(scenario: &str) -> String {
    scenario.replace([' ', '/'], "_")
}

/// Whether a new connection carries a message both ways.
pub fn echo_once() -> bool {
    let (server, client) = pair();
    let data = pattern(99, 3000);
    client.send(&data).is_ok()
        && server
            .recv(TIMEOUT)
            .is_ok_and(|m| m.to_vec() == data && server.send(&m.to_vec()).is_ok())
        && client.recv(TIMEOUT).is_ok_and(|m| m.to_vec() == data)
}

/// Message sizes of the bystanders' and the afterwards traffic, cycled: eager, a full frame,
/// rendezvous.
pub const SIZES: [usize; 3] = [64, 4000, 64 << 10];

/// Verified messages one way on a connection, on a thread of their own until told to stop
/// (and at least a few, whatever the fault's timing).
pub struct Bystander {
    stop: Arc<AtomicBool>,
    delivered: Arc<AtomicU64>,
    thread: JoinHandle<(Tally, u64)>,
}

impl Bystander {
    pub fn start(server: Conn, client: Conn) -> Bystander {
        let stop = Arc::new(AtomicBool::new(false));
        let delivered = Arc::new(AtomicU64::new(0));
        let (flag, progress) = (stop.clone(), delivered.clone());
        let thread = std::thread::spawn(move || {
            let started = Instant::now();
            let mut t = Tally::default();
            let mut seq = 0u64;
            while !flag.load(Ordering::Acquire) || seq < 6 {
                let len = SIZES[seq as usize % SIZES.len()];
                let data = payload(seq, len);
                t.sent += len as u64;
                if client.send_timeout(&data, TIMEOUT).is_err() {
                    break;
                }
                match server.recv(TIMEOUT) {
                    Ok(m) if m.to_vec() == data => t.received += len as u64,
                    Ok(m) => t.corrupted += (m.len() as u64).min(len as u64),
                    Err(_) => break,
                }
                seq += 1;
                progress.store(seq, Ordering::Release);
            }
            t.secs = started.elapsed().as_secs_f64();
            (t, seq)
        });
        Bystander {
            stop,
            delivered,
            thread,
        }
    }

    /// Messages delivered intact so far.
    pub fn delivered(&self) -> u64 {
        self.delivered.load(Ordering::Acquire)
    }

    /// Waits (bounded by `TIMEOUT`) until `n` more messages are delivered; panics if the
    /// traffic stalls or ends.
    pub fn wait_for(&self, n: u64) {
        let target = self.delivered() + n;
        let deadline = Instant::now() + TIMEOUT;
        while self.delivered() < target {
            assert!(!self.thread.is_finished(), "bystander traffic ended");
            assert!(Instant::now() < deadline, "bystander traffic stalled");
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    }

    /// Stops the traffic: what it moved, and how many messages.
    pub fn finish(self) -> (Tally, u64) {
        self.stop.store(true, Ordering::Release);
        self.thread.join().expect("bystander thread")
    }
}

/// Accepts one connection on `listener` from a new endpoint of this host: (server side,
/// client side).
pub fn connect(listener: &Listener) -> (Conn, Conn) {
    let client = Endpoint::with_config(local_ip(), config()).expect("client endpoint");
    let addr = addr_of(listener);
    let c = std::thread::spawn(move || client.connect(addr).expect("connect"));
    let s = listener.accept_timeout(TIMEOUT).expect("accept");
    (s, c.join().expect("connect thread"))
}

/// Six messages (each size twice) from the client, each echoed back by the server and
/// checked both ways.
pub fn echo_traffic(server: &Conn, client: &Conn, seed: u64) -> Tally {
    let started = Instant::now();
    let mut t = Tally::default();
    for seq in 0..SIZES.len() as u64 * 2 {
        let len = SIZES[seq as usize % SIZES.len()];
        let data = payload(seed | seq, len);
        t.sent += 2 * len as u64;
        let ok = client.send_timeout(&data, TIMEOUT).is_ok()
            && server.recv(TIMEOUT).is_ok_and(|m| {
                m.to_vec() == data && server.send_timeout(&m.to_vec(), TIMEOUT).is_ok()
            })
            && client.recv(TIMEOUT).is_ok_and(|m| m.to_vec() == data);
        if ok {
            t.received += 2 * len as u64;
        } else {
            break;
        }
    }
    t.secs = started.elapsed().as_secs_f64();
    t
}
