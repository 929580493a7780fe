//! `cargo xtask bench [NAME...]`: benchmarks on a real RDMA device, from the same ladder as the
//! device tests (a device that exists -> rxe on this host -> the qemu guest, one boot for all).
//! Each benchmark measures ours and a C baseline in the same run, prints the comparison table
//! and writes `target/bench/<name>.json` in the shared comparison shape (see `compare`) and
//! beside it `<name>.svg`, its rows as bars (`chart::comparison`; `cargo xtask chart` draws it
//! again from the JSON); `target/bench/report.md` covers every benchmark of the run, with their
//! charts. The run shows its progress in runs (`progress.rs`): each cargo bench is one, each
//! perftest, pingpong or cost client run another.
use std::path::Path;
use std::process::{Command, ExitCode};
use std::time::Duration;

use serde_json::{Map, Value};

use crate::compare::{Better, Comparison, Report};
use crate::progress::{Event, Live};
use crate::test::{acquire, stream, Target};
use crate::util::{self, Error, Result};
use crate::{apt, chart, cost_bench, guest, perftest_bench, pingpong_bench};

/// How a benchmark runs.
enum Kind {
    /// A cargo bench target (`harness = false`) that takes `--bench` and writes raw JSON to the
    /// path in `json_env`, converted here to the comparison shape.
    Cargo {
        package: &'static str,
        target: &'static str,
        json_env: &'static str,
        /// Turns the raw JSON into the comparison report.
        convert: fn(&std::path::Path, &str) -> Result<Report>,
    },
    /// Our perftest tools against perftest (release builds of `apps`).
    Perftest,
    /// Our `rc-pingpong` alternating with `ibv_rc_pingpong` (release build).
    Pingpong,
    /// Instructions per operation under callgrind, ours beside the C tools (release builds of
    /// `apps` and the transport's `cost` program); not run unless named.
    Cost,
}

struct Bench {
    name: &'static str,
    kind: Kind,
    about: &'static str,
}

const BENCHES: &[Bench] = &[
    Bench {
        name: "memory",
        kind: Kind::Cargo {
            package: "memory",
            target: "registration",
            json_env: "MEMORY_BENCH_JSON",
            convert: memory_report,
        },
        about: "pool alloc+free vs ibv_reg_mr+ibv_dereg_mr, 64 B / 4 KiB / 1 MiB, 1 and 2 threads",
    },
    Bench {
        name: "transport",
        kind: Kind::Cargo {
            package: "transport",
            target: "transport",
            json_env: "TRANSPORT_BENCH_JSON",
            convert: comparison_report,
        },
        about: "transport messages, RPC and large transfers vs ib_send_bw/ib_send_lat/ib_read_bw and rstream",
    },
    Bench {
        name: "stream",
        kind: Kind::Cargo {
            package: "transport",
            target: "stream",
            json_env: "STREAM_BENCH_JSON",
            convert: comparison_report,
        },
        about: "byte stream (tokio) throughput and 64 B echo vs rstream, and the echo vs tokio TcpStream",
    },
    Bench {
        name: "perftest",
        kind: Kind::Perftest,
        about:
            "our send/write/read/atomic latency and bandwidth tools vs perftest's ib_*, two hosts",
    },
    Bench {
        name: "pingpong",
        kind: Kind::Pingpong,
        about: "rc-pingpong vs ibv_rc_pingpong, usec/iter at 64 B and 4 KiB, runs alternating",
    },
    Bench {
        name: "cost",
        kind: Kind::Cost,
        about: "instructions per operation (callgrind) and system calls, ours vs the C tools; \
                only when named",
    },
    Bench {
        name: "scale",
        kind: Kind::Cargo {
            package: "transport",
            target: "scale",
            json_env: "SCALE_BENCH_JSON",
            convert: scale_report,
        },
        about: "1 to 10,000 connections between two endpoints: connect rate vs cmtime, memory \
                per connection, messages lost, round trips; only when named",
    },
];

/// Benchmarks that run only when named: long, or needing tools of their own.
fn only_when_named(b: &Bench) -> bool {
    matches!(b.kind, Kind::Cost) || b.name == "scale"
}

