//! [`Listener`]: a bound, listening CM id that yields connect requests and connections.
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use verbs::{Cq, Pd, Qp, Srq};

use crate::step::{names, wait_steps, Step, Stepwise};
use crate::{
    Admission, CmEvent, CmId, ConnOptions, ConnParam, Connection, Error, EventChannel, EventKind,
    IncomingRequest, PeerParam, PortSpace, Result,
};

/// Backlog of pending connect requests.
pub const DEFAULT_BACKLOG: i32 = 128;

/// A listening CM id (RC port space). Call [`accept`](Self::accept) (or
/// [`get_request`](Self::get_request) to look at a request first) from one thread and hand the
/// requests to others: each request's id is moved to a channel of its own right away, so
/// accepting one connection never waits behind another. Dropping the listener stops
/// listening; established connections are unaffected.
#[derive(Debug)]
pub struct Listener {
    id: CmId,
    opts: ConnOptions,
    rejected: AtomicU64,
    /// The listening id has a channel of its own: each request's id moves to a new one.
    own_channel: bool,
}

impl Listener {
    /// Binds to `addr` (port 0: any free port; see [`local_addr`](Self::local_addr)) and
    /// listens. Bind to the IP of an RDMA netdev, not a wildcard, so the device is explicit.
    pub fn bind(addr: SocketAddr, opts: ConnOptions) -> Result<Listener> {
        Self::listen(EventChannel::new()?, true, addr, opts)
    }

    /// Binds and listens like [`bind`](Self::bind), on an id whose events arrive on
    /// `channel`, maybe shared with other ids: whoever reads it hands the connect requests
    /// to [`request_from`](Self::request_from), and the requests' ids stay on `channel`.
    pub fn bind_on(
        channel: &EventChannel,
        addr: SocketAddr,
        opts: ConnOptions,
    ) -> Result<Listener> {
        Self::listen(channel.clone(), false, addr, opts)
    }

    fn listen(
        channel: EventChannel,
        own_channel: bool,
        addr: SocketAddr,
        opts: ConnOptions,
    ) -> Result<Listener> {
        let id = CmId::new(&channel, PortSpace::Tcp)?;
        id.bind_addr(addr)
            .map_err(|e| crate::addr::diagnose_local(addr.ip(), e))?;
        // Bound to an address, the id knows its device: a shared PD of another one is refused
        // now rather than at the first connection.
        if !addr.ip().is_unspecified() {
            opts.check_pd(&id)?;
        }
        id.listen(DEFAULT_BACKLOG)?;
        Ok(Listener {
            id,
            opts,
            rejected: AtomicU64::new(0),
            own_channel,
        })
    }

