//! `devinfo -v` prints the device's transport and a port's width, speed and physical state
//! as `ibv_devinfo -v` does (device tier).
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