fn usage() -> String {
    let mut s = String::from(
        "usage: cargo xtask bench [NAME...]   (all but cost and scale when none is named)\n",
    );
    for b in BENCHES {
        s.push_str(&format!("  {:<10} {}\n", b.name, b.about));
    }
    s
}

pub fn main(args: &[String]) -> Result<ExitCode> {
    let mut chosen: Vec<&Bench> = Vec::new();
    for a in args {
        if a == "--help" || a == "-h" {
            print!("{}", usage());
            return Ok(ExitCode::SUCCESS);
        }
        let b = BENCHES
            .iter()
            .find(|b| b.name == a)
            .ok_or_else(|| Error::new(format!("unknown benchmark {a:?}\n{}", usage())))?;
        chosen.push(b);
    }
    if chosen.is_empty() {
        chosen = BENCHES.iter().filter(|b| !only_when_named(b)).collect();
    }
    apt::ensure(apt::BASE)?;
    let cost_chosen = chosen.iter().any(|b| matches!(b.kind, Kind::Cost));
    // The cost bench's report again from the files of its last run, without running it.
    let cost_from_raw = std::env::var_os("XTASK_COST_FROM_RAW").is_some_and(|v| !v.is_empty());
    if cost_chosen {
        apt::ensure(apt::COST)?;
    }
    let out_dir = util::target_dir().join("bench");
    std::fs::create_dir_all(&out_dir)?;
    let raw = |b: &Bench| out_dir.join(format!("{}.raw.json", b.name));
    let cost_raw = out_dir.join("cost").join("raw");
    let mut cost_cases: Option<(Vec<cost_bench::Set>, Vec<cost_bench::Row>)> = None;

    // Build every chosen benchmark on the host first; the device runs only what was built.
    let mut script = String::from("fail=0\n");
    let mut steps = 0;
    for b in &chosen {
        let start = script.len();
        script.push_str(&format!("echo '@@bench {}'\n", b.name));
        match &b.kind {
            Kind::Cargo {
                package,
                target,
                json_env,
                ..
            } => {
                let exe = built_bench(package, target)?;
                // The scale bench's choice of connection counts goes along to the device.
                let forwarded: String = ["SCALE_CONNECTIONS", "SCALE_IDLE", "SCALE_CHURN"]
                    .into_iter()
                    .filter(|_| b.name == "scale")
                    .filter_map(|k| {
                        Some(format!(
                            "{k}={} ",
                            util::shell_quote(&std::env::var(k).ok()?)
                        ))
                    })
                    .collect();
                script.push_str(&format!(
                    "(cd {dir} && {forwarded}{json_env}={json} exec {exe} --bench) || fail=1\n",
                    dir = util::shell_quote(&e_dir(&exe)),
                    json = util::shell_quote(&raw(b).to_string_lossy()),
                    exe = util::shell_quote(&exe.exe.to_string_lossy()),
                ));
            }
            Kind::Perftest => {
                let mut cmd = util::cargo();
                cmd.args(["build", "--release", "-p", "apps", "--bins"]);
                util::status(cmd, "cargo build --release -p apps --bins")?;
                let bins = util::target_dir().join("release");
                script.push_str(&perftest_bench::script(
                    &perftest_bench::cases(),
                    &bins,
                    perftest_bench::ROUNDS,
                ));
            }
            Kind::Pingpong => {
                let mut cmd = util::cargo();
                cmd.args(["build", "--release", "-p", "apps", "--bin", "rc-pingpong"]);
                util::status(cmd, "cargo build --release -p apps --bin rc-pingpong")?;
                let exe = util::target_dir().join("release").join("rc-pingpong");
                script.push_str(&pingpong_bench::script(
                    &exe,
                    &pingpong_bench::SIZES,
                    pingpong_bench::PAIRS,
                    pingpong_bench::ITERS,
                ));
            }
            Kind::Cost if cost_from_raw => {
                let (sets, rows) = cost_bench::only(
                    cost_bench::cases(Path::new("bin"), Path::new("bin/cost")),
                    std::env::var("XTASK_COST_CASES").ok().as_deref(),
                );
                cost_cases = Some((sets, rows));
            }
            Kind::Cost => {
                let mut cmd = util::cargo();
                cmd.args(["build", "--release", "-p", "apps", "--bins"]);
                util::status(cmd, "cargo build --release -p apps --bins")?;
                let exe = built_bench("transport", "cost")?;
                let _ = std::fs::remove_dir_all(&cost_raw);
                std::fs::create_dir_all(&cost_raw)?;
                let bins = cost_bench::stripped_copies(
                    &util::target_dir().join("release"),
                    &exe.exe,
                    &out_dir.join("cost").join("bin"),
                )?;
                let (sets, rows) = cost_bench::only(
                    cost_bench::cases(&bins, &bins.join("cost")),
                    std::env::var("XTASK_COST_CASES").ok().as_deref(),
                );
                script.push_str(&cost_bench::script(
                    &sets,
                    &rows,
                    &cost_raw,
                    &bins.join(cost_bench::POLLSHIM),
                ));
                cost_cases = Some((sets, rows));
            }
        }
        steps += match b.kind {
            Kind::Cargo { .. } => 1,
            _ => script_runs(&script[start..]),
        };
    }
    script.push_str("echo '@@bench end'\nexit $fail\n");

    // Run: lines of the perftest and pingpong sections are kept for parsing (their case
    // markers are shown).
    let mut lines: Vec<String> = Vec::new();
    let mut pp_lines: Vec<String> = Vec::new();
    let mut section = String::new();
    let live = Live::start("bench", steps, "runs");
    let mut on_line = |line: &str| {
        if let Some(name) = line.strip_prefix("@@bench ") {
            if section.is_empty() {
                live.event(Event::BinaryStarted);
            } else {
                if chosen
                    .iter()
                    .any(|b| b.name == section && matches!(b.kind, Kind::Cargo { .. }))
                {
                    live.event(Event::TestFinished);
                }
                live.event(Event::BinaryFinished);
            }
            section = name.to_string();
            if name != "end" {
                live.println(&format!("xtask: bench {name}"));
            }
            return;
        }
        let ended = Some(Event::TestFinished).filter(|_| run_ended(&section, line));
        if section == "perftest" {
            if let Some(case) = line.strip_prefix("@@case ") {
                live.println(&format!("  {case}"));
            } else if line.starts_with("@@rc ") && line != "@@rc 0" {
                live.println_then(&format!("  ({line})"), ended);
            } else if ended.is_some() {
                live.event(Event::TestFinished);
            }
            lines.push(line.to_string());
        } else if section == "cost" {
            if let Some(run) = line.strip_prefix("@@cost ") {
                let f: Vec<&str> = run.split_whitespace().collect();
                if let [key, step, n, rc, peer] = f.as_slice() {
                    let status = match (*rc, *peer) {
                        ("0", "0") => String::new(),
                        _ => format!("  (status {rc}, peer {peer}: see cost/raw/{key}.{step}.log)"),
                    };
                    let text = format!("  {key} step {step}, {n} ops{status}");
                    live.println_then(&text, ended);
                } else {
                    live.event(Event::TestFinished);
                }
            } else {
                live.println(line);
            }
        } else if section == "pingpong" {
            if let Some(run) = line.strip_prefix("@@pp ") {
                live.println_then(&format!("  {run}"), ended);
            } else {
                live.println(line);
            }
            pp_lines.push(line.to_string());
        } else {
            live.println(line);
        }
    };
    let (ok, device) = if cost_from_raw && chosen.len() == 1 {
        (true, "(the cost bench's last run)".to_string())
    } else {
        match acquire()? {
            Target::Host(dev, origin) => {
                let mut cmd = Command::new("sh");
                cmd.arg("-c")
                    .arg(&script)
                    .current_dir(util::workspace_root())
                    .env("RDMA_TEST_DEVICE", &dev.name)
                    .env("RDMA_TEST_GID_INDEX", dev.gid_index.to_string())
                    .env("RDMA_TEST_ADDR", dev.addr.to_string());
                let ok = stream(cmd, &mut on_line)?;
                (ok, format!("{} ({origin})", dev.name))
            }
            Target::Guest(_) => {
                let outcome = guest::run(&mut guest::Options {
                    two_hosts: true,
                    device: guest::Device::Rxe,
                    timeout: Duration::from_secs(if cost_chosen { 7200 } else { 3600 }),
                    script,
                    on_line: &mut on_line,
                    yields_cpu: false,
                })?;
                (outcome.status.success(), outcome.device())
            }
        }
    };
    live.finish();
    println!("device: {device}");

    let mut md = String::from("# Benchmark report\n\nMeasured in one run on the same device; under emulation compare the ratios, not the absolute values.\n\n");
    let mut all_ok = ok;
    for b in &chosen {
        let path = out_dir.join(format!("{}.json", b.name));
        let report = match &b.kind {
            Kind::Cargo { convert, .. } => match convert(&raw(b), &device) {
                Ok(r) => r,
                Err(e) => {
                    eprintln!("xtask: bench {}: {e}", b.name);
                    all_ok = false;
                    continue;
                }
            },
            Kind::Perftest => {
                // Every client's output, for a look at a case that failed.
                std::fs::write(out_dir.join("perftest.log"), lines.join("\n") + "\n")?;
                let rows = perftest_bench::parse(&lines);
                let r = perftest_bench::report(&device, &rows);
                if let Err(e) = perftest_bench::charts(&rows, &out_dir) {
                    eprintln!("xtask: bench perftest: {e}");
                    all_ok = false;
                }
                let expected = perftest_bench::cases().len() * 2 + perftest_bench::CONTROLS.len();
                if rows.len() < expected {
                    eprintln!(
                        "xtask: bench perftest: {} of {expected} runs gave a result (see above)",
                        rows.len()
                    );
                    all_ok = false;
                }
                r
            }
            Kind::Pingpong => {
                let samples = pingpong_bench::parse(&pp_lines);
                let r = pingpong_bench::report(&device, &samples, pingpong_bench::ITERS);
                for c in &r.comparisons {
                    println!(
                        "{}: median ratio {:.3}x, quiet runs' median ratio {:.3}x ({} runs), per-pair ratio median {:.3}x, fastest runs {:.1} vs {:.1} usec/iter",
                        c.case,
                        c.ratio(),
                        c.extra["quiet_median_ratio"].as_f64().unwrap_or(f64::NAN),
                        c.extra["quiet_runs"],
                        c.extra["pair_ratio_median"].as_f64().unwrap_or(f64::NAN),
                        c.extra["ours_min"].as_f64().unwrap_or(f64::NAN),
                        c.extra["baseline_min"].as_f64().unwrap_or(f64::NAN),
                    );
                }
                let want = pingpong_bench::SIZES.len() * pingpong_bench::PAIRS * 3;
                let got: usize = samples.values().map(Vec::len).sum();
                if got < want {
                    eprintln!(
                        "xtask: bench pingpong: {got} of {want} runs gave a result (see above)"
                    );
                    all_ok = false;
                }
                r
            }
            Kind::Cost => {
                let (sets, rows) = cost_cases.as_ref().expect("built above");
                let measured = cost_bench::measure(&cost_raw, sets, rows);
                let missing: Vec<&str> = rows
                    .iter()
                    .zip(&measured)
                    .filter(|(_, m)| m.ours_runs.is_empty() || m.baseline_runs.is_empty())
                    .map(|(r, _)| r.case.as_str())
                    .collect();
                if !missing.is_empty() {
                    eprintln!(
                        "xtask: bench cost: no runs for {} (logs in {})",
                        missing.join(", "),
                        cost_raw.display()
                    );
                    all_ok = false;
                }
                if let Err(e) =
                    cost_bench::write_functions(&cost_raw, &out_dir.join("cost"), sets, rows)
                {
                    eprintln!("xtask: bench cost: {e}");
                    all_ok = false;
                }
                cost_bench::report(&device, sets, rows, &measured)
            }
        };
        report.write(&path)?;
        let table = match b.kind {
            Kind::Cost => cost_bench::table(&report),
            _ => report.table(),
        };
        println!("\nbench {}:\n{table}", b.name);
        println!("bench {}: JSON in {}", b.name, path.display());
        let svg = format!("{}.svg", b.name);
        match chart::comparison(&report.to_json(), &out_dir.join(&svg)) {
            // Nothing to draw (a scale run of the idle endpoint only).
            Err(_) if report.comparisons.is_empty() => {
                println!("bench {}: no comparisons, no chart", b.name)
            }
            Ok(()) => println!(
                "bench {}: chart in {}",
                b.name,
                out_dir.join(&svg).display()
            ),
            Err(e) => {
                eprintln!("xtask: bench {}: {e}", b.name);
                all_ok = false;
            }
        }
        let mut charts = vec![("ours beside the baseline", svg.as_str())];
        if let Kind::Perftest = b.kind {
            charts.extend([
                ("latency (typical)", "perftest-latency.svg"),
                ("latency (99.9th percentile)", "perftest-latency-p99.svg"),
                ("bandwidth", "perftest-bw.svg"),
            ]);
        }
        md.push_str(&report.markdown(&charts));
    }
    let md_path = out_dir.join("report.md");
    std::fs::write(&md_path, md)?;
    println!("report: {}", md_path.display());
    if all_ok {
        Ok(ExitCode::SUCCESS)
    } else {
        Err(Error::new("a benchmark failed (see above)"))
    }
}