    /// The bound address (with the port actually used).
    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.id.local_addr()
    }
    /// The listening id.
    pub fn id(&self) -> &CmId {
        &self.id
    }
    /// How many connect requests the admission hook rejected.
    pub fn rejected(&self) -> u64 {
        self.rejected.load(Ordering::Relaxed)
    }

    /// Waits up to `timeout` for a connect request and prepares it: a channel of its own, and
    /// a PD, CQ and QP (in Init) made according to the listener's [`ConnOptions`]. Post receives
    /// on its QP, then [`accept`](ConnectRequest::accept) or [`reject`](ConnectRequest::reject)
    /// it (dropping it rejects it too).
    pub fn get_request(&self, timeout: Duration) -> Result<ConnectRequest> {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let ev = self.id.get_event(left)?.ok_or(Error::Timeout {
                op: "connect request",
                after: timeout,
            })?;
            if let Some(req) = self.request_from(ev)? {
                return Ok(req);
            }
        }
    }

    /// Takes an event of the listening id: a connect request that passes the admission hook
    /// becomes a [`ConnectRequest`] with its resources (as [`get_request`](Self::get_request)
    /// makes them); one the hook refuses is rejected here (`Ok(None)`), as is any other
    /// event but the device's removal (an error).
    pub fn request_from(&self, ev: CmEvent) -> Result<Option<ConnectRequest>> {
        self.request_on(ev, None)
    }

    /// [`request_from`](Self::request_from), the request's QP on `cq` and `srq` instead of
    /// the listener's options' queues (of the options' PD): a listener whose connections
    /// spread over several queues picks them per request.
    pub fn request_from_on(
        &self,
        ev: CmEvent,
        cq: &Cq,
        srq: Option<&Srq>,
    ) -> Result<Option<ConnectRequest>> {
        self.request_on(ev, Some((cq, srq)))
    }

    fn request_on(
        &self,
        ev: CmEvent,
        queues: Option<(&Cq, Option<&Srq>)>,
    ) -> Result<Option<ConnectRequest>> {
        match ev.kind() {
            Ok(EventKind::ConnectRequest) => {}
            Ok(EventKind::DeviceRemoval) => return Err(Error::Disconnected),
            // Anything else on the listening id is of no use here; it is acknowledged.
            _ => return Ok(None),
        }
        let Some(id) = ev.id().cloned() else {
            return Ok(None);
        };
        if let Some(hook) = &self.opts.admit {
            let req = IncomingRequest {
                peer_addr: id.peer_addr(),
                local_addr: id.local_addr(),
                private_data: ev.private_data(),
            };
            if let Admission::Reject(data) = hook.call(&req) {
                crate::trace::refused_by_admission(&id);
                let max =
                    crate::max_private_data(crate::PortSpace::Tcp, crate::PrivateDataOp::Reject);
                // The peer is turned away whatever happens; the id and the event go with
                // this call.
                let _ = id.reject(&data[..data.len().min(max)]);
                self.rejected.fetch_add(1, Ordering::Relaxed);
                return Ok(None);
            }
        }
        let private_data = crate::PrivateData::new(ev.private_data().to_vec());
        let peer_param = ev.param();
        // Acknowledge before migrating: rdma_migrate_id waits for it.
        drop(ev);
        if self.own_channel {
            id.migrate(&EventChannel::new()?)?;
        }
        let on_queues;
        let opts = match queues {
            Some((cq, srq)) => {
                on_queues = self.opts.clone().on_queues(cq, srq);
                &on_queues
            }
            None => &self.opts,
        };
        let (pd, cq, qp) = match opts.resources(&id) {
            Ok(r) => r,
            Err(e) => {
                let _ = id.reject(&[]);
                return Err(e);
            }
        };
        Ok(Some(ConnectRequest {
            id,
            pd,
            cq,
            qp,
            private_data,
            peer_param,
            param: self.opts.param.clone(),
        }))
    }

    /// Waits up to `timeout` for a connect request and accepts it with the listener's
    /// parameters: the established connection.
    pub fn accept(&self, timeout: Duration) -> Result<Connection> {
        let deadline = Instant::now() + timeout;
        let req = self.get_request(timeout)?;
        req.accept_by(deadline, timeout)
    }
}

/// A connect request with its resources ready: look at the peer's private data, post
/// receives on [`qp`](Self::qp), then accept or reject. Dropping it without either rejects it
/// (the id is destroyed).
#[derive(Debug)]
pub struct ConnectRequest {
    // Drop order: QP, CQ, PD, then the id.
    qp: Qp,
    cq: Cq,
    pd: Pd,
    id: CmId,
    private_data: crate::PrivateData,
    peer_param: PeerParam,
    param: ConnParam,
}

impl ConnectRequest {
    /// The peer's private data (padded by the transport to 56 bytes on IB/RoCE).
    pub fn private_data(&self) -> &[u8] {
        &self.private_data
    }
    /// The peer's connection parameters.
    pub fn peer_param(&self) -> PeerParam {
        self.peer_param
    }
    /// The QP (Init): post receives here before accepting.
    pub fn qp(&self) -> &Qp {
        &self.qp
    }
    /// The PD, to register memory before accepting.
    pub fn pd(&self) -> &Pd {
        &self.pd
    }
    /// The CQ.
    pub fn cq(&self) -> &Cq {
        &self.cq
    }
    /// The new id.
    pub fn id(&self) -> &CmId {
        &self.id
    }
    /// The peer's address.
    pub fn peer_addr(&self) -> Option<SocketAddr> {
        self.id.peer_addr()
    }

    /// Accepts with `private_data` (at most 196 bytes) and waits up to `timeout` for the
    /// connection to be established.
    #[doc(alias = "rdma_accept")]
    pub fn accept(self, private_data: &[u8], timeout: Duration) -> Result<Connection> {
        let channel = self.id.channel();
        let mut accepting = self.start_accept(private_data, timeout)?;
        wait_steps(&channel, &mut accepting)
    }

