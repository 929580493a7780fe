//! `cargo xtask bench perftest`: each of our perftest-compatible tools and its perftest
//! counterpart back to back on the same device pair (server on the peer, client here), at
//! 2 B..64 KiB (latency) and 2 B..1 MiB (bandwidth), in [`ROUNDS`] rounds; the comparison
//! JSON, charts and table, from each side's median over the rounds. A few [`CONTROLS`] run
//! perftest's program a second time beside its first, so the report shows what two runs of
//! the same program differ by on this host in this run: the noise floor of every ratio.
use std::collections::BTreeMap;
use std::path::Path;

use serde_json::{json, Map};

use crate::chart::{self, Series};
use crate::compare::{self, Better, Comparison, Report};
use crate::util::Result;

const LAT_TESTS: [&str; 4] = ["send_lat", "write_lat", "read_lat", "atomic_lat"];
const BW_TESTS: [&str; 3] = ["send_bw", "write_bw", "read_bw"];
const LAT_SIZES: [u64; 5] = [2, 64, 1024, 4096, 65_536];
const BW_SIZES: [u64; 6] = [2, 64, 1024, 16_384, 65_536, 1 << 20];

/// Rounds over every case. Within a round ours and perftest's run back to back, perftest's
/// first in every other round (an even count, so each goes first in half of them); each
/// side's reported row is the median of its rounds (under emulation one run of a case varies
/// by 10% and more, and now and then far more).
pub const ROUNDS: usize = 6;

/// The cases whose perftest program also runs against itself (the control rows): a latency,
/// a message rate and a bandwidth.
pub const CONTROLS: [(&str, u64); 3] = [("send_lat", 64), ("send_bw", 64), ("read_bw", 65_536)];

/// Which program a run is: ours, perftest's, or perftest's again (a control).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Side {
    /// Our tool.
    Ours,
    /// perftest's program.
    Perftest,
    /// perftest's program again, beside its first run in the same round.
    Control,
}

impl Side {
    fn label(self) -> &'static str {
        match self {
            Side::Ours => "ours",
            Side::Perftest => "perftest",
            Side::Control => "control",
        }
    }
}

/// Iterations of a latency case: enough for a steady median (perftest's default of 1000
/// leaves t_typical swinging by several percent), fewer at 64 KiB, where each round trip
/// takes about 2 ms.
fn lat_iters(size: u64) -> u64 {
    if size <= 4096 {
        5000
    } else {
        1000
    }
}

/// Iterations of a bandwidth case: 64 MiB, at least 50 and at most 20,000 messages (perftest
/// leaves the peak out above 20,000). At 5,000 two-byte messages a run lasted an eighth of a
/// second, and its rate swung by 10% from run to run.
fn bw_iters(size: u64) -> u64 {
    ((64u64 << 20) / size).clamp(50, 20_000)
}

/// One measurement to take, for both implementations.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Case {
    /// perftest's test name without `ib_`, e.g. `send_lat`.
    pub test: &'static str,
    /// Message size.
    pub size: u64,
    /// Iterations.
    pub iters: u64,
    /// Send queue depth, when not the tools' default (the same for both).
    pub tx_depth: Option<u32>,
}

impl Case {
    fn is_lat(&self) -> bool {
        self.test.ends_with("_lat")
    }
    fn label(&self) -> String {
        format!("{} {}B", self.test, self.size)
    }
    /// Whether perftest's program also runs against itself in this case.
    pub fn has_control(&self) -> bool {
        CONTROLS.contains(&(self.test, self.size))
    }
}

/// Every case of the benchmark.
pub fn cases() -> Vec<Case> {
    let mut v = Vec::new();
    for test in LAT_TESTS {
        let sizes: &[u64] = if test == "atomic_lat" {
            &[8]
        } else {
            &LAT_SIZES
        };
        for &size in sizes {
            v.push(Case {
                test,
                size,
                iters: lat_iters(size),
                tx_depth: None,
            });
        }
    }
    for test in BW_TESTS {
        for size in BW_SIZES {
            v.push(Case {
                test,
                size,
                iters: bw_iters(size),
                // 128 READs of 1 MiB in flight stall emulated rxe for minutes (perftest's
                // too); both sides get the same shallower queue.
                tx_depth: (test == "read_bw" && size >= 1 << 20).then_some(16),
            });
        }
    }
    v
}

