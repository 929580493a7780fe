//! `cargo xtask demo`: brings up a device (two hosts in the qemu guest) and runs the reference
//! programs between them, printing what each reports.
use std::process::ExitCode;
use std::time::Duration;

use crate::util::Result;
use crate::{apt, guest};

/// One program run between the two hosts: a server on the peer, a client here. Both are sh
/// command lines with the `RDMA_TEST_*` environment of the guest.
struct App {
    name: &'static str,
    server: &'static str,
    client: &'static str,
    /// Lines of the output worth showing (an extended grep pattern).
    show: &'static str,
}

/// The programs the demo runs, in order. The reference apps join this list as they land.
const APPS: &[App] = &[
    App {
        name: "ibv_rc_pingpong (rdma-core, RC send/recv, 1000 x 4 KiB)",
        server: "ibv_rc_pingpong -d $RDMA_TEST_PEER_DEVICE -g $RDMA_TEST_PEER_GID_INDEX",
        client: "ibv_rc_pingpong -d $RDMA_TEST_DEVICE -g $RDMA_TEST_GID_INDEX $RDMA_TEST_PEER_ADDR",
        show: "bytes in|iters in",
    },
    App {
        name: "rping (rdma-core, rdma_cm + RDMA read/write, 10 pings)",
        server: "rping -s -a $RDMA_TEST_PEER_ADDR -C 10 -v",
        client: "rping -c -I $RDMA_TEST_ADDR -a $RDMA_TEST_PEER_ADDR -C 10 -v",
        show: "ping data: rdma-ping-(0|9):",
    },
];

pub fn main(_args: &[String]) -> Result<ExitCode> {
    apt::ensure(apt::BASE)?;
    let mut script = String::from("fail=0\nT='timeout 60'\n");
    for app in APPS {
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
    script.push_str("exit $fail\n");
    let outcome = guest::run(&mut guest::Options {
        two_hosts: true,
        timeout: Duration::from_secs(600),
        script,
        on_line: &mut |line: &str| println!("{line}"),
    })?;
    println!("device: {}", outcome.device());
    println!(
        "demo: {} ({:.1} s, boot included)",
        if outcome.status.success() {
            "all programs succeeded"
        } else {
            "a program failed"
        },
        outcome.elapsed.as_secs_f64()
    );
    Ok(crate::util::exit_code(outcome.status))
}
