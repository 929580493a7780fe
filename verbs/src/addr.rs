//! Finding the RDMA device, port and GID that serve an IP address: from the devices' GID tables
//! (RoCE), or from the netdev whose MAC address an iWARP port's GID carries.
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::context::{Context, GidEntry, GidType};
use crate::device::DeviceList;
use crate::{Error, Result, Transport};

/// An IP address an RDMA device serves: a RoCE v2 GID of one of its ports maps it (IPv4-mapped
/// for an IPv4 address), or, on iWARP, it is an address of the port's netdev.
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
    if ctx.transport() == Transport::Iwarp {
        return iwarp_addresses(ctx);
    }
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

/// The addresses of an iWARP device: those of the netdev whose MAC address is the first six
/// bytes of a port's GID (an iWARP port has one GID, its netdev's MAC, as siw, cxgb4 and irdma
/// make it; iWARP has no RoCE GIDs and siw's ports name no netdev in the GID table).
fn iwarp_addresses(ctx: &Context) -> Result<Vec<RdmaAddr>> {
    let ports = ctx.query_device()?.phys_port_cnt();
    let interfaces = interfaces()?;
    let mut out = Vec::new();
    for port in 1..=ports {
        let Ok(gid) = ctx.query_gid(port, 0) else {
            continue;
        };
        let mac = &gid.gid.raw()[..6];
        for (ip, _) in interfaces.iter().filter(|(_, m)| m == mac) {
            out.push(RdmaAddr {
                device: ctx.name().to_owned(),
                addr: *ip,
                gid,
            });
        }
    }
    Ok(out)
}

/// Every IP address of the host's interfaces, with its interface's MAC address (interfaces
/// without one are left out), from `getifaddrs`.
fn interfaces() -> Result<Vec<(IpAddr, [u8; 6])>> {
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: valid out-pointer; on success the list is ours until freeifaddrs.
    if unsafe { libc::getifaddrs(&mut head) } != 0 {
        return Err(Error::ListInterfaces(std::io::Error::last_os_error()));
    }
    let mut macs: Vec<(String, [u8; 6])> = Vec::new();
    let mut ips: Vec<(String, IpAddr)> = Vec::new();
    let mut cur = head;
    while !cur.is_null() {
        // SAFETY: a node of the list getifaddrs built, not freed yet.
        let ifa = unsafe { &*cur };
        cur = ifa.ifa_next;
        if ifa.ifa_addr.is_null() || ifa.ifa_name.is_null() {
            continue;
        }
        // SAFETY: a NUL-terminated name of the node.
        let name = unsafe { std::ffi::CStr::from_ptr(ifa.ifa_name) }
            .to_string_lossy()
            .into_owned();
        // SAFETY: ifa_addr points at a sockaddr of at least its family's header.
        let family = i32::from(unsafe { (*ifa.ifa_addr).sa_family });
        match family {
            libc::AF_PACKET => {
                // SAFETY: an AF_PACKET address of getifaddrs is a sockaddr_ll.
                let ll = unsafe { &*(ifa.ifa_addr as *const libc::sockaddr_ll) };
                if ll.sll_halen == 6 {
                    let mut mac = [0u8; 6];
                    mac.copy_from_slice(&ll.sll_addr[..6]);
                    macs.push((name, mac));
                }
            }
            libc::AF_INET => {
                // SAFETY: an AF_INET address is a sockaddr_in.
                let sin = unsafe { &*(ifa.ifa_addr as *const libc::sockaddr_in) };
                let ip = Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr));
                ips.push((name, IpAddr::V4(ip)));
            }
            libc::AF_INET6 => {
                // SAFETY: an AF_INET6 address is a sockaddr_in6.
                let sin6 = unsafe { &*(ifa.ifa_addr as *const libc::sockaddr_in6) };
                ips.push((name, IpAddr::V6(Ipv6Addr::from(sin6.sin6_addr.s6_addr))));
            }
            _ => {}
        }
    }
    // SAFETY: the list getifaddrs returned, freed once; nothing of it is used after.
    unsafe { libc::freeifaddrs(head) };
    Ok(ips
        .into_iter()
        .filter_map(|(name, ip)| {
            let (_, mac) = macs.iter().find(|(n, _)| *n == name)?;
            Some((ip, *mac))
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
    fn interfaces_list_their_addresses_with_their_mac() {
        // Every host has a loopback: 127.0.0.1 on `lo`, whose hardware address is all zeros.
        let all = interfaces().unwrap();
        let lo = all
            .iter()
            .find(|(ip, _)| *ip == IpAddr::from([127, 0, 0, 1]))
            .expect("127.0.0.1 listed");
        assert_eq!(lo.1, [0; 6]);
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
