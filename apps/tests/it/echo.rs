//! `echo-server` on the peer host and `echo-client` here, in each polling mode (device tier):
//! every byte verified by the client, its summary checked; bad input ends the client with a
//! one-line cause.
use std::io::{BufRead, BufReader};
use std::process::Command;
use std::time::Duration;

use testkit::{assert_success, run_with_timeout, ChildGuard};

const SERVER: &str = env!("CARGO_BIN_EXE_echo-server");
const CLIENT: &str = env!("CARGO_BIN_EXE_echo-client");
const TIMEOUT: Duration = Duration::from_secs(120);

/// Starts `echo-server` on the peer host, listening on every RDMA address (`0.0.0.0`) at
/// `port`, polling as `polling`, reads busy-polling for `busy_read` microseconds, once it
/// says it listens.
fn server(port: u16, polling: &str, busy_read: &str) -> ChildGuard {
    let peer = testkit::peer();
    let mut cmd = peer.command(SERVER);
    cmd.arg(format!("0.0.0.0:{port}"))
        .args(["--polling", polling, "--busy-read", busy_read]);
    let mut child = ChildGuard::spawn(cmd).expect("start echo-server");
    let out = child.take_stdout().expect("server stdout");
    // Read on a thread of its own so the wait is bounded (a server that never speaks is
    // killed when `child` drops, which ends the read).
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = BufReader::new(out).read_line(&mut line);
        let _ = tx.send(line);
    });
    let line = rx
        .recv_timeout(TIMEOUT)
        .expect("echo-server said nothing within the bound");
    assert!(
        line.starts_with("listening on"),
        "echo-server said {line:?}"
    );
    child
}

fn client(port: u16, args: &[&str]) -> Command {
    let mut cmd = Command::new(CLIENT);
    cmd.arg(format!("{}:{port}", testkit::peer().device.addr))
        .args(["--src", &testkit::device().addr.to_string()])
        .args(args);
    cmd
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn echo_client_and_server_verify_every_byte_in_each_polling_mode() {
    // Each polling mode on one side of a pair, the server's and the client's different: six
    // modes in three pairs (every process start costs seconds under emulation).
    let pairs = [
        (("adaptive", "0"), ("busy", "0")),
        (("event", "0"), ("reactor", "0")),
        (("reactor:1000", "1000"), ("reactor:1000", "0")),
    ];
    for (i, ((s_polling, s_busy_read), (polling, busy_read))) in pairs.into_iter().enumerate() {
        let port = 7_710 + i as u16;
        let _server = server(port, s_polling, s_busy_read);
        let out = run_with_timeout(
            client(
                port,
                &[
                    "--size",
                    "5000",
                    "--count",
                    "50",
                    "--concurrency",
                    "4",
                    "--polling",
                    polling,
                    "--busy-read",
                    busy_read,
                ],
            ),
            TIMEOUT,
        );
        let what = format!(
            "echo-client --polling {polling} --busy-read {busy_read} with echo-server \
             --polling {s_polling} --busy-read {s_busy_read}"
        );
        assert_success(&what, &out);
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            text.contains("200 round trips of 5000 bytes on 4 connections: min "),
            "{what}: {text}"
        );
        println!("{what}: {text}");
    }
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn echo_client_where_nobody_listens_fails_with_the_cause() {
    let out = run_with_timeout(client(7_729, &["--count", "1"]), TIMEOUT);
    assert!(!out.status.success(), "a client with no server succeeded");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("nothing listens on that port"), "{err}");
}

#[test]
fn an_unknown_polling_mode_is_refused_with_the_choices() {
    // Refused while parsing the options: no device needed.
    let mut cmd = Command::new(CLIENT);
    cmd.args(["192.0.2.1:7730", "--polling", "spinning"]);
    let out = run_with_timeout(cmd, Duration::from_secs(30));
    assert_eq!(out.status.code(), Some(2), "clap's usage error");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("unknown polling mode 'spinning'") && err.contains("reactor[:SPIN_US]"),
        "{err}"
    );
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn echo_client_reports_its_statistics_and_device_counters_and_traces_its_connection() {
    let port = 7_731;
    let _server = server(port, "adaptive", "0");
    let mut cmd = client(
        port,
        &["--size", "4096", "--count", "200", "--stats", "0.05"],
    );
    cmd.env("RUST_LOG", "transport=debug");
    let out = run_with_timeout(cmd, TIMEOUT);
    assert_success("echo-client --stats 0.05", &out);
    let text = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = text.lines().filter(|l| l.starts_with("stats ")).collect();
    // The end's line is the endpoint's after every echo came back: each byte counted once
    // each way; the reports (a last one may still come after it, from the reporter's task)
    // count the device's packets beside.
    let last = lines
        .iter()
        .find(|l| l.starts_with("stats at the end: "))
        .unwrap_or_else(|| panic!("no statistics at the end: {text}"));
    let bytes = 200 * 4096;
    assert!(
        last.contains(&format!("msgs {bytes} B, in "))
            && last.contains(&format!("msgs {bytes} B, calls")),
        "{bytes} bytes each way: {last}"
    );
    assert!(last.contains("(1 opened"), "{last}");
    let device = &testkit::device().name;
    assert!(
        lines.iter().any(|l| l.contains(&format!("| {device}/1:"))),
        "a report with the device's counters: {text}"
    );
    let ctx = verbs::Context::open(device).expect("the test device");
    let has_packet_counter = ctx
        .port_counters(1)
        .expect("port 1's counters")
        .get("sent_pkts")
        .is_some();
    if has_packet_counter {
        assert!(
            lines.iter().any(|l| l.contains(" sent_pkts +")),
            "the device's packets moved in some report: {text}"
        );
    }
    // RUST_LOG turned on the transport's events: the connection's span and its life.
    let err = String::from_utf8_lossy(&out.stderr);
    for what in ["connecting", "established", "conn{qp="] {
        assert!(err.contains(what), "no {what:?} in the trace: {err}");
    }
    println!("{text}\n{err}");
}
