//! `cargo xtask faults`: the transport's fault suite (`transport/tests/it/fault_suite/`) on a real
//! device, then one table and `target/faults/report.json`:
//! `{"device", "scenarios": [{"name", "traffic", "bytes_sent", "bytes_received", "bytes_lost",
//! "bytes_corrupted", "detect_ms", "kept_serving", "pass", ...}]}`.
//!
//! `goodput_vs_clean` is the scenario's goodput over the same traffic's on a clean link;
//! `call_p50_ms` / `call_p99_ms` are the round trips of the netem traffic's RPC calls. The
//! table marks the netem scenarios' goals ([`GOODPUT_GOALS`]): reported, never a failure,
//! since they are timings. `device_counters` is how much each counter of both devices' port
//! (sysfs `hw_counters`, read with `verbs::Context::port_counters`) grew during the scenario,
//! `{"rxe0/1": {"rcvd_seq_err": 12, ...}, ...}`; a second table lists those that grew.
//!
//! Exits non-zero on any loss, corruption, failed scenario, or a scenario that wrote no figures
//! (it crashed or hung).

use std::fs;
use std::process::ExitCode;

use serde_json::{json, Value};

use crate::util::{self, Context, Error, Result};

/// The scenarios the suite records, by the name they write under, one a line: the one place
/// the names live (each test checks its own name against it). A scenario missing from its
/// records crashed or hung; records of scenarios not listed here are reported after these.
const SCENARIOS_LIST: &str = include_str!("../../transport/tests/it/fault_suite/scenarios.txt");

/// The scenarios, in report order.
fn listed_scenarios() -> impl Iterator<Item = &'static str> {
    SCENARIOS_LIST.lines().filter(|l| !l.trim().is_empty())
}

/// Least goodput against the clean link each netem scenario should keep.
const GOODPUT_GOALS: &[(&str, f64)] = &[("loss 1%", 0.5), ("loss 5%", 0.2), ("duplicate 5%", 0.9)];

/// The goal column of a scenario: its goodput goal and whether the figures meet it.
fn goal_cell(s: &Value) -> String {
    let name = s["name"].as_str().unwrap_or("");
    let Some((_, least)) = GOODPUT_GOALS.iter().find(|(n, _)| *n == name) else {
        return "-".to_owned();
    };
    match s["goodput_vs_clean"].as_f64() {
        Some(g) if g >= *least => format!(">={least:.2}x met"),
        _ => format!(">={least:.2}x MISSED"),
    }
}

/// The file a scenario writes its figures to, without the extension (the suite's own rule).
fn file_name(scenario: &str) -> String {
    scenario.replace([' ', '/'], "_")
}

