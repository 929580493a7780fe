//! Credit accounting in both directions: absolute, wrapping u32 limits (PROTOCOL.md, "Credits").

use super::error::ProtocolError;

/// Credits of one connection.
///
/// Sending: we may send frame number `sent` while `sent < peer_limit`; data frames need more
/// than `reserve` credits left, control frames may use the reserve, and the very last credit
/// only carries a limit that grants the peer something new (so both ends can never sit at zero
/// with updates neither can send).
///
/// Receiving: the peer may have sent up to `released + window` frames; the limit advertised last
/// is `advertised`.
#[derive(Debug, Clone)]
pub(crate) struct Credits {
    sent: u32,
    peer_limit: u32,
    peer_window: u32,
    received: u32,
    released: u32,
    window: u32,
    advertised: u32,
    reserve: u32,
}

impl Credits {
    pub(crate) fn new(window: u32, reserve: u32, peer_window: u32) -> Self {
        Credits {
            sent: 0,
            peer_limit: peer_window,
            peer_window,
            received: 0,
            released: 0,
            window,
            advertised: window,
            reserve,
        }
    }

    /// Credits we may still use.
    pub(crate) fn available(&self) -> u32 {
        self.peer_limit.wrapping_sub(self.sent)
    }

    /// Our current limit for the peer.
    pub(crate) fn limit(&self) -> u32 {
        self.released.wrapping_add(self.window)
    }

    /// Whether a frame (data or control) may be sent now.
    pub(crate) fn can_send(&self, data: bool) -> bool {
        let avail = self.available();
        if data {
            avail > self.reserve
        } else {
            avail >= 2 || (avail == 1 && self.limit() != self.advertised)
        }
    }

    /// Whether an explicit CREDIT frame is due (the advertised limit lags by half a window).
    pub(crate) fn update_due(&self) -> bool {
        self.limit().wrapping_sub(self.advertised) >= (self.window / 2).max(1)
    }

    /// Accounts one frame sent; returns the limit to write in its header.
    pub(crate) fn on_send(&mut self) -> u32 {
        debug_assert!(self.available() > 0);
        self.sent = self.sent.wrapping_add(1);
        self.advertised = self.limit();
        self.advertised
    }

    /// Accounts one frame received, checking that the peer had credit for it.
    pub(crate) fn on_receive(&mut self) -> Result<(), ProtocolError> {
        if self.received.wrapping_sub(self.released) >= self.window {
            return Err(ProtocolError::CreditExceeded {
                seq: self.received,
                limit: self.limit(),
            });
        }
        self.received = self.received.wrapping_add(1);
        Ok(())
    }

    /// Takes the limit piggybacked on a received frame.
    pub(crate) fn on_peer_limit(&mut self, limit: u32) -> Result<(), ProtocolError> {
        let forward = limit.wrapping_sub(self.peer_limit) as i32 >= 0;
        let plausible = limit.wrapping_sub(self.sent) <= self.peer_window;
        if !forward || !plausible {
            return Err(ProtocolError::BadCreditLimit {
                limit,
                previous: self.peer_limit,
                sent: self.sent,
                window: self.peer_window,
            });
        }
        self.peer_limit = limit;
        Ok(())
    }

    /// Whether the limits we send fit a compact DATA frame's `bits` of immediate data: our
    /// window is below `2^bits`, so the peer rebuilds each limit from its low bits.
    pub(crate) fn limit_fits(&self, bits: u32) -> bool {
        self.window < 1 << bits
    }

    /// The whole limit the peer sent as its low `bits` bits (a compact DATA frame): the one
    /// value with those low bits from the last limit on, less than `2^bits` ahead of it. A
    /// peer whose window is `2^bits` or more may not send limits so; `None` then.
    pub(crate) fn peer_limit_from_low(&self, low: u32, bits: u32) -> Option<u32> {
        if self.peer_window >= 1 << bits {
            return None;
        }
        let mask = (1u32 << bits) - 1;
        Some(
            self.peer_limit
                .wrapping_add(low.wrapping_sub(self.peer_limit) & mask),
        )
    }

