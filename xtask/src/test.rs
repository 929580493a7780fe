//! `cargo xtask test [--device rxe|siw] [-p CRATE]... [FILTER]`: host-tier tests with `cargo test`
//! (the workspace, or the crates named with `-p`), then the device-tier tests
//! (`#[ignore = "needs an RDMA device: ..."]`) on a real RDMA device, got from the ladder: a
//! device that already exists -> rxe on this host -> the qemu guest, where the tier runs twice,
//! on rxe (RoCE) and then on siw (iWARP), one boot each. `--device` picks one of the guest's.
//! Ends with one line per tier (`tier rxe: N passed, M failed, K skipped[, P partly skipped]
//! (T s)`) and the total
//! `N passed, M failed, K skipped`. Each tier shows its progress on the way (`progress.rs`): how
//! many of its tests (listed before it starts) have finished, the time spent and the time left.
use std::fs;
use std::io::{BufRead, BufReader, IsTerminal};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use crate::progress::{Event, Live};
use crate::util::{self, Context, Error, Result};
use crate::{apt, guest, rxe};

/// A test executable built by `cargo test --no-run`.
#[derive(Debug)]
struct TestBinary {
    exe: PathBuf,
    /// The crate's manifest directory: tests run there, as under cargo.
    dir: PathBuf,
    /// How many device-tier tests it holds (after FILTER).
    device_tests: usize,
}

/// Counts from libtest's `test result:` lines.
#[derive(Debug, Default, Clone, Copy)]
struct Tally {
    passed: u64,
    failed: u64,
    results: u64,
}

impl Tally {
    fn add_line(&mut self, line: &str) -> Option<(u64, u64)> {
        let line = strip_ansi(line);
        let rest = line.trim().strip_prefix("test result: ")?;
        let num = |what: &str| -> Option<u64> {
            rest.split(';')
                .find_map(|p| p.trim().strip_suffix(what))
                .and_then(|n| n.trim().rsplit(' ').next()?.parse().ok())
        };
        let (p, f) = (num(" passed")?, num(" failed")?);
        self.passed += p;
        self.failed += f;
        self.results += 1;
        Some((p, f))
    }
}