/// `cargo xtask chart [NAME...]`: each named benchmark's chart, `target/bench/NAME.svg`, drawn
/// again from the JSON of its last run (`NAME.json`) without running it; without a name, every
/// benchmark that has a JSON there.
pub fn chart_main(args: &[String]) -> Result<ExitCode> {
    let usage =
        "usage: cargo xtask chart [NAME...]   (every benchmark with a JSON when none is named)";
    if let Some(a) = args.iter().find(|a| a.starts_with('-')) {
        if a == "--help" || a == "-h" {
            println!("{usage}");
            return Ok(ExitCode::SUCCESS);
        }
        return Err(Error::new(format!("unknown option {a:?}\n{usage}")));
    }
    let dir = util::target_dir().join("bench");
    let json = |name: &str| dir.join(format!("{name}.json"));
    let names: Vec<&str> = if args.is_empty() {
        BENCHES
            .iter()
            .map(|b| b.name)
            .filter(|n| json(n).is_file())
            .collect()
    } else {
        args.iter().map(String::as_str).collect()
    };
    if names.is_empty() {
        return Err(Error::new(format!(
            "no benchmark JSON in {} (cargo xtask bench writes them)",
            dir.display()
        )));
    }
    for name in names {
        let path = json(name);
        let text = std::fs::read_to_string(&path)
            .map_err(|e| Error::new(format!("{}: {e}", path.display())))?;
        let doc: Value = serde_json::from_str(&text)
            .map_err(|e| Error::new(format!("{}: {e}", path.display())))?;
        let svg = dir.join(format!("{name}.svg"));
        chart::comparison(&doc, &svg)?;
        println!("chart: {}", svg.display());
    }
    Ok(ExitCode::SUCCESS)
}

