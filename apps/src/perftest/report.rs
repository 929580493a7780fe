//! Results as perftest computes and prints them: latency statistics over round-trip samples,
//! bandwidth from post and completion times, perftest's table lines, and JSON with the field
//! names of perftest's `--out_json`.
use std::time::Duration;

use serde_json::{json, Value};

/// perftest's `RESULT_LINE`.
pub const RESULT_LINE: &str =
    "---------------------------------------------------------------------------------------";
/// perftest's `RESULT_FMT_LAT`.
pub const LAT_HEADER: &str = " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] ";
/// perftest's `RESULT_FMT_LAT_DUR`.
pub const LAT_DUR_HEADER: &str = " #bytes        #iterations       t_avg[usec]    tps average";
/// perftest's `RESULT_FMT` / `RESULT_FMT_G`.
pub fn bw_header(gbits: bool) -> &'static str {
    if gbits {
        " #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]"
    } else {
        " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]"
    }
}

/// perftest drops this many of the largest samples (`LAT_MEASURE_TAIL`).
const LAT_MEASURE_TAIL: usize = 2;

/// Latency statistics of one size, in microseconds.
#[derive(Debug, Clone, PartialEq)]
pub struct LatStats {
    /// Message size.
    pub size: u64,
    /// Iterations run.
    pub iters: u64,
    /// Smallest sample.
    pub min: f64,
    /// Largest sample kept.
    pub max: f64,
    /// Median ("typical").
    pub typical: f64,
    /// Mean.
    pub avg: f64,
    /// Standard deviation.
    pub stdev: f64,
    /// 99th percentile.
    pub p99: f64,
    /// 99.9th percentile.
    pub p999: f64,
}

impl LatStats {
    /// Statistics from post times (`posted[i]`: when exchange `i` started): the samples are
    /// the gaps between consecutive posts, divided by `rtt_factor` (2 for ping-pongs, whose
    /// gap is a round trip; 1 for READ and atomics), as perftest's `print_report_lat`.
    pub fn from_posts(size: u64, posted: &[Duration], rtt_factor: f64) -> Option<LatStats> {
        let mut d: Vec<f64> = posted
            .windows(2)
            .map(|w| (w[1] - w[0]).as_secs_f64() * 1e6 / rtt_factor)
            .collect();
        if d.len() <= LAT_MEASURE_TAIL {
            return None;
        }
        d.sort_by(f64::total_cmp);
        let all = d.len();
        let n = all - LAT_MEASURE_TAIL;
        let kept = &d[..n];
        let typical = if n % 2 == 0 {
            (kept[n / 2 - 1] + kept[n / 2]) / 2.0
        } else {
            kept[n / 2]
        };
        let avg = kept.iter().sum::<f64>() / n as f64;
        let var = kept.iter().map(|x| (x - avg).powi(2)).sum::<f64>() / n as f64;
        let at = |q: f64| d[((n as f64 * q).ceil() as usize).min(all - 1)];
        Some(LatStats {
            size,
            iters: posted.len() as u64,
            min: d[0],
            max: d[n.min(all - 1)],
            typical,
            avg,
            stdev: var.sqrt(),
            p99: at(0.99),
            p999: at(0.999),
        })
    }

    /// perftest's `REPORT_FMT_LAT` line.
    pub fn line(&self) -> String {
        format!(
            " {:<7} {}          {:<7.2}        {:<7.2}      {:<7.2}  \t       {:<7.2}     \t{:<7.2}\t\t{:<7.2} \t\t{:<7.2}",
            self.size,
            self.iters,
            self.min,
            self.max,
            self.typical,
            self.avg,
            self.stdev,
            self.p99,
            self.p999
        )
    }

    /// The `--out_json` fields, rounded as printed.
    pub fn json(&self) -> Value {
        json!({
            "MsgSize": self.size,
            "n_iterations": self.iters,
            "t_min": r2(self.min),
            "t_max": r2(self.max),
            "t_typical": r2(self.typical),
            "t_avg": r2(self.avg),
            "t_stdev": r2(self.stdev),
            "percentile_99": r2(self.p99),
            "percentile_99.9": r2(self.p999),
        })
    }
}

/// Duration-mode latency: iterations in the measured time.
#[derive(Debug, Clone, PartialEq)]
pub struct LatDuration {
    /// Message size.
    pub size: u64,
    /// Iterations completed.
    pub iters: u64,
    /// Mean latency (usec).
    pub avg: f64,
    /// Transactions per second.
    pub tps: f64,
}

