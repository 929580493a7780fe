//! Two-host sanity runs of rdma-core's own programs between this host's device and the peer's:
//! `ibv_rc_pingpong` (verbs, RC QP) and `rping` (rdma_cm). Real programs on a real device prove
//! the device, the addresses and the GID indexes that `cargo xtask test` hands to tests.
use std::process::{Command, Output};
use std::thread::sleep;
use std::time::{Duration, Instant};

use testkit::{assert_success, device, peer, run_with_timeout, ChildGuard};

const LIMIT: Duration = Duration::from_secs(60);

/// Runs the client until it connects: the server needs a moment to start listening.
fn client_until_connected(make: impl Fn() -> Command, not_yet: impl Fn(&Output) -> bool) -> Output {
    let deadline = Instant::now() + Duration::from_secs(10);
    sleep(Duration::from_millis(500));
    loop {
        let out = run_with_timeout(make(), LIMIT);
        if out.status.success() || !not_yet(&out) || Instant::now() >= deadline {
            return out;
        }
        sleep(Duration::from_millis(500));
    }
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn ibv_rc_pingpong_between_hosts() {
    let (me, peer) = (device(), peer());
    // ibv_rc_pingpong connects its queue pair by hand: an iWARP device (node type RNIC, as
    // the kernel reports it) connects them only through the RDMA CM.
    let node_type = std::fs::read_to_string(format!("/sys/class/infiniband/{}/node_type", me.name))
        .unwrap_or_default();
    if node_type.trim().starts_with("4:") {
        testkit::skip(
            testkit::test_name!(),
            &format!(
                "{} is an iWARP device ({}): it has no manually connected queue pairs",
                me.name,
                node_type.trim()
            ),
        );
        return;
    }
    let mut server = peer.command("ibv_rc_pingpong");
    server.args([
        "-d",
        &peer.device.name,
        "-g",
        &peer.device.gid_index.to_string(),
    ]);
    let server = ChildGuard::spawn(server).expect("start ibv_rc_pingpong server");
    let client = client_until_connected(
        || {
            let mut c = Command::new("ibv_rc_pingpong");
            c.args(["-d", &me.name, "-g", &me.gid_index.to_string()])
                .arg(peer.device.addr.to_string());
            c
        },
        |out| text(out).contains("Couldn't connect"),
    );
    let server = server.wait_output(LIMIT);
    assert_success("ibv_rc_pingpong client", &client);
    assert_success("ibv_rc_pingpong server", &server);
    for (side, out) in [("client", &client), ("server", &server)] {
        let t = text(out);
        assert!(
            t.contains("1000 iters in"),
            "{side} did not report 1000 iterations:\n{t}"
        );
        println!(
            "{side}: {}",
            t.lines()
                .filter(|l| l.contains(" in "))
                .collect::<Vec<_>>()
                .join(" | ")
        );
    }
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn rping_between_hosts() {
    let (me, peer) = (device(), peer());
    let peer_addr = peer.device.addr.to_string();
    let mut server = peer.command("rping");
    server.args(["-s", "-a", &peer_addr, "-C", "10", "-v"]);
    let server = ChildGuard::spawn(server).expect("start rping server");
    // -I binds the client to this host's address, hence to this host's device.
    let client = client_until_connected(
        || {
            let mut c = Command::new("rping");
            c.args([
                "-c",
                "-I",
                &me.addr.to_string(),
                "-a",
                &peer_addr,
                "-C",
                "10",
                "-v",
            ]);
            c
        },
        |out| !text(out).contains("ping data:"),
    );
    let server = server.wait_output(LIMIT);
    assert_success("rping client", &client);
    assert_success("rping server", &server);
    let pings = |out: &Output| {
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| l.starts_with("ping data:"))
            .count()
    };
    let server_pings = String::from_utf8_lossy(&server.stdout)
        .lines()
        .filter(|l| l.starts_with("server ping data:"))
        .count();
    assert_eq!(pings(&client), 10, "client:\n{}", text(&client));
    assert_eq!(server_pings, 10, "server:\n{}", text(&server));
    println!(
        "rping: 10 pings each way between {} and {}",
        me.name, peer.device.name
    );
}