/// The client runs of a perftest, pingpong or cost script: each line that calls its run
/// function (`pt_case`, `pp_run`, `run`) ends in one line that [`run_ended`] sees.
fn script_runs(script: &str) -> u64 {
    script
        .lines()
        .filter(|l| {
            ["pt_case ", "pp_run ", "run "]
                .iter()
                .any(|f| l.starts_with(f))
        })
        .count() as u64
}

/// Whether `line` of bench `section`'s output ends one of its client runs.
fn run_ended(section: &str, line: &str) -> bool {
    match section {
        "perftest" => line.starts_with("@@rc "),
        "pingpong" => line.starts_with("@@pp "),
        "cost" => line.starts_with("@@cost "),
        _ => false,
    }
}

/// Builds bench target `target` of `package` (`cargo bench --no-run`) and returns its
/// executable.
fn built_bench(package: &str, target: &str) -> Result<util::Executable> {
    let package = util::package_name(package);
    let mut cmd = util::cargo();
    cmd.args(["bench", "-p", package, "--bench", target, "--no-run"]);
    let what = format!("cargo bench -p {package} --bench {target} --no-run");
    util::built_executables(cmd, &what, |msg| {
        msg["target"]["name"] == *target
            && msg["target"]["kind"]
                .as_array()
                .is_some_and(|k| k.iter().any(|k| k == "bench"))
    })?
    .into_iter()
    .next()
    .ok_or_else(|| Error::new(format!("`{what}` built no executable")))
}

