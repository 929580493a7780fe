//! `cargo xtask demo`: brings up a device (two hosts in the qemu guest) and runs the reference
//! programs between them (rdma-core's, ours, and each of ours against rdma-core's), then our
//! tokio echo server and client over the transport's byte stream, printing what each reports;
//! then the same on an iWARP pair (siw) for what runs there: rping and the echo
//! (`ibv_rc_pingpong` connects by hand, which iWARP cannot).
use std::process::ExitCode;
use std::time::Duration;

use std::path::PathBuf;

use crate::util::{self, Error, Result};
use crate::{apt, guest};

/// Our reference programs, built for release.
struct AppPaths {
    rc_pingpong: PathBuf,
    rping: PathBuf,
    echo_server: PathBuf,
    echo_client: PathBuf,
}

fn build_apps() -> Result<AppPaths> {
    let mut cmd = util::cargo();
    cmd.args(["build", "--release", "-p", "apps", "--bins"]);
    let built = util::built_executables(cmd, "cargo build --release -p apps --bins", |_| true)?;
    let find = |name: &str| {
        built
            .iter()
            .find(|e| e.exe.file_name().is_some_and(|f| f == name))
            .map(|e| e.exe.clone())
            .ok_or_else(|| Error::new(format!("the apps build made no `{name}` program")))
    };
    Ok(AppPaths {
        rc_pingpong: find("rc-pingpong")?,
        rping: find("rping")?,
        echo_server: find("echo-server")?,
        echo_client: find("echo-client")?,
    })
}

/// One program run between the two hosts: a server on the peer, a client here. Both are sh
/// command lines with the `RDMA_TEST_*` environment of the guest; `$RC_PINGPONG` and `$RPING`
/// name our reference programs (release builds).
struct App {
    name: &'static str,
    server: &'static str,
    client: &'static str,
    /// Lines of the output worth showing (an extended grep pattern).
    show: &'static str,
    /// Whether it runs on iWARP (connects through the RDMA CM).
    iwarp: bool,
}

const RC_PINGPONG_SERVER_C: &str =
    "ibv_rc_pingpong -d $RDMA_TEST_PEER_DEVICE -g $RDMA_TEST_PEER_GID_INDEX";
const RC_PINGPONG_CLIENT_C: &str =
    "ibv_rc_pingpong -d $RDMA_TEST_DEVICE -g $RDMA_TEST_GID_INDEX $RDMA_TEST_PEER_ADDR";
const RC_PINGPONG_SERVER_RS: &str =
    "$RC_PINGPONG -d $RDMA_TEST_PEER_DEVICE -g $RDMA_TEST_PEER_GID_INDEX";
const RC_PINGPONG_CLIENT_RS: &str =
    "$RC_PINGPONG -d $RDMA_TEST_DEVICE -g $RDMA_TEST_GID_INDEX $RDMA_TEST_PEER_ADDR";
const PINGPONG_SHOW: &str = "bytes in|iters in";
const RPING_SERVER_C: &str = "rping -s -a $RDMA_TEST_PEER_ADDR -C 10 -v";
const RPING_CLIENT_C: &str = "rping -c -I $RDMA_TEST_ADDR -a $RDMA_TEST_PEER_ADDR -C 10 -v";
const RPING_SERVER_RS: &str = "$RPING -s -a $RDMA_TEST_PEER_ADDR -C 10 -v";
const RPING_CLIENT_RS: &str = "$RPING -c -I $RDMA_TEST_ADDR -a $RDMA_TEST_PEER_ADDR -C 10 -v";
const RPING_SHOW: &str = "ping data: rdma-ping-(0|9):";

/// The programs the demo runs, in order: rdma-core's as the baseline, ours, then each of ours
/// against rdma-core's counterpart.
const APPS: &[App] = &[
    App {
        name: "ibv_rc_pingpong <-> ibv_rc_pingpong (rdma-core; RC send/recv, 1000 x 4 KiB)",
        server: RC_PINGPONG_SERVER_C,
        client: RC_PINGPONG_CLIENT_C,
        show: PINGPONG_SHOW,
        iwarp: false,
    },
    App {
        name: "rc-pingpong <-> rc-pingpong (ours)",
        server: RC_PINGPONG_SERVER_RS,
        client: RC_PINGPONG_CLIENT_RS,
        show: PINGPONG_SHOW,
        iwarp: false,
    },
    App {
        name: "rc-pingpong server (ours) <-> ibv_rc_pingpong client (rdma-core)",
        server: RC_PINGPONG_SERVER_RS,
        client: RC_PINGPONG_CLIENT_C,
        show: PINGPONG_SHOW,
        iwarp: false,
    },
    App {
        name: "rping <-> rping (rdma-core; rdma_cm + RDMA read/write, 10 pings)",
        server: RPING_SERVER_C,
        client: RPING_CLIENT_C,
        show: RPING_SHOW,
        iwarp: true,
    },
    App {
        name: "rping <-> rping (ours)",
        server: RPING_SERVER_RS,
        client: RPING_CLIENT_RS,
        show: RPING_SHOW,
        iwarp: true,
    },
    App {
        name: "rping server (ours) <-> rping client (rdma-core)",
        server: RPING_SERVER_RS,
        client: RPING_CLIENT_C,
        show: RPING_SHOW,
        iwarp: true,
    },
];

