//! Pieces of `echo-client`: the payload of each message (checkable byte by byte) and the
//! latency summary.

use std::time::Duration;

/// The bytes of message `seq` of connection `conn`: every byte depends on both and on its
/// position, so a misplaced, stale or foreign byte is caught.
pub fn payload(conn: u32, seq: u64, len: usize) -> Vec<u8> {
    let mut x = (u64::from(conn) << 40 ^ seq).wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// The first position where `got` differs from `want`, if any.
pub fn first_mismatch(got: &[u8], want: &[u8]) -> Option<usize> {
    got.iter().zip(want).position(|(a, b)| a != b)
}

/// Latency percentiles of round trips.
#[derive(Debug, Clone, PartialEq)]
pub struct Summary {
    /// Round trips measured.
    pub count: usize,
    /// Minimum, median, p99, p99.9 and maximum.
    pub min: Duration,
    /// Median.
    pub p50: Duration,
    /// 99th percentile.
    pub p99: Duration,
    /// 99.9th percentile.
    pub p999: Duration,
    /// Maximum.
    pub max: Duration,
}

impl Summary {
    /// Summarizes `samples` (sorted here); `None` when empty.
    pub fn of(mut samples: Vec<Duration>) -> Option<Summary> {
        if samples.is_empty() {
            return None;
        }
        samples.sort_unstable();
        let at = |q: f64| samples[((samples.len() - 1) as f64 * q).round() as usize];
        Some(Summary {
            count: samples.len(),
            min: samples[0],
            p50: at(0.5),
            p99: at(0.99),
            p999: at(0.999),
            max: samples[samples.len() - 1],
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_of_a_known_distribution() {
        let s = Summary::of((1..=1000).rev().map(Duration::from_micros).collect()).unwrap();
        assert_eq!(s.count, 1000);
        assert_eq!(s.min, Duration::from_micros(1));
        assert_eq!(s.p50, Duration::from_micros(501));
        assert_eq!(s.p99, Duration::from_micros(990));
        assert_eq!(s.p999, Duration::from_micros(999));
        assert_eq!(s.max, Duration::from_micros(1000));
        assert_eq!(Summary::of(Vec::new()), None);
    }

    #[test]
    fn payloads_differ_by_connection_and_sequence_and_mismatches_are_found() {
        let a = payload(1, 7, 256);
        assert_eq!(a, payload(1, 7, 256));
        assert_ne!(a, payload(2, 7, 256));
        assert_ne!(a, payload(1, 8, 256));
        let mut b = a.clone();
        b[100] ^= 1;
        assert_eq!(first_mismatch(&b, &a), Some(100));
        assert_eq!(first_mismatch(&a, &a), None);
    }
}