fn e_dir(e: &util::Executable) -> String {
    e.dir.to_string_lossy().into_owned()
}

/// A bench whose raw JSON is already in the comparison shape (the transport's).
/// The scale bench's report: its comparisons (our connect rate against cmtime's), and its
/// rows of figures per number of connections, its idle endpoints' and its churn's figures
/// kept beside them as `rows`, `idle` and `churn`.
fn scale_report(raw: &std::path::Path, device: &str) -> Result<Report> {
    let mut report = comparison_report(raw, device)?;
    let text = std::fs::read_to_string(raw)?;
    let v: Value =
        serde_json::from_str(&text).map_err(|e| Error::new(format!("{}: {e}", raw.display())))?;
    for key in ["rows", "idle", "churn"] {
        report.extra.insert(key.into(), v[key].clone());
    }
    Ok(report)
}

fn comparison_report(raw: &std::path::Path, device: &str) -> Result<Report> {
    let text = std::fs::read_to_string(raw)
        .map_err(|e| Error::new(format!("no results ({}): {e}", raw.display())))?;
    let v: Value =
        serde_json::from_str(&text).map_err(|e| Error::new(format!("{}: {e}", raw.display())))?;
    let comparisons = v["comparisons"]
        .as_array()
        .ok_or_else(|| Error::new(format!("{}: no comparisons", raw.display())))?
        .iter()
        .map(|c| Comparison {
            case: c["case"].as_str().unwrap_or("?").to_string(),
            metric: c["metric"].as_str().unwrap_or("?").to_string(),
            unit: c["unit"].as_str().unwrap_or("").to_string(),
            ours: c["ours"].as_f64().unwrap_or(f64::NAN),
            baseline: c["baseline"].as_f64().unwrap_or(f64::NAN),
            baseline_name: c["baseline_name"].as_str().unwrap_or("").to_string(),
            better: if c["better"] == "lower" {
                Better::Lower
            } else {
                Better::Higher
            },
            // null: no goal, a ratio only reported.
            goal: c["goal"].as_f64().unwrap_or(f64::NAN),
            extra: c
                .as_object()
                .map(|m| {
                    m.iter()
                        .filter(|(k, _)| !crate::compare::FIELDS.contains(&k.as_str()))
                        .map(|(k, v)| (k.clone(), v.clone()))
                        .collect()
                })
                .unwrap_or_default(),
        })
        .collect();
    Ok(Report {
        bench: v["bench"].as_str().unwrap_or("?").to_string(),
        device: v["device"].as_str().unwrap_or(device).to_string(),
        comparisons,
        extra: Map::new(),
    })
}

