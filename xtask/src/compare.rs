//! The comparison report every side-by-side benchmark writes: ours against a baseline measured
//! in the same run, as `target/bench/<name>.json`
//! (`{"bench", "device", "comparisons": [{"case", "metric", "unit", "ours", "baseline",
//! "baseline_name", "ratio", "better", "goal"}]}`, `ratio` = ours / baseline, `goal` the ratio
//! to meet), a printed table, and a Markdown section for `target/bench/report.md`.
use std::path::Path;

use serde_json::{json, Map, Value};

use crate::util::{Error, Result};

/// `x` as a JSON number, or null when it is not finite (a ratio with a zero or missing side).
pub fn finite_or_null(x: f64) -> Value {
    if x.is_finite() {
        json!(x)
    } else {
        Value::Null
    }
}

/// The median of `v` (NaN when empty).
pub fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// The fields every comparison has, in the JSON; a bench may add others beside them.
pub const FIELDS: [&str; 9] = [
    "case",
    "metric",
    "unit",
    "ours",
    "baseline",
    "baseline_name",
    "ratio",
    "better",
    "goal",
];

/// Which direction is better for a metric.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Better {
    /// Latency, time per operation.
    Lower,
    /// Bandwidth, rates.
    Higher,
}

impl Better {
    fn as_str(self) -> &'static str {
        match self {
            Better::Lower => "lower",
            Better::Higher => "higher",
        }
    }
}

/// One case: ours against the baseline.
#[derive(Debug, Clone)]
pub struct Comparison {
    /// What was measured, e.g. `send_lat 64B`.
    pub case: String,
    /// The metric, e.g. `t_typical`.
    pub metric: String,
    /// Its unit, e.g. `usec`.
    pub unit: String,
    /// Our value.
    pub ours: f64,
    /// The baseline's value.
    pub baseline: f64,
    /// The baseline program or call.
    pub baseline_name: String,
    /// Which direction is better.
    pub better: Better,
    /// The ratio (ours / baseline) to meet: at most it for `Lower`, at least for `Higher`.
    /// NaN (`null` in the JSON): no goal, the ratio is only reported.
    pub goal: f64,
    /// Bench-specific fields kept beside the common ones.
    pub extra: Map<String, Value>,
}

impl Comparison {
    /// ours / baseline (NaN when the baseline is zero).
    pub fn ratio(&self) -> f64 {
        if self.baseline == 0.0 {
            f64::NAN
        } else {
            self.ours / self.baseline
        }
    }

    /// Whether the ratio meets the goal.
    pub fn met(&self) -> bool {
        if self.goal.is_nan() {
            return true;
        }
        let r = self.ratio();
        match self.better {
            Better::Lower => r <= self.goal,
            Better::Higher => r >= self.goal,
        }
    }

    fn to_json(&self) -> Value {
        let mut m = Map::new();
        m.insert("case".into(), json!(self.case));
        m.insert("metric".into(), json!(self.metric));
        m.insert("unit".into(), json!(self.unit));
        m.insert("ours".into(), json!(self.ours));
        m.insert("baseline".into(), json!(self.baseline));
        m.insert("baseline_name".into(), json!(self.baseline_name));
        m.insert("ratio".into(), finite_or_null(self.ratio()));
        m.insert("better".into(), json!(self.better.as_str()));
        m.insert("goal".into(), json!(self.goal));
        for (k, v) in &self.extra {
            m.entry(k.clone()).or_insert_with(|| v.clone());
        }
        Value::Object(m)
    }
}

/// A bench's comparisons, with the fields it keeps beside them.
#[derive(Debug, Clone)]
pub struct Report {
    /// Bench name.
    pub bench: String,
    /// The device it ran on.
    pub device: String,
    /// The cases.
    pub comparisons: Vec<Comparison>,
    /// Bench-specific top-level fields.
    pub extra: Map<String, Value>,
}

impl Report {
    /// The JSON document.
    pub fn to_json(&self) -> Value {
        let mut m = Map::new();
        m.insert("bench".into(), json!(self.bench));
        m.insert("device".into(), json!(self.device));
        m.insert(
            "comparisons".into(),
            Value::Array(self.comparisons.iter().map(Comparison::to_json).collect()),
        );
        for (k, v) in &self.extra {
            m.entry(k.clone()).or_insert_with(|| v.clone());
        }
        Value::Object(m)
    }