impl LatDuration {
    /// perftest's `REPORT_FMT_LAT_DUR` line.
    pub fn line(&self) -> String {
        format!(
            " {:<7}       {}            {:<7.2}        {:<7.2}",
            self.size, self.iters, self.avg, self.tps
        )
    }
    /// The `--out_json` fields.
    pub fn json(&self) -> Value {
        json!({"MsgSize": self.size, "n_iterations": self.iters, "t_avg": r2(self.avg),
               "tps_average": r2(self.tps)})
    }
}

/// Bandwidth of one size.
#[derive(Debug, Clone, PartialEq)]
pub struct BwStats {
    /// Message size.
    pub size: u64,
    /// Messages.
    pub iters: u64,
    /// Peak bandwidth (MB/s or Gb/s).
    pub peak: f64,
    /// Average bandwidth (MB/s or Gb/s).
    pub avg: f64,
    /// Message rate (Mpps).
    pub msg_rate: f64,
    /// Whether the unit is Gb/s.
    pub gbits: bool,
}

impl BwStats {
    /// From the time of the first post and, per message, the time its completion was seen
    /// (`completed[i]`, measured from the same origin); with `peak`, the peak is the best
    /// rate over any run of messages starting at a moderation boundary, as perftest's
    /// `print_report_bw` finds it (in time quadratic in the messages), else 0, as perftest
    /// prints it then.
    pub fn compute(
        size: u64,
        posted: &[Duration],
        completed: &[Duration],
        cq_mod: usize,
        peak: bool,
        gbits: bool,
    ) -> BwStats {
        let n = completed.len().min(posted.len());
        let unit = if gbits { 125_000_000.0 } else { 1_048_576.0 };
        if n == 0 {
            return BwStats {
                size,
                iters: 0,
                peak: 0.0,
                avg: 0.0,
                msg_rate: 0.0,
                gbits,
            };
        }
        let total = (completed[n - 1].saturating_sub(posted[0]))
            .as_secs_f64()
            .max(1e-9);
        let avg = size as f64 * n as f64 / total / unit;
        let msg_rate = n as f64 / total / 1e6;
        if !peak {
            return BwStats {
                size,
                iters: n as u64,
                peak: 0.0,
                avg,
                msg_rate,
                gbits,
            };
        }
        let step = cq_mod.max(1);
        let mut best = f64::MAX;
        for i in (0..n).step_by(step) {
            let mut j = (i + 1).div_ceil(step) * step - 1;
            while j < n {
                let t = completed[j].saturating_sub(posted[i]).as_secs_f64() / (j - i + 1) as f64;
                best = best.min(t);
                j += step;
            }
            let t = completed[n - 1].saturating_sub(posted[i]).as_secs_f64() / (n - i) as f64;
            best = best.min(t);
        }
        let peak = if best > 0.0 && best < f64::MAX {
            size as f64 / best / unit
        } else {
            avg
        };
        BwStats {
            size,
            iters: n as u64,
            peak: peak.max(avg),
            avg,
            msg_rate,
            gbits,
        }
    }

    /// perftest's `REPORT_FMT` line (`REPORT_FMT_EXT` for small Gb/s values).
    pub fn line(&self) -> String {
        if self.gbits && self.avg < 0.1 {
            format!(
                " {:<7}    {}           {:<7.6}            {:<7.6}            {:<7.6}",
                self.size, self.iters, self.peak, self.avg, self.msg_rate
            )
        } else {
            format!(
                " {:<7}    {:<10}       {:<7.2}            {:<7.2}\t\t   {:<7.6}",
                self.size, self.iters, self.peak, self.avg, self.msg_rate
            )
        }
    }

    /// The `--out_json` fields, rounded as printed.
    pub fn json(&self) -> Value {
        let r = if self.gbits && self.avg < 0.1 { r6 } else { r2 };
        json!({
            "MsgSize": self.size,
            "n_iterations": self.iters,
            "BW_peak": r(self.peak),
            "BW_average": r(self.avg),
            "MsgRate": r6(self.msg_rate),
        })
    }
}

/// `x` with two decimals, rounded exactly as the table prints it (`{:.2}` rounds the binary
/// value, so 231.165 prints as 231.16 where `(x * 100.0).round()` would give 231.17).
fn r2(x: f64) -> f64 {
    rounded_as_printed(x, 2)
}