/// `line` without terminal colour sequences (`ESC [ ... m`).
pub(crate) fn strip_ansi(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for d in chars.by_ref() {
                if d.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// Where the device tier runs (`bench` and `test` share the ladder).
pub(crate) enum Target {
    Host(rxe::Device, &'static str),
    /// The qemu guest, with the devices to run on, in order.
    Guest(Vec<guest::Device>),
}

const USAGE: &str =
    "usage: cargo xtask test [--device rxe|siw] [--serial] [--timeout S] [-p CRATE]... [FILTER]";

/// The command line of `cargo xtask test`.
#[derive(Debug, PartialEq, Eq)]
struct Args {
    /// Test-name filter, passed to every test binary.
    filter: Option<String>,
    /// Packages whose tests run (`-p`/`--package`, repeatable; a crate named by its folder or
    /// import name is its package: `transport` is `rdma-transport`); empty: the whole workspace.
    packages: Vec<String>,
    /// Bound on each run of the device tier.
    timeout: Duration,
    /// `--device`: in the qemu guest, the one device to run the device tier on (otherwise
    /// rxe, then siw). A device the ladder finds on the host is used as it is.
    device: Option<guest::Device>,
    /// `--serial`: the guest's tiers one after the other (by default both guests run at once).
    serial: bool,
}

impl Args {
    fn parse(args: &[String]) -> Result<Args> {
        let mut out = Args {
            filter: None,
            packages: Vec::new(),
            timeout: Duration::from_secs(3600),
            device: None,
            serial: false,
        };
        let mut it = args.iter();
        while let Some(a) = it.next() {
            let mut value = |opt: &str, what: &str| {
                it.next()
                    .cloned()
                    .ok_or_else(|| Error::new(format!("{opt} needs {what}; {USAGE}")))
            };
            match a.as_str() {
                "--timeout" => {
                    let v = value("--timeout", "seconds")?;
                    out.timeout = Duration::from_secs(v.parse().map_err(|_| {
                        Error::new(format!("--timeout {v:?} is not a number of seconds"))
                    })?);
                }
                "--device" => out.device = Some(guest::Device::parse(&value(a, "rxe or siw")?)?),
                "--serial" => out.serial = true,
                "-p" | "--package" => out.packages.push(value(a, "a crate name")?),
                s if s.starts_with("--package=") => {
                    out.packages.push(s["--package=".len()..].to_owned())
                }
                s if s.starts_with("-p") && s.len() > 2 => out.packages.push(s[2..].to_owned()),
                s if s.starts_with('-') => {
                    return Err(Error::new(format!("unknown option {s:?}; {USAGE}")))
                }
                s if out.filter.is_none() => out.filter = Some(s.to_owned()),
                s => {
                    return Err(Error::new(format!(
                        "a second FILTER {s:?} (only one is taken; to pick crates use -p CRATE); {USAGE}"
                    )))
                }
            }
        }
        if let Some(p) = out.packages.iter().find(|p| p.is_empty()) {
            return Err(Error::new(format!("empty crate name {p:?}; {USAGE}")));
        }
        for p in &mut out.packages {
            *p = util::package_name(p).to_owned();
        }
        Ok(out)
    }

    /// `--workspace`, or `-p CRATE` for each crate named.
    fn cargo_selection(&self) -> Vec<String> {
        if self.packages.is_empty() {
            return vec!["--workspace".to_owned()];
        }
        self.packages
            .iter()
            .flat_map(|p| ["-p".to_owned(), p.clone()])
            .collect()
    }

    /// Features the tests are built with: the transport's `grpc` (tonic, heavy, off in the
    /// default build) whenever the transport's tests run, so its gRPC device test runs too.
    fn cargo_features(&self) -> Vec<String> {
        let transport = util::package_name("transport");
        if self.packages.is_empty() || self.packages.iter().any(|p| p == transport) {
            vec!["--features".to_owned(), format!("{transport}/grpc")]
        } else {
            Vec::new()
        }
    }
}

pub fn main(args: &[String]) -> Result<ExitCode> {
    let args = Args::parse(args)?;
    let filter = args.filter.as_deref();
    let selection = args.cargo_selection();
    let features = args.cargo_features();
    let started = Instant::now();
    // Packages first: building the workspace needs libibverbs-dev and libclang (bindgen).
    apt::ensure(apt::BASE)?;

    eprintln!(
        "xtask: host tier: cargo test {} {}",
        selection.join(" "),
        features.join(" ")
    );
    let host_total = host_tests(&selection, &features, filter);
    let live = host_total.map(|n| Live::start("host tier", n, "tests"));
    let mut host = Tally::default();
    let mut cmd = util::cargo();
    // Every crate's tests run, and every failure is counted, even after one crate fails.
    cmd.arg("test")
        .arg("--no-fail-fast")
        .args(&selection)
        .args(&features);
    if let Some(f) = filter {
        cmd.args(["--", f]);
    }
    let host_ok = stream_shown(cmd, live.as_ref(), &mut |line| {
        host.add_line(line);
    })?;
    if let Some(live) = live {
        live.finish();
    }
    let host_elapsed = started.elapsed();
    let mut errors: Vec<String> = Vec::new();
    if !host_ok && host.failed == 0 {
        errors.push(format!(
            "host tier: `cargo test {}` failed before running tests (see above)",
            selection.join(" ")
        ));
    }

    let tiers = match device_tiers(&args, &selection, &features) {
        Ok(tiers) => tiers,
        Err(e) => {
            errors.push(e.to_string());
            Vec::new()
        }
    };
    let (mut passed, mut failed, mut skipped) = (host.passed, host.failed, 0);
    for t in &tiers {
        passed += t.passed();
        failed += t.tally.failed;
        skipped += t.skipped();
        if let Some(e) = &t.error {
            errors.push(format!("tier {}: {e}", t.label));
        } else if t.tally.passed + t.tally.failed == 0 {
            errors.push(format!("tier {}: ran no tests", t.label));
        }
    }
    println!();
    println!(
        "host tier: {} passed, {} failed ({:.0} s)",
        host.passed,
        host.failed,
        host_elapsed.as_secs_f64()
    );
    for t in &tiers {
        println!("{}", t.summary());
    }
    for e in &errors {
        println!("error: {e}");
    }
    for t in &tiers {
        println!("device: {}", t.device);
    }
    println!(
        "{passed} passed, {failed} failed, {skipped} skipped ({:.0} s in all)",
        started.elapsed().as_secs_f64()
    );
    Ok(if failed == 0 && errors.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// One run of the device tier, on one device.
#[derive(Debug)]
struct Tier {
    /// `rxe` or `siw` in the guest; the device's name on a host.
    label: String,
    tally: Tally,
    /// Tests that skipped for a capability the device lacks (they also count as passed in
    /// libtest's lines), and tests that skipped a part of themselves for one and passed.
    skips: (u64, u64),
    /// The device, described (name, where, kernel).
    device: String,
    /// Why the tier could not run (or run to its end), if it could not.
    error: Option<String>,
    elapsed: Duration,
}

impl Tier {
    /// Tests that passed, not counting those that skipped.
    fn passed(&self) -> u64 {
        self.tally.passed.saturating_sub(self.skipped())
    }

    fn skipped(&self) -> u64 {
        self.skips.0
    }

    /// `tier LABEL: N passed, M failed, K skipped[, P partly skipped] (T s)`.
    fn summary(&self) -> String {
        let partly = match self.skips.1 {
            0 => String::new(),
            p => format!(", {p} partly skipped"),
        };
        format!(
            "tier {}: {} passed, {} failed, {} skipped{partly} ({:.0} s)",
            self.label,
            self.passed(),
            self.tally.failed,
            self.skipped(),
            self.elapsed.as_secs_f64()
        )
    }
}

/// Builds the test executables, finds a device (or, in the guest, each device asked for) and
/// runs the device tests on each.
fn device_tiers(args: &Args, selection: &[String], features: &[String]) -> Result<Vec<Tier>> {
    let filter = args.filter.as_deref();
    let bins = test_binaries(selection, features, filter)?;
    let total: usize = bins.iter().map(|b| b.device_tests).sum();
    if total == 0 {
        let place = if selection == ["--workspace"] {
            "the workspace".to_owned()
        } else {
            format!("`{}`", selection.join(" "))
        };
        return Err(Error::new(match filter {
            Some(f) => format!("no device-tier tests in {place} match {f:?}"),
            None => format!("no device-tier tests in {place}"),
        }));
    }
    let mut tiers = Vec::new();
    match acquire()? {
        Target::Host(dev, origin) => {
            if let Some(d) = args.device {
                eprintln!(
                    "xtask: --device {} names the guest's device; the tier runs on {} ({origin})",
                    d.name(),
                    dev.name
                );
            }
            tiers.push(host_tier(&bins, args, dev, origin)?)
        }
        Target::Guest(devices) => {
            let devices = match args.device {
                Some(d) => vec![d],
                None => devices,
            };
            if devices.len() > 1 && !args.serial {
                // Both guests at once (each a tier of its own, its lines marked): the tiers'
                // tests wait on the wire and on timers much of the time, which the other
                // guest's fill. Their images are made first, one at a time (a shared cache).
                for &d in &devices {
                    guest::prepare(d)?;
                }
                let bins = &bins;
                let results: Vec<Result<Tier>> = std::thread::scope(|s| {
                    let running: Vec<_> = devices
                        .iter()
                        .map(|&d| s.spawn(move || guest_tier(bins, args, d, true)))
                        .collect();
                    running
                        .into_iter()
                        .map(|t| t.join().expect("a tier's thread panicked"))
                        .collect()
                });
                for r in results {
                    tiers.push(r?);
                }
            } else {
                for d in devices {
                    tiers.push(guest_tier(&bins, args, d, false)?);
                }
            }
        }
    }
    Ok(tiers)
}

/// The skip log of one tier, emptied: tests that skip append a line to it.
fn fresh_skip_log(label: &str) -> Result<PathBuf> {
    // One per run too: two runs at once must not empty each other's.
    let skip_log = util::target_dir()
        .join("xtask")
        .join(format!("skipped-{label}-{}.log", std::process::id()));
    fs::create_dir_all(skip_log.parent().expect("has a parent"))?;
    fs::write(&skip_log, "").context(format_args!("cannot create {}", skip_log.display()))?;
    Ok(skip_log)
}

/// Writes the tier's test times to `target/xtask/times-LABEL.txt` (slowest first) and prints
/// the slowest few: where the tier's time went.
fn report_timings(live: &Live, label: &str) {
    let (slowest, table) = live.timings(5);
    if slowest.is_empty() {
        return;
    }
    let path = util::target_dir()
        .join("xtask")
        .join(format!("times-{label}.txt"));
    let _ = fs::write(&path, table);
    let list: Vec<String> = slowest
        .iter()
        .map(|(name, d)| format!("{name} {:.0} s", d.as_secs_f64()))
        .collect();
    live.println(&format!(
        "xtask: tier {label}: slowest tests: {} (all in {})",
        list.join(", "),
        path.display()
    ));
}

/// What the skip log of a tier holds: (tests skipped, tests that skipped a part of
/// themselves). A part's line is `part of TEST: PART: reason` (`testkit::skip_part`), and a
/// test that skips several parts counts once; every other line is a skipped test's.
fn count_skips(skip_log: &Path) -> (u64, u64) {
    let text = fs::read_to_string(skip_log).unwrap_or_default();
    let mut tests = 0;
    let mut partly = std::collections::BTreeSet::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        match line.strip_prefix(PART_PREFIX) {
            Some(rest) => {
                partly.insert(rest.split(": ").next().unwrap_or(rest).to_owned());
            }
            None => tests += 1,
        }
    }
    (tests, partly.len() as u64)
}

/// How `testkit::skip_part` marks its lines in the skip log.
const PART_PREFIX: &str = "part of ";

/// The command line of one test binary in the device tier.
fn binary_args(b: &TestBinary, filter: Option<&str>) -> Vec<String> {
    let mut v = vec![
        b.exe.to_string_lossy().into_owned(),
        "--ignored".to_owned(),
        "--test-threads=1".to_owned(),
    ];
    // The guest's console is a terminal: colour only when ours is one too.
    if !std::io::stdout().is_terminal() {
        v.push("--color=never".to_owned());
    }
    v.extend(filter.map(str::to_owned));
    v
}

/// The device tier on a device of this host.
fn host_tier(bins: &[TestBinary], args: &Args, dev: rxe::Device, origin: &str) -> Result<Tier> {
    let started = Instant::now();
    let total: usize = bins.iter().map(|b| b.device_tests).sum();
    let skip_log = fresh_skip_log(&dev.name)?;
    eprintln!(
        "xtask: device tier: {total} tests in {} binaries on {} ({origin})",
        bins.len(),
        dev.name
    );
    let live = Live::start(format!("tier {}", dev.name), total as u64, "tests");
    let mut tally = Tally::default();
    for b in bins {
        live.eprintln(&format!("     Running {}", b.exe.display()));
        live.event(Event::BinaryStarted);
        let a = binary_args(b, args.filter.as_deref());
        let mut cmd = Command::new(&a[0]);
        cmd.args(&a[1..])
            .current_dir(&b.dir)
            .env("CARGO_MANIFEST_DIR", &b.dir)
            .env("RDMA_TEST_DEVICE", &dev.name)
            .env("RDMA_TEST_GID_INDEX", dev.gid_index.to_string())
            .env("RDMA_TEST_ADDR", dev.addr.to_string())
            .env("RDMA_TEST_SKIP_LOG", &skip_log);
        let before = tally;
        let ok = stream_shown(cmd, Some(&live), &mut |line| {
            tally.add_line(line);
        })?;
        if let Some(e) = check_binary(b, ok, before, &mut tally) {
            live.println(&e);
        }
    }
    report_timings(&live, &dev.name);
    live.finish();
    Ok(Tier {
        label: dev.name.clone(),
        tally,
        skips: count_skips(&skip_log),
        device: format!("{} ({origin})", dev.name),
        error: None,
        elapsed: started.elapsed(),
    })
}

/// The device tier in the qemu guest on `device` (two hosts, one boot); `beside` another
/// tier running at once (then progress comes as lines, and every line names its tier).
fn guest_tier(
    bins: &[TestBinary],
    args: &Args,
    device: guest::Device,
    beside: bool,
) -> Result<Tier> {
    let started = Instant::now();
    let label = device.name();
    let total: usize = bins.iter().map(|b| b.device_tests).sum();
    let skip_log = fresh_skip_log(label)?;
    eprintln!(
        "xtask: device tier on {label}: {total} tests in {} binaries, in the qemu guest (one boot, two hosts)",
        bins.len()
    );
    let mut script = format!(
        "export RDMA_TEST_SKIP_LOG={}\n",
        util::shell_quote(&skip_log.to_string_lossy())
    );
    for v in [
        "RUST_BACKTRACE",
        "RUST_LOG",
        "RUST_MIN_STACK",
        "TRANSPORT_FAULTS_REPORT",
    ] {
        if let Ok(val) = std::env::var(v) {
            script.push_str(&format!("export {v}={}\n", util::shell_quote(&val)));
        }
    }
    for (i, b) in bins.iter().enumerate() {
        let dir = util::shell_quote(&b.dir.to_string_lossy());
        script.push_str(&format!(
            "echo 'XTASK-BIN {i}'\n(cd {dir} && CARGO_MANIFEST_DIR={dir} exec {})\necho \"XTASK-BIN-RC {i} $?\"\n",
            util::shell_words(&binary_args(b, args.filter.as_deref()))
        ));
    }
    script.push_str("exit 0\n");
    let live = if beside {
        Live::start_beside(format!("tier {label}"), total as u64, "tests", label)
    } else {
        Live::start(format!("tier {label}"), total as u64, "tests")
    };
    let mut tally = Tally::default();
    let mut current: Option<(usize, Tally)> = None;
    let outcome = guest::run(&mut guest::Options {
        two_hosts: true,
        device,
        timeout: args.timeout,
        script,
        on_line: &mut |line: &str| {
            if let Some(i) = line.strip_prefix("XTASK-BIN ").and_then(|i| i.parse().ok()) {
                let b: &TestBinary = &bins[i];
                live.eprintln(&format!(
                    "     Running {} (in the guest, {label})",
                    b.exe.display()
                ));
                live.event(Event::BinaryStarted);
                current = Some((i, tally));
            } else if let Some(rest) = line.strip_prefix("XTASK-BIN-RC ") {
                let rc: i32 = rest
                    .split(' ')
                    .nth(1)
                    .and_then(|r| r.parse().ok())
                    .unwrap_or(-1);
                if let Some((i, before)) = current.take() {
                    if let Some(e) = check_binary(&bins[i], rc == 0, before, &mut tally) {
                        live.println(&e);
                    }
                }
            } else {
                live.output(line);
                tally.add_line(line);
            }
        },
        // Beside the siw guest, rxe's gives way: siw's connections (iWARP over the guest's
        // TCP, its MPA exchange under timers) break when its guest starves, rxe's retry.
        yields_cpu: beside && device == guest::Device::Rxe,
    });
    report_timings(&live, label);
    live.finish();
    if let Some((i, before)) = current.take() {
        if let Some(e) = check_binary(&bins[i], false, before, &mut tally) {
            println!("{e}");
        }
    }
    let (device_line, error) = match outcome {
        Ok(o) => (o.device(), None),
        Err(e) => (format!("{label} in the qemu guest"), Some(e.to_string())),
    };
    Ok(Tier {
        label: label.to_owned(),
        tally,
        skips: count_skips(&skip_log),
        device: device_line,
        error,
        elapsed: started.elapsed(),
    })
}

/// A binary that failed without a failing test (crash, abort) still counts as one failure;
/// returns the line that says so.
fn check_binary(b: &TestBinary, ok: bool, before: Tally, after: &mut Tally) -> Option<String> {
    let ran = after.results > before.results;
    if ok || after.failed != before.failed {
        return None;
    }
    after.failed += 1;
    Some(format!(
        "error: {} ended abnormally{}",
        b.exe.display(),
        if ran {
            ""
        } else {
            " before reporting a result"
        }
    ))
}

/// The ladder: a device that exists (RDMA_TEST_DEVICE or the host's own) -> host rxe -> guest.
pub(crate) fn acquire() -> Result<Target> {
    if let Some(name) = std::env::var("RDMA_TEST_DEVICE")
        .ok()
        .filter(|v| !v.is_empty())
    {
        if !Path::new("/sys/class/infiniband").join(&name).exists() {
            let present = rxe::devices();
            return Err(Error::new(format!(
                "RDMA_TEST_DEVICE={name}: no such RDMA device on this host (present: {})",
                if present.is_empty() {
                    "none".into()
                } else {
                    present.join(", ")
                }
            )));
        }
        let given = (
            std::env::var("RDMA_TEST_GID_INDEX")
                .ok()
                .and_then(|v| v.parse().ok()),
            std::env::var("RDMA_TEST_ADDR")
                .ok()
                .and_then(|v| v.parse().ok()),
        );
        let dev = match given {
            (Some(gid_index), Some(addr)) => rxe::Device {
                name: name.clone(),
                gid_index,
                addr,
            },
            _ => rxe::usable(&name).context(format_args!("RDMA_TEST_DEVICE={name}"))?,
        };
        return Ok(Target::Host(dev, "named by RDMA_TEST_DEVICE"));
    }
    for name in rxe::devices() {
        match rxe::usable(&name) {
            Ok(dev) => return Ok(Target::Host(dev, "this host's device")),
            Err(e) => eprintln!("xtask: {e}; not using it"),
        }
    }
    match rxe::up() {
        Ok(dev) => Ok(Target::Host(dev, "rxe on this host, `cargo xtask rxe up`")),
        Err(e) => {
            eprintln!("xtask: host rxe: {e}; using the qemu guest");
            Ok(Target::Guest(vec![guest::Device::Rxe, guest::Device::Siw]))
        }
    }
}

/// `cargo test --workspace|-p CRATE... --no-run --message-format=json`: the test executables,
/// each with the number of device-tier tests it holds (listed on the host, so empty ones are
/// not run).
fn test_binaries(
    selection: &[String],
    features: &[String],
    filter: Option<&str>,
) -> Result<Vec<TestBinary>> {
    let mut cmd = util::cargo();
    cmd.arg("test")
        .args(selection)
        .args(features)
        .arg("--no-run");
    let what = format!("cargo test {} --no-run", selection.join(" "));
    let built = util::built_executables(cmd, &what, |msg| msg["profile"]["test"] == true)?;
    let mut bins: Vec<TestBinary> = Vec::new();
    for util::Executable { exe, dir } in built {
        let mut list = Command::new(&exe);
        list.args(["--ignored", "--list"])
            .args(filter)
            .current_dir(&dir);
        let listing = util::output(list, &format!("{} --list", exe.display()))?;
        let device_tests = listing.lines().filter(|l| l.ends_with(": test")).count();
        if device_tests > 0 {
            bins.push(TestBinary {
                exe,
                dir,
                device_tests,
            });
        }
    }
    Ok(bins)
}

/// How many tests the host tier will run: `cargo test ... -- [FILTER] --list` (which builds
/// them first, as the tier would), counting each binary's and the doc tests' list; `None`
/// (no progress shown) if they cannot be listed. Cargo's lines but its `Running` ones are shown.
fn host_tests(selection: &[String], features: &[String], filter: Option<&str>) -> Option<u64> {
    let mut cmd = util::cargo();
    cmd.arg("test")
        .arg("--no-fail-fast")
        .args(selection)
        .args(features)
        .arg("--")
        .args(filter)
        .args(["--list", "--format", "terse"]);
    let mut n = 0;
    let listed = stream_merged(
        cmd,
        &mut |line| {
            if line.ends_with(": test") {
                n += 1;
            }
        },
        &mut |line| {
            let l = line.trim_start();
            if !l.starts_with("Running ") && !l.starts_with("Doc-tests ") {
                eprintln!("{line}");
            }
        },
    );
    match listed {
        Ok(true) => Some(n),
        _ => {
            eprintln!("xtask: host tier: its tests could not be listed; no progress shown");
            None
        }
    }
}

/// Runs `cmd` with its stdout lines printed through `live` (or as they are, without it) and
/// given to `each`; under a bar its stderr lines are printed through `live` too, so they do
/// not land on the bar. Returns success.
fn stream_shown(cmd: Command, live: Option<&Live>, each: &mut dyn FnMut(&str)) -> Result<bool> {
    match live {
        None => stream(cmd, &mut |line| {
            println!("{line}");
            each(line);
        }),
        Some(live) if live.is_bar() => stream_merged(
            cmd,
            &mut |line| {
                live.output(line);
                each(line);
            },
            &mut |line| live.eprintln(line),
        ),
        Some(live) => stream(cmd, &mut |line| {
            live.output(line);
            each(line);
        }),
    }
}

/// Runs `cmd` with stdout and stderr piped line by line, each to its own callback in the order
/// they come; returns success. A process left behind holding stderr is not waited for.
fn stream_merged(
    mut cmd: Command,
    out: &mut dyn FnMut(&str),
    err: &mut dyn FnMut(&str),
) -> Result<bool> {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .context(format_args!("cannot run {:?}", cmd.get_program()))?;
    let (tx, rx) = std::sync::mpsc::channel::<(bool, String)>();
    let stdout = child.stdout.take().expect("piped stdout");
    let stderr = child.stderr.take().expect("piped stderr");
    let tx_err = tx.clone();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(|l| l.ok()) {
            if tx.send((false, line)).is_err() {
                break;
            }
        }
    });
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(|l| l.ok()) {
            if tx_err.send((true, line)).is_err() {
                break;
            }
        }
    });
    let mut status = None;
    loop {
        // Once the command has ended, what its streams still hold comes within a moment.
        let wait = match status {
            None => Duration::from_millis(200),
            Some(_) => Duration::from_secs(1),
        };
        match rx.recv_timeout(wait) {
            Ok((false, line)) => out(&line),
            Ok((true, line)) => err(&line),
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break,
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) if status.is_some() => break,
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
        }
        if status.is_none() {
            status = child.try_wait()?;
        }
    }
    let status = match status {
        Some(s) => s,
        None => child.wait()?,
    };
    Ok(status.success())
}

