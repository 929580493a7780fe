//! GIDs and GID table entries with their types (`ibv_query_gid_ex`, `ibv_query_gid_table`).
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use verbs_sys as sys;

/// A 128-bit global identifier, in wire (network) byte order. On RoCE it is an IPv6 address,
/// IPv4-mapped (`::ffff:a.b.c.d`) for an IPv4 netdev address.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Gid(pub [u8; 16]);

impl Gid {
    /// The all-zero GID (empty table entry, or "no GRH").
    pub const ZERO: Gid = Gid([0; 16]);

    /// The raw bytes.
    pub fn raw(&self) -> [u8; 16] {
        self.0
    }
    /// Upper 64 bits (subnet prefix), host order.
    pub fn subnet_prefix(&self) -> u64 {
        u64::from_be_bytes(self.0[..8].try_into().expect("8 bytes"))
    }
    /// Lower 64 bits (interface id), host order.
    pub fn interface_id(&self) -> u64 {
        u64::from_be_bytes(self.0[8..].try_into().expect("8 bytes"))
    }
    /// Whether all bits are zero.
    pub fn is_zero(&self) -> bool {
        self.0 == [0; 16]
    }
    /// The GID as an IPv6 address.
    pub fn to_ipv6(&self) -> Ipv6Addr {
        Ipv6Addr::from(self.0)
    }
    /// The IPv4 address of an IPv4-mapped GID.
    pub fn to_ipv4_mapped(&self) -> Option<Ipv4Addr> {
        self.to_ipv6().to_ipv4_mapped()
    }
    /// The GID RoCE uses for an IP address (IPv4 addresses are mapped).
    pub fn from_ip(addr: IpAddr) -> Self {
        match addr {
            IpAddr::V4(v4) => Gid(v4.to_ipv6_mapped().octets()),
            IpAddr::V6(v6) => Gid(v6.octets()),
        }
    }
    pub(crate) fn to_sys(self) -> sys::ibv_gid {
        sys::ibv_gid { raw: self.0 }
    }
    pub(crate) fn from_sys(g: &sys::ibv_gid) -> Self {
        // SAFETY: every bit pattern of the union is a valid `[u8; 16]`.
        Gid(unsafe { g.raw })
    }
}

impl From<[u8; 16]> for Gid {
    fn from(raw: [u8; 16]) -> Self {
        Gid(raw)
    }
}

impl fmt::Display for Gid {
    /// Formats like `ibv_devinfo -v`: eight groups of four hex digits.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, pair) in self.0.chunks(2).enumerate() {
            if i > 0 {
                f.write_str(":")?;
            }
            write!(f, "{:02x}{:02x}", pair[0], pair[1])?;
        }
        Ok(())
    }
}

impl fmt::Debug for Gid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Gid({self})")
    }
}

/// The protocol a GID is used with (`enum ibv_gid_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GidType {
    /// InfiniBand.
    Ib,
    /// RoCE v1 (Ethernet, no IP header).
    RoceV1,
    /// RoCE v2 (UDP/IP): the one to use on routed networks and with rxe.
    RoceV2,
}

impl TryFrom<u32> for GidType {
    type Error = u32;
    fn try_from(v: u32) -> Result<Self, u32> {
        Ok(match v {
            sys::IBV_GID_TYPE_IB => Self::Ib,
            sys::IBV_GID_TYPE_ROCE_V1 => Self::RoceV1,
            sys::IBV_GID_TYPE_ROCE_V2 => Self::RoceV2,
            other => return Err(other),
        })
    }
}

/// One GID table entry (`struct ibv_gid_entry`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GidEntry {
    /// The GID.
    pub gid: Gid,
    /// Its index in the port's table: what queue pairs and address handles take as source GID
    /// index (8 bits, as in `ibv_global_route`).
    pub index: u8,
    /// The port.
    pub port: u8,
    /// Its type; `None` for a type newer than this crate.
    pub gid_type: Option<GidType>,
    /// The netdev's ifindex (0 if none).
    pub ndev_ifindex: u32,
}

impl GidEntry {
    /// The entry, or `None` for an index past 255, which no queue pair or address handle can
    /// use as its source GID.
    pub(crate) fn from_sys(e: &sys::ibv_gid_entry) -> Option<Self> {
        Some(GidEntry {
            gid: Gid::from_sys(&e.gid),
            index: u8::try_from(e.gid_index).ok()?,
            port: e.port_num as u8,
            gid_type: GidType::try_from(e.gid_type).ok(),
            ndev_ifindex: e.ndev_ifindex,
        })
    }

    /// Whether this is the RoCE v2 GID of `addr`.
    pub fn is_roce_v2_for(&self, addr: IpAddr) -> bool {
        self.gid_type == Some(GidType::RoceV2) && self.gid == Gid::from_ip(addr)
    }
}

/// Picks, from a GID table, the RoCE v2 entry of `port` for `addr`.
pub fn select_roce_v2(entries: &[GidEntry], port: u8, addr: IpAddr) -> Option<GidEntry> {
    entries
        .iter()
        .copied()
        .find(|e| e.port == port && e.is_roce_v2_for(addr))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(index: u8, gid: Gid, t: GidType) -> GidEntry {
        GidEntry {
            gid,
            index,
            port: 1,
            gid_type: Some(t),
            ndev_ifindex: 2,
        }
    }

    #[test]
    fn selects_the_roce_v2_ipv4_mapped_entry() {
        let addr: IpAddr = "192.168.77.1".parse().unwrap();
        let mapped = Gid::from_ip(addr);
        assert_eq!(
            mapped.to_ipv4_mapped(),
            Some("192.168.77.1".parse().unwrap())
        );
        let link_local = Gid([0xfe, 0x80, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8]);
        let table = [
            entry(0, link_local, GidType::RoceV1),
            entry(1, link_local, GidType::RoceV2),
            entry(2, mapped, GidType::RoceV1),
            entry(3, mapped, GidType::RoceV2),
        ];
        assert_eq!(select_roce_v2(&table, 1, addr).map(|e| e.index), Some(3));
        assert_eq!(select_roce_v2(&table, 2, addr), None);
        assert_eq!(select_roce_v2(&table[..3], 1, addr), None);
    }

    #[test]
    fn display_and_halves() {
        let g = Gid::from_ip("10.0.0.1".parse().unwrap());
        assert_eq!(g.to_string(), "0000:0000:0000:0000:0000:ffff:0a00:0001");
        assert_eq!(g.subnet_prefix(), 0);
        assert_eq!(g.interface_id(), 0x0000_ffff_0a00_0001);
        assert!(!g.is_zero() && Gid::ZERO.is_zero());
        assert_eq!(GidType::try_from(2), Ok(GidType::RoceV2));
        assert_eq!(GidType::try_from(9), Err(9));
    }
}
