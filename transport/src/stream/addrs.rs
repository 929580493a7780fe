//! The addresses [`Stream::connect`](super::Stream::connect) and
//! [`StreamListener::bind`](super::StreamListener::bind) take, as `tokio::net` takes them
//! ([`ToSocketAddrs`]), and the one place where async code does what would block: a host
//! name's resolution and the opening of a shared endpoint run off the runtime's threads
//! ([`off_runtime`]).

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};

/// What [`Stream::connect`](super::Stream::connect) and
/// [`StreamListener::bind`](super::StreamListener::bind) take, like `tokio::net`'s trait of
/// the same name: a `SocketAddr` (V4 or V6), an `(IpAddr, u16)` pair (`Ipv4Addr`, `Ipv6Addr`
/// too), a string (`"10.77.0.2:7471"`, `"host:7471"`), a `(&str, u16)` or `(String, u16)`
/// pair, a slice of `SocketAddr`, or a reference to any of these. Addresses given as such are
/// used at once; a host name is resolved by the system resolver off the runtime's threads
/// (see [`off_runtime`]). Sealed: implemented for these types only.
pub trait ToSocketAddrs: sealed::Sealed {}

mod sealed {
    /// The addresses, or the name to resolve.
    pub trait Sealed {
        fn addrs(&self) -> super::Addrs;
    }
}

/// Addresses as given, or a name the resolver must look up.
#[derive(Debug)]
pub enum Addrs {
    /// Addresses given as such.
    Ready(Vec<SocketAddr>),
    /// A name and port (`"host:port"` when the port is `None`) to resolve.
    Lookup(String, Option<u16>),
}

impl Addrs {
    /// The addresses, resolved by the system resolver (blocking) when a name was given.
    fn resolve_blocking(self) -> io::Result<Vec<SocketAddr>> {
        use std::net::ToSocketAddrs as _;
        match self {
            Addrs::Ready(v) => Ok(v),
            Addrs::Lookup(name, None) => Ok(name.to_socket_addrs()?.collect()),
            Addrs::Lookup(host, Some(port)) => {
                Ok((host.as_str(), port).to_socket_addrs()?.collect())
            }
        }
    }
}

/// The addresses `addr` stands for: at once when given as addresses, else resolved off the
/// runtime's threads.
pub(crate) async fn resolve(addr: &(impl ToSocketAddrs + ?Sized)) -> io::Result<Vec<SocketAddr>> {
    match addr.addrs() {
        Addrs::Ready(v) => Ok(v),
        lookup => off_runtime(move || lookup.resolve_blocking()).await,
    }
}

/// Runs `f`, which may block (a name's resolution, a device's opening), where it blocks no
/// runtime thread: inside a tokio runtime (the `tokio` feature) on tokio's blocking pool, as
/// `tokio::net` resolves names; elsewhere (another executor, or none) on the calling thread.
pub(crate) async fn off_runtime<T: Send + 'static>(
    f: impl FnOnce() -> io::Result<T> + Send + 'static,
) -> io::Result<T> {
    #[cfg(feature = "tokio")]
    if let Ok(runtime) = tokio::runtime::Handle::try_current() {
        return match runtime.spawn_blocking(f).await {
            Ok(r) => r,
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            Err(_) => Err(io::Error::other(
                "the tokio runtime shut down before the address could be resolved or the device opened",
            )),
        };
    }
    f()
}

impl ToSocketAddrs for SocketAddr {}
impl sealed::Sealed for SocketAddr {
    fn addrs(&self) -> Addrs {
        Addrs::Ready(vec![*self])
    }
}

impl ToSocketAddrs for SocketAddrV4 {}
impl sealed::Sealed for SocketAddrV4 {
    fn addrs(&self) -> Addrs {
        Addrs::Ready(vec![SocketAddr::V4(*self)])
    }
}

impl ToSocketAddrs for SocketAddrV6 {}
impl sealed::Sealed for SocketAddrV6 {
    fn addrs(&self) -> Addrs {
        Addrs::Ready(vec![SocketAddr::V6(*self)])
    }
}

impl ToSocketAddrs for (IpAddr, u16) {}
impl sealed::Sealed for (IpAddr, u16) {
    fn addrs(&self) -> Addrs {
        Addrs::Ready(vec![SocketAddr::from(*self)])
    }
}

impl ToSocketAddrs for (Ipv4Addr, u16) {}
impl sealed::Sealed for (Ipv4Addr, u16) {
    fn addrs(&self) -> Addrs {
        Addrs::Ready(vec![SocketAddr::from(*self)])
    }
}

