//! [`StreamListener`]: accepts byte streams, like `TcpListener`, on one address or (bound to
//! the unspecified address) on every address an RDMA device serves.

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use super::error::to_io;
use super::{Stream, ToSocketAddrs};
use crate::{Endpoint, EndpointConfig, Listener};

/// Accepts [`Stream`]s on an address of an RDMA device, or on all of them.
#[derive(Debug)]
pub struct StreamListener {
    /// One listener per address served (one, unless bound to the unspecified address).
    inner: Vec<Listener>,
    /// The unspecified address it was bound to, with the port it got (one listener's
    /// address is its own).
    wildcard: Option<SocketAddr>,
    /// Where the next poll starts, so that no address starves the others.
    next: AtomicUsize,
}

impl StreamListener {
    /// Listens on `addr` (port 0: any free port): a `SocketAddr`, a string such as
    /// `"10.77.0.2:7471"` or `"0.0.0.0:7471"`, or an `(ip, port)` pair, as
    /// `TcpListener::bind` takes ([`ToSocketAddrs`]; a host name is resolved off the runtime's
    /// threads), and the first address that can be bound is used.
    ///
    /// The unspecified address (`0.0.0.0`, or `[::]` for IPv6 too) listens on every address an
    /// RDMA device serves (from the devices' RoCE v2 GIDs), all on one port. Each address
    /// uses its [shared endpoint](super::shared_endpoint), opened on first use off the
    /// runtime's threads; the streams it accepts share it. For another configuration, use
    /// [`bind_with`](Self::bind_with); for an endpoint of your own, [`bind_on`](Self::bind_on).
    ///
    /// No RDMA device has the address: `AddrNotAvailable`; the port is taken: `AddrInUse`.
    pub async fn bind(addr: impl ToSocketAddrs) -> io::Result<StreamListener> {
        Self::bind_with(addr, EndpointConfig::default()).await
    }

