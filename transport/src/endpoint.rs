//! [`Endpoint`]: one device, protection domain, memory pool and progress engine serving many
//! connections; it listens and connects.

use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use cm::{ConnOptions, ConnParam, Connector};
use parking_lot::Mutex;
use verbs::{AccessFlags, QpCap};

use crate::engine::{ConnectOp, EndpointStats, Engine, Queues, Shared};
use crate::region::{Access, Region, Token};
use crate::{Conn, EndpointConfig, Error, Listener, Result};

/// Inline room each connection's QP asks for: frames up to this size (messages up to 112
/// bytes, and every control frame) are copied by the device while posting, so they take no
/// pool buffer past the post and the device reads no registered memory for them. A device
/// that grants less gets asked for half as much (see [`cm::ConnOptions::cap`]); the frames
/// that no longer fit go from the pool.
const INLINE_ROOM: u32 = 128;

/// The resources every connection of this side shares: the RDMA device that serves a local
/// IP address, one protection domain, one memory pool, one completion queue and shared
/// receive queue, and the threads that make progress. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Endpoint {
    pub(crate) engine: Arc<Engine>,
}

impl Endpoint {
    /// An endpoint on the RDMA device that has `local_ip` (the address of an RDMA netdev),
    /// with the default configuration.
    pub fn new(local_ip: IpAddr) -> Result<Endpoint> {
        Self::with_config(local_ip, EndpointConfig::default())
    }

    /// An endpoint on the device of `local_ip` with `config`.
    pub fn with_config(local_ip: IpAddr, config: EndpointConfig) -> Result<Endpoint> {
        Self::builder(local_ip).config(config).build()
    }

    /// A builder, to give the endpoint your own protection domain or data pool.
    pub fn builder(local_ip: IpAddr) -> EndpointBuilder {
        EndpointBuilder {
            local_ip,
            config: EndpointConfig::default(),
            pd: None,
            pool: None,
        }
    }

    fn shared(&self) -> &Arc<Shared> {
        &self.engine.shared
    }

    /// The local IP address the endpoint serves.
    pub fn local_ip(&self) -> IpAddr {
        self.shared().local_ip
    }

    /// The configuration.
    pub fn config(&self) -> &EndpointConfig {
        &self.shared().cfg
    }

    /// The memory pool every connection's buffers come from (its statistics show what the
    /// endpoint holds).
    pub fn pool(&self) -> &memory::Pool {
        &self.shared().res.pool
    }

    /// The protection domain (to register memory of your own for this endpoint's peers).
    pub fn pd(&self) -> &verbs::Pd {
        &self.shared().res.pd
    }

    /// Connections currently known (open, closing, or being torn down).
    pub fn connections(&self) -> usize {
        self.shared().conn_count()
    }

    /// What the endpoint's connections did: the counters of every connection established
    /// since it started, open now or ended, summed ([`Stats`](crate::Stats); the round-trip
    /// estimate is their mean, by samples), how many are open, and how the others ended.
    /// The pool's figures are [`pool`](Self::pool)'s `stats()`.
    pub fn stats(&self) -> EndpointStats {
        self.shared().stats()
    }

    /// Listens on `port` of the local address (0: any free port). The listening id's events
    /// come to the endpoint's CM thread, which accepts for the listener: no thread of its
    /// own. Dropping the listener frees the port at once.
    pub fn listen(&self, port: u16) -> Result<Listener> {
        let addr = SocketAddr::new(self.local_ip(), port);
        // Each request's QP goes on the queues of the place it takes (the options' are the
        // first ones).
        let first = self.shared().res.first_queues();
        let opts = self
            .conn_options(None, first)?
            .admit_hook(Some(crate::listener::admission(self)));
        let backlog = self.shared().listen(addr, opts)?;
        Ok(Listener::new(backlog, self.clone()))
    }

    /// Connects to `dst` within the configured connect timeout.
    pub fn connect(&self, dst: SocketAddr) -> Result<Conn> {
        self.connect_timeout(dst, self.config().connect_timeout)
    }

    /// Connects to `dst` within `timeout`. Nobody listening: [`Error::Cm`] with the rejection;
    /// a peer speaking another protocol version: [`Error::Handshake`]. The attempt is the
    /// one [`connect_async`](Self::connect_async) makes, waited for on this thread.
    pub fn connect_timeout(&self, dst: SocketAddr, timeout: Duration) -> Result<Conn> {
        let mut connecting = self.start_connect(dst, timeout)?;
        // The attempt fails itself at its deadline (the progress thread's tick looks at it);
        // the grace covers the tick's interval and the CM's last event.
        let bound = timeout + CONNECT_GRACE;
        match crate::task::block_on(Some(bound), |cx| Pin::new(&mut connecting).poll(cx)) {
            Some(r) => r,
            None => Err(Error::TimedOut {
                op: "connect",
                after: timeout,
            }),
        }
    }