/// The shell script that runs every case `rounds` times, ours and perftest's back to back
/// (alternating which goes first; a control case's second perftest run goes last, or first
/// in the rounds perftest's goes first, so the two runs of perftest's are always adjacent),
/// marking each client's output with `@@case <test> <size> <ours|perftest|control>` and
/// `@@rc <status>`.
pub fn script(cases: &[Case], ours_dir: &Path, rounds: usize) -> String {
    let mut s = String::from(
        r#"PD=${RDMA_TEST_PEER_DEVICE:-$RDMA_TEST_DEVICE}
PG=${RDMA_TEST_PEER_GID_INDEX:-$RDMA_TEST_GID_INDEX}
PA=${RDMA_TEST_PEER_ADDR:-$RDMA_TEST_ADDR}
PORT=19200
pt_case() {
  label=$1; srv=$2; cli=$3; shift 3
  PORT=$((PORT+1)); hex=$(printf '%04X' $PORT)
  timeout 300 $srv -d $PD -x $PG -p $PORT "$@" >/dev/null 2>&1 &
  sp=$!
  i=0
  while ! grep -q ":$hex 00000000:0000 0A" /proc/net/tcp 2>/dev/null; do
    i=$((i+1)); [ $i -gt 600 ] && break; sleep 0.05
  done
  echo "@@case $label"
  timeout 300 $cli -d $RDMA_TEST_DEVICE -x $RDMA_TEST_GID_INDEX -p $PORT "$@" $PA 2>&1
  echo "@@rc $?"
  wait $sp
}
"#,
    );
    for round in 0..rounds {
        for c in cases {
            let ours = ours_dir
                .join(c.test.replace('_', "-"))
                .to_string_lossy()
                .into_owned();
            let theirs = format!("ib_{}", c.test);
            let mut args = format!("-F -n {}", c.iters);
            if c.test != "atomic_lat" {
                args.push_str(&format!(" -s {}", c.size));
            }
            if let Some(t) = c.tx_depth {
                args.push_str(&format!(" -t {t}"));
            }
            let mut runs = vec![(Side::Ours, &ours), (Side::Perftest, &theirs)];
            if c.has_control() {
                runs.push((Side::Control, &theirs));
            }
            if round % 2 == 1 {
                runs.reverse();
            }
            for (who, prog) in runs {
                s.push_str(&format!(
                    "pt_case '{} {} {}' {prog} {prog} {args}\n",
                    c.test,
                    c.size,
                    who.label()
                ));
            }
        }
    }
    s
}

/// A client's result row: the numbers of perftest's table line.
pub type Row = Vec<f64>;

/// Result rows by (test, size, side).
pub type Rows = BTreeMap<(String, u64, Side), Row>;

/// Parses the script's output: (test, size, side) -> result row (each run's last row; over
/// several rounds, the median of each column).
pub fn parse(lines: &[String]) -> Rows {
    let mut runs: BTreeMap<(String, u64, Side), BTreeMap<usize, Row>> = BTreeMap::new();
    let mut round: BTreeMap<(String, u64, Side), usize> = BTreeMap::new();
    let mut current: Option<(String, u64, Side)> = None;
    for l in lines {
        if let Some(rest) = l.strip_prefix("@@case ") {
            let f: Vec<&str> = rest.split_whitespace().collect();
            let side = |who: &str| {
                [Side::Ours, Side::Perftest, Side::Control]
                    .into_iter()
                    .find(|s| s.label() == who)
            };
            current = match f.as_slice() {
                [t, s, who] => s
                    .parse()
                    .ok()
                    .zip(side(who))
                    .map(|(s, side)| ((*t).to_string(), s, side)),
                _ => None,
            };
            if let Some(key) = &current {
                *round.entry(key.clone()).or_default() += 1;
            }
            continue;
        }
        if l.starts_with("@@rc ") {
            current = None;
            continue;
        }
        let Some(key) = &current else { continue };
        if l.starts_with(' ') && l.trim_start().starts_with(|c: char| c.is_ascii_digit()) {
            let row: Row = l
                .split_whitespace()
                .filter_map(|w| w.parse().ok())
                .collect();
            if row.len() == 5 || row.len() == 9 {
                runs.entry(key.clone()).or_default().insert(round[key], row);
            }
        }
    }
    runs.into_iter()
        .filter_map(|(key, rows)| median_row(rows.into_values().collect()).map(|r| (key, r)))
        .collect()
}

/// The median of each column over `rows` (those as long as the first); `None` if empty.
fn median_row(rows: Vec<Row>) -> Option<Row> {
    let len = rows.first()?.len();
    let rows: Vec<Row> = rows.into_iter().filter(|r| r.len() == len).collect();
    Some(
        (0..len)
            .map(|i| compare::median(rows.iter().map(|r| r[i]).collect()))
            .collect(),
    )
}

