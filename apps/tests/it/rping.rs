//! Interop of our `rping` with rdma-core's `rping`, in both roles, server on the peer host
//! (device tier).
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use testkit::{assert_success, ChildGuard};

const OURS: &str = env!("CARGO_BIN_EXE_rping");
const THEIRS: &str = "rping";
const TIMEOUT: Duration = Duration::from_secs(60);

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn all(out: &Output) -> String {
    format!("{}{}", stdout(out), String::from_utf8_lossy(&out.stderr))
}

/// Runs `server` (on the peer host) and `client` (here) for `count` pings of `size` bytes;
/// both must succeed and print every ping's data. Output goes to pipes read only at the end,
/// so keep `count * size` well under the pipe buffer (64 KiB).
fn pair(server: &str, client: &str, port: u16, count: u32, size: usize) {
    pair_after(server, client, port, count, size, || {});
}

/// [`pair`], running `before_client` once the server is started, right before the first
/// client.
fn pair_after(
    server: &str,
    client: &str,
    port: u16,
    count: u32,
    size: usize,
    before_client: impl FnOnce(),
) {
    let peer = testkit::peer();
    let peer_addr = peer.device.addr.to_string();
    let port = port.to_string();
    let mut s = peer.command(server);
    // rdma-core's server reads into a buffer of its own -S size: give both sides the size.
    s.args([
        "-s",
        "-a",
        &peer_addr,
        "-p",
        &port,
        "-v",
        "-S",
        &size.to_string(),
    ]);
    let mut server_child = ChildGuard::spawn(s).expect("start server");
    // rdma-core's rping client does not exit when an iWARP connect is refused (the TCP
    // port not open yet): connect once the server listens.
    super::wait_cm_listening(port.parse().expect("a port"), &mut server_child);

    before_client();
    // The server may not be listening yet: a rejected client is retried.
    let deadline = Instant::now() + TIMEOUT;
    let started = Instant::now();
    let out = loop {
        let mut c = Command::new(client);
        c.args(["-c", "-a", &peer_addr, "-p", &port, "-v", "-V"]);
        c.args(["-I", &testkit::device().addr.to_string()]);
        c.args(["-C", &count.to_string(), "-S", &size.to_string()]);
        let out = ChildGuard::spawn(c)
            .expect("start client")
            .wait_output(TIMEOUT);
        let text = all(&out).to_lowercase();
        if !out.status.success() && text.contains("reject") && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(200));
            continue;
        }
        break out;
    };
    let elapsed = started.elapsed();
    assert_success(&format!("{client} -c"), &out);
    let s = server_child.wait_output(TIMEOUT);
    assert_success(&format!("{server} -s"), &s);

    let c_text = stdout(&out);
    let s_text = stdout(&s);
    for ping in 0..count {
        let line = format!("ping data: rdma-ping-{ping}: ");
        assert!(c_text.contains(&line), "client lacks {line:?}:\n{c_text}");
        assert!(
            s_text.contains(&format!("server {line}")),
            "server lacks {line:?}:\n{s_text}"
        );
    }
    let first = c_text.lines().next().unwrap_or_default();
    assert_eq!(first.len(), "ping data: ".len() + size - 1, "{first:?}");
    println!("{server} -s / {client} -c: {count} pings of {size} bytes in {elapsed:?}");
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn our_rping_server_with_rdma_core_client() {
    pair(OURS, THEIRS, 7_301, 10, 64);
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn rdma_core_rping_server_with_our_client() {
    pair(THEIRS, OURS, 7_302, 10, 64);
}

/// Forgets every neighbour (ARP) entry of this host and of the peer's host.
fn flush_neighbours() {
    for mut c in [Command::new("ip"), testkit::peer().command("ip")] {
        c.args(["neigh", "flush", "all"]);
        assert_success("ip neigh flush all", &testkit::run_with_timeout(c, TIMEOUT));
    }
}

/// The first connection to a host whose neighbour entry is not cached: our client resolves
/// in short attempts as rdma-core's does, instead of waiting out its whole timeout for an
/// answer that came in milliseconds; and our server serves rdma-core's client in that case.
#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn first_ping_after_a_neighbour_flush_in_both_roles() {
    pair_after(THEIRS, OURS, 7_307, 3, 64, flush_neighbours);
    pair_after(OURS, THEIRS, 7_308, 3, 64, flush_neighbours);
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn our_rping_both_sides_large_pings() {
    pair(OURS, OURS, 7_303, 12, 4000);
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn multi_packet_pings_with_rdma_core_in_both_roles() {
    pair(OURS, THEIRS, 7_304, 10, 3000);
    pair(THEIRS, OURS, 7_305, 10, 3000);
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn our_persistent_server_serves_concurrent_clients_of_both_kinds() {
    let peer = testkit::peer();
    let peer_addr = peer.device.addr.to_string();
    let port = "7306";
    let mut s = peer.command(OURS);
    s.args(["-s", "-P", "-a", &peer_addr, "-p", port]);
    let mut server = ChildGuard::spawn(s).expect("start server");
    let client = |prog: &str| {
        let mut c = Command::new(prog);
        c.args(["-c", "-a", &peer_addr, "-p", port, "-v", "-V", "-C", "20"]);
        c.args(["-I", &testkit::device().addr.to_string()]);
        c
    };
    // Wait until it serves one client, then run several at once.
    let deadline = Instant::now() + TIMEOUT;
    loop {
        let out = ChildGuard::spawn(client(OURS))
            .unwrap()
            .wait_output(TIMEOUT);
        if out.status.success() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "server never served: {}",
            all(&out)
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let clients: Vec<_> = [OURS, THEIRS, OURS, THEIRS]
        .iter()
        .map(|p| (p.to_string(), ChildGuard::spawn(client(p)).unwrap()))
        .collect();
    for (prog, c) in clients {
        let out = c.wait_output(TIMEOUT);
        assert_success(&format!("{prog} -c"), &out);
        assert!(
            stdout(&out).contains("ping data: rdma-ping-19: "),
            "{}",
            all(&out)
        );
    }
    server.kill();
}
