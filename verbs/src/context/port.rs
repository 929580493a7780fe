//! Port speed, width and physical state (`ibv_port_attr`'s `active_speed`, `active_width`,
//! `phys_state`), decoded and printed as `ibv_devinfo` prints them.
use std::fmt;

use super::PortAttr;

c_enum! {
    /// Per-lane signalling rate of a port (`active_speed`).
    PortSpeed: u8 {
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
    /// The per-lane rate in Gb/s.
    pub fn gbps(self) -> f64 {
        match self {
            PortSpeed::Sdr => 2.5,
            PortSpeed::Ddr => 5.0,
            PortSpeed::Qdr | PortSpeed::Fdr10 => 10.0,
            PortSpeed::Fdr => 14.0,
            PortSpeed::Edr => 25.0,
            PortSpeed::Hdr => 50.0,
            PortSpeed::Ndr => 100.0,
        }
    }
}

impl fmt::Display for PortSpeed {
    /// As `ibv_devinfo` prints it: `25.0 Gbps`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:.1} Gbps", self.gbps())
    }
}

c_enum! {
    /// Number of lanes of a port (`active_width`).
    PortWidth: u8 {
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
    /// The number of lanes.
    pub fn lanes(self) -> u32 {
        match self {
            PortWidth::X1 => 1,
            PortWidth::X2 => 2,
            PortWidth::X4 => 4,
            PortWidth::X8 => 8,
            PortWidth::X12 => 12,
        }
    }
}

impl fmt::Display for PortWidth {
    /// As `ibv_devinfo` prints it: `4X`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}X", self.lanes())
    }
}

c_enum! {
    /// Physical state of a port's link (`phys_state`).
    PhysState: u8 {
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
        })
    }
}

impl PortAttr {
    /// Per-lane speed (`Err` with the raw value for one newer than this crate).
    #[doc(alias = "ibv_query_port")]
    pub fn active_speed(&self) -> Result<PortSpeed, u8> {
        PortSpeed::try_from(self.0.active_speed)
    }
    /// Number of lanes (`Err` with the raw value for one newer than this crate).
    #[doc(alias = "ibv_query_port")]
    pub fn active_width(&self) -> Result<PortWidth, u8> {
        PortWidth::try_from(self.0.active_width)
    }
    /// Physical link state (`Err` with the raw value for one newer than this crate).
    #[doc(alias = "ibv_query_port")]
    pub fn phys_state(&self) -> Result<PhysState, u8> {
        PhysState::try_from(self.0.phys_state)
    }
    /// The link's rate in Gb/s: lanes × per-lane speed (`None` if either is unknown).
    pub fn rate_gbps(&self) -> Option<f64> {
        Some(f64::from(self.active_width().ok()?.lanes()) * self.active_speed().ok()?.gbps())
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
    }
}