    /// Accepts with `param` and waits up to `timeout` for the connection.
    pub fn accept_with(self, param: ConnParam, timeout: Duration) -> Result<Connection> {
        let channel = self.id.channel();
        let mut accepting = self.start_accept_with(param, timeout)?;
        wait_steps(&channel, &mut accepting)
    }

    /// Accepts with `private_data` (at most 196 bytes), the step-wise form of
    /// [`accept`](Self::accept): feed the returned [`Accepting`] the events of its id; it
    /// fails once `timeout` passed without the connection.
    #[doc(alias = "rdma_accept")]
    pub fn start_accept(mut self, private_data: &[u8], timeout: Duration) -> Result<Accepting> {
        self.param = self.param.clone().private_data(private_data)?;
        self.begin(Instant::now() + timeout, timeout)
    }

    /// Accepts with `param`, step by step (see [`start_accept`](Self::start_accept)).
    pub fn start_accept_with(mut self, param: ConnParam, timeout: Duration) -> Result<Accepting> {
        self.param = param;
        self.begin(Instant::now() + timeout, timeout)
    }

    fn begin(self, deadline: Instant, total: Duration) -> Result<Accepting> {
        self.id.ready_qp(&self.qp)?;
        self.id.accept(&self.param, &self.qp)?;
        Ok(Accepting {
            id: self.id.clone(),
            deadline,
            total,
            request: Some(self),
        })
    }

    /// Accepts with the listener's parameters and waits until `deadline` (`total` after the
    /// caller's start) for the connection.
    fn accept_by(self, deadline: Instant, total: Duration) -> Result<Connection> {
        let channel = self.id.channel();
        let mut accepting = self.begin(deadline, total)?;
        wait_steps(&channel, &mut accepting)
    }

    /// Rejects with `private_data` (at most 148 bytes) for the peer.
    #[doc(alias = "rdma_reject")]
    pub fn reject(self, private_data: &[u8]) -> Result<()> {
        self.id.reject(private_data)
    }
}

/// An accepted request waiting for the connection to be established
/// ([`ConnectRequest::start_accept`]), step by step.
#[derive(Debug)]
pub struct Accepting {
    id: CmId,
    deadline: Instant,
    total: Duration,
    /// Taken when it is done.
    request: Option<ConnectRequest>,
}

impl Accepting {
    /// The id whose events to feed.
    pub fn id(&self) -> &CmId {
        &self.id
    }

    /// The deadline: [`on_timer`](Self::on_timer) fails the accept from then on.
    pub fn deadline(&self) -> Instant {
        self.deadline
    }

    /// Takes an event: one of another id is ignored; `Established` is [`Step::Done`] with the
    /// connection; a rejection, an unreachable peer or a disconnect is the error it means.
    pub fn on_event(&mut self, ev: &CmEvent) -> Result<Step<Connection>> {
        if !names(ev, &self.id) || self.request.is_none() {
            return Ok(Step::Waiting);
        }
        if !ev.is(EventKind::Established) {
            return match ev.connection_failure() {
                Some(e) => {
                    self.request = None;
                    Err(e)
                }
                None => Ok(Step::Waiting),
            };
        }
        let Some(ConnectRequest {
            qp,
            cq,
            pd,
            id,
            private_data,
            peer_param,
            ..
        }) = self.request.take()
        else {
            return Ok(Step::Waiting);
        };
        id.established_qp(&qp)?;
        Ok(Step::Done(Connection::new(
            id,
            pd,
            cq,
            qp,
            private_data.into_vec(),
            peer_param,
        )))
    }

    /// Looks at the clock: past the deadline, the accept timed out.
    pub fn on_timer(&mut self, now: Instant) -> Result<Step<Connection>> {
        crate::step::expire(&mut self.request, now, self.deadline, "accept", self.total)
    }
}

impl Stepwise for Accepting {
    type Output = Connection;
    fn on_event(&mut self, ev: &CmEvent) -> Result<Step<Connection>> {
        Accepting::on_event(self, ev)
    }
    fn on_timer(&mut self, now: Instant) -> Result<Step<Connection>> {
        Accepting::on_timer(self, now)
    }
    fn deadline(&self) -> Instant {
        self.deadline
    }
}