/// `x` with six decimals, rounded as printed.
fn r6(x: f64) -> f64 {
    rounded_as_printed(x, 6)
}

fn rounded_as_printed(x: f64, decimals: usize) -> f64 {
    format!("{x:.decimals$}").parse().unwrap_or(x)
}

/// An empty list with room for `n` entries whose memory is already touched, so that a timed
/// loop filling it takes no page fault: one per 4 KiB of notes otherwise, each costly under
/// emulation, enough to move a latency test's 99th percentile.
pub fn prefaulted<T: Copy>(n: usize, fill: T) -> Vec<T> {
    let mut v = Vec::with_capacity(n);
    v.resize(n, fill);
    // The writes must happen although nothing reads them before the list is cleared.
    std::hint::black_box(v.as_mut_slice());
    v.clear();
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    fn us(v: &[u64]) -> Vec<Duration> {
        v.iter().map(|&x| Duration::from_micros(x)).collect()
    }

    #[test]
    fn latency_statistics_like_perftest() {
        // Round trips of 10, 20, ..., 100 us, then two outliers perftest drops as the tail.
        let mut t = 0;
        let mut posts = vec![0];
        for rtt in (1..=10).map(|i| i * 10).chain([5000, 9000]) {
            t += rtt;
            posts.push(t);
        }
        let s = LatStats::from_posts(2, &us(&posts), 2.0).unwrap();
        assert_eq!(s.iters, 13);
        assert_eq!(s.min, 5.0);
        assert_eq!(s.typical, 27.5); // median of 5..50 (half round trips)
        assert_eq!(s.avg, 27.5);
        assert!((s.stdev - 14.3614).abs() < 1e-3, "{}", s.stdev);
        assert_eq!(s.max, 2500.0); // perftest prints the first dropped sample as t_max
        assert_eq!(s.p99, 2500.0);
        let line = s.line();
        assert!(line.starts_with(" 2       13          5.00"), "{line:?}");
        let j = s.json();
        assert_eq!(j["t_typical"], 27.5);
        assert_eq!(j["MsgSize"], 2);
        assert!(LatStats::from_posts(2, &us(&[0, 1, 2]), 1.0).is_none());
    }

    #[test]
    fn json_rounds_as_the_table_prints() {
        // 100.005 is stored as 100.00499..., which `{:.2}` prints as 100.00; scaling by 100
        // first rounds the product up to 10000.5, then to 100.01.
        let x = 100.005_f64;
        assert_eq!(format!("{x:.2}"), "100.00");
        assert_eq!((x * 100.0).round() / 100.0, 100.01);
        assert_eq!(r2(x), 100.0);
        assert_eq!(
            r6(0.123_456_5),
            format!("{:.6}", 0.123_456_5).parse::<f64>().unwrap()
        );
    }

    #[test]
    fn prefaulted_lists_are_empty_with_their_room() {
        let v = prefaulted(10_000, Duration::ZERO);
        assert!(v.is_empty());
        assert!(v.capacity() >= 10_000);
    }

    #[test]
    fn bandwidth_like_perftest() {
        // 4 messages of 1 MiB, posted at 0, completed at 1, 2, 3, 4 ms: 1000 MiB/s... average
        // over first post to last completion.
        let posted = us(&[0, 0, 0, 0]);
        let completed = us(&[1000, 2000, 3000, 4000]);
        let s = BwStats::compute(1 << 20, &posted, &completed, 1, true, false);
        assert_eq!(s.iters, 4);
        assert!((s.avg - 1000.0).abs() < 1e-6, "{}", s.avg);
        assert!((s.msg_rate - 0.001).abs() < 1e-9);
        assert!(s.peak >= s.avg);
        let g = BwStats::compute(1 << 20, &posted, &completed, 1, true, true);
        assert!((g.avg - 8.388608).abs() < 1e-6, "{}", g.avg);
        assert!(
            s.line().starts_with(" 1048576    4       "),
            "{:?}",
            s.line()
        );
        assert_eq!(s.json()["BW_average"], 1000.0);
        // Without the peak: 0, as perftest prints it, and the same average.
        let n = BwStats::compute(1 << 20, &posted, &completed, 1, false, false);
        assert_eq!((n.peak, n.avg, n.iters), (0.0, s.avg, 4));
        assert!(
            n.line().starts_with(" 1048576    4                0.00 "),
            "{:?}",
            n.line()
        );
    }
}
