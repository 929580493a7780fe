//! [`Listener`]: a bound, listening CM id that yields connect requests and connections.
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use verbs::{Cq, Pd, Qp};

use crate::{
    Admission, CmId, ConnOptions, ConnParam, Connection, Error, EventChannel, EventKind,
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
}

impl Listener {
    /// Binds to `addr` (port 0: any free port; see [`local_addr`](Self::local_addr)) and
    /// listens. Bind to the IP of an RDMA netdev, not a wildcard, so the device is explicit.
    pub fn bind(addr: SocketAddr, opts: ConnOptions) -> Result<Listener> {
        let id = CmId::with_own_channel(PortSpace::Tcp)?;
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
            match ev.kind() {
                Ok(EventKind::ConnectRequest) => {
                    let Some(id) = ev.id().cloned() else { continue };
                    if let Some(hook) = &self.opts.admit {
                        let req = IncomingRequest {
                            peer_addr: id.peer_addr(),
                            local_addr: id.local_addr(),
                            private_data: ev.private_data(),
                        };
                        if let Admission::Reject(data) = hook.call(&req) {
                            let max = crate::max_private_data(
                                crate::PortSpace::Tcp,
                                crate::PrivateDataOp::Reject,
                            );
                            // The peer is turned away whatever happens; the id and the event
                            // go with this iteration.
                            let _ = id.reject(&data[..data.len().min(max)]);
                            self.rejected.fetch_add(1, Ordering::Relaxed);
                            continue;
                        }
                    }
                    let private_data = crate::PrivateData::new(ev.private_data().to_vec());
                    let peer_param = ev.param();
                    // Acknowledge before migrating: rdma_migrate_id waits for it.
                    drop(ev);
                    id.migrate(&EventChannel::new()?)?;
                    let (pd, cq, qp) = match self.opts.resources(&id) {
                        Ok(r) => r,
                        Err(e) => {
                            let _ = id.reject(&[]);
                            return Err(e);
                        }
                    };
                    return Ok(ConnectRequest {
                        id,
                        pd,
                        cq,
                        qp,
                        private_data,
                        peer_param,
                        param: self.opts.param.clone(),
                    });
                }
                Ok(EventKind::DeviceRemoval) => return Err(Error::Disconnected),
                // Anything else on the listening id is of no use here; it is acknowledged.
                _ => continue,
            }
        }
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
    pub fn accept(mut self, private_data: &[u8], timeout: Duration) -> Result<Connection> {
        self.param = self.param.clone().private_data(private_data)?;
        self.accept_by(Instant::now() + timeout, timeout)
    }

    /// Accepts with `param` and waits up to `timeout` for the connection.
    pub fn accept_with(mut self, param: ConnParam, timeout: Duration) -> Result<Connection> {
        self.param = param;
        self.accept_by(Instant::now() + timeout, timeout)
    }

    fn accept_by(self, deadline: Instant, total: Duration) -> Result<Connection> {
        self.id.ready_qp(&self.qp)?;
        self.id.accept(&self.param, &self.qp)?;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let ev = self.id.get_event(left)?.ok_or(Error::Timeout {
                op: "accept",
                after: total,
            })?;
            match ev.kind() {
                Ok(EventKind::Established) => break,
                _ => match ev.connection_failure() {
                    Some(e) => return Err(e),
                    None => continue,
                },
            }
        }
        let ConnectRequest {
            qp,
            cq,
            pd,
            id,
            private_data,
            peer_param,
            ..
        } = self;
        Ok(Connection::new(
            id,
            pd,
            cq,
            qp,
            private_data.into_vec(),
            peer_param,
        ))
    }

    /// Rejects with `private_data` (at most 148 bytes) for the peer.
    #[doc(alias = "rdma_reject")]
    pub fn reject(self, private_data: &[u8]) -> Result<()> {
        self.id.reject(private_data)
    }
}
