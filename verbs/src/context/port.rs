//! Port speed, width and physical state (`ibv_port_attr`'s `active_speed`, `active_width`,
//! `phys_state`), decoded and printed as `ibv_devinfo` prints them.
use std::fmt;

use super::PortAttr;

c_enum! {
    /// Per-lane signalling rate of a port (`active_speed`).
    PortSpeed: u8, unknown Unknown {
        /// SDR, 2.5 Gb/s.
        Sdr = 1,
        /// DDR, 5 Gb/s.
        Ddr = 2,
        /// QDR, 10 Gb/s.
        Qdr = 4,
        /// FDR10, 10 Gb/s.
        Fdr10 = 8,
        /// FDR, 14 Gb/s.
        Fdr = 16,
        /// EDR, 25 Gb/s.
        Edr = 32,
        /// HDR, 50 Gb/s.
        Hdr = 64,
        /// NDR, 100 Gb/s.
        Ndr = 128,
    }
}

impl PortSpeed {
    /// The per-lane rate in Gb/s (`None` for a speed this crate does not know).
    pub fn gbps(self) -> Option<f64> {
        Some(match self {
            PortSpeed::Sdr => 2.5,
            PortSpeed::Ddr => 5.0,
            PortSpeed::Qdr | PortSpeed::Fdr10 => 10.0,
            PortSpeed::Fdr => 14.0,
            PortSpeed::Edr => 25.0,
            PortSpeed::Hdr => 50.0,
            PortSpeed::Ndr => 100.0,
            PortSpeed::Unknown(_) => return None,
        })
    }
}

impl fmt::Display for PortSpeed {
    /// As `ibv_devinfo` prints it: `25.0 Gbps` (`invalid speed` for an unknown one).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.gbps() {
            Some(gbps) => write!(f, "{gbps:.1} Gbps"),
            None => f.write_str("invalid speed"),
        }
    }
}

c_enum! {
    /// Number of lanes of a port (`active_width`).
    PortWidth: u8, unknown Unknown {
        /// One lane.
        X1 = 1,
        /// Four lanes.
        X4 = 2,
        /// Eight lanes.
        X8 = 4,
        /// Twelve lanes.
        X12 = 8,
        /// Two lanes.
        X2 = 16,
    }
}

impl PortWidth {
    /// The number of lanes (`None` for a width this crate does not know).
    pub fn lanes(self) -> Option<u32> {
        Some(match self {
            PortWidth::X1 => 1,
            PortWidth::X2 => 2,
            PortWidth::X4 => 4,
            PortWidth::X8 => 8,
            PortWidth::X12 => 12,
            PortWidth::Unknown(_) => return None,
        })
    }
}

impl fmt::Display for PortWidth {
    /// As `ibv_devinfo` prints it: `4X` (`invalid width` for an unknown one).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.lanes() {
            Some(lanes) => write!(f, "{lanes}X"),
            None => f.write_str("invalid width"),
        }
    }
}

c_enum! {
    /// Physical state of a port's link (`phys_state`).
    PhysState: u8, unknown Unknown {
        /// Sleeping.
        Sleep = 1,
        /// Polling for a peer.
        Polling = 2,
        /// Disabled.
        Disabled = 3,
        /// Training.
        PortConfigurationTraining = 4,
        /// The link is up.
        LinkUp = 5,
        /// Recovering from a link error.
        LinkErrorRecovery = 6,
        /// Physical test mode.
        PhyTest = 7,
    }
}

impl fmt::Display for PhysState {
    /// As `ibv_devinfo` prints it: `LINK_UP`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            PhysState::Sleep => "SLEEP",
            PhysState::Polling => "POLLING",
            PhysState::Disabled => "DISABLED",
            PhysState::PortConfigurationTraining => "PORT_CONFIGURATION TRAINNING",
            PhysState::LinkUp => "LINK_UP",
            PhysState::LinkErrorRecovery => "LINK_ERROR_RECOVERY",
            PhysState::PhyTest => "PHY TEST",
            PhysState::Unknown(_) => "invalid physical state",
        })
    }
}

impl PortAttr {
    /// Per-lane speed (`PortSpeed::Unknown` with the raw value for one newer than this crate).
    #[doc(alias = "ibv_query_port")]
    pub fn active_speed(&self) -> PortSpeed {
        PortSpeed::from_c(self.0.active_speed)
    }
    /// Number of lanes (`PortWidth::Unknown` with the raw value for one newer than this crate).
    #[doc(alias = "ibv_query_port")]
    pub fn active_width(&self) -> PortWidth {
        PortWidth::from_c(self.0.active_width)
    }
    /// Physical link state (`PhysState::Unknown` with the raw value for one newer than this
    /// crate).
    #[doc(alias = "ibv_query_port")]
    pub fn phys_state(&self) -> PhysState {
        PhysState::from_c(self.0.phys_state)
    }
    /// The link's rate in Gb/s: lanes × per-lane speed (`None` if either is unknown).
    pub fn rate_gbps(&self) -> Option<f64> {
        Some(f64::from(self.active_width().lanes()?) * self.active_speed().gbps()?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prints_like_ibv_devinfo() {
        assert_eq!(PortSpeed::Edr.to_string(), "25.0 Gbps");
        assert_eq!(PortSpeed::Sdr.to_string(), "2.5 Gbps");
        assert_eq!(PortSpeed::Fdr10.to_string(), "10.0 Gbps");
        assert_eq!(PortWidth::X4.to_string(), "4X");
        assert_eq!(PortWidth::X12.to_string(), "12X");
        assert_eq!(PhysState::LinkUp.to_string(), "LINK_UP");
        assert_eq!(PortSpeed::try_from(32), Ok(PortSpeed::Edr));
        assert_eq!(PortSpeed::try_from(3), Err(3));
        assert_eq!(PortWidth::try_from(2), Ok(PortWidth::X4));
        assert_eq!(PhysState::try_from(9), Err(9));
        assert_eq!(PortSpeed::Unknown(3).to_string(), "invalid speed");
        assert_eq!(PortWidth::Unknown(3).to_string(), "invalid width");
        assert_eq!(PhysState::Unknown(9).to_string(), "invalid physical state");
    }

    /// The getters return values, whatever the device reports: known codes decoded, others
    /// kept as `Unknown(raw)` and converted back to the same raw value.
    #[test]
    fn getters_are_values_with_unknown_codes_kept() {
        // SAFETY: ibv_port_attr is plain integers: all-zero is a valid value.
        let mut raw: verbs_sys::ibv_port_attr = unsafe { std::mem::zeroed() };
        raw.active_speed = 32;
        raw.active_width = 2;
        raw.phys_state = 5;
        let port = PortAttr(raw);
        assert_eq!(port.active_speed(), PortSpeed::Edr);
        assert_eq!(port.active_width(), PortWidth::X4);
        assert_eq!(port.phys_state(), PhysState::LinkUp);
        assert_eq!(port.rate_gbps(), Some(100.0));

        raw.active_speed = 3;
        raw.active_width = 3;
        raw.phys_state = 9;
        let port = PortAttr(raw);
        assert_eq!(port.active_speed(), PortSpeed::Unknown(3));
        assert_eq!(port.active_width(), PortWidth::Unknown(3));
        assert_eq!(port.phys_state(), PhysState::Unknown(9));
        assert_eq!(u8::from(port.active_speed()), 3);
        assert_eq!(u8::from(port.phys_state()), 9);
        assert_eq!(port.rate_gbps(), None);
    }
}