impl ToSocketAddrs for (Ipv6Addr, u16) {}
impl sealed::Sealed for (Ipv6Addr, u16) {
    fn addrs(&self) -> Addrs {
        Addrs::Ready(vec![SocketAddr::from(*self)])
    }
}

impl ToSocketAddrs for [SocketAddr] {}
impl sealed::Sealed for [SocketAddr] {
    fn addrs(&self) -> Addrs {
        Addrs::Ready(self.to_vec())
    }
}

impl ToSocketAddrs for str {}
impl sealed::Sealed for str {
    fn addrs(&self) -> Addrs {
        match self.parse() {
            Ok(addr) => Addrs::Ready(vec![addr]),
            Err(_) => Addrs::Lookup(self.to_owned(), None),
        }
    }
}

impl ToSocketAddrs for String {}
impl sealed::Sealed for String {
    fn addrs(&self) -> Addrs {
        self.as_str().addrs()
    }
}

impl ToSocketAddrs for (&str, u16) {}
impl sealed::Sealed for (&str, u16) {
    fn addrs(&self) -> Addrs {
        let (host, port) = *self;
        match host.parse::<IpAddr>() {
            Ok(ip) => Addrs::Ready(vec![SocketAddr::new(ip, port)]),
            Err(_) => Addrs::Lookup(host.to_owned(), Some(port)),
        }
    }
}

impl ToSocketAddrs for (String, u16) {}
impl sealed::Sealed for (String, u16) {
    fn addrs(&self) -> Addrs {
        (self.0.as_str(), self.1).addrs()
    }
}

impl<T: ToSocketAddrs + ?Sized> ToSocketAddrs for &T {}
impl<T: sealed::Sealed + ?Sized> sealed::Sealed for &T {
    fn addrs(&self) -> Addrs {
        (**self).addrs()
    }
}

#[cfg(test)]
mod tests {
    use super::sealed::Sealed;
    use super::*;

    fn ready(a: &(impl ToSocketAddrs + ?Sized)) -> Vec<SocketAddr> {
        match a.addrs() {
            Addrs::Ready(v) => v,
            Addrs::Lookup(name, port) => panic!("{name} {port:?} should need no lookup"),
        }
    }

    #[test]
    fn addresses_given_as_such_need_no_lookup_and_names_do() {
        let sa: SocketAddr = "10.77.0.2:7471".parse().unwrap();
        let ip: IpAddr = "10.77.0.2".parse().unwrap();
        assert_eq!(ready(&sa), vec![sa]);
        assert_eq!(ready("10.77.0.2:7471"), vec![sa]);
        assert_eq!(ready(&"10.77.0.2:7471".to_owned()), vec![sa]);
        assert_eq!(ready(&(ip, 7471)), vec![sa]);
        assert_eq!(ready(&("10.77.0.2", 7471)), vec![sa]);
        assert_eq!(ready(&("10.77.0.2".to_owned(), 7471)), vec![sa]);
        assert_eq!(ready(&[sa, sa][..]), vec![sa, sa]);
        assert_eq!(ready("[::1]:7"), vec!["[::1]:7".parse().unwrap()]);
        assert!(matches!(
            "localhost:7471".addrs(),
            Addrs::Lookup(n, None) if n == "localhost:7471"
        ));
        assert!(matches!(
            ("localhost", 7471).addrs(),
            Addrs::Lookup(n, Some(7471)) if n == "localhost"
        ));
    }

    #[cfg(feature = "tokio")]
    #[test]
    fn a_name_resolves_off_the_runtime_threads_and_a_bad_one_is_an_error() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let caller = std::thread::current().id();
        let (v, resolver) = rt.block_on(async {
            let v = resolve("localhost:7471").await.unwrap();
            let resolver = off_runtime(|| Ok(std::thread::current().id()))
                .await
                .unwrap();
            (v, resolver)
        });
        assert!(
            v.iter().all(|a| a.port() == 7471 && a.ip().is_loopback()),
            "{v:?}"
        );
        assert!(!v.is_empty());
        assert_ne!(
            resolver, caller,
            "the blocking work ran on the runtime's thread"
        );
        let bad = rt.block_on(resolve("no such host.invalid:1"));
        assert!(bad.is_err());
        // Without a runtime, on the caller's thread.
        let here = futures::executor::block_on(off_runtime(|| Ok(std::thread::current().id())));
        assert_eq!(here.unwrap(), caller);
    }
}
