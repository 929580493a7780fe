//! `devinfo -v` prints the device's transport and a port's width, speed and physical state
//! as `ibv_devinfo -v` does, and `devinfo --counters` the counters `rdma statistic show link`
//! shows (device tier).
use std::process::Command;
use std::time::Duration;

use testkit::assert_success;

/// The value of every line of `program -v -d DEV -i 1` that starts with one of `fields`.
/// (None where it prints no such line).
fn port_fields(program: &str, fields: &[&str]) -> Vec<Option<String>> {
    let mut c = Command::new(program);
    c.args(["-v", "-d", &testkit::device().name, "-i", "1"]);
    let out = testkit::run_with_timeout(c, Duration::from_secs(10));
    assert_success(program, &out);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    fields
        .iter()
        .map(|f| {
            text.lines()
                .find_map(|l| l.trim().strip_prefix(f))
                .map(|v| v.trim().to_string())
        })
        .collect()
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn the_transport_and_a_ports_width_speed_and_state_as_ibv_devinfo_prints_them() {
    let fields = [
        "transport:",
        "active_width:",
        "active_speed:",
        "phys_state:",
    ];
    let ours = port_fields(env!("CARGO_BIN_EXE_devinfo"), &fields);
    let theirs = port_fields("ibv_devinfo", &fields);
    assert_eq!(ours, theirs);
    assert!(theirs[..3].iter().all(Option::is_some), "{theirs:?}");
    // The physical state of InfiniBand-transport ports only (RoCE's among them).
    match theirs[0].as_deref() {
        Some("iWARP (1)") => assert_eq!(theirs[3], None),
        _ => assert!(
            theirs[3]
                .as_deref()
                .is_some_and(|s| s.starts_with("LINK_UP")),
            "{theirs:?}"
        ),
    }
}

/// The `link DEV/1 NAME VALUE ...` line `program ARGS...` prints, as its first two words and
/// its pairs; `None` when `rdma` refuses the port with EINVAL (a port without statistics).
fn link_line(program: &str, args: &[&str]) -> Option<(String, Vec<(String, u64)>)> {
    let mut c = Command::new(program);
    c.args(args);
    let child = testkit::ChildGuard::spawn(c).unwrap_or_else(|e| {
        panic!("cannot run {program} ({e}): install iproute2 for `rdma` (the guest has it)")
    });
    let out = child.wait_output(Duration::from_secs(10));
    if program == "rdma"
        && !out.status.success()
        && String::from_utf8_lossy(&out.stderr).contains("Invalid argument")
    {
        return None;
    }
    assert_success(program, &out);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "one line for one port:\n{text}");
    let words: Vec<&str> = lines[0].split_whitespace().collect();
    assert!(words.len() >= 2 && words.len() % 2 == 0, "{text}");
    let mut pairs: Vec<(String, u64)> = words[2..]
        .chunks(2)
        .map(|p| (p[0].to_owned(), p[1].parse().expect("a number")))
        .collect();
    pairs.sort();
    Some((words[..2].join(" "), pairs))
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn counters_as_rdma_statistic_prints_them() {
    let dev = testkit::device().name;
    let ours = || {
        let args = ["--counters", "-d", &dev, "-i", "1"];
        link_line(env!("CARGO_BIN_EXE_devinfo"), &args).expect("devinfo --counters")
    };
    // Packet counters move meanwhile: ours before and after bound rdma's. The kernel keeps
    // the values it read for sysfs up to hw_counters/lifespan (about 10 ms): wait it out.
    let before = ours();
    let theirs = link_line("rdma", &["statistic", "show", "link", &format!("{dev}/1")]);
    std::thread::sleep(Duration::from_millis(100));
    let after = ours();
    assert_eq!(before.0, format!("link {dev}/1"));
    let Some(theirs) = theirs else {
        // siw: rdma refuses, and we print the port with no counters.
        assert!(
            after.1.is_empty(),
            "rdma shows no statistics for {dev}/1: {after:?}"
        );
        return;
    };
    assert_eq!(before.0, theirs.0);
    let names = |v: &[(String, u64)]| v.iter().map(|p| p.0.clone()).collect::<Vec<_>>();
    assert_eq!(names(&before.1), names(&theirs.1));
    assert_eq!(names(&after.1), names(&theirs.1));
    for ((b, a), (name, t)) in before.1.iter().zip(&after.1).zip(&theirs.1) {
        assert!(b.1 <= *t && *t <= a.1, "{name}: {} <= {t} <= {}", b.1, a.1);
    }
}
