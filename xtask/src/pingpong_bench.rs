//! `cargo xtask bench pingpong`: our `rc-pingpong` against rdma-core's `ibv_rc_pingpong`, time
//! per iteration at 64 B and 4 KiB. A noisy host (shared cores, emulation) drifts by more than
//! the gap to measure, so the two alternate in one run (ours then theirs in odd pairs, theirs
//! then ours in even ones: each side runs first equally often and as many times as the other,
//! server on the peer, client here) and each side's median is
//! compared; the median of the per-pair ratios, each side's fastest run, and the medians of
//! the runs within 2x of the fastest (those the host did not hold up) are kept beside it.
//! `ibv_rc_pingpong` also runs a second time beside its first in every pair (the control
//! rows, no goal): what two runs of the same program differ by on this host in this run.
use std::collections::BTreeMap;
use std::path::Path;

use serde_json::{json, Map};

use crate::compare::{finite_or_null, median, Better, Comparison, Report};

/// Message sizes measured.
pub const SIZES: [u64; 2] = [64, 4096];
/// Runs of each side per size, alternating (even, so each side runs first in half the pairs).
/// Under emulation on a shared host a run's time per iteration swings by 10x with the host's
/// load; many short runs give the medians a chance.
pub const PAIRS: usize = 16;
/// Exchanges per run (0.1 to 1 s under emulation).
pub const ITERS: u64 = 1000;

/// The shell script: for each size, `pairs` pairs of runs, ours first in odd pairs and theirs
/// first in even ones, each client's result line marked `@@pp <ours|theirs|control> <size>
/// <pair> <line>`; the control (theirs again) runs right beside theirs: last in odd pairs,
/// first in even ones.
pub fn script(ours: &Path, sizes: &[u64], pairs: usize, iters: u64) -> String {
    let mut s = String::from(
        r#"PD=${RDMA_TEST_PEER_DEVICE:-$RDMA_TEST_DEVICE}
PG=${RDMA_TEST_PEER_GID_INDEX:-$RDMA_TEST_GID_INDEX}
PA=${RDMA_TEST_PEER_ADDR:-$RDMA_TEST_ADDR}
PORT=19400
pp_run() {
  who=$1; prog=$2; size=$3; pair=$4
  PORT=$((PORT+1)); hex=$(printf '%04X' $PORT)
  timeout 300 $prog -d $PD -g $PG -p $PORT -s $size -n ITERS >/dev/null 2>&1 &
  sp=$!
  i=0
  while ! grep -q ":$hex 00000000:0000 0A" /proc/net/tcp 2>/dev/null; do
    i=$((i+1)); [ $i -gt 600 ] && break; sleep 0.02
  done
  out=$(timeout 300 $prog -d $RDMA_TEST_DEVICE -g $RDMA_TEST_GID_INDEX -p $PORT -s $size -n ITERS $PA 2>&1)
  rc=$?
  echo "@@pp $who $size $pair $(echo "$out" | grep 'usec/iter')"
  [ $rc = 0 ] || { echo "@@pp-failed $who $size $pair rc=$rc"; echo "$out" | tail -3; }
  wait $sp
}
"#,
    )
    .replace("ITERS", &iters.to_string());
    let ours = crate::util::shell_quote(&ours.to_string_lossy());
    for size in sizes {
        for pair in 1..=pairs {
            let mine = format!("pp_run ours {ours} {size} {pair}\n");
            let theirs = format!("pp_run theirs ibv_rc_pingpong {size} {pair}\n");
            let control = format!("pp_run control ibv_rc_pingpong {size} {pair}\n");
            let mut runs = [mine, theirs, control];
            if pair % 2 == 0 {
                runs.reverse();
            }
            s.extend(runs);
        }
    }
    s
}

/// Which program a run is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Run {
    /// Our `rc-pingpong`.
    Ours,
    /// `ibv_rc_pingpong`.
    Theirs,
    /// `ibv_rc_pingpong` again, beside its first run of the pair.
    Control,
}

/// Each run's samples: (size, run) -> usec/iter of every run, in run order (pair number).
pub type Samples = BTreeMap<(u64, Run), Vec<(usize, f64)>>;