/// The memory bench's own JSON, in the comparison shape: pool (ours) against
/// `ibv_reg_mr` + `ibv_dereg_mr` (baseline), ns per operation per thread; its other fields kept.
fn memory_report(raw: &std::path::Path, device: &str) -> Result<Report> {
    let text = std::fs::read_to_string(raw).map_err(|e| {
        Error::new(format!(
            "no results from the memory bench ({}): {e}",
            raw.display()
        ))
    })?;
    let v: Value =
        serde_json::from_str(&text).map_err(|e| Error::new(format!("{}: {e}", raw.display())))?;
    let mut extra = Map::new();
    if let Value::Object(m) = &v {
        for (k, val) in m {
            if !matches!(k.as_str(), "results" | "device") {
                extra.insert(k.clone(), val.clone());
            }
        }
    }
    let comparisons = v["results"]
        .as_array()
        .map(|rs| {
            rs.iter()
                .map(|r| {
                    let mut e = Map::new();
                    for k in ["size", "threads", "pool_ops", "reg_mr_ops"] {
                        e.insert(k.into(), r[k].clone());
                    }
                    Comparison {
                        case: format!(
                            "{} B x{} thread(s)",
                            r["size"].as_u64().unwrap_or(0),
                            r["threads"].as_u64().unwrap_or(0)
                        ),
                        metric: "alloc+free".into(),
                        unit: "ns/op/thread".into(),
                        ours: r["pool_ns_per_op"].as_f64().unwrap_or(f64::NAN),
                        baseline: r["reg_mr_ns_per_op"].as_f64().unwrap_or(f64::NAN),
                        baseline_name: "ibv_reg_mr+ibv_dereg_mr".into(),
                        better: Better::Lower,
                        goal: 1.0,
                        extra: e,
                    }
                })
                .collect()
        })
        .unwrap_or_default();
    Ok(Report {
        bench: "memory".into(),
        device: v["device"].as_str().unwrap_or(device).to_string(),
        comparisons,
        extra,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn each_run_of_a_script_is_one_step_and_ends_in_its_marker() {
        let cases = perftest_bench::cases();
        let pt = perftest_bench::script(&cases, Path::new("/bin"), 2);
        let with_control = cases.iter().filter(|c| c.has_control()).count();
        assert_eq!(
            script_runs(&pt),
            (2 * (2 * cases.len() + with_control)) as u64
        );
        let pp = pingpong_bench::script(Path::new("/bin/rc-pingpong"), &[64, 4096], 3, 10);
        assert_eq!(script_runs(&pp), 2 * 3 * 3);
        assert!(run_ended("perftest", "@@rc 0"));
        assert!(!run_ended("perftest", "@@case send_lat 64 ours"));
        assert!(run_ended("pingpong", "@@pp ours 64 1 1.23 usec/iter"));
        assert!(!run_ended("pingpong", "@@pp-failed ours 64 1 rc=1"));
        assert!(run_ended("cost", "@@cost key 1 100 0 0"));
        assert!(!run_ended("transport", "@@rc 0"));
    }

    #[test]
    fn comparison_shaped_results_pass_through() {
        let dir = std::env::temp_dir().join(format!("xtask-cmp-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let raw = dir.join("t.raw.json");
        let doc = json!({"bench": "transport", "device": "rxe0+rxe1", "comparisons": [
            {"case": "rpc 64B", "metric": "median", "unit": "us", "ours": 30.0, "baseline": 20.0,
             "baseline_name": "ib_send_lat", "ratio": 1.5, "better": "lower", "goal": 1.1,
             "polling": "busy"}]});
        std::fs::write(&raw, doc.to_string()).unwrap();
        let r = comparison_report(&raw, "x").unwrap();
        let v = r.to_json();
        assert_eq!(v["bench"], "transport");
        assert_eq!(v["device"], "rxe0+rxe1");
        let c = &v["comparisons"][0];
        assert_eq!(c["ratio"], 1.5);
        assert_eq!(c["better"], "lower");
        assert_eq!(c["polling"], "busy");
        assert!(!r.comparisons[0].met());
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn memory_results_move_to_the_comparison_shape_keeping_their_fields() {
        let dir = std::env::temp_dir().join(format!("xtask-mem-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let raw = dir.join("memory.raw.json");
        let doc = json!({"benchmark": "memory/registration", "device": "rxe0", "samples": 5,
            "results": [{"size": 64, "threads": 1, "pool_ns_per_op": 50.0, "pool_ops": 10,
                          "reg_mr_ns_per_op": 5000.0, "reg_mr_ops": 3, "ratio": 100.0}]});
        std::fs::write(&raw, doc.to_string()).unwrap();
        let r = memory_report(&raw, "x").unwrap();
        let v = r.to_json();
        assert_eq!(v["bench"], "memory");
        assert_eq!(v["device"], "rxe0");
        assert_eq!(v["samples"], 5);
        let c = &v["comparisons"][0];
        assert_eq!(c["ours"], 50.0);
        assert_eq!(c["baseline"], 5000.0);
        assert_eq!(c["ratio"], 0.01);
        assert_eq!(c["better"], "lower");
        assert_eq!(c["pool_ops"], 10);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
