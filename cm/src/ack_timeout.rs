//! The local ACK timeout of a reliable connection: how long a QP waits for the peer's
//! acknowledgement before it sends again, as the 5-bit exponent InfiniBand and RoCE encode
//! (4.096 µs × 2^n) and as a [`Duration`].
use std::time::Duration;

/// The unit of the encoding: 4.096 µs.
const UNIT_NANOS: u64 = 4096;

/// Largest exponent the 5-bit field holds (2^31 × 4.096 µs, about 2.4 hours).
pub const MAX_ACK_TIMEOUT_EXPONENT: u8 = 31;

/// The longest timeout the encoding holds: 4.096 µs × 2^[`MAX_ACK_TIMEOUT_EXPONENT`].
pub const MAX_ACK_TIMEOUT: Duration = Duration::from_nanos(UNIT_NANOS << MAX_ACK_TIMEOUT_EXPONENT);

/// The exponent whose timeout is the shortest at least `timeout`: 4.096 µs × 2^n ≥ `timeout`,
/// at least 1 (0 means "never time out" in the encoding, which would leave a lost packet
/// unrecovered) and at most [`MAX_ACK_TIMEOUT_EXPONENT`].
pub fn ack_timeout_exponent(timeout: Duration) -> u8 {
    let nanos = timeout.as_nanos();
    (1..MAX_ACK_TIMEOUT_EXPONENT)
        .find(|&n| u128::from(UNIT_NANOS << n) >= nanos)
        .unwrap_or(MAX_ACK_TIMEOUT_EXPONENT)
}

/// The timeout exponent `n` stands for: 4.096 µs × 2^n (`None` for 0, which means no
/// timeout, and for values past the 5-bit field).
pub fn ack_timeout_duration(n: u8) -> Option<Duration> {
    (1..=MAX_ACK_TIMEOUT_EXPONENT)
        .contains(&n)
        .then(|| Duration::from_nanos(UNIT_NANOS << n))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn perftests_default_of_14_is_67_milliseconds() {
        assert_eq!(
            ack_timeout_duration(14),
            Some(Duration::from_nanos(67_108_864))
        );
        assert_eq!(ack_timeout_exponent(Duration::from_millis(67)), 14);
        assert_eq!(ack_timeout_exponent(Duration::from_nanos(67_108_864)), 14);
        assert_eq!(ack_timeout_exponent(Duration::from_nanos(67_108_865)), 15);
    }

    #[test]
    fn the_exponent_rounds_up_and_stays_in_the_field() {
        assert_eq!(ack_timeout_exponent(Duration::ZERO), 1);
        assert_eq!(ack_timeout_exponent(Duration::from_micros(1)), 1);
        assert_eq!(ack_timeout_exponent(Duration::from_secs(1)), 18);
        assert_eq!(ack_timeout_exponent(Duration::from_secs(86_400)), 31);
        for n in 1..=MAX_ACK_TIMEOUT_EXPONENT {
            let d = ack_timeout_duration(n).unwrap();
            assert_eq!(ack_timeout_exponent(d), n);
        }
        assert_eq!(ack_timeout_duration(0), None);
        assert_eq!(ack_timeout_duration(32), None);
        assert_eq!(
            ack_timeout_duration(MAX_ACK_TIMEOUT_EXPONENT),
            Some(MAX_ACK_TIMEOUT)
        );
    }
}
