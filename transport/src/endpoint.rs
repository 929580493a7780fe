//! [`Endpoint`]: one device, protection domain, memory pool and progress engine serving many
//! connections; it listens and connects.

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::AtomicUsize;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cm::{ConnOptions, ConnParam, Connector};
use parking_lot::{Condvar, Mutex};
use verbs::{AccessFlags, QpCap};

use crate::engine::{ConnShared, ConnState, Engine, Shared};
use crate::proto::{self, ConnectInfo, HandshakeError};
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

    /// Listens on `port` of the local address (0: any free port).
    pub fn listen(&self, port: u16) -> Result<Listener> {
        let addr = SocketAddr::new(self.local_ip(), port);
        let opts = self
            .conn_options(None)?
            .admit_hook(Some(crate::listener::admission(self)));
        let inner = cm::Listener::bind(addr, opts)?;
        Ok(Listener::new(inner, self.clone()))
    }

    /// Connects to `dst` within the configured connect timeout.
    pub fn connect(&self, dst: SocketAddr) -> Result<Conn> {
        self.connect_timeout(dst, self.config().connect_timeout)
    }

    /// Connects to `dst` within `timeout`. Nobody listening: [`Error::Cm`] with the rejection;
    /// a peer speaking another protocol version: [`Error::Handshake`].
    pub fn connect_timeout(&self, dst: SocketAddr, timeout: Duration) -> Result<Conn> {
        self.check_room()?;
        let info = self.config().proto.connect_info();
        let pending = Connector::new(dst)
            .src(self.local_ip())
            .options(self.conn_options(Some(&info.encode()))?)
            .timeout(timeout)
            .resolve()?;
        // Register before connecting: the peer may send as soon as it accepted.
        let conn = self.register(pending.qp().clone(), pending.id().clone(), None);
        let connected = pending.connect().map_err(handshake_rejection);
        let parts = match connected {
            Ok(c) => c.into_parts(),
            Err(e) => {
                self.unregister(&conn);
                return Err(e);
            }
        };
        let peer = match ConnectInfo::decode(&parts.private_data) {
            Ok(p) => p,
            Err(e) => {
                self.unregister(&conn);
                let _ = parts.qp.to_error();
                let _ = parts.id.disconnect();
                return Err(Error::Handshake(e));
            }
        };
        self.establish(&conn, &parts.id, &peer)?;
        Ok(Conn {
            inner: conn,
            engine: self.engine.clone(),
        })
    }

    /// Connects to `dst` within the configured connect timeout, as a future: the connect runs
    /// on a thread of its own (no runtime needed). Dropping the future lets the connect finish
    /// and closes the connection it made.
    pub async fn connect_async(&self, dst: SocketAddr) -> Result<Conn> {
        self.drive_from_current_runtime();
        let ep = self.clone();
        crate::task::spawn_blocking("transport-connect", move || ep.connect(dst)).await
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

    /// Refuses a new connection when the endpoint has as many as its shared receive queue is
    /// sized for.
    pub(crate) fn check_room(&self) -> Result<()> {
        let max = self.config().max_connections;
        if self.connections() >= max as usize {
            return Err(Error::TooManyConnections { max });
        }
        Ok(())
    }

    /// Options for the CM: this endpoint's PD, CQ and SRQ; QPs sized for the protocol,
    /// asking for [`INLINE_ROOM`] bytes of inline data.
    pub(crate) fn conn_options(&self, private_data: Option<&[u8]>) -> Result<ConnOptions> {
        let s = self.shared();
        let mut param = ConnParam::new().retry_count(s.cfg.retry_count);
        if let Some(data) = private_data {
            param = param.private_data(data)?;
        }
        Ok(ConnOptions::new()
            .pd(&s.res.pd)
            .cq(&s.res.cq)
            .srq(&s.res.srq)
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

    /// Makes the engine's record of a connection, known by QP number from now on.
    pub(crate) fn register(
        &self,
        qp: verbs::Qp,
        id: cm::CmId,
        proto: Option<proto::Connection<memory::Buffer>>,
    ) -> Arc<ConnShared> {
        let conn = Arc::new(ConnShared {
            shared: self.shared().clone(),
            local_addr: id.local_addr(),
            peer_addr: id.peer_addr(),
            qp,
            id,
            eager_limit: AtomicUsize::new(proto.as_ref().map_or(0, |p| p.eager_limit())),
            spin: crate::engine::SpinBudget::new(match self.config().polling {
                crate::Polling::Adaptive { spin } => spin,
                _ => Duration::ZERO,
            }),
            state: Mutex::new(ConnState::new(proto.map(|mut p| {
                p.set_coalescing(self.config().polling.batches_messages());
                p
            }))),
            cond: Condvar::new(),
            handles: AtomicUsize::new(1),
            nodelay: std::sync::atomic::AtomicBool::new(false),
        });
        self.shared().add_conn(conn.clone());
        conn
    }

    pub(crate) fn unregister(&self, conn: &ConnShared) {
        self.shared().remove_conns([conn.qp.qp_num()]);
    }

    /// The peer's connect data arrived: start the protocol, replay early frames, and route the
    /// id's CM events (disconnects) to the engine.
    pub(crate) fn establish(
        &self,
        conn: &Arc<ConnShared>,
        id: &cm::CmId,
        peer: &ConnectInfo,
    ) -> Result<()> {
        let proto = proto::Connection::new(&self.config().proto, peer, Instant::now())
            .map_err(|e| Error::Config(e.to_string()))?;
        {
            let mut st = conn.state.lock();
            conn.set_proto(&mut st, proto);
            conn.replay_early(&mut st);
            conn.drive(&mut st);
        }
        id.migrate(&self.shared().cm_channel)?;
        Ok(())
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

/// A rejection carrying the peer's connect data: its version tells why.
fn handshake_rejection(e: cm::Error) -> Error {
    if let cm::Error::Rejected { private_data, .. } = &e {
        if let Err(h @ HandshakeError::VersionMismatch { .. }) = ConnectInfo::decode(private_data) {
            return Error::Handshake(h);
        }
    }
    Error::Cm(e)
}
