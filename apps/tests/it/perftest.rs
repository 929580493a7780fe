//! The perftest-compatible tools against themselves and against perftest's `ib_*` programs in
//! both roles (server on the peer host), the size sweep, `--json` against the table, and bad
//! input: one-line causes, non-zero exits, no hang (device tier).
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use serde_json::Value;
use testkit::{assert_success, ChildGuard};

const TIMEOUT: Duration = Duration::from_secs(90);

/// (our binary, perftest's, whether the server prints results too)
const TOOLS: [(&str, &str, bool); 7] = [
    (env!("CARGO_BIN_EXE_send-lat"), "ib_send_lat", true),
    (env!("CARGO_BIN_EXE_write-lat"), "ib_write_lat", true),
    (env!("CARGO_BIN_EXE_read-lat"), "ib_read_lat", false),
    (env!("CARGO_BIN_EXE_atomic-lat"), "ib_atomic_lat", false),
    (env!("CARGO_BIN_EXE_send-bw"), "ib_send_bw", true),
    (env!("CARGO_BIN_EXE_write-bw"), "ib_write_bw", false),
    (env!("CARGO_BIN_EXE_read-bw"), "ib_read_bw", false),
];

fn text(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn all(out: &Output) -> String {
    format!("{}{}", text(out), String::from_utf8_lossy(&out.stderr))
}

/// The result rows of perftest's table: lines starting with a size, split in columns.
fn rows(out: &str) -> Vec<Vec<f64>> {
    out.lines()
        .filter(|l| l.starts_with(' ') && l.trim_start().starts_with(|c: char| c.is_ascii_digit()))
        .map(|l| {
            l.split_whitespace()
                .filter_map(|w| w.parse().ok())
                .collect()
        })
        .filter(|r: &Vec<f64>| r.len() == 5 || r.len() == 9)
        .collect()
}

fn is_lat(prog: &str) -> bool {
    prog.contains("lat")
}

/// `extra`, with `-R` added on an iWARP device: its queue pairs connect only through the
/// RDMA CM, so there every test runs in perftest's rdma_cm mode.
fn with_cm<'a>(extra: &[&'a str]) -> Vec<&'a str> {
    let mut v = extra.to_vec();
    let iwarp = verbs::Context::open(&testkit::device().name)
        .expect("open the test device")
        .transport()
        == verbs::Transport::Iwarp;
    if iwarp && !v.contains(&"-R") {
        v.push("-R");
    }
    v
}

fn server(prog: &str, port: u16, extra: &[&str]) -> ChildGuard {
    let extra = &with_cm(extra)[..];
    let peer = testkit::peer();
    let mut c = peer.command(prog);
    c.args([
        "-d",
        &peer.device.name,
        "-x",
        &peer.device.gid_index.to_string(),
    ]);
    c.args(["-p", &port.to_string()]).args(extra);
    let mut g = ChildGuard::spawn(c).expect("start server");
    if extra.contains(&"-R") {
        super::wait_cm_listening(port, &mut g);
    } else {
        super::wait_listening(port, &mut g);
    }
    g
}

fn client(prog: &str, port: u16, extra: &[&str]) -> Command {
    let extra = &with_cm(extra)[..];
    let dev = testkit::device();
    let mut c = Command::new(prog);
    c.args(["-d", &dev.name, "-x", &dev.gid_index.to_string()]);
    c.args(["-p", &port.to_string()]).args(extra);
    if extra.contains(&"-R") {
        // rdma_cm routes by address: bind the client to this host's device.
        c.args(["--source_ip", &dev.addr.to_string()]);
    }
    c.arg(testkit::peer().device.addr.to_string());
    c
}

