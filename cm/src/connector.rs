//! [`Connector`]: the active side: resolve address and route, create the QP, connect, all
//! within one total timeout; blocking, or step by step ([`Resolving`], [`Connecting`]) for
//! callers that read the events themselves.
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use verbs::{Cq, Pd, Qp};

use crate::param::{check_private_data, PrivateDataOp};
use crate::step::{names, wait_steps, Step, Stepwise};
use crate::{
    CmEvent, CmId, ConnOptions, Connection, Error, EventChannel, EventKind, PortSpace, Result,
};

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
        let channel = EventChannel::new()?;
        let mut resolving = self.resolving(&channel)?;
        wait_steps(&channel, &mut resolving)?;
        self.pending(&resolving)
    }

    /// Starts resolving (see [`resolve`](Self::resolve)) step by step, on an id whose events
    /// arrive on `channel`: feed [`Resolving::on_event`] the events of its id, then make the
    /// resources with [`pending`](Self::pending). The total timeout starts now.
    pub fn resolving(&self, channel: &EventChannel) -> Result<Resolving> {
        let deadline = Instant::now() + self.timeout;
        Resolving::start(channel, PortSpace::Tcp, self.src, self.dst, deadline)
    }

    /// Creates the PD, CQ and QP (Init) on the id `resolving` resolved: the connection,
    /// ready for receives to be posted and then for [`PendingConnection::start_connect`] (or
    /// [`connect`](PendingConnection::connect)) within what is left of the total timeout.
    pub fn pending(&self, resolving: &Resolving) -> Result<PendingConnection> {
        let id = resolving.id.clone();
        let (pd, cq, qp) = self.opts.resources(&id)?;
        Ok(PendingConnection {
            qp,
            cq,
            pd,
            id,
            opts: self.opts.clone(),
            deadline: resolving.end,
            total: self.timeout,
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
/// `deadline`: the blocking form of [`Resolving`].
pub(crate) fn resolve_in_attempts(
    ps: PortSpace,
    src: Option<SocketAddr>,
    dst: SocketAddr,
    deadline: Instant,
) -> Result<CmId> {
    let channel = EventChannel::new()?;
    let mut resolving = Resolving::start(&channel, ps, src, dst, deadline)?;
    wait_steps(&channel, &mut resolving)
}

/// Which resolution an attempt waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    Addr,
    Route,
    Done,
}

/// Address and route resolution, step by step: each attempt of [`RESOLVE_ATTEMPT`] on a
/// fresh id (so [`id`](Self::id) changes when an attempt that timed out is retried), until
/// the total deadline. A failure says what is wrong with the addresses where it can: a
/// source address no RDMA device serves, a route that leaves through a netdev without one, a
/// destination of this host that no RDMA device serves (refused before anything is sent).
#[derive(Debug)]
pub struct Resolving {
    ps: PortSpace,
    src: Option<SocketAddr>,
    dst: SocketAddr,
    channel: EventChannel,
    id: CmId,
    stage: Stage,
    /// When the current resolution's event is overdue.
    stage_deadline: Instant,
    /// The total deadline.
    end: Instant,
}

impl Resolving {
    /// Starts resolving `dst` (from `src`, which also binds) on a fresh id of port space `ps`
    /// whose events arrive on `channel`, to be done by `deadline`.
    pub fn start(
        channel: &EventChannel,
        ps: PortSpace,
        src: Option<SocketAddr>,
        dst: SocketAddr,
        deadline: Instant,
    ) -> Result<Resolving> {
        crate::addr::check_destination(dst)?;
        let diagnose = |err| final_error(src, dst, err);
        loop {
            match begin_attempt(channel, ps, src, dst, deadline) {
                Ok((id, stage_deadline)) => {
                    return Ok(Resolving {
                        ps,
                        src,
                        dst,
                        channel: channel.clone(),
                        id,
                        stage: Stage::Addr,
                        stage_deadline,
                        end: deadline,
                    })
                }
                Err(Attempt::Retry(_)) if Instant::now() < deadline => continue,
                Err(Attempt::Retry(err) | Attempt::Fail(err)) => return Err(diagnose(err)),
            }
        }
    }

    /// The id of the current attempt: its events are the ones to feed.
    pub fn id(&self) -> &CmId {
        &self.id
    }

    /// When to call [`on_timer`](Self::on_timer) at the latest.
    pub fn deadline(&self) -> Instant {
        self.stage_deadline
    }

    /// The total deadline.
    pub fn end(&self) -> Instant {
        self.end
    }

    /// Takes an event: one of another id is ignored; `AddrResolved` starts the route
    /// resolution; `RouteResolved` is [`Step::Done`] with the resolved id.
    pub fn on_event(&mut self, ev: &CmEvent) -> Result<Step<CmId>> {
        if !names(ev, &self.id) || self.stage == Stage::Done {
            return Ok(Step::Waiting);
        }
        let outcome = match (self.stage, ev.kind()) {
            (Stage::Addr, Ok(EventKind::AddrResolved)) => {
                let t = self.step_time();
                match self.id.resolve_route(t) {
                    Ok(()) => {
                        self.stage = Stage::Route;
                        self.stage_deadline = Instant::now() + t + EVENT_GRACE;
                        return Ok(Step::Waiting);
                    }
                    Err(e) => Attempt::from(e),
                }
            }
            (Stage::Addr, Ok(EventKind::AddrError)) => {
                let source = status_error(ev.status());
                let timed_out = source.raw_os_error() == Some(libc::ETIMEDOUT);
                let err = Error::ResolveAddr {
                    dst: self.dst,
                    source,
                };
                retry_if(timed_out, err)
            }
            (Stage::Route, Ok(EventKind::RouteResolved)) => {
                self.stage = Stage::Done;
                return Ok(Step::Done(self.id.clone()));
            }
            (Stage::Route, Ok(EventKind::RouteError)) => {
                let source = status_error(ev.status());
                let timed_out = source.raw_os_error() == Some(libc::ETIMEDOUT);
                retry_if(timed_out, Error::ResolveRoute(source))
            }
            _ => Attempt::Fail(unexpected(ev, self.stage_name())),
        };
        self.retry_or_fail(outcome)
    }

    /// Looks at the clock: an attempt whose event is overdue is retried on a fresh id while
    /// the total deadline allows, else the resolution failed.
    pub fn on_timer(&mut self, now: Instant) -> Result<Step<CmId>> {
        if self.stage == Stage::Done || now < self.stage_deadline {
            return Ok(Step::Waiting);
        }
        let err = Error::Timeout {
            op: self.stage_name(),
            after: RESOLVE_ATTEMPT + EVENT_GRACE,
        };
        self.retry_or_fail(Attempt::Retry(err))
    }

    fn stage_name(&self) -> &'static str {
        match self.stage {
            Stage::Addr => "address resolution",
            _ => "route resolution",
        }
    }

    /// The time the next resolution gets: [`RESOLVE_ATTEMPT`], less if the deadline is nearer.
    fn step_time(&self) -> Duration {
        self.end
            .saturating_duration_since(Instant::now())
            .min(RESOLVE_ATTEMPT)
    }

    fn retry_or_fail(&mut self, outcome: Attempt) -> Result<Step<CmId>> {
        let mut outcome = outcome;
        loop {
            match outcome {
                Attempt::Retry(_) if Instant::now() < self.end => {}
                Attempt::Retry(err) | Attempt::Fail(err) => {
                    self.stage = Stage::Done;
                    return Err(final_error(self.src, self.dst, err));
                }
            }
            match begin_attempt(&self.channel, self.ps, self.src, self.dst, self.end) {
                Ok((id, stage_deadline)) => {
                    self.id = id;
                    self.stage = Stage::Addr;
                    self.stage_deadline = stage_deadline;
                    return Ok(Step::Waiting);
                }
                Err(a) => outcome = a,
            }
        }
    }
}

impl Stepwise for Resolving {
    type Output = CmId;
    fn on_event(&mut self, ev: &CmEvent) -> Result<Step<CmId>> {
        Resolving::on_event(self, ev)
    }
    fn on_timer(&mut self, now: Instant) -> Result<Step<CmId>> {
        Resolving::on_timer(self, now)
    }
    fn deadline(&self) -> Instant {
        self.stage_deadline
    }
}

fn retry_if(timed_out: bool, err: Error) -> Attempt {
    if timed_out {
        Attempt::Retry(err)
    } else {
        Attempt::Fail(err)
    }
}

/// A resolution's final error, diagnosed from the addresses.
fn final_error(src: Option<SocketAddr>, dst: SocketAddr, err: Error) -> Error {
    let err = match src {
        Some(src) => crate::addr::diagnose_local(src.ip(), err),
        None => crate::addr::diagnose_route(dst, err),
    };
    crate::trace::gave_up("address and route resolution", &err);
    err
}

/// Starts one attempt: a fresh id on `channel` resolving the address within
/// [`RESOLVE_ATTEMPT`] (less if `deadline` is nearer); returns it and when its event is
/// overdue (librdmacm's event comes when its timer runs out, so a little later than that).
fn begin_attempt(
    channel: &EventChannel,
    ps: PortSpace,
    src: Option<SocketAddr>,
    dst: SocketAddr,
    deadline: Instant,
) -> std::result::Result<(CmId, Instant), Attempt> {
    let t = deadline
        .saturating_duration_since(Instant::now())
        .min(RESOLVE_ATTEMPT);
    let id = CmId::new(channel, ps)?;
    id.resolve_addr(src, dst, t)?;
    Ok((id, Instant::now() + t + EVENT_GRACE))
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
        let channel = self.id.channel();
        let mut connecting = self.start_connect()?;
        wait_steps(&channel, &mut connecting)
    }

    /// Sends the connect request: the step-wise form of [`connect`](Self::connect). Feed
    /// the returned [`Connecting`] the events of its id.
    #[doc(alias = "rdma_connect")]
    pub fn start_connect(self) -> Result<Connecting> {
        self.id.connect(&self.opts.param, &self.qp)?;
        Ok(Connecting {
            id: self.id.clone(),
            deadline: self.deadline,
            total: self.total,
            pending: Some(self),
        })
    }
}