    /// The peer's window.
    pub(crate) fn peer_window(&self) -> u32 {
        self.peer_window
    }

    /// One received frame's buffer is free again. Returns false (and changes nothing) when
    /// every received frame is already released.
    pub(crate) fn release(&mut self) -> bool {
        if self.released == self.received {
            return false;
        }
        self.released = self.released.wrapping_add(1);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_limit_rebuilt_from_its_low_bits_is_the_one_sent_across_wraps() {
        let bits = 24;
        let mask = (1u32 << bits) - 1;
        let mut c = Credits::new(8, 2, 1000);
        for start in [0u32, mask - 5, u32::MAX - 300, 0x7fff_fff0] {
            c.peer_limit = start;
            c.sent = start.wrapping_sub(1000);
            for advance in [0u32, 1, 17, 999, 1000] {
                let limit = start.wrapping_add(advance);
                assert_eq!(
                    c.peer_limit_from_low(limit & mask, bits),
                    Some(limit),
                    "from {start:#x}, {advance} ahead"
                );
            }
        }
        let wide = Credits::new(8, 2, 1 << 24);
        assert_eq!(
            wide.peer_limit_from_low(5, bits),
            None,
            "a window of 2^24 or more"
        );
        assert!(Credits::new((1 << 24) - 1, 2, 8).limit_fits(bits));
        assert!(!Credits::new(1 << 24, 2, 8).limit_fits(bits));
    }

    #[test]
    fn data_stops_at_the_reserve_control_continues() {
        let mut c = Credits::new(8, 2, 6);
        for _ in 0..4 {
            assert!(c.can_send(true));
            c.on_send();
        }
        assert_eq!(c.available(), 2);
        assert!(!c.can_send(true));
        assert!(c.can_send(false));
        c.on_send();
        // last credit: only with something new to grant
        assert!(!c.can_send(false));
        c.on_receive().unwrap();
        assert!(c.release());
        assert!(c.can_send(false));
        assert_eq!(c.on_send(), 9);
        assert!(!c.can_send(false));
    }

    #[test]
    fn limits_are_absolute_and_checked() {
        let mut c = Credits::new(4, 1, 4);
        c.on_send();
        c.on_peer_limit(5).unwrap();
        c.on_peer_limit(5).unwrap(); // idempotent
        assert!(matches!(
            c.on_peer_limit(4),
            Err(ProtocolError::BadCreditLimit { .. })
        ));
        assert!(matches!(
            c.on_peer_limit(6),
            Err(ProtocolError::BadCreditLimit { .. })
        ));
        for _ in 0..4 {
            c.on_receive().unwrap();
        }
        assert!(matches!(
            c.on_receive(),
            Err(ProtocolError::CreditExceeded { seq: 4, limit: 4 })
        ));
        assert!(c.release());
        c.on_receive().unwrap();
    }

    #[test]
    fn wraps_around_u32() {
        let mut c = Credits::new(4, 1, 4);
        c.sent = u32::MAX - 1;
        c.peer_limit = u32::MAX.wrapping_add(3);
        c.received = u32::MAX;
        c.released = u32::MAX - 1;
        c.advertised = c.limit();
        assert_eq!(c.available(), 4);
        c.on_receive().unwrap();
        c.on_send();
        c.on_send();
        assert_eq!(c.sent, 0);
        c.on_peer_limit(4).unwrap();
        assert_eq!(c.available(), 4);
        assert!(c.release() && c.release());
        assert!(!c.release());
        assert!(c.update_due());
    }

    #[test]
    fn update_due_at_half_window() {
        let mut c = Credits::new(8, 2, 8);
        for _ in 0..4 {
            c.on_receive().unwrap();
        }
        for i in 0..4 {
            assert_eq!(c.update_due(), i >= 4);
            c.release();
        }
        assert!(c.update_due());
        c.on_send();
        assert!(!c.update_due());
    }
}