/// Runs a pair; both must succeed; checks the rows each side prints. Returns (server, client)
/// stdout.
fn pair(
    s_prog: &str,
    c_prog: &str,
    port: u16,
    extra: &[&str],
    server_rows: bool,
) -> (String, String) {
    // A device without atomics (iWARP) cannot run the atomic test: the other tools still run.
    if [s_prog, c_prog].iter().any(|p| p.contains("atomic")) {
        let dev = testkit::device().name;
        let caps = verbs::Context::open(&dev)
            .and_then(|c| c.capabilities())
            .expect("query the test device");
        if let Err(lacks) = caps.require(&dev, verbs::Capability::Atomics) {
            testkit::skip_part(
                &format!("the atomic pair on port {port}"),
                &lacks.to_string(),
            );
            return (String::new(), String::new());
        }
    }
    // perftest calibrates its clock by sampling; under emulation that sometimes fails
    // ("Can't produce a report") after a complete exchange: that run is retried.
    let mut attempt = 0;
    let (s, c) = loop {
        attempt += 1;
        let s = server(s_prog, port, extra);
        let c = ChildGuard::spawn(client(c_prog, port, extra))
            .expect("start client")
            .wait_output(TIMEOUT);
        let s = s.wait_output(TIMEOUT);
        let calibration = |o: &Output| {
            !o.status.success()
                && String::from_utf8_lossy(&o.stderr).contains("Can't produce a report")
        };
        if attempt < 3 && (calibration(&c) || calibration(&s)) {
            println!("perftest could not calibrate its clock; running the pair again");
            continue;
        }
        break (s, c);
    };
    assert_success(&format!("{c_prog} (client) with {s_prog}"), &c);
    assert_success(&format!("{s_prog} (server) with {c_prog}"), &s);
    let (st, ct) = (text(&s), text(&c));
    println!("--- {s_prog} server ---\n{st}\n--- {c_prog} client ---\n{ct}");
    // With -q the bandwidth tests count the iterations of every QP, as perftest does.
    let arg = |flag: &str| {
        extra
            .iter()
            .position(|a| *a == flag)
            .map(|i| extra[i + 1].parse::<f64>().unwrap())
    };
    let want_iters = arg("-n").unwrap() * arg("-q").unwrap_or(1.0);
    // perftest's own numbers are not ours to check (under emulation its clock calibration
    // can print inf): only that it printed its rows.
    let check = |who: &str, prog: &str, t: &str| {
        let r = rows(t);
        assert!(!r.is_empty(), "{who}: no result row in\n{t}");
        for row in &r {
            assert_eq!(row[1], want_iters, "{who}: iterations in {row:?}");
            if prog.starts_with("ib_") {
                continue;
            }
            assert!(
                row.iter().all(|v| v.is_finite() && *v >= 0.0),
                "{who}: {row:?}"
            );
            if is_lat(c_prog) {
                // min <= typical <= p99.9, all positive
                assert!(
                    row[2] > 0.0 && row[2] <= row[4] && row[4] <= row[8],
                    "{who}: {row:?}"
                );
            } else if who == "client" {
                // The message rate, not the MB/s: at a few bytes a message a slow host's
                // bandwidth rounds to 0.00.
                assert!(row[4] > 0.0, "{who}: no messages in {row:?}");
            }
        }
        r
    };
    check("client", c_prog, &ct);
    if server_rows && !s_prog.starts_with("ib_") {
        check("server", s_prog, &st);
    }
    (st, ct)
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn each_tool_against_itself() {
    for (i, (ours, _, server_rows)) in TOOLS.iter().enumerate() {
        let extra: &[&str] = if is_lat(ours) {
            &["-n", "20", "-s", "64"]
        } else {
            &["-n", "20", "-s", "4096"]
        };
        let extra = if ours.ends_with("atomic-lat") {
            &extra[..2]
        } else {
            extra
        };
        pair(ours, ours, 18_700 + i as u16, extra, *server_rows);
    }
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn our_clients_with_perftest_servers() {
    for (i, (ours, theirs, server_rows)) in TOOLS.iter().enumerate() {
        pair(theirs, ours, 18_710 + i as u16, &["-n", "20"], *server_rows);
    }
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn perftest_clients_with_our_servers() {
    for (i, (ours, theirs, server_rows)) in TOOLS.iter().enumerate() {
        let extra: &[&str] = if ours.ends_with("atomic-lat") {
            &["-n", "20"]
        } else {
            &["-n", "20", "-s", "1024"]
        };
        pair(ours, theirs, 18_720 + i as u16, extra, *server_rows);
    }
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn size_sweep_against_perftest() {
    let sizes: Vec<f64> = (1..24).map(|i| f64::from(1u32 << i)).collect();
    let (_, c) = pair("ib_send_lat", TOOLS[0].0, 18_730, &["-a", "-n", "5"], true);
    assert_eq!(rows(&c).iter().map(|r| r[0]).collect::<Vec<_>>(), sizes);
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn json_matches_the_table() {
    for (prog, port, server_rows) in [(TOOLS[5].0, 18_740, false), (TOOLS[0].0, 18_741, true)] {
        let (_, c) = pair(prog, prog, port, &["-n", "20", "--json"], server_rows);
        let json_line = c.lines().find(|l| l.starts_with('{')).expect("a JSON line");
        let v: Value = serde_json::from_str(json_line).unwrap();
        assert_eq!(v["role"], "client");
        assert_eq!(v["device"], testkit::device().name);
        let results = v["results"].as_array().unwrap();
        let table = rows(&c);
        assert_eq!(results.len(), table.len());
        let keys: &[&str] = if is_lat(prog) {
            &[
                "MsgSize",
                "n_iterations",
                "t_min",
                "t_max",
                "t_typical",
                "t_avg",
                "t_stdev",
                "percentile_99",
                "percentile_99.9",
            ]
        } else {
            &[
                "MsgSize",
                "n_iterations",
                "BW_peak",
                "BW_average",
                "MsgRate",
            ]
        };
        for (r, row) in results.iter().zip(&table) {
            for (k, cell) in keys.iter().zip(row) {
                let j = r[*k]
                    .as_f64()
                    .unwrap_or_else(|| panic!("{k} missing in {r}"));
                assert!((j - cell).abs() < 1e-9, "{k}: JSON {j} vs table {cell}");
            }
        }
    }
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn rdma_cm_mode_against_perftest_in_both_roles() {
    // send-lat and write-bw over rdma_cm (-R): the exchange on an rdma_cm control connection
    // and the test QPs connected by the CM, against perftest's -R in either role and ourselves.
    for (i, &(ours, theirs, server_rows)) in [TOOLS[0], TOOLS[5]].iter().enumerate() {
        let port = 18_770 + 3 * i as u16;
        let extra = ["-R", "-n", "20"];
        pair(theirs, ours, port, &extra, server_rows);
        pair(ours, theirs, port + 1, &extra, server_rows);
        let (s, c) = pair(ours, ours, port + 2, &extra, server_rows);
        assert!(c.contains("remote address"), "{c}");
        if server_rows {
            assert_eq!(rows(&s).len(), 1, "{s}");
        }
    }
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn bidirectional_bandwidth_against_perftest_in_both_roles() {
    // -b: both sides post, measure and exchange reports; each prints the sum of both, so the
    // server's row equals the client's.
    for (i, &(ours, theirs, _)) in [TOOLS[4], TOOLS[5], TOOLS[6]].iter().enumerate() {
        let port = 18_780 + 3 * i as u16;
        let extra = ["-b", "-n", "20", "-s", "4096"];
        let mut runs = vec![
            pair(theirs, ours, port, &extra, true),
            pair(ours, theirs, port + 1, &extra, true),
        ];
        if i == 1 {
            runs.push(pair(ours, ours, port + 2, &extra, true));
        }
        for (s, c) in runs {
            let (sr, cr) = (rows(&s), rows(&c));
            assert_eq!(sr.len(), 1, "server rows:\n{s}");
            assert_eq!(sr, cr, "the sides printed different sums");
            assert!(cr[0][4] > 0.0, "no messages: {cr:?}");
        }
    }
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn rdma_cm_with_several_qps_and_bidirectional_against_perftest_in_both_roles() {
    // -R with -q 2 (the CM connects every QP on the test's port, perftest's order) and -R with
    // -b (both sides post over CM-connected QPs and exchange reports on the control
    // connection), for each bandwidth test, against perftest: each option of each test in one
    // role, the roles alternating from test to test and from option to option, so that each
    // option of each role runs with some test.
    let mut port = 18_800;
    for (t, &(ours, theirs, _)) in [TOOLS[4], TOOLS[5], TOOLS[6]].iter().enumerate() {
        for (o, extra) in [
            &["-R", "-q", "2", "-n", "200", "-s", "4096"][..],
            &["-R", "-b", "-n", "200", "-s", "4096"][..],
        ]
        .into_iter()
        .enumerate()
        {
            let bidir = extra.contains(&"-b");
            let (s_prog, c_prog) = [(theirs, ours), (ours, theirs)][(t + o) % 2];
            port += 1;
            let (s, c) = pair(s_prog, c_prog, port, extra, bidir);
            let qps = if bidir { 1 } else { 2 };
            assert!(c.contains(&format!("Number of qps   : {qps}")), "{c}");
            if bidir {
                assert_eq!(rows(&s), rows(&c), "the sides printed different sums");
            }
        }
    }
    // Both at once, ours against ours.
    let extra = ["-R", "-q", "2", "-b", "-n", "200", "-s", "4096"];
    let (s, c) = pair(TOOLS[4].0, TOOLS[4].0, 18_813, &extra, true);
    assert!(c.contains("Number of qps   : 2"), "{c}");
    assert_eq!(rows(&s), rows(&c), "the sides printed different sums");
}

/// Asserts a failed run with a one-line cause containing `needle`.
fn fails_with(out: &Output, needle: &str) {
    assert!(!out.status.success(), "expected failure:\n{}", all(out));
    let err = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "one line expected:\n{err}");
    assert!(
        lines[0].contains(needle),
        "{needle:?} not in {:?}",
        lines[0]
    );
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn bad_device_gid_and_size_are_refused_at_once() {
    let dev = testkit::device();
    let run = |args: &[&str]| {
        let mut c = Command::new(TOOLS[0].0);
        c.args(args);
        testkit::run_with_timeout(c, Duration::from_secs(20))
    };
    fails_with(
        &run(&["-d", "no-such-dev"]),
        "no RDMA device named \"no-such-dev\"",
    );
    fails_with(&run(&["-d", &dev.name, "-x", "64"]), "GID index 64");
    fails_with(&run(&["-d", &dev.name, "-s", "9000000"]), "-s 1..=8388608");
    fails_with(&run(&["-d", &dev.name, "-i", "2"]), "use -i 1..=1");
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn missing_server_and_dead_client_end_with_a_cause() {
    // No server: the client gives up after its --timeout.
    let t0 = Instant::now();
    let mut c = client(TOOLS[0].0, 18_750, &["--timeout", "2"]);
    c.args(["-n", "5"]);
    let out = testkit::run_with_timeout(c, Duration::from_secs(30));
    fails_with(&out, "start the server");
    assert!(t0.elapsed() < Duration::from_secs(20));

    // A client that connects and dies mid-run: the server reports it within its --timeout.
    let s = server(TOOLS[0].0, 18_751, &["-n", "100000000", "--timeout", "5"]);
    let mut c = ChildGuard::spawn(client("ib_send_lat", 18_751, &["-n", "100000000"]))
        .expect("start client");
    std::thread::sleep(Duration::from_secs(3));
    c.kill();
    let out = s.wait_output(Duration::from_secs(40));
    fails_with(&out, "the peer");
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn perftest_peer_with_other_parameters_is_reported() {
    // Our 4 KiB sends into perftest's 2-byte receives.
    let s = server("ib_send_lat", 18_760, &["-n", "50"]);
    let c = ChildGuard::spawn(client(
        TOOLS[0].0,
        18_760,
        &["-n", "50", "-s", "4096", "--timeout", "10"],
    ))
    .expect("start client")
    .wait_output(TIMEOUT);
    drop(s);
    fails_with(&c, "same -s");

    // A different test on the other side (write bandwidth against a read server): refused
    // by the queue pair's access rights (REMOTE_READ only). siw checks a WRITE against the
    // region's rights alone, and perftest registers its buffer with every right: there the
    // WRITEs land, and only the report exchange can tell.
    let iwarp = verbs::Context::open(&testkit::device().name)
        .expect("open the test device")
        .transport()
        == verbs::Transport::Iwarp;
    if iwarp {
        return;
    }
    let s = server("ib_read_bw", 18_761, &["-n", "50"]);
    let c = ChildGuard::spawn(client(TOOLS[5].0, 18_761, &["-n", "50", "--timeout", "10"]))
        .expect("start client")
        .wait_output(TIMEOUT);
    drop(s);
    assert!(
        !c.status.success(),
        "write against a read server succeeded:\n{}",
        all(&c)
    );
    assert_eq!(
        String::from_utf8_lossy(&c.stderr).lines().count(),
        1,
        "{}",
        all(&c)
    );
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn several_qps_with_iterations_not_a_multiple_of_the_signal_interval() {
    // -q 2 -n 150 with -Q 100: each QP's last request is signaled (150 is no multiple of
    // 100), and each QP sends exactly its 150 (the peer posted that many receives per QP),
    // however the queues refill. Against perftest's server, then ours.
    for (port, server) in [(18_830, TOOLS[4].1), (18_831, TOOLS[4].0)] {
        let extra = ["-q", "2", "-n", "150", "-s", "1024"];
        let (_, c) = pair(server, TOOLS[4].0, port, &extra, false);
        let r = rows(&c);
        assert_eq!(r.len(), 1, "{c}");
        // Like perftest, the table counts every QP's iterations.
        assert_eq!(r[0][1], 300.0, "{c}");
        assert!(r[0][4] > 0.0, "no messages: {c}");
    }
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn the_peak_is_left_out_where_perftest_leaves_it_out() {
    // Finding the peak takes time quadratic in the iterations: like perftest, the tools leave
    // it out (printing 0.00) on a send-bw server and above 20,000 iterations, with a warning,
    // and when asked (-N), without one. 25,000 two-byte sends take about a second.
    let warning = "WARNING: BW peak won't be measured in this run.";
    let started = Instant::now();
    let (s, c) = pair(
        TOOLS[4].0,
        TOOLS[4].0,
        18_832,
        &["-n", "25000", "-s", "2"],
        true,
    );
    for (who, out) in [("server", &s), ("client", &c)] {
        assert!(out.contains(warning), "{who} did not warn:\n{out}");
        let r = rows(out);
        assert_eq!(r.len(), 1, "{who}: {out}");
        assert_eq!(r[0][2], 0.0, "{who}: a peak was measured: {out}");
        // 2-byte messages: the average MB/s of a slow host prints 0.00, the rate does not.
        assert!(r[0][4] > 0.0, "{who}: no message rate: {out}");
    }
    println!("25,000 sends and both reports in {:?}", started.elapsed());
    // Asked for with -N: no peak, no warning; perftest's server takes the same option.
    for (port, server) in [(18_833, TOOLS[5].0), (18_834, TOOLS[5].1)] {
        let (_, c) = pair(
            server,
            TOOLS[5].0,
            port,
            &["-n", "200", "-N", "-s", "4096"],
            false,
        );
        assert!(!c.contains(warning), "-N warned:\n{c}");
        let r = rows(&c);
        assert_eq!(r.len(), 1, "{c}");
        assert_eq!(r[0][2], 0.0, "-N measured a peak: {c}");
        assert!(r[0][4] > 0.0, "no messages: {c}");
    }
    // Below the limit the client still measures it.
    let (_, c) = pair(
        TOOLS[5].0,
        TOOLS[5].0,
        18_835,
        &["-n", "200", "-s", "4096"],
        false,
    );
    assert!(!c.contains(warning), "{c}");
    let r = rows(&c);
    assert!(r[0][2] >= r[0][3], "peak below the average: {c}");
}
