//! Finding the RDMA device, port and GID that serve an IP address, from the devices' GID tables.
use std::fmt;
use std::net::IpAddr;

use crate::context::{Context, GidEntry, GidType};
use crate::device::DeviceList;
use crate::{Error, Result};

/// An IP address an RDMA device serves: a RoCE v2 GID of one of its ports maps it (IPv4-mapped
/// for an IPv4 address).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RdmaAddr {
    /// The device, e.g. `rxe0`.
    pub device: String,
    /// The IP address.
    pub addr: IpAddr,
    /// Its GID entry: `port`, `index` (the source GID index for queue pairs and address
    /// handles) and the GID itself.
    pub gid: GidEntry,
}

impl fmt::Display for RdmaAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} ({} port {}, GID index {})",
            self.addr, self.device, self.gid.port, self.gid.index
        )
    }
}

/// The IP address a RoCE v2 GID stands for (IPv4 for an IPv4-mapped GID).
fn ip_of(e: &GidEntry) -> Option<IpAddr> {
    if e.gid_type != Some(GidType::RoceV2) || e.gid.is_zero() {
        return None;
    }
    Some(match e.gid.to_ipv4_mapped() {
        Some(v4) => IpAddr::V4(v4),
        None => IpAddr::V6(e.gid.to_ipv6()),
    })
}

/// The addresses of one open device.
fn addresses_of(ctx: &Context) -> Result<Vec<RdmaAddr>> {
    Ok(ctx
        .gid_table()?
        .into_iter()
        .filter_map(|gid| {
            ip_of(&gid).map(|addr| RdmaAddr {
                device: ctx.name().to_owned(),
                addr,
                gid,
            })
        })
        .collect())
}

/// Opens every device in turn, stopping at the first for which `f` returns `Some`. Devices that
/// cannot be opened or queried are passed over.
fn scan<T>(mut f: impl FnMut(&Context, Vec<RdmaAddr>) -> Option<T>) -> Result<Option<T>> {
    let list = DeviceList::get()?;
    for dev in list.iter() {
        let Ok(ctx) = Context::open_dev(dev, &DeviceList::name_of(dev)) else {
            continue;
        };
        let Ok(addrs) = addresses_of(&ctx) else {
            continue;
        };
        if let Some(found) = f(&ctx, addrs) {
            return Ok(Some(found));
        }
    }
    Ok(None)
}

/// Every IP address the host's RDMA devices serve (from their RoCE v2 GIDs), device by device.
/// Devices that cannot be opened or queried are left out.
pub fn rdma_addresses() -> Result<Vec<RdmaAddr>> {
    let mut all = Vec::new();
    scan(|_, addrs| {
        all.extend(addrs);
        None::<()>
    })?;
    Ok(all)
}

/// The device, port and GID index that serve `addr`. None does:
/// [`Error::NoDeviceForAddr`], listing the addresses that are served.
pub fn device_for_addr(addr: IpAddr) -> Result<RdmaAddr> {
    Context::open_by_addr(addr).map(|(_, a)| a)
}

impl Context {
    /// Opens the device that serves the IP address `addr` (a RoCE v2 GID of one of its ports
    /// maps it), with that GID: its port and index are what queue pairs and address handles
    /// use as source. None does: [`Error::NoDeviceForAddr`], listing the addresses that are
    /// served.
    ///
    /// ```no_run
    /// # fn main() -> verbs::Result<()> {
    /// let (ctx, me) = verbs::Context::open_by_addr("10.77.0.1".parse().unwrap())?;
    /// println!("{} serves {} on port {}, GID index {}", ctx.name(), me.addr, me.gid.port, me.gid.index);
    /// # Ok(())
    /// # }
    /// ```
    pub fn open_by_addr(addr: IpAddr) -> Result<(Context, RdmaAddr)> {
        let mut served = Vec::new();
        let found = scan(|ctx, addrs| {
            let hit = addrs.iter().position(|a| a.addr == addr);
            match hit {
                Some(i) => Some((ctx.clone(), addrs[i].clone())),
                None => {
                    served.extend(addrs);
                    None
                }
            }
        })?;
        found.ok_or_else(|| Error::NoDeviceForAddr {
            addr,
            served: describe(&served),
        })
    }
}

/// `served` as a list for an error message.
pub(crate) fn describe(served: &[RdmaAddr]) -> String {
    if served.is_empty() {
        return "none: no RDMA device has an IP address (is a device up on a netdev with an \
                address? e.g. `rdma link add rxe0 type rxe netdev eth0`)"
            .to_owned();
    }
    served
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::context::Gid;

    fn entry(gid: Gid, t: GidType) -> GidEntry {
        GidEntry {
            gid,
            index: 3,
            port: 1,
            gid_type: Some(t),
            ndev_ifindex: 2,
        }
    }

    #[test]
    fn only_roce_v2_gids_name_addresses() {
        let v4: IpAddr = "10.77.0.1".parse().unwrap();
        let v6: IpAddr = "fe80::1".parse().unwrap();
        assert_eq!(ip_of(&entry(Gid::from_ip(v4), GidType::RoceV2)), Some(v4));
        assert_eq!(ip_of(&entry(Gid::from_ip(v6), GidType::RoceV2)), Some(v6));
        assert_eq!(ip_of(&entry(Gid::from_ip(v4), GidType::RoceV1)), None);
        assert_eq!(ip_of(&entry(Gid::ZERO, GidType::RoceV2)), None);
    }

    #[test]
    fn the_list_of_served_addresses_reads_well() {
        let a = RdmaAddr {
            device: "rxe0".into(),
            addr: "10.77.0.1".parse().unwrap(),
            gid: entry(Gid::from_ip("10.77.0.1".parse().unwrap()), GidType::RoceV2),
        };
        assert_eq!(a.to_string(), "10.77.0.1 (rxe0 port 1, GID index 3)");
        assert_eq!(describe(&[a.clone(), a]).matches("rxe0").count(), 2);
        assert!(describe(&[]).contains("rdma link add"));
    }
}
