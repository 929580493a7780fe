//! Conversions between `std::net::SocketAddr` and the C socket addresses librdmacm takes, and
//! the diagnosis of a local address no RDMA device serves.
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};

use crate::Error;

/// `err` (a failed bind or resolution from the local address `local`) as
/// [`Error::NotRdmaAddress`] when no RDMA device serves `local`, listing those that are served;
/// else `err` unchanged. Only called on failures, so the GID tables are read only then.
pub(crate) fn diagnose_local(local: IpAddr, err: Error) -> Error {
    if local.is_unspecified() || local.is_loopback() {
        return err;
    }
    let Ok(served) = verbs::rdma_addresses() else {
        return err;
    };
    if served.iter().any(|a| a.addr == local) {
        return err;
    }
    match err {
        Error::Bind { source, .. } | Error::ResolveAddr { source, .. } => Error::NotRdmaAddress {
            addr: local,
            source,
            served: list(&served),
        },
        other => other,
    }
}

/// Refuses at once a destination that is an address of this host no RDMA device serves
/// (127.0.0.1, or the address of a netdev without one): nothing there can answer the CM, and
/// a connection would only wait out its timeout. Remote destinations pass (only the peer
/// knows what it serves).
pub(crate) fn check_destination(dst: SocketAddr) -> Result<(), Error> {
    let ip = dst.ip();
    // Binding succeeds exactly for the host's own addresses.
    if ip.is_unspecified() || std::net::UdpSocket::bind((ip, 0)).is_err() {
        return Ok(());
    }
    let Ok(served) = verbs::rdma_addresses() else {
        return Ok(());
    };
    if served.iter().any(|a| a.addr == ip) {
        return Ok(());
    }
    Err(Error::LocalNotRdma {
        dst,
        served: list(&served),
    })
}

/// `err` (a failed resolution of `dst` without a source address) as [`Error::NoRdmaRoute`]
/// when it is ENODEV: the route leaves through a netdev no RDMA device serves.
pub(crate) fn diagnose_route(dst: SocketAddr, err: Error) -> Error {
    match err {
        Error::ResolveAddr { source, .. } if source.raw_os_error() == Some(libc::ENODEV) => {
            Error::NoRdmaRoute {
                dst,
                src: route_source(dst),
                source,
                served: verbs::rdma_addresses()
                    .map(|s| list(&s))
                    .unwrap_or_else(|e| e.to_string()),
            }
        }
        other => other,
    }
}

/// The source address the kernel's routing picks for `dst` (a connected UDP socket's local
/// address: nothing is sent).
fn route_source(dst: SocketAddr) -> Option<IpAddr> {
    let any: SocketAddr = match dst {
        SocketAddr::V4(_) => (Ipv4Addr::UNSPECIFIED, 0).into(),
        SocketAddr::V6(_) => (Ipv6Addr::UNSPECIFIED, 0).into(),
    };
    let sock = std::net::UdpSocket::bind(any).ok()?;
    sock.connect((dst.ip(), dst.port().max(1))).ok()?;
    Some(sock.local_addr().ok()?.ip())
}

fn list(served: &[verbs::RdmaAddr]) -> String {
    if served.is_empty() {
        return "none".to_owned();
    }
    served
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

/// `addr` as a `sockaddr_storage` (IPv4 or IPv6, network byte order).
pub(crate) fn to_storage(addr: SocketAddr) -> libc::sockaddr_storage {
    // SAFETY: all-zero is a valid sockaddr_storage.
    let mut ss: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    match addr {
        SocketAddr::V4(a) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: a.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from_ne_bytes(a.ip().octets()),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: sockaddr_storage is larger than and aligned for sockaddr_in.
            unsafe { std::ptr::write((&mut ss as *mut libc::sockaddr_storage).cast(), sin) };
        }
        SocketAddr::V6(a) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: a.port().to_be(),
                sin6_flowinfo: a.flowinfo(),
                sin6_addr: libc::in6_addr {
                    s6_addr: a.ip().octets(),
                },
                sin6_scope_id: a.scope_id(),
            };
            // SAFETY: sockaddr_storage is larger than and aligned for sockaddr_in6.
            unsafe { std::ptr::write((&mut ss as *mut libc::sockaddr_storage).cast(), sin6) };
        }
    }
    ss
}

/// The address in `ss`, if it is IPv4 or IPv6.
pub(crate) fn from_storage(ss: &libc::sockaddr_storage) -> Option<SocketAddr> {
    match i32::from(ss.ss_family) {
        libc::AF_INET => {
            // SAFETY: the family says it holds a sockaddr_in, which fits and is aligned.
            let sin: &libc::sockaddr_in = unsafe { &*(ss as *const libc::sockaddr_storage).cast() };
            Some(SocketAddr::V4(SocketAddrV4::new(
                Ipv4Addr::from(sin.sin_addr.s_addr.to_ne_bytes()),
                u16::from_be(sin.sin_port),
            )))
        }
        libc::AF_INET6 => {
            // SAFETY: as above, for sockaddr_in6.
            let sin6: &libc::sockaddr_in6 =
                unsafe { &*(ss as *const libc::sockaddr_storage).cast() };
            Some(SocketAddr::V6(SocketAddrV6::new(
                Ipv6Addr::from(sin6.sin6_addr.s6_addr),
                u16::from_be(sin6.sin6_port),
                sin6.sin6_flowinfo,
                sin6.sin6_scope_id,
            )))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips() {
        for a in [
            "192.168.77.1:7174".parse::<SocketAddr>().unwrap(),
            "[fe80::1]:1".parse().unwrap(),
            "0.0.0.0:0".parse().unwrap(),
        ] {
            assert_eq!(from_storage(&to_storage(a)), Some(a));
        }
    }

    #[test]
    fn ipv4_is_network_order() {
        let ss = to_storage("10.0.0.2:7174".parse().unwrap());
        // SAFETY: to_storage wrote a sockaddr_in.
        let sin: &libc::sockaddr_in = unsafe { &*(&ss as *const libc::sockaddr_storage).cast() };
        assert_eq!(sin.sin_port.to_ne_bytes(), 7174u16.to_be_bytes());
        assert_eq!(sin.sin_addr.s_addr.to_ne_bytes(), [10, 0, 0, 2]);
    }
}
