//! [`Connector`]: the active side: resolve address and route, create the QP, connect, all
//! within one total timeout.
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use verbs::{Cq, Pd, Qp};

use crate::param::{check_private_data, PrivateDataOp};
use crate::{CmId, ConnOptions, Connection, Error, EventKind, PortSpace, Result};

/// Total time a connection attempt may take by default.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Longest single address or route resolution handed to librdmacm, by [`Connector`] and
/// [`UdConnector`](crate::UdConnector); a resolution that times out is retried on a fresh id
/// while the total timeout allows.
pub const RESOLVE_ATTEMPT: Duration = Duration::from_millis(500);

/// How much longer than librdmacm's own timer we wait for its event.
const EVENT_GRACE: Duration = Duration::from_millis(500);

/// How one resolution attempt ended, when it did not succeed.
enum Attempt {
    /// Timed out in the kernel: worth another attempt while time is left.
    Retry(Error),
    /// Any other failure: final.
    Fail(Error),
}

impl From<Error> for Attempt {
    fn from(err: Error) -> Self {
        match err {
            Error::Timeout { .. } => Attempt::Retry(err),
            other => Attempt::Fail(other),
        }
    }
}

/// Builds an RC connection to `dst`.
#[derive(Debug, Clone)]
pub struct Connector {
    dst: SocketAddr,
    src: Option<SocketAddr>,
    opts: ConnOptions,
    timeout: Duration,
}

impl Connector {
    /// A connector to `dst` with default options and [`DEFAULT_CONNECT_TIMEOUT`].
    pub fn new(dst: SocketAddr) -> Self {
        Connector {
            dst,
            src: None,
            opts: ConnOptions::default(),
            timeout: DEFAULT_CONNECT_TIMEOUT,
        }
    }
    /// Connect from this local IP (binds the id to its device: do this on hosts with several
    /// RDMA devices).
    pub fn src(mut self, ip: IpAddr) -> Self {
        self.src = Some(SocketAddr::new(ip, 0));
        self
    }
    /// Resource options and connection parameters.
    pub fn options(mut self, opts: ConnOptions) -> Self {
        self.opts = opts;
        self
    }
    /// Create the connection's QP and CQ on this shared PD (see [`ConnOptions::pd`]).
    pub fn pd(mut self, pd: &Pd) -> Self {
        self.opts = self.opts.pd(pd);
        self
    }
    /// Private data for the connect request: at most 56 bytes, else
    /// [`Error::PrivateDataTooLong`].
    pub fn private_data(mut self, data: &[u8]) -> Result<Self> {
        check_private_data(PortSpace::Tcp, PrivateDataOp::Connect, data)?;
        self.opts = self.opts.private_data(data)?;
        Ok(self)
    }
    /// Total time for resolution and connection.
    pub fn timeout(mut self, total: Duration) -> Self {
        self.timeout = total;
        self
    }

    /// Resolves the address and route and creates the PD, CQ and QP (Init), leaving time to
    /// post receives before [`PendingConnection::connect`].
    ///
    /// The kernel resolves an address whose neighbour entry is not cached yet by sending an
    /// ARP request and looking again only when its timer runs out, so one long resolution
    /// would take the whole timeout even though the answer came in milliseconds. Resolution
    /// therefore runs in attempts of [`RESOLVE_ATTEMPT`] (as rping does with 2 s), retried
    /// while the total timeout allows.
    pub fn resolve(&self) -> Result<PendingConnection> {
        let total = self.timeout;
        let deadline = Instant::now() + total;
        let id = resolve_in_attempts(PortSpace::Tcp, self.src, self.dst, deadline)?;
        let (pd, cq, qp) = self.opts.resources(&id)?;
        Ok(PendingConnection {
            qp,
            cq,
            pd,
            id,
            opts: self.opts.clone(),
            deadline,
            total,
        })
    }

    /// Resolves, creates the resources and connects: the established connection, or a typed
    /// error (rejected, unreachable, timed out) within the total timeout.
    pub fn connect(&self) -> Result<Connection> {
        self.resolve()?.connect()
    }
}

/// Resolves address and route to `dst` (from `src`, which also binds) on a fresh id of port
/// space `ps` per attempt of [`RESOLVE_ATTEMPT`], retrying attempts that time out until
/// `deadline`. A failure says what is wrong with the addresses where it can: a source address
/// no RDMA device serves, a route that leaves through a netdev without one, a destination of
/// this host that no RDMA device serves (refused before anything is sent).
pub(crate) fn resolve_in_attempts(
    ps: PortSpace,
    src: Option<SocketAddr>,
    dst: SocketAddr,
    deadline: Instant,
) -> Result<CmId> {
    crate::addr::check_destination(dst)?;
    loop {
        match resolve_attempt(ps, src, dst, deadline) {
            Ok(id) => return Ok(id),
            Err(Attempt::Retry(_)) if Instant::now() < deadline => continue,
            Err(Attempt::Retry(err) | Attempt::Fail(err)) => {
                return Err(match src {
                    Some(src) => crate::addr::diagnose_local(src.ip(), err),
                    None => crate::addr::diagnose_route(dst, err),
                })
            }
        }
    }
}