    /// [`bind`](Self::bind) with a configuration of its own, the unspecified address
    /// included: each address it listens on uses the
    /// [shared endpoint](super::shared_endpoint_with) of that address and `config` (polling
    /// mode, pool, `max_connections`: how many streams it serves at once).
    ///
    /// ```no_run
    /// # async fn demo() -> std::io::Result<()> {
    /// use transport::stream::StreamListener;
    /// use transport::{EndpointConfig, Polling};
    ///
    /// let config = EndpointConfig::default().with_polling(Polling::Busy);
    /// let listener = StreamListener::bind_with("0.0.0.0:7471", config).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn bind_with(
        addr: impl ToSocketAddrs,
        config: EndpointConfig,
    ) -> io::Result<StreamListener> {
        let mut last = None;
        for addr in super::resolve(&addr).await? {
            let mut endpoints = Vec::new();
            let opened = async {
                for ip in listen_ips(addr.ip())? {
                    endpoints.push(super::shared::open(ip, &config).await?);
                }
                Self::listen_all(&endpoints, addr)
            };
            match opened.await {
                Ok(l) => return Ok(l),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| super::no_address("bind to")))
    }

    /// [`bind`](Self::bind), from blocking code.
    pub fn bind_blocking(addr: impl std::net::ToSocketAddrs) -> io::Result<StreamListener> {
        let config = EndpointConfig::default();
        let mut last = None;
        for addr in addr.to_socket_addrs()? {
            let bound = listen_ips(addr.ip()).and_then(|ips| {
                let endpoints = ips
                    .into_iter()
                    .map(|ip| super::shared_endpoint_with(ip, &config))
                    .collect::<io::Result<Vec<_>>>()?;
                Self::listen_all(&endpoints, addr)
            });
            match bound {
                Ok(l) => return Ok(l),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| super::no_address("bind to")))
    }

    /// Listens on `addr`'s port of each endpoint: of one (a specific address), or of one
    /// per address (the unspecified `addr`), all on one port.
    fn listen_all(endpoints: &[Endpoint], addr: SocketAddr) -> io::Result<StreamListener> {
        if !addr.ip().is_unspecified() {
            return Self::bind_on(&endpoints[0], addr.port());
        }
        let mut inner: Vec<Listener> = Vec::with_capacity(endpoints.len());
        let mut port = addr.port();
        for endpoint in endpoints {
            let listener = endpoint.listen(port).map_err(to_io)?;
            // Port 0 picks a free port for the first address; the others take the same.
            port = listener.local_addr().map_err(to_io)?.port();
            inner.push(listener);
        }
        Ok(StreamListener {
            inner,
            wildcard: Some(SocketAddr::new(addr.ip(), port)),
            next: AtomicUsize::new(0),
        })
    }

    /// Listens on `port` of an endpoint of your own (its address; its configuration).
    pub fn bind_on(endpoint: &Endpoint, port: u16) -> io::Result<StreamListener> {
        endpoint
            .listen(port)
            .map(Self::from_listener)
            .map_err(to_io)
    }

    /// A stream listener over a transport listener.
    pub fn from_listener(inner: Listener) -> StreamListener {
        StreamListener {
            inner: vec![inner],
            wildcard: None,
            next: AtomicUsize::new(0),
        }
    }

    /// The address it listens on (the unspecified address when bound to it), with its port.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        match self.wildcard {
            Some(addr) => Ok(addr),
            None => self.inner[0].local_addr().map_err(to_io),
        }
    }

    /// The endpoints of the accepted streams: one, or one per address when bound to the
    /// unspecified address.
    pub fn endpoints(&self) -> impl Iterator<Item = &Endpoint> + '_ {
        self.inner.iter().map(Listener::endpoint)
    }

    /// Polls for a stream (see [`Listener::poll_accept`]: cancel safe). Bound to several
    /// addresses, it looks at each in turn, starting after the one that gave the last stream.
    pub fn poll_accept(&self, cx: &mut Context<'_>) -> Poll<io::Result<(Stream, SocketAddr)>> {
        let n = self.inner.len();
        let start = self.next.load(Ordering::Relaxed);
        for i in 0..n {
            let at = (start + i) % n;
            if let Poll::Ready(r) = self.inner[at].poll_accept(cx) {
                self.next.store((at + 1) % n, Ordering::Relaxed);
                return Poll::Ready(r.map_err(to_io).and_then(accepted));
            }
        }
        Poll::Pending
    }

    /// Accepts the next stream and the peer's address. Cancel safe.
    pub async fn accept(&self) -> io::Result<(Stream, SocketAddr)> {
        std::future::poll_fn(|cx| self.poll_accept(cx)).await
    }

    /// Accepts the next stream, blocking up to `timeout`.
    pub fn accept_blocking(&self, timeout: Duration) -> io::Result<(Stream, SocketAddr)> {
        match &self.inner[..] {
            [one] => one
                .accept_timeout(timeout)
                .map_err(to_io)
                .and_then(accepted),
            _ => super::error::block_on_io("accept", Some(timeout), |cx| self.poll_accept(cx)),
        }
    }
}

/// The addresses to listen on for `ip`: itself, or those the unspecified address stands for
/// ([`wildcard_ips`]).
fn listen_ips(ip: IpAddr) -> io::Result<Vec<IpAddr>> {
    if ip.is_unspecified() {
        wildcard_ips(ip)
    } else {
        Ok(vec![ip])
    }
}

/// The addresses the unspecified address `ip` stands for: every IPv4 address an RDMA device
/// serves for `0.0.0.0`; every address (IPv4 too, as a dual-stack socket) for `[::]`. IPv6
/// link-local addresses are left out: they cannot be bound without a scope.
fn wildcard_ips(ip: IpAddr) -> io::Result<Vec<IpAddr>> {
    let all = verbs::rdma_addresses().map_err(io::Error::other)?;
    let mut ips: Vec<IpAddr> = all
        .into_iter()
        .map(|a| a.addr)
        .filter(|a| match a {
            IpAddr::V4(_) => true,
            IpAddr::V6(v6) => ip.is_ipv6() && (v6.segments()[0] & 0xffc0) != 0xfe80,
        })
        .collect();
    ips.sort();
    ips.dedup();
    if ips.is_empty() {
        return Err(io::Error::new(
            io::ErrorKind::AddrNotAvailable,
            "no RDMA device serves an address to listen on: add one (`rdma link add rxe0 type rxe netdev ETH` for Soft-RoCE)",
        ));
    }
    Ok(ips)
}

fn accepted(conn: crate::Conn) -> io::Result<(Stream, SocketAddr)> {
    let stream = Stream::from_conn(conn);
    let peer = stream.peer_addr()?;
    Ok((stream, peer))
}