/// The main job: our tokio echo server on the peer, serving until killed, and our echo client
/// here, once with one connection of 64-byte messages and once with 8 connections of 4 KiB;
/// the client verifies every byte and prints its latency summary and throughput. Both poll
/// from tokio's reactor, spinning 1 ms after a completion (the low-latency setting).
const ECHO: &str = r#"echo "== echo-server <-> echo-client (ours; tokio byte streams over the transport)"
$RDMA_TEST_PEER_EXEC $T $ECHO_SERVER 0.0.0.0:7600 --polling reactor:1000 > /tmp/server.log 2>&1 &
server=$!
i=0
while ! grep -q listening /tmp/server.log && [ $i -lt 100 ]; do sleep 0.1; i=$((i+1)); done
for run in '--size 64 --count 1000' '--size 4096 --count 200 --concurrency 8'; do
  run="$run --polling reactor:1000"
  echo "echo-client $run"
  $T $ECHO_CLIENT $RDMA_TEST_PEER_ADDR:7600 --src $RDMA_TEST_ADDR $run > /tmp/client.log 2>&1; c=$?
  sed 's/^/client: /' /tmp/client.log
  if [ $c -ne 0 ]; then echo "FAILED (client status $c)"; tail -5 /tmp/server.log; fail=1; else echo "ok"; fi
done
kill $server 2>/dev/null; wait $server 2>/dev/null
"#;

pub fn main(_args: &[String]) -> Result<ExitCode> {
    apt::ensure(apt::BASE)?;
    let apps = build_apps()?;
    let mut all_ok = true;
    for device in [guest::Device::Rxe, guest::Device::Siw] {
        println!("=== on {} ===", device.name());
        let outcome = guest::run(&mut guest::Options {
            two_hosts: true,
            device,
            timeout: Duration::from_secs(600),
            script: script(&apps, device),
            on_line: &mut |line: &str| println!("{line}"),
            yields_cpu: false,
        })?;
        println!("device: {}", outcome.device());
        println!(
            "demo on {}: {} ({:.1} s, boot included)",
            device.name(),
            if outcome.status.success() {
                "all programs succeeded"
            } else {
                "a program failed"
            },
            outcome.elapsed.as_secs_f64()
        );
        all_ok &= outcome.status.success();
    }
    Ok(if all_ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// The guest's script on `device`: the programs that run there, then the echo.
fn script(apps: &AppPaths, device: guest::Device) -> String {
    let mut script = format!(
        "fail=0\nT='timeout 60'\nRC_PINGPONG={}\nRPING={}\nECHO_SERVER={}\nECHO_CLIENT={}\n",
        util::shell_quote(&apps.rc_pingpong.to_string_lossy()),
        util::shell_quote(&apps.rping.to_string_lossy()),
        util::shell_quote(&apps.echo_server.to_string_lossy()),
        util::shell_quote(&apps.echo_client.to_string_lossy()),
    );
    for app in APPS
        .iter()
        .filter(|a| device == guest::Device::Rxe || a.iwarp)
    {
        script.push_str(&format!(
            r#"echo "== {name}"
$RDMA_TEST_PEER_EXEC $T {server} > /tmp/server.log 2>&1 &
sleep 1
$T {client} > /tmp/client.log 2>&1; c=$?
wait $!; s=$?
grep -E '{show}' /tmp/client.log | sed 's/^/client: /'
grep -E '{show}' /tmp/server.log | sed 's/^/server: /'
if [ $c -ne 0 ] || [ $s -ne 0 ]; then
  echo "FAILED (client status $c, server status $s)"; tail -5 /tmp/client.log /tmp/server.log; fail=1
else
  echo "ok"
fi
"#,
            name = app.name,
            server = app.server,
            client = app.client,
            show = app.show,
        ));
    }
    script.push_str(ECHO);
    script.push_str("exit $fail\n");
    script
}