/// Parses the script's `@@pp` lines (`... N iters in S seconds = U usec/iter`).
pub fn parse(lines: &[String]) -> Samples {
    let mut out = Samples::new();
    for l in lines {
        let Some(rest) = l.strip_prefix("@@pp ") else {
            continue;
        };
        let f: Vec<&str> = rest.split_whitespace().collect();
        let [who, size, pair, ..] = f.as_slice() else {
            continue;
        };
        let usec = f
            .iter()
            .position(|w| *w == "usec/iter")
            .and_then(|i| f.get(i - 1))
            .and_then(|w| w.parse::<f64>().ok());
        let run = match *who {
            "ours" => Run::Ours,
            "theirs" => Run::Theirs,
            "control" => Run::Control,
            _ => continue,
        };
        if let (Ok(size), Ok(pair), Some(usec)) = (size.parse(), pair.parse(), usec) {
            out.entry((size, run)).or_default().push((pair, usec));
        }
    }
    out
}

/// A run slower than this many times the fastest run of its size (either side) was held up
/// by the host rather than by the program: [`report`] gives medians without such runs too.
pub const QUIET_FACTOR: f64 = 2.0;

/// One comparison per size: median usec/iter, ours against `ibv_rc_pingpong` (lower is
/// better, no goal: decisions about speed go through `bench cost`), with every sample and the median per-pair ratio; then per size the
/// control row, `ibv_rc_pingpong`'s second runs against its first ones (no goal).
pub fn report(device: &str, samples: &Samples, iters: u64) -> Report {
    let mut comparisons = Vec::new();
    let mut controls = Vec::new();
    let sizes: std::collections::BTreeSet<u64> = samples.keys().map(|(s, _)| *s).collect();
    for size in sizes {
        let Some(b) = samples.get(&(size, Run::Theirs)) else {
            continue;
        };
        if let Some(o) = samples.get(&(size, Run::Ours)) {
            comparisons.push(compare(
                o,
                b,
                size,
                iters,
                format!("rc_pingpong {size}B"),
                f64::NAN,
            ));
        }
        if let Some(again) = samples.get(&(size, Run::Control)) {
            let case = format!("control: ibv_rc_pingpong {size}B, a second run");
            controls.push(compare(again, b, size, iters, case, f64::NAN));
        }
    }
    comparisons.extend(controls);
    let mut extra = Map::new();
    extra.insert(
        "note".into(),
        json!(
            "ours and ibv_rc_pingpong alternate in one run; medians of each side's runs; \
             control rows: ibv_rc_pingpong's second runs against its first"
        ),
    );
    Report {
        bench: "pingpong".into(),
        device: device.into(),
        comparisons,
        extra,
    }
}

