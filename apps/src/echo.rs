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

/// Parses a polling mode of `--polling`: `adaptive[:SPIN_US]` (default spin: the transport's,
/// [`transport::DEFAULT_ADAPTIVE_SPIN`]), `busy`, `event`, or `reactor[:SPIN_US]` (progress
/// from tokio's reactor; spin 0 unless given).
pub fn parse_polling(s: &str) -> Result<transport::Polling, String> {
    use transport::Polling;
    let (mode, spin) = match s.split_once(':') {
        Some((m, us)) => {
            let us: u64 = us
                .parse()
                .map_err(|_| format!("spin '{us}' is not a number of microseconds"))?;
            (m, Some(Duration::from_micros(us)))
        }
        None => (s, None),
    };
    match (mode, spin) {
        ("adaptive", spin) => Ok(Polling::Adaptive {
            spin: spin.unwrap_or(transport::DEFAULT_ADAPTIVE_SPIN),
        }),
        ("reactor", spin) => Ok(Polling::Reactor {
            spin: spin.unwrap_or(Duration::ZERO),
        }),
        ("busy", None) => Ok(Polling::Busy),
        ("event", None) => Ok(Polling::Event),
        ("busy" | "event", Some(_)) => Err(format!("{mode} takes no spin time")),
        _ => Err(format!(
            "unknown polling mode '{mode}': use adaptive[:SPIN_US], busy, event or reactor[:SPIN_US]"
        )),
    }
}

/// The endpoint options both echo programs take.
#[derive(clap::Args, Debug, Clone)]
pub struct EndpointArgs {
    /// How the endpoint polls: adaptive or adaptive:SPIN_US, busy, event, reactor or
    /// reactor:SPIN_US (tokio's reactor drives progress; with a spin for the lowest latency,
    /// e.g. reactor:1000).
    #[arg(long, default_value = "adaptive", value_parser = parse_polling)]
    pub polling: transport::Polling,
    /// Microseconds a read polls the device itself before it waits (busy read; 0: none).
    /// With reactor:1000 and --busy-read 1000, the lowest latency on a quiet machine.
    #[arg(long, default_value_t = 0)]
    pub busy_read: u64,
    /// Milliseconds a queue pair waits for the peer's acknowledgement before it sends again
    /// (rounded up to 4.096 us x 2^n; default: the transport's, 67 ms).
    #[arg(long, value_parser = parse_millis)]
    pub ack_timeout: Option<Duration>,
    /// Prints the endpoint's statistics and its port's device counters every SECS seconds
    /// (fractions allowed), and once more at the end.
    #[arg(long, value_name = "SECS", value_parser = parse_secs)]
    pub stats: Option<Duration>,
}

/// Parses a positive number of seconds (fractions allowed).
fn parse_secs(s: &str) -> Result<Duration, String> {
    match s.parse::<f64>() {
        Ok(secs) if secs > 0.0 && secs.is_finite() => Ok(Duration::from_secs_f64(secs)),
        _ => Err(format!("'{s}' is not a positive number of seconds")),
    }
}

/// Parses a positive number of milliseconds (fractions allowed).
fn parse_millis(s: &str) -> Result<Duration, String> {
    match s.parse::<f64>() {
        Ok(ms) if ms > 0.0 && ms.is_finite() => Ok(Duration::from_secs_f64(ms / 1000.0)),
        _ => Err(format!("'{s}' is not a positive number of milliseconds")),
    }
}

/// The endpoint configuration `args` ask for.
pub fn config(args: &EndpointArgs) -> transport::EndpointConfig {
    let mut config = transport::EndpointConfig::default()
        .with_polling(args.polling)
        .with_busy_read(Duration::from_micros(args.busy_read));
    if let Some(timeout) = args.ack_timeout {
        config = config.with_ack_timeout(timeout);
    }
    config
}

/// An endpoint on the device of `ip` configured by `args`; for the reactor modes, with its
/// tokio driver spawned on the current runtime.
pub fn endpoint(
    ip: std::net::IpAddr,
    args: &EndpointArgs,
) -> transport::Result<transport::Endpoint> {
    let ep = transport::Endpoint::with_config(ip, config(args))?;
    if matches!(args.polling, transport::Polling::Reactor { .. }) {
        ep.spawn_tokio_driver()?;
    }
    if let Some(every) = args.stats {
        crate::live_stats::spawn_reporter(&ep, every);
    }
    Ok(ep)
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

    #[test]
    fn polling_modes_parse_with_and_without_spin() {
        use transport::Polling;
        assert_eq!(
            parse_polling("adaptive").unwrap(),
            transport::EndpointConfig::default().polling()
        );
        assert_eq!(
            parse_polling("adaptive:20").unwrap(),
            Polling::Adaptive {
                spin: Duration::from_micros(20)
            }
        );
        assert_eq!(
            parse_polling("reactor:1000").unwrap(),
            Polling::Reactor {
                spin: Duration::from_millis(1)
            }
        );
        assert_eq!(
            parse_polling("reactor").unwrap(),
            Polling::Reactor {
                spin: Duration::ZERO
            }
        );
        assert_eq!(parse_polling("busy").unwrap(), Polling::Busy);
        assert_eq!(parse_polling("event").unwrap(), Polling::Event);
        assert!(parse_polling("busy:5").unwrap_err().contains("no spin"));
        assert!(parse_polling("reactor:x")
            .unwrap_err()
            .contains("microseconds"));
        assert!(parse_polling("spin")
            .unwrap_err()
            .contains("unknown polling mode"));
    }
}
