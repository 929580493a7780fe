//! What the transport's side-by-side benches share: a comparison row, the table, the JSON file
//! (the shared comparison shape `cargo xtask bench` converts) and the `main` around a run.

use std::process::ExitCode;
use std::time::Duration;

/// The whole run is killed after this, whatever hangs.
const WATCHDOG: Duration = Duration::from_secs(900);

/// One comparison row of the JSON.
pub struct Row {
    pub case: String,
    pub metric: &'static str,
    pub unit: &'static str,
    pub ours: f64,
    pub baseline: Option<f64>,
    pub baseline_name: String,
    pub higher: bool,
    /// The ratio to meet; `None`: reported only.
    pub goal: Option<f64>,
    /// The polling mode of our endpoints that gave `ours`, when the bench says.
    pub polling: Option<&'static str>,
}

impl Row {
    /// A control row: a baseline's second runs (`again`) against its first ones (`first`),
    /// the medians of each, with no goal: what two runs of the same program differ by here.
    /// `what` names the program's test, `baseline_name` its first runs.
    pub fn control(
        what: &str,
        metric: &'static str,
        unit: &'static str,
        higher: bool,
        again: Vec<f64>,
        first: Vec<f64>,
        baseline_name: String,
    ) -> Row {
        Row {
            case: format!("control: {what}, a second run"),
            metric,
            unit,
            ours: median_of(again).unwrap_or(f64::NAN),
            baseline: median_of(first),
            baseline_name,
            higher,
            goal: None,
            polling: None,
        }
    }

    pub fn ratio(&self) -> Option<f64> {
        self.baseline.map(|b| self.ours / b)
    }

    fn json(&self) -> serde_json::Value {
        let mut row = serde_json::json!({
            "case": self.case,
            "metric": self.metric,
            "unit": self.unit,
            "ours": self.ours,
            "baseline": self.baseline,
            "baseline_name": self.baseline_name,
            "ratio": self.ratio(),
            "better": if self.higher { "higher" } else { "lower" },
            "goal": self.goal,
        });
        if let Some(p) = self.polling {
            row["polling"] = p.into();
        }
        row
    }
}

/// An empty list with room for `n` round-trip times whose memory is already touched, so that
/// a timed loop filling it takes no page fault (one per 4 KiB of times otherwise, each tens of
/// microseconds under emulation: enough to move a 99th percentile).
pub fn prefaulted(n: usize) -> Vec<Duration> {
    let mut v = Vec::with_capacity(n);
    v.resize(n, Duration::ZERO);
    // The writes must happen although nothing reads them before the list is cleared.
    std::hint::black_box(v.as_mut_slice());
    v.clear();
    v
}

/// The median of `v` (not empty; the upper middle of an even count).
pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// The median of a baseline's successful rounds, `None` if none succeeded.
pub fn median_of(v: Vec<f64>) -> Option<f64> {
    (!v.is_empty()).then(|| median(v))
}

/// A baseline's measurement, or `None` (and why on stderr) if it failed or is not a number.
pub fn baseline(name: &str, r: Result<f64, String>) -> Option<f64> {
    r.and_then(|v| {
        if v > 0.0 && v.is_finite() {
            Ok(v)
        } else {
            Err(format!("it reported {v}, not a measurement"))
        }
    })
    .map_err(|e| eprintln!("baseline {name} failed: {e}"))
    .ok()
}

/// `size` bytes as a case name says it: 64 B, 4 KiB, 1 MiB.
pub fn human(size: usize) -> String {
    match size {
        s if s >= 1 << 20 => format!("{} MiB", s >> 20),
        s if s >= 1 << 10 => format!("{} KiB", s >> 10),
        s => format!("{s} B"),
    }
}

fn print_table(rows: &[Row]) {
    println!(
        "\n{:<36} {:>18} {:>10} {:>10} {:>7} {:>6}",
        "case", "metric", "ours", "baseline", "ratio", "goal"
    );
    for r in rows {
        let b = r.baseline.map_or("-".into(), |b| format!("{b:.2}"));
        let ratio = r.ratio().map_or("-".into(), |x| format!("{x:.2}"));
        let goal = r.goal.map_or("-".into(), |g| {
            format!("{}{g}", if r.higher { ">=" } else { "<=" })
        });
        println!(
            "{:<36} {:>18} {:>10.2} {b:>10} {ratio:>7} {goal:>6}  {} ({})",
            r.case, r.metric, r.ours, r.unit, r.baseline_name
        );
    }
}

/// The bench's `main`: only says how to run it unless given `--bench`; otherwise runs `run`
/// under a watchdog, prints the table, writes the JSON (to `$<env>` or the target dir) and
/// exits non-zero if a measurement of ours failed. `run` returns the device names.
pub fn main(
    bench: &str,
    env: &str,
    run: impl FnOnce(&mut Vec<Row>) -> Result<String, String>,
) -> ExitCode {
    // `cargo test --benches` runs this without `--bench`: it needs two devices, so only say how.
    if !std::env::args().any(|a| a == "--bench") {
        println!("{bench} bench: run with `cargo xtask bench {bench}` (needs two RDMA devices)");
        return ExitCode::SUCCESS;
    }
    let name = bench.to_owned();
    std::thread::spawn(move || {
        std::thread::sleep(WATCHDOG);
        eprintln!("{name} bench: still running after {WATCHDOG:?}, giving up");
        std::process::exit(2);
    });
    let mut rows = Vec::new();
    let outcome = run(&mut rows);
    print_table(&rows);
    let device = match &outcome {
        Ok(d) => d.clone(),
        Err(_) => testkit::device().name,
    };
    let json = serde_json::json!({
        "bench": bench,
        "device": device,
        "comparisons": rows.iter().map(Row::json).collect::<Vec<_>>(),
    });
    let path = testkit::bench_json_path(env, &format!("{bench}.raw.json"));
    let written = path
        .parent()
        .map_or(Ok(()), std::fs::create_dir_all)
        .and_then(|()| std::fs::write(&path, format!("{json:#}\n")));
    if let Err(e) = written {
        eprintln!("cannot write {}: {e}", path.display());
        return ExitCode::FAILURE;
    }
    println!("JSON: {}", path.display());
    match outcome {
        Ok(_) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{bench} bench failed: {e}");
            ExitCode::FAILURE
        }
    }
}