/// One attempt at resolving address and route on a fresh id, each step given at most
/// [`RESOLVE_ATTEMPT`] (less if the deadline is nearer).
fn resolve_attempt(
    ps: PortSpace,
    src: Option<SocketAddr>,
    dst: SocketAddr,
    deadline: Instant,
) -> std::result::Result<CmId, Attempt> {
    let left = || deadline.saturating_duration_since(Instant::now());
    // librdmacm's timer and our wait for its event: the event comes when its timer runs
    // out, so wait a little longer than that.
    let step = || left().min(RESOLVE_ATTEMPT);
    let wait = |step: Duration| step + EVENT_GRACE;
    let id = CmId::with_own_channel(ps)?;

    let t = step();
    id.resolve_addr(src, dst, t)?;
    let ev = id.wait_event(wait(t), "address resolution")?;
    match ev.kind() {
        Ok(EventKind::AddrResolved) => {}
        Ok(EventKind::AddrError) => {
            let source = status_error(ev.status());
            let timed_out = source.raw_os_error() == Some(libc::ETIMEDOUT);
            let err = Error::ResolveAddr { dst, source };
            return Err(if timed_out {
                Attempt::Retry(err)
            } else {
                Attempt::Fail(err)
            });
        }
        _ => return Err(unexpected(&ev, "address resolution").into()),
    }
    drop(ev);

    let t = step();
    id.resolve_route(t)?;
    let ev = id.wait_event(wait(t), "route resolution")?;
    match ev.kind() {
        Ok(EventKind::RouteResolved) => {}
        Ok(EventKind::RouteError) => {
            let source = status_error(ev.status());
            let timed_out = source.raw_os_error() == Some(libc::ETIMEDOUT);
            let err = Error::ResolveRoute(source);
            return Err(if timed_out {
                Attempt::Retry(err)
            } else {
                Attempt::Fail(err)
            });
        }
        _ => return Err(unexpected(&ev, "route resolution").into()),
    }
    drop(ev);
    Ok(id)
}

/// Connects to `dst` with `private_data`, default options, within `timeout`.
pub fn connect(dst: SocketAddr, private_data: &[u8], timeout: Duration) -> Result<Connection> {
    Connector::new(dst)
        .private_data(private_data)?
        .timeout(timeout)
        .connect()
}

/// A resolved connection attempt whose QP exists (Init) but which has not sent its connect
/// request yet.
#[derive(Debug)]
pub struct PendingConnection {
    qp: Qp,
    cq: Cq,
    pd: Pd,
    id: CmId,
    opts: ConnOptions,
    deadline: Instant,
    total: Duration,
}

impl PendingConnection {
    /// The QP (Init): post receives here before connecting.
    pub fn qp(&self) -> &Qp {
        &self.qp
    }
    /// The PD, to register memory.
    pub fn pd(&self) -> &Pd {
        &self.pd
    }
    /// The CQ.
    pub fn cq(&self) -> &Cq {
        &self.cq
    }
    /// The CM id.
    pub fn id(&self) -> &CmId {
        &self.id
    }

    /// Sends the connect request and waits (within what is left of the total timeout) for
    /// the peer's answer.
    #[doc(alias = "rdma_connect")]
    pub fn connect(self) -> Result<Connection> {
        let left = || self.deadline.saturating_duration_since(Instant::now());
        self.id.connect(&self.opts.param, &self.qp)?;
        let (private_data, peer_param) = loop {
            let ev = self.id.get_event(left())?.ok_or(Error::Timeout {
                op: "connect",
                after: self.total,
            })?;
            match ev.kind() {
                // The QP is ours (not librdmacm's): make it ready, then complete the handshake.
                Ok(EventKind::ConnectResponse) => {
                    self.id.ready_qp(&self.qp)?;
                    self.id.establish()?;
                    break (ev.private_data().to_vec(), ev.param());
                }
                Ok(EventKind::Established) => break (ev.private_data().to_vec(), ev.param()),
                _ => match ev.connection_failure() {
                    Some(e) => return Err(e),
                    None => continue,
                },
            }
        };
        let PendingConnection { qp, cq, pd, id, .. } = self;
        Ok(Connection::new(id, pd, cq, qp, private_data, peer_param))
    }
}

/// An event status (a negative errno) as an error.
pub(crate) fn status_error(status: i32) -> std::io::Error {
    std::io::Error::from_raw_os_error(status.checked_neg().filter(|e| *e > 0).unwrap_or(libc::EIO))
}

pub(crate) fn unexpected(ev: &crate::CmEvent, expected: &'static str) -> Error {
    match ev.kind() {
        Ok(event) => Error::UnexpectedEvent {
            event,
            status: ev.status(),
            expected,
        },
        Err(code) => Error::GetEvent(std::io::Error::other(format!(
            "unknown CM event type {code} while waiting for {expected}"
        ))),
    }
}
