//! Interop of `rc-pingpong` with rdma-core's `ibv_rc_pingpong`, in both roles (device tier); the other
//! programs in their modules.
mod devinfo;
mod echo;
mod perftest;
mod rping;

use std::process::{Command, Output};
use std::time::{Duration, Instant};

use testkit::{assert_success, ChildGuard};

const OURS: &str = env!("CARGO_BIN_EXE_rc-pingpong");
const THEIRS: &str = "ibv_rc_pingpong";
const TIMEOUT: Duration = Duration::from_secs(60);

fn cmd(program: &str, port: u16, extra: &[&str], server: Option<&str>) -> Command {
    let dev = testkit::device();
    let mut c = Command::new(program);
    c.args([
        "-d",
        &dev.name,
        "-g",
        &dev.gid_index.to_string(),
        "-p",
        &port.to_string(),
    ]);
    c.args(["-n", "500"]).args(extra);
    if let Some(s) = server {
        c.arg(s);
    }
    c
}

/// Waits until something listens on TCP `port` (read from /proc, so the server's single
/// accept is not consumed by probing).
fn wait_listening(port: u16, server: &mut ChildGuard) {
    let needle = format!(":{port:04X} ");
    let deadline = Instant::now() + TIMEOUT;
    loop {
        let listening = ["/proc/net/tcp", "/proc/net/tcp6"].iter().any(|f| {
            std::fs::read_to_string(f)
                .unwrap_or_default()
                .lines()
                .any(|l| {
                    let cols: Vec<&str> = l.split_whitespace().collect();
                    cols.len() > 3 && format!("{} ", cols[1]).ends_with(&needle) && cols[3] == "0A"
                })
        });
        if listening {
            return;
        }
        if Instant::now() > deadline {
            server.kill();
            panic!("server never listened on port {port}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn text(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Runs `server_prog` as server and `client_prog` as client; both must succeed and print the
/// result lines.
/// Waits until an rdma_cm id listens on `port` (`rdma resource show cm_id`).
pub(crate) fn wait_cm_listening(port: u16, server: &mut ChildGuard) {
    let needle = format!(":{port} ");
    let deadline = Instant::now() + TIMEOUT;
    loop {
        let out = Command::new("rdma")
            .args(["resource", "show", "cm_id"])
            .output()
            .expect("run rdma resource show cm_id");
        let listing = String::from_utf8_lossy(&out.stdout);
        if listing
            .lines()
            .any(|l| l.contains("state LISTEN") && format!("{l} ").contains(&needle))
        {
            return;
        }
        if Instant::now() > deadline {
            server.kill();
            panic!("server never listened with rdma_cm on port {port}:\n{listing}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Whether the device under test is iWARP, whose queue pairs connect only through the
/// RDMA CM (so ibv_rc_pingpong cannot run there, and ours says why).
fn iwarp() -> bool {
    verbs::Context::open(&testkit::device().name)
        .expect("open the test device")
        .transport()
        == verbs::Transport::Iwarp
}

/// On iWARP: our rc-pingpong, in either role, refuses at once, saying why and what to use.
fn ours_refuses_on_iwarp(port: u16) {
    let addr = testkit::device().addr.to_string();
    for server in [None, Some(addr.as_str())] {
        let out = testkit::run_with_timeout(cmd(OURS, port, &[], server), TIMEOUT);
        assert!(!out.status.success(), "{}", text(&out));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("is an iWARP device") && err.contains("RDMA CM") && err.contains("-R"),
            "{err}"
        );
    }
}

fn pair(server_prog: &str, client_prog: &str, port: u16, extra: &[&str]) -> (String, String) {
    let mut server = ChildGuard::spawn(cmd(server_prog, port, extra, None)).expect("start server");
    wait_listening(port, &mut server);
    let addr = testkit::device().addr.to_string();
    let client =
        ChildGuard::spawn(cmd(client_prog, port, extra, Some(&addr))).expect("start client");
    let c = client.wait_output(TIMEOUT);
    let s = server.wait_output(TIMEOUT);
    assert_success(&format!("{client_prog} (client)"), &c);
    assert_success(&format!("{server_prog} (server)"), &s);
    for (who, out) in [("server", &s), ("client", &c)] {
        let t = text(out);
        assert!(
            t.contains("  local address:  LID 0x0000, QPN 0x"),
            "{who}: {t}"
        );
        assert!(
            t.contains("  remote address: LID 0x0000, QPN 0x"),
            "{who}: {t}"
        );
        assert!(
            t.contains(" bytes in ") && t.contains(" Mbit/sec"),
            "{who}: {t}"
        );
        assert!(
            t.contains("500 iters in ") && t.contains(" usec/iter"),
            "{who}: {t}"
        );
        println!("--- {who} ---\n{t}");
    }
    (text(&s), text(&c))
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn our_server_with_ibv_rc_pingpong_client() {
    if iwarp() {
        return ours_refuses_on_iwarp(18_601);
    }
    pair(OURS, THEIRS, 18_601, &[]);
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn ibv_rc_pingpong_server_with_our_client() {
    if iwarp() {
        return ours_refuses_on_iwarp(18_602);
    }
    pair(THEIRS, OURS, 18_602, &[]);
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn ours_with_ours_in_event_mode_and_small_messages() {
    if iwarp() {
        return ours_refuses_on_iwarp(18_603);
    }
    pair(OURS, OURS, 18_603, &["-e", "-s", "64", "-r", "100"]);
    pair(OURS, THEIRS, 18_604, &["-e", "-s", "64", "-m", "512"]);
}