/// The runs `o` against `ibv_rc_pingpong`'s runs `b` of one size: medians, every sample,
/// the median per-pair ratio, each side's fastest run and the quiet runs' medians.
fn compare(
    o: &[(usize, f64)],
    b: &[(usize, f64)],
    size: u64,
    iters: u64,
    case: String,
    goal: f64,
) -> Comparison {
    let values = |v: &[(usize, f64)]| v.iter().map(|(_, u)| *u).collect::<Vec<_>>();
    let pair_ratios: Vec<f64> = o
        .iter()
        .filter_map(|(p, u)| b.iter().find(|(q, _)| q == p).map(|(_, t)| u / t))
        .collect();
    let mut extra = Map::new();
    extra.insert("size".into(), json!(size));
    extra.insert("iterations".into(), json!(iters));
    extra.insert("runs".into(), json!(o.len().min(b.len())));
    extra.insert("ours_samples".into(), json!(values(o)));
    extra.insert("baseline_samples".into(), json!(values(b)));
    let min = |v: &[(usize, f64)]| v.iter().map(|(_, u)| *u).fold(f64::INFINITY, f64::min);
    extra.insert("ours_min".into(), json!(min(o)));
    extra.insert("baseline_min".into(), json!(min(b)));
    // Medians of the runs the host did not hold up (within QUIET_FACTOR of the fastest run of
    // this size, of either side).
    let fastest = min(o).min(min(b));
    let quiet = |v: &[(usize, f64)]| {
        v.iter()
            .map(|(_, u)| *u)
            .filter(|u| *u <= fastest * QUIET_FACTOR)
            .collect::<Vec<_>>()
    };
    let (qo, qb) = (quiet(o), quiet(b));
    extra.insert("quiet_runs".into(), json!([qo.len(), qb.len()]));
    extra.insert(
        "quiet_median_ratio".into(),
        finite_or_null(median(qo) / median(qb)),
    );
    extra.insert(
        "pair_ratio_median".into(),
        finite_or_null(median(pair_ratios)),
    );
    Comparison {
        case,
        metric: "usec/iter".into(),
        unit: "usec".into(),
        ours: median(values(o)),
        baseline: median(values(b)),
        baseline_name: "ibv_rc_pingpong".into(),
        better: Better::Lower,
        goal,
        extra,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn script_alternates_ours_and_theirs_and_who_goes_first() {
        let s = script(Path::new("/x/rc-pingpong"), &[64], 2, 100);
        let runs: Vec<&str> = s.lines().filter(|l| l.starts_with("pp_run ")).collect();
        assert_eq!(
            runs,
            [
                "pp_run ours /x/rc-pingpong 64 1",
                "pp_run theirs ibv_rc_pingpong 64 1",
                "pp_run control ibv_rc_pingpong 64 1",
                "pp_run control ibv_rc_pingpong 64 2",
                "pp_run theirs ibv_rc_pingpong 64 2",
                "pp_run ours /x/rc-pingpong 64 2",
            ]
        );
        assert!(s.contains("-s $size -n 100 $PA"));
    }

    #[test]
    fn medians_and_pair_ratios() {
        let lines: Vec<String> = [
            "@@pp ours 64 1 3000 iters in 0.60 seconds = 200.00 usec/iter",
            "@@pp theirs 64 1 3000 iters in 0.60 seconds = 100.00 usec/iter",
            "@@pp ours 64 2 3000 iters in 0.60 seconds = 90.00 usec/iter",
            "@@pp theirs 64 2 3000 iters in 0.60 seconds = 100.00 usec/iter",
            "@@pp ours 64 3 3000 iters in 0.60 seconds = 110.00 usec/iter",
            "@@pp theirs 64 3 3000 iters in 0.60 seconds = 100.00 usec/iter",
            "@@pp ours 4096 1 ",
            "@@pp-failed ours 4096 1 rc=1",
            "@@pp theirs 4096 1 3000 iters in 0.60 seconds = 300.00 usec/iter",
            "@@pp control 4096 1 3000 iters in 0.60 seconds = 330.00 usec/iter",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let s = parse(&lines);
        assert_eq!(s[&(64, Run::Ours)].len(), 3);
        assert!(!s.contains_key(&(4096, Run::Ours)));
        let r = report("rxe0", &s, 3000);
        assert_eq!(
            r.comparisons.len(),
            2,
            "4096 has no run of ours, only a control"
        );
        let control = &r.comparisons[1];
        assert_eq!(control.case, "control: ibv_rc_pingpong 4096B, a second run");
        assert!((control.ratio() - 1.1).abs() < 1e-12);
        assert!(control.goal.is_nan() && control.met());
        let c = &r.comparisons[0];
        assert_eq!((c.ours, c.baseline), (110.0, 100.0));
        assert!((c.ratio() - 1.1).abs() < 1e-12);
        assert!(c.goal.is_nan() && c.met());
        assert_eq!(c.extra["pair_ratio_median"], json!(1.1));
        assert_eq!(c.extra["ours_samples"], json!([200.0, 90.0, 110.0]));
        assert_eq!(
            (c.extra["ours_min"].clone(), c.extra["baseline_min"].clone()),
            (json!(90.0), json!(100.0))
        );
        // 200 is more than twice the fastest run (90): left out of the quiet medians.
        assert_eq!(c.extra["quiet_runs"], json!([2, 3]));
        assert_eq!(c.extra["quiet_median_ratio"], json!(1.0));
        assert_eq!(median(vec![4.0, 1.0, 3.0, 2.0]), 2.5);
    }
}