pub fn main(args: &[String]) -> Result<ExitCode> {
    // In the guest, one device: the scenarios' records of a second would replace the first's.
    let device = match args {
        [] => None,
        [opt, d] if opt == "--device" => Some(crate::guest::Device::parse(d)?),
        _ => {
            return Err(Error::new(format!(
                "usage: cargo xtask faults [--device rxe|siw] (got {args:?})"
            )))
        }
    };
    let out = util::target_dir().join("faults");
    let records = out.join("records");
    if records.exists() {
        fs::remove_dir_all(&records).context(format_args!("cannot clear {}", records.display()))?;
    }
    fs::create_dir_all(&records).context(format_args!("cannot create {}", records.display()))?;
    // The test process (on the host or in the guest) writes one file per scenario there.
    std::env::set_var("TRANSPORT_FAULTS_REPORT", &records);
    let mut test_args: Vec<String> = vec!["-p".into(), "transport".into(), "fault_suite::".into()];
    test_args.extend([
        "--device".into(),
        device.unwrap_or(crate::guest::Device::Rxe).name().into(),
    ]);
    let tests = crate::test::main(&test_args)?;

    let mut device = Value::Null;
    let mut scenarios = Vec::new();
    let mut all_pass = tests == ExitCode::SUCCESS;
    for name in listed_scenarios() {
        let file = records.join(format!("{}.json", file_name(name)));
        let record = fs::read_to_string(&file)
            .ok()
            .and_then(|s| serde_json::from_str::<Value>(&s).ok());
        let record = record.unwrap_or_else(|| {
            json!({"name": name, "pass": false, "error": "no figures: the scenario crashed, hung or failed before recording"})
        });
        if device.is_null() {
            device = record["device"].clone();
        }
        all_pass &= record["pass"] == true;
        scenarios.push(record);
    }
    let listed: Vec<String> = listed_scenarios()
        .map(|n| format!("{}.json", file_name(n)))
        .collect();
    let mut unlisted: Vec<_> = fs::read_dir(&records)
        .context(format_args!("cannot read {}", records.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| !listed.iter().any(|l| p.ends_with(l)))
        .collect();
    unlisted.sort();
    for path in unlisted {
        let record = fs::read_to_string(&path)
            .ok()
            .and_then(|s| serde_json::from_str::<Value>(&s).ok())
            .unwrap_or_else(|| json!({"name": path.display().to_string(), "pass": false, "error": "unreadable figures"}));
        all_pass &= record["pass"] == true;
        scenarios.push(record);
    }
    println!();
    println!(
        "{:<26} {:<36} {:>12} {:>10} {:>10} {:>10} {:>8} {:>17} {:>19} {:>8} {:>6}",
        "scenario",
        "traffic",
        "bytes sent",
        "lost",
        "corrupted",
        "detect ms",
        "goodput",
        "call p50/p99 ms",
        "goodput goal",
        "serving",
        "pass"
    );
    for s in &scenarios {
        let num = |k: &str| s[k].as_u64().map_or("-".to_owned(), |v| v.to_string());
        println!(
            "{:<26} {:<36} {:>12} {:>10} {:>10} {:>10} {:>8} {:>17} {:>19} {:>8} {:>6}",
            s["name"].as_str().unwrap_or("?"),
            s["traffic"].as_str().unwrap_or("-"),
            num("bytes_sent"),
            num("bytes_lost"),
            num("bytes_corrupted"),
            s["detect_ms"]
                .as_f64()
                .map_or("-".to_owned(), |v| format!("{v:.0}")),
            s["goodput_vs_clean"]
                .as_f64()
                .map_or("-".to_owned(), |v| format!("{v:.2}x")),
            match (s["call_p50_ms"].as_f64(), s["call_p99_ms"].as_f64()) {
                (Some(p50), Some(p99)) => format!("{p50:.0} / {p99:.0}"),
                _ => "-".to_owned(),
            },
            goal_cell(s),
            match s["kept_serving"].as_bool() {
                Some(true) => "yes",
                Some(false) => "NO",
                None => "-",
            },
            match (s["pass"] == true, s["skipped"].is_string()) {
                (true, true) => "skip",
                (true, false) => "pass",
                (false, _) => "FAIL",
            },
        );
    }
    counters_table(&scenarios);
    let report = json!({"device": device, "scenarios": scenarios});
    let path = out.join("report.json");
    fs::write(&path, serde_json::to_string_pretty(&report).expect("JSON"))
        .context(format_args!("cannot write {}", path.display()))?;
    for s in scenarios.iter().filter(|s| s["skipped"].is_string()) {
        println!(
            "skipped {}: {}",
            s["name"].as_str().unwrap_or("?"),
            s["skipped"].as_str().unwrap_or("")
        );
    }
    println!("\nfaults: report in {}", path.display());
    Ok(if all_pass {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// The device counters that grew during each scenario, a line per port (`-` for a scenario
/// that recorded none, e.g. on siw, whose ports show no counters).
fn counters_table(scenarios: &[Value]) {
    println!();
    println!("{:<26} {:<8} device counters that grew", "scenario", "port");
    for s in scenarios {
        let name = s["name"].as_str().unwrap_or("?");
        let lines = counter_lines(&s["device_counters"]);
        if lines.is_empty() {
            println!("{name:<26} {:<8} -", "-");
        }
        for (i, (port, grew)) in lines.iter().enumerate() {
            println!("{:<26} {port:<8} {grew}", if i == 0 { name } else { "" });
        }
    }
}

/// `(port, "name +n name +n ...")` for each port of a scenario's `device_counters`, the
/// counters that did not grow left out (`none` when none did).
fn counter_lines(ports: &Value) -> Vec<(String, String)> {
    let Some(ports) = ports.as_object() else {
        return Vec::new();
    };
    ports
        .iter()
        .filter(|(_, counters)| counters.as_object().is_some_and(|c| !c.is_empty()))
        .map(|(port, counters)| {
            let grew: Vec<String> = counters
                .as_object()
                .into_iter()
                .flatten()
                .filter_map(|(name, n)| Some((name, n.as_u64()?)))
                .filter(|(_, n)| *n > 0)
                .map(|(name, n)| format!("{name} +{n}"))
                .collect();
            let grew = if grew.is_empty() {
                "none".to_owned()
            } else {
                grew.join(" ")
            };
            (port.clone(), grew)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_scenario_is_listed_once_and_every_goal_names_a_listed_one() {
        let names: Vec<&str> = listed_scenarios().collect();
        assert!(!names.is_empty());
        let mut unique = names.clone();
        unique.sort_unstable();
        unique.dedup();
        assert_eq!(unique.len(), names.len(), "a scenario is listed twice");
        for (goal, _) in GOODPUT_GOALS {
            assert!(names.contains(goal), "goodput goal for unlisted {goal:?}");
        }
    }

    #[test]
    fn counter_lines_list_what_grew_per_port() {
        let ports = json!({
            "rxe0/1": {"rcvd_seq_err": 3, "sent_pkts": 120, "send_err": 0},
            "rxe1/1": {"sent_pkts": 0},
            "siw0/1": {},
        });
        assert_eq!(
            counter_lines(&ports),
            [
                (
                    "rxe0/1".to_owned(),
                    "rcvd_seq_err +3 sent_pkts +120".to_owned()
                ),
                ("rxe1/1".to_owned(), "none".to_owned()),
            ]
        );
        assert!(counter_lines(&Value::Null).is_empty());
    }
}