/// Runs `cmd` with stdout piped line by line to `each` (stderr inherited); returns success.
pub(crate) fn stream(mut cmd: Command, each: &mut dyn FnMut(&str)) -> Result<bool> {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .context(format_args!("cannot run {:?}", cmd.get_program()))?;
    let out = child.stdout.take().expect("piped stdout");
    for line in BufReader::new(out).lines() {
        let Ok(line) = line else { break };
        each(&line);
    }
    Ok(child.wait()?.success())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Args> {
        Args::parse(&args.iter().map(|s| s.to_string()).collect::<Vec<_>>())
    }

    #[test]
    fn a_test_that_skips_parts_counts_once_as_partly_skipped_and_not_as_skipped() {
        let dir = std::env::temp_dir().join(format!("xtask-skips-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let log = dir.join("skipped.log");
        fs::write(
            &log,
            "it::ud::a: siw0 (iWARP) has no UD\n\
             part of perftest::x: the atomic pair on port 1: no atomics\n\
             part of perftest::x: the atomic pair on port 2: no atomics\n\
             part of perftest::y: the atomic pair on port 3: no atomics\n\
             it::mw::b: siw0 (iWARP) has no memory windows\n",
        )
        .unwrap();
        assert_eq!(count_skips(&log), (2, 2));
        assert_eq!(count_skips(&dir.join("none.log")), (0, 0));
        let tier = Tier {
            label: "siw".into(),
            tally: Tally {
                passed: 10,
                failed: 1,
                results: 1,
            },
            skips: count_skips(&log),
            device: String::new(),
            error: None,
            elapsed: Duration::from_secs(3),
        };
        // Skipped tests passed for libtest: they are taken off the passed.
        assert_eq!(
            tier.summary(),
            "tier siw: 8 passed, 1 failed, 2 skipped, 2 partly skipped (3 s)"
        );
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn packages_are_repeatable_and_kept_apart_from_the_filter() {
        let a = parse(&[
            "-p",
            "memory",
            "--package",
            "cm",
            "-pverbs",
            "--package=xtask",
            "pool",
        ])
        .unwrap();
        assert_eq!(
            a.packages,
            ["rdma-memory", "rdma-cm", "rdma-verbs", "xtask"]
        );
        assert_eq!(a.filter.as_deref(), Some("pool"));
        assert_eq!(
            a.cargo_selection(),
            [
                "-p",
                "rdma-memory",
                "-p",
                "rdma-cm",
                "-p",
                "rdma-verbs",
                "-p",
                "xtask"
            ]
        );
        // The filter may come first, and options after it.
        let a = parse(&["pool", "-p", "memory", "--timeout", "60"]).unwrap();
        assert_eq!(a.filter.as_deref(), Some("pool"));
        assert_eq!(a.packages, ["rdma-memory"]);
        assert_eq!(a.timeout, Duration::from_secs(60));
    }

    #[test]
    fn no_package_means_the_workspace() {
        let a = parse(&[]).unwrap();
        assert_eq!(a.filter, None);
        assert_eq!(a.cargo_selection(), ["--workspace"]);
        assert_eq!(a.cargo_features(), ["--features", "rdma-transport/grpc"]);
        assert_eq!(a.timeout, Duration::from_secs(3600));
        assert!(parse(&["-p", "memory"])
            .unwrap()
            .cargo_features()
            .is_empty());
        assert_eq!(
            parse(&["-p", "memory", "-p", "transport"])
                .unwrap()
                .cargo_features(),
            ["--features", "rdma-transport/grpc"]
        );
    }

    #[test]
    fn crates_are_named_by_folder_import_or_package_name() {
        // `-p transport` as the docs say, the import name, or the package name itself.
        let a = parse(&[
            "-p",
            "transport",
            "-pverbs_sys",
            "--package=rdma-cm",
            "-p",
            "apps",
        ])
        .unwrap();
        assert_eq!(
            a.cargo_selection(),
            [
                "-p",
                "rdma-transport",
                "-p",
                "rdma-verbs-sys",
                "-p",
                "rdma-cm",
                "-p",
                "apps"
            ]
        );
        assert_eq!(a.cargo_features(), ["--features", "rdma-transport/grpc"]);
        let a = parse(&["-p", "rdma-transport"]).unwrap();
        assert_eq!(a.cargo_features(), ["--features", "rdma-transport/grpc"]);
    }

    #[test]
    fn device_picks_one_guest_tier() {
        assert_eq!(parse(&[]).unwrap().device, None);
        let a = parse(&["--device", "siw", "-p", "cm"]).unwrap();
        assert_eq!(a.device, Some(guest::Device::Siw));
        assert_eq!(a.packages, ["rdma-cm"]);
        let e = parse(&["--device", "ib0"]).unwrap_err().to_string();
        assert!(e.contains("rxe (Soft-RoCE) or siw (Soft-iWARP)"), "{e}");
        let e = parse(&["--device"]).unwrap_err().to_string();
        assert!(e.contains("--device needs rxe or siw"), "{e}");
    }

    #[test]
    fn bad_command_lines_say_what_is_wrong() {
        let msg = |args: &[&str]| parse(args).unwrap_err().to_string();
        assert!(
            msg(&["-p"]).contains("-p needs a crate name"),
            "{}",
            msg(&["-p"])
        );
        assert!(msg(&["--timeout", "soon"]).contains("not a number"));
        assert!(msg(&["--frobnicate"]).contains("unknown option \"--frobnicate\""));
        // `cargo xtask test memory pool`: the second word is not taken silently.
        let two = msg(&["memory", "pool"]);
        assert!(
            two.contains("-p CRATE") && two.contains("\"pool\""),
            "{two}"
        );
        assert!(msg(&["--package="]).contains("empty crate name"));
    }

    #[test]
    fn parses_libtest_results() {
        let mut t = Tally::default();
        t.add_line("test result: ok. 3 passed; 0 failed; 2 ignored; 0 measured; 0 filtered out; finished in 0.01s");
        t.add_line(
            "test result: FAILED. 1 passed; 4 failed; 0 ignored; 0 measured; 0 filtered out",
        );
        assert_eq!(t.add_line("running 3 tests"), None);
        t.add_line("test result: \u{1b}[32mok\u{1b}[m. 2 passed; 0 failed; 0 ignored");
        assert_eq!((t.passed, t.failed, t.results), (6, 4, 3));
    }
}