    /// Connects to `dst` within the configured connect timeout, as a future (no runtime
    /// needed): the attempt's CM events come to the endpoint's CM thread, which wakes the
    /// task; no thread is started for it. Dropping the future abandons the attempt (the
    /// peer is refused) or closes the connection it made.
    pub async fn connect_async(&self, dst: SocketAddr) -> Result<Conn> {
        self.drive_from_current_runtime();
        self.start_connect(dst, self.config().connect_timeout)?
            .await
    }

    fn start_connect(&self, dst: SocketAddr, timeout: Duration) -> Result<ConnectFuture> {
        self.shared().check_room()?;
        let slot = self.shared().res.take_slot()?;
        crate::trace::connecting(dst);
        let info = self.config().proto.connect_info();
        let connector = Connector::new(dst)
            .src(self.local_ip())
            .options(self.conn_options(Some(&info.encode()), slot.queues())?)
            .timeout(timeout);
        let op = self.shared().start_connect(connector, slot)?;
        Ok(ConnectFuture {
            endpoint: self.clone(),
            op: Some(op),
        })
    }

    /// Registers memory for peers to read and/or write through a [`Token`].
    pub fn expose(&self, len: usize, access: Access) -> Result<Region> {
        let mr = self.pd().reg_mr(len, access.flags())?;
        let token = Token {
            addr: mr.addr(),
            len: len as u64,
            rkey: mr.rkey(),
            access,
        };
        Ok(Region {
            mr: Mutex::new(mr),
            token,
        })
    }

    /// Options for the CM: this endpoint's PD, and the CQ and SRQ of `queues`; QPs sized for
    /// the protocol, asking for [`INLINE_ROOM`] bytes of inline data.
    pub(crate) fn conn_options(
        &self,
        private_data: Option<&[u8]>,
        queues: &Queues,
    ) -> Result<ConnOptions> {
        let s = self.shared();
        let mut param = ConnParam::new().retry_count(s.cfg.retry_count);
        if let Some(data) = private_data {
            param = param.private_data(data)?;
        }
        Ok(ConnOptions::new()
            .pd(&s.res.pd)
            .cq(&queues.cq)
            .srq(&queues.srq)
            .cap(QpCap {
                max_send_wr: s.cfg.qp_send_depth(),
                max_recv_wr: 1,
                // A frame that goes at once gathers its header and the caller's bytes.
                max_send_sge: 2,
                max_recv_sge: 1,
                max_inline_data: INLINE_ROOM,
            })
            .access(AccessFlags::REMOTE_READ | AccessFlags::REMOTE_WRITE)
            .ack_timeout(s.cfg.ack_timeout)
            .param(param))
    }
}

/// How long past its timeout a blocking connect waits for the attempt's own end.
const CONNECT_GRACE: Duration = Duration::from_secs(2);

/// A connect in progress: its outcome as a connection of `endpoint`. Dropping it before the
/// end abandons the attempt, or closes the connection it made.
struct ConnectFuture {
    endpoint: Endpoint,
    /// Taken with the outcome.
    op: Option<Arc<ConnectOp>>,
}

impl Future for ConnectFuture {
    type Output = Result<Conn>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<Conn>> {
        let Some(op) = &self.op else {
            return Poll::Ready(Err(Error::PolledAfterEnd { what: "a connect" }));
        };
        let Poll::Ready(r) = op.poll(cx) else {
            return Poll::Pending;
        };
        self.op = None;
        Poll::Ready(r.map(|inner| Conn {
            inner,
            engine: self.endpoint.engine.clone(),
        }))
    }
}

impl Drop for ConnectFuture {
    fn drop(&mut self) {
        if let Some(op) = self.op.take() {
            self.endpoint.shared().cancel_connect(&op);
        }
    }
}

/// Builds an [`Endpoint`] with resources of your own.
#[derive(Debug)]
pub struct EndpointBuilder {
    local_ip: IpAddr,
    config: EndpointConfig,
    pd: Option<verbs::Pd>,
    pool: Option<memory::Pool>,
}

impl EndpointBuilder {
    /// The configuration (default: [`EndpointConfig::default`]).
    pub fn config(mut self, config: EndpointConfig) -> Self {
        self.config = config;
        self
    }

    /// Use this protection domain (on the device of the local address, e.g. from
    /// `verbs::Context::open_by_addr`), so memory you register on it can be used with the
    /// endpoint's peers. Another device's PD is [`Error::Config`].
    pub fn pd(mut self, pd: &verbs::Pd) -> Self {
        self.pd = Some(pd.clone());
        self
    }

    /// Use this pool for the data path (copies of sends, rendezvous chunks, READ
    /// destinations). It must be registered on the endpoint's PD (`Pool::on_pd` with the PD
    /// given to [`pd`](Self::pd)) with `LOCAL_WRITE | REMOTE_READ` access; other access is
    /// [`Error::Config`]. Receive buffers keep a pool of their own.
    pub fn pool(mut self, pool: memory::Pool) -> Self {
        self.pool = Some(pool);
        self
    }

    /// Opens the device and starts the endpoint.
    pub fn build(self) -> Result<Endpoint> {
        let shared = Shared::new(self.local_ip, self.config, self.pd, self.pool)?;
        Ok(Endpoint {
            engine: Engine::start(shared)?,
        })
    }
}