/// The comparisons: typical latency (lower is better), average bandwidth and, at 2 B, the
/// message rate (higher is better), reported without a goal (decisions about speed go through
/// `bench cost`). Then the control rows: perftest's second runs against its first.
pub fn report(device: &str, rows: &Rows) -> Report {
    let mut comparisons = Vec::new();
    let mut controls = Vec::new();
    for c in cases() {
        let key = |side| (c.test.to_string(), c.size, side);
        let Some(b) = rows.get(&key(Side::Perftest)) else {
            continue;
        };
        let mut extra = Map::new();
        extra.insert("size".into(), json!(c.size));
        extra.insert("iterations".into(), json!(c.iters));
        if let Some(t) = c.tx_depth {
            extra.insert("tx_depth".into(), json!(t));
        }
        let base = format!("ib_{}", c.test);
        // The column compared, from a result line of its test's width. At 2 B the bandwidth
        // rounds to 0.01 MB/s: the message rate says it.
        let (metric, unit, col, better, width) = if c.is_lat() {
            ("t_typical", "usec", 4, Better::Lower, 9)
        } else if c.size == 2 {
            ("msg_rate", "Mpps", 4, Better::Higher, 5)
        } else {
            ("bw_avg", "MB/sec", 3, Better::Higher, 5)
        };
        let compare = |o: &Row, case: String, baseline_name: String, goal: f64| {
            (o.len() == width && b.len() == width).then(|| Comparison {
                case,
                metric: metric.into(),
                unit: unit.into(),
                ours: o[col],
                baseline: b[col],
                baseline_name,
                better,
                goal,
                extra: extra.clone(),
            })
        };
        if let Some(o) = rows.get(&key(Side::Ours)) {
            comparisons.extend(compare(o, c.label(), base.clone(), f64::NAN));
        }
        if let Some(again) = rows.get(&key(Side::Control)) {
            controls.extend(compare(
                again,
                format!("control: {base} {}B, a second run", c.size),
                format!("{base}, the run beside it in each round"),
                f64::NAN,
            ));
        }
    }
    comparisons.extend(controls);
    let mut extra = Map::new();
    extra.insert(
        "note".into(),
        json!("ours and perftest measured back to back in one run; compare ratios"),
    );
    extra.insert("rounds".into(), json!(ROUNDS));
    Report {
        bench: "perftest".into(),
        device: device.into(),
        comparisons,
        extra,
    }
}