    /// Writes the JSON document to `path`.
    pub fn write(&self, path: &Path) -> Result<()> {
        let text = serde_json::to_string_pretty(&self.to_json())
            .map_err(|e| Error::new(format!("JSON of {}: {e}", self.bench)))?;
        std::fs::write(path, text + "\n")
            .map_err(|e| Error::new(format!("write {}: {e}", path.display())))
    }

    /// The table: case, metric, ours, baseline, ratio, goal (and whether it is met).
    pub fn table(&self) -> String {
        let mut s = format!(
            "{:<22} {:<10} {:>12} {:>12} {:<16} {:>7} {:>8}\n",
            "case", "metric", "ours", "baseline", "baseline_name", "ratio", "goal"
        );
        for c in &self.comparisons {
            let op = if c.better == Better::Lower {
                "<="
            } else {
                ">="
            };
            let goal = if c.goal.is_nan() {
                "-".to_string()
            } else {
                format!("{op}{:.2}x", c.goal)
            };
            s.push_str(&format!(
                "{:<22} {:<10} {:>12.3} {:>12.3} {:<16} {:>6.2}x {goal}{}\n",
                c.case,
                c.metric,
                c.ours,
                c.baseline,
                c.baseline_name,
                c.ratio(),
                if c.met() { "" } else { "  (missed)" }
            ));
        }
        s
    }

    /// A Markdown section with the table and `charts` (file names beside report.md).
    pub fn markdown(&self, charts: &[(&str, &str)]) -> String {
        let mut s = format!("## {}\n\nDevice: {}\n\n", self.bench, self.device);
        for (title, file) in charts {
            s.push_str(&format!("![{title}]({file})\n\n"));
        }
        s.push_str("| case | metric | unit | ours | baseline | baseline_name | ratio | goal |\n");
        s.push_str("|---|---|---|---:|---:|---|---:|---|\n");
        for c in &self.comparisons {
            let op = if c.better == Better::Lower {
                "≤"
            } else {
                "≥"
            };
            let goal = if c.goal.is_nan() {
                "none (reported)".to_string()
            } else {
                format!("{op} {:.2}×", c.goal)
            };
            s.push_str(&format!(
                "| {} | {} | {} | {:.3} | {:.3} | {} | {:.2}× | {goal}{} |\n",
                c.case,
                c.metric,
                c.unit,
                c.ours,
                c.baseline,
                c.baseline_name,
                c.ratio(),
                if c.met() { "" } else { " (missed)" }
            ));
        }
        s.push('\n');
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_has_the_shared_shape_and_keeps_extra_fields() {
        let mut extra = Map::new();
        extra.insert("threads".into(), json!(2));
        let r = Report {
            bench: "demo".into(),
            device: "rxe0".into(),
            comparisons: vec![Comparison {
                case: "send_lat 2B".into(),
                metric: "t_typical".into(),
                unit: "usec".into(),
                ours: 9.0,
                baseline: 10.0,
                baseline_name: "ib_send_lat".into(),
                better: Better::Lower,
                goal: 1.0,
                extra,
            }],
            extra: Map::from_iter([("samples".to_string(), json!(5))]),
        };
        let v = r.to_json();
        assert_eq!(v["bench"], "demo");
        assert_eq!(v["samples"], 5);
        let c = &v["comparisons"][0];
        for k in FIELDS {
            assert!(!c[k].is_null(), "{k} missing in {c}");
        }
        assert_eq!(c["ratio"], 0.9);
        assert_eq!(c["better"], "lower");
        assert_eq!(c["threads"], 2);
        assert!(r.comparisons[0].met());
        assert!(r.table().contains("0.90x <=1.00x"));
        assert!(r.markdown(&[("x", "x.svg")]).contains("![x](x.svg)"));
    }

    #[test]
    fn a_nan_goal_is_reported_only_never_missed() {
        let c = Comparison {
            case: "echo vs TCP".into(),
            metric: "median".into(),
            unit: "us".into(),
            ours: 30.0,
            baseline: 10.0,
            baseline_name: "tcp".into(),
            better: Better::Lower,
            goal: f64::NAN,
            extra: Map::new(),
        };
        assert!(c.met());
        assert!(c.to_json()["goal"].is_null());
        let r = Report {
            bench: "stream".into(),
            device: "rxe0".into(),
            comparisons: vec![c],
            extra: Map::new(),
        };
        assert!(r.table().contains("3.00x -"), "{}", r.table());
        assert!(!r.table().contains("missed"));
        assert!(r.markdown(&[]).contains("none (reported)"));
    }
}