/// A connect request on its way ([`PendingConnection::start_connect`]), step by step: the
/// peer's answer completes it.
#[derive(Debug)]
pub struct Connecting {
    id: CmId,
    deadline: Instant,
    total: Duration,
    /// Taken when it is done.
    pending: Option<PendingConnection>,
}

impl Connecting {
    /// The id whose events to feed.
    pub fn id(&self) -> &CmId {
        &self.id
    }

    /// The total deadline: [`on_timer`](Self::on_timer) fails the connect from then on.
    pub fn deadline(&self) -> Instant {
        self.deadline
    }

    /// Takes an event: one of another id is ignored; the peer's acceptance (readying the QP
    /// and establishing, as the QP is ours) is [`Step::Done`]; a rejection, an unreachable
    /// peer or a disconnect is the error it means.
    pub fn on_event(&mut self, ev: &CmEvent) -> Result<Step<Connection>> {
        if !names(ev, &self.id) {
            return Ok(Step::Waiting);
        }
        let Some(p) = self.pending.as_ref() else {
            return Ok(Step::Waiting);
        };
        match ev.kind() {
            // The QP is ours (not librdmacm's): make it ready, then complete the handshake.
            Ok(EventKind::ConnectResponse) => {
                p.id.ready_qp(&p.qp)?;
                p.id.establish()?;
            }
            Ok(EventKind::Established) => {}
            _ => {
                return match ev.connection_failure() {
                    Some(e) => {
                        self.pending = None;
                        Err(e)
                    }
                    None => Ok(Step::Waiting),
                }
            }
        }
        let Some(PendingConnection { qp, cq, pd, id, .. }) = self.pending.take() else {
            return Ok(Step::Waiting);
        };
        id.established_qp(&qp)?;
        let (private_data, peer_param) = (ev.private_data().to_vec(), ev.param());
        Ok(Step::Done(Connection::new(
            id,
            pd,
            cq,
            qp,
            private_data,
            peer_param,
        )))
    }

    /// Looks at the clock: past the deadline, the connect timed out.
    pub fn on_timer(&mut self, now: Instant) -> Result<Step<Connection>> {
        crate::step::expire(&mut self.pending, now, self.deadline, "connect", self.total)
    }
}

impl Stepwise for Connecting {
    type Output = Connection;
    fn on_event(&mut self, ev: &CmEvent) -> Result<Step<Connection>> {
        Connecting::on_event(self, ev)
    }
    fn on_timer(&mut self, now: Instant) -> Result<Step<Connection>> {
        Connecting::on_timer(self, now)
    }
    fn deadline(&self) -> Instant {
        self.deadline
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