/// Writes `perftest-latency.svg` (typical latency), `perftest-latency-p99.svg` (99.9th
/// percentile) and `perftest-bw.svg` (average bandwidth) into `dir`: per test, ours solid and
/// perftest dashed in the same colour.
pub fn charts(rows: &Rows, dir: &Path) -> Result<()> {
    let series = |tests: &[&str], col: usize| -> Vec<Series> {
        let mut v = Vec::new();
        for (i, t) in tests.iter().enumerate() {
            for ours in [true, false] {
                let side = if ours { Side::Ours } else { Side::Perftest };
                let points: Vec<(u64, f64)> = rows
                    .iter()
                    .filter(|((tt, _, s), r)| tt == t && *s == side && r.len() > col)
                    .map(|((_, s, _), r)| (*s, r[col]))
                    .collect();
                if points.is_empty() {
                    continue;
                }
                v.push(Series {
                    name: format!("{} {t}", if ours { "ours" } else { "perftest" }),
                    points,
                    color: i,
                    dashed: !ours,
                });
            }
        }
        v
    };
    chart::draw(
        &dir.join("perftest-latency.svg"),
        "Latency (t_typical), ours vs perftest",
        "t_typical [usec]",
        &series(&LAT_TESTS, 4),
        true,
    )?;
    chart::draw(
        &dir.join("perftest-latency-p99.svg"),
        "Latency tail (99.9th percentile), ours vs perftest",
        "99.9% [usec]",
        &series(&LAT_TESTS, 8),
        true,
    )?;
    chart::draw(
        &dir.join("perftest-bw.svg"),
        "Bandwidth vs message size, ours vs perftest",
        "BW average [MB/sec]",
        &series(&BW_TESTS, 3),
        true,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cases_cover_the_sizes_and_the_script_runs_both_sides() {
        let c = cases();
        assert!(c.iter().any(|c| c.test == "send_lat" && c.size == 65_536));
        assert!(c.iter().any(|c| c.test == "read_bw" && c.size == 1 << 20));
        let s = script(&c[..1], Path::new("/x"), 2);
        let ours = "pt_case 'send_lat 2 ours' /x/send-lat /x/send-lat -F -n 5000 -s 2";
        let theirs = "pt_case 'send_lat 2 perftest' ib_send_lat ib_send_lat";
        // Round 1: ours first; round 2: perftest's first.
        let at = |p: &str| s.match_indices(p).map(|(i, _)| i).collect::<Vec<_>>();
        let (o, t) = (at(ours), at(theirs));
        assert_eq!((o.len(), t.len()), (2, 2));
        assert!(o[0] < t[0] && t[1] < o[1]);
    }

    #[test]
    fn a_control_runs_perftest_again_beside_its_first_run() {
        let c: Vec<Case> = cases().into_iter().filter(Case::has_control).collect();
        assert_eq!(c.len(), CONTROLS.len());
        let s = script(&c[..1], Path::new("/x"), 2);
        let labels: Vec<&str> = s
            .lines()
            .filter_map(|l| l.strip_prefix("pt_case '"))
            .filter_map(|l| l.split('\'').next())
            .collect();
        assert_eq!(
            labels,
            [
                "send_lat 64 ours",
                "send_lat 64 perftest",
                "send_lat 64 control",
                "send_lat 64 control",
                "send_lat 64 perftest",
                "send_lat 64 ours"
            ]
        );
        assert!(s.contains("pt_case 'send_lat 64 control' ib_send_lat ib_send_lat"));
        let out: Vec<String> = [
            "@@case send_lat 64 ours",
            " 64      1000          5.00   9.00   6.00   6.50   0.50   8.00   9.00",
            "@@case send_lat 64 perftest",
            " 64      1000          5.00   9.00   5.00   6.50   0.50   8.00   9.00",
            "@@case send_lat 64 control",
            " 64      1000          5.00   9.00   4.00   6.50   0.50   8.00   9.00",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let r = report("rxe0", &parse(&out));
        assert_eq!(r.comparisons.len(), 2);
        let control = &r.comparisons[1];
        assert_eq!(control.case, "control: ib_send_lat 64B, a second run");
        assert_eq!((control.ours, control.baseline), (4.0, 5.0));
        assert!(control.goal.is_nan() && control.met());
        assert!(
            r.comparisons[0].goal.is_nan(),
            "no goals: speed is decided by bench cost"
        );
    }

    #[test]
    fn parses_rows_and_compares() {
        let out: Vec<String> = [
            "@@case send_lat 2 ours",
            " #bytes #iterations    t_min[usec] ...",
            " 2       1000          5.00   9.00   6.00   6.50   0.50   8.00   9.00",
            "@@rc 0",
            // Two more rounds of ours: the medians are 5.0 (t_min) and 6.0 (t_typical).
            "@@case send_lat 2 ours",
            " 2       1000          4.00   9.00   60.00   6.50   0.50   8.00   9.00",
            "@@rc 0",
            "@@case send_lat 2 ours",
            " 2       1000          7.00   9.00   5.00   6.50   0.50   8.00   9.00",
            "@@rc 0",
            "@@case send_lat 2 perftest",
            " 2       1000          5.00   9.00   5.00   6.50   0.50   8.00   9.00",
            "@@rc 0",
            "@@case send_bw 2 ours",
            " 2          5000             1.00               0.50   \t\t   0.250000",
            "@@rc 0",
            "@@case send_bw 2 perftest",
            " 2          5000             1.00               1.00   \t\t   0.500000",
            "@@rc 0",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let rows = parse(&out);
        assert_eq!(rows.len(), 4);
        let r = report("rxe0", &rows);
        assert_eq!(r.comparisons.len(), 2);
        let lat = &r.comparisons[0];
        assert_eq!(
            (lat.case.as_str(), lat.ours, lat.baseline),
            ("send_lat 2B", 6.0, 5.0)
        );
        assert!(lat.goal.is_nan() && lat.met());
        assert_eq!(r.comparisons[1].metric, "msg_rate");
        assert!((r.comparisons[1].ratio() - 0.5).abs() < 1e-12);
        assert_eq!(rows[&("send_lat".to_string(), 2, Side::Ours)][2], 5.0);
        assert!(script(&cases(), Path::new("/x"), 1).contains("read-bw -F -n 64 -s 1048576 -t 16"));
        let dir = std::env::temp_dir().join(format!("xtask-pt-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        charts(&rows, &dir).unwrap();
        assert!(dir.join("perftest-bw.svg").exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
