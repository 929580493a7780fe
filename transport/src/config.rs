//! [`EndpointConfig`]: the resources of an endpoint (pool, queues) and how it makes progress.

use std::time::Duration;

pub use cm::{Admission, AdmitHook, IncomingRequest};

use crate::proto;
use crate::{ConfigError, ProtocolConfig};

/// Receives posted on the SRQ beyond the credits of every connection (less if the device
/// allows fewer): replacing consumed receives can then wait for an idle poll, off the path
/// between a frame's arrival and its delivery, until this many are owed.
pub(crate) const SRQ_SLACK: u32 = 32;

/// How the endpoint waits for completions: its progress thread, and a thread blocked in a
/// call (which polls the completion queue itself while it spins, so the completion it waits
/// for needs no handoff between threads). A sender also polls once after each send. While
/// application threads poll like this, the progress thread runs only the timers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Polling {
    /// Spin on the completion queue: lowest latency. The progress thread spins while no call
    /// waits, and a blocked call spins until it is done or times out: a core per waiting
    /// thread.
    Busy,
    /// Sleep on the completion channel until the device signals (arm, poll again, then sleep,
    /// so no completion is missed): no CPU when idle, a wakeup's latency per message.
    Event,
    /// Spin for `spin`, then sleep on the completion channel (the progress thread), or until
    /// the progress thread wakes it (a blocked call). A connection whose blocked calls sleep
    /// for frames that arrive soon after (up to 16 times `spin`) stretches its calls' spin
    /// to twice that, so a ping-pong slower than `spin` does not pay a thread handoff per
    /// message; calls that end early shrink it back towards `spin`.
    ///
    /// On a multi-threaded tokio runtime (feature `tokio`), the endpoint is driven from the
    /// runtime itself: its first async connect or accept there spawns a driver task, as
    /// [`Polling::Reactor`]'s `Endpoint::spawn_tokio_driver` does, which polls the
    /// completion queue between the runtime's other tasks for 16 times `spin` after the last
    /// completion, then waits for the completion channel on tokio's reactor. The completions
    /// and the tasks they wake then meet on the runtime's threads, with no handoff from the
    /// progress thread, whatever the number of connections: many connections at once carry
    /// more messages than one, not fewer. While it lives, a waiting task spins as below only
    /// when its connection is the endpoint's only one (it then catches its own message
    /// without a wakeup; with several, a spinning task would hold a runtime thread from the
    /// others). The driver ends with its runtime (the progress thread then polls again, and
    /// the next async connect or accept on another runtime spawns a new driver).
    ///
    /// Elsewhere (another executor, tokio's current-thread runtime, no runtime), async waits
    /// (a byte stream's read, [`Conn::recv_async`](crate::Conn::recv_async),
    /// [`Conn::call_async`](crate::Conn::call_async)) spin the same way as blocked calls in
    /// the waiting task before it registers its waker, one task of the endpoint at a time
    /// (not on tokio's current-thread runtime, whose one thread the spin would hold from
    /// every other task). The spinning task polls for every connection of the endpoint, so
    /// the tasks it wakes are woken on its executor thread and run there next. The other
    /// waiting tasks register their wakers at once. Set [`EndpointConfig::with_busy_read`] to spin every waiting task
    /// anyway.
    Adaptive {
        /// How long to spin before sleeping (at least; see above).
        spin: Duration,
    },
    /// A reactor of yours waits on the completion channel: register
    /// [`Endpoint::progress_fd`](crate::Endpoint::progress_fd) with it and call
    /// [`Endpoint::progress_ready`](crate::Endpoint::progress_ready) when it is readable,
    /// or, with the `tokio` feature, let
    /// `Endpoint::spawn_tokio_driver` do both. The
    /// completion and the task it wakes then meet on the reactor's thread, with no handoff
    /// from a progress thread. The progress thread only runs the timers and polls once per
    /// tick (a few milliseconds), which is all the progress an endpoint gets when no reactor
    /// drives it; blocked calls do not spin.
    Reactor {
        /// How long the tokio driver keeps polling the completion queue (yielding to other
        /// tasks between polls) after its last completion before it waits for the channel:
        /// zero waits at once (no CPU when idle); [`Duration::MAX`] never waits (busy).
        spin: Duration,
    },
}

impl Polling {
    /// Whether plain messages travel in batches under this mode (unless `nodelay`, see
    /// [`Conn::set_nodelay`](crate::Conn::set_nodelay)): under busy and reactor polling a
    /// poller beside the sender posts the batches while the sender only adds to them. Under
    /// adaptive and event polling the sender would mostly post them itself, seeing each
    /// completion as soon as it could wait for it, and the extra completions cost more than
    /// the batches saved: a one-way stream of small messages goes faster there without
    /// batches, and faster still in batches under busy polling.
    pub(crate) fn batches_messages(&self) -> bool {
        matches!(self, Polling::Busy | Polling::Reactor { .. })
    }
}

/// The default [`EndpointConfig::ack_timeout`]: 4.096 µs × 2^14, about 67 ms.
pub const DEFAULT_ACK_TIMEOUT: Duration = Duration::from_nanos(4096 << 14);

/// The spin of the default polling mode, [`Polling::Adaptive`]: 50 µs.
pub const DEFAULT_ADAPTIVE_SPIN: Duration = Duration::from_micros(50);

/// Configuration of an [`Endpoint`](crate::Endpoint): the protocol limits of each connection,
/// the pool and queues shared by all of them, and the polling mode.
///
/// Start from [`EndpointConfig::default`] and change what you need with the `with_*`
/// setters; the getter of the same name without `with_` reads a value back. Values are
/// checked when the endpoint is built ([`validate`](Self::validate)), not by the setters.
///
/// ```
/// use std::time::Duration;
/// use transport::{EndpointConfig, Polling, ProtocolConfig};
///
/// let config = EndpointConfig::default()
///     .with_polling(Polling::Busy)
///     .with_pool_bytes(64 << 20)
///     .with_linger(Duration::from_secs(1))
///     .with_proto(ProtocolConfig::default().with_window(128));
/// assert_eq!(config.polling(), Polling::Busy);
/// assert_eq!(config.proto().window(), 128);
/// assert!(config.validate().is_ok());
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct EndpointConfig {
    pub(crate) proto: proto::Config,
    pub(crate) polling: Polling,
    pub(crate) pool_bytes: usize,
    pub(crate) max_connections: u32,
    pub(crate) connections_per_queue: u32,
    pub(crate) serve_requests: bool,
    pub(crate) connect_timeout: Duration,
    pub(crate) max_one_sided: u32,
    /// The device completes a WRITE once it is sent, not once the peer placed it (iWARP;
    /// set from the device). Then each one-sided WRITE is followed by a zero-length READ,
    /// whose completion says the peer placed it, and no SEND's or WRITE's completion counts
    /// as a sign of the peer's life (its frames do).
    pub(crate) write_completes_when_sent: bool,
    pub(crate) admit: Option<cm::AdmitHook>,
    pub(crate) busy_read: Duration,
    pub(crate) linger: Duration,
    pub(crate) ack_timeout: Duration,
    pub(crate) retry_count: u8,
}

impl Default for EndpointConfig {
    fn default() -> Self {
        EndpointConfig {
            proto: proto::Config::default(),
            polling: Polling::Adaptive {
                spin: DEFAULT_ADAPTIVE_SPIN,
            },
            pool_bytes: 256 << 20,
            max_connections: 4096,
            connections_per_queue: 256,
            serve_requests: true,
            connect_timeout: cm::DEFAULT_CONNECT_TIMEOUT,
            max_one_sided: 8,
            write_completes_when_sent: false,
            admit: None,
            busy_read: Duration::ZERO,
            linger: Duration::from_secs(10),
            ack_timeout: DEFAULT_ACK_TIMEOUT,
            retry_count: 7,
        }
    }
}

impl EndpointConfig {
    /// Sets the per-connection protocol limits (credits, frame size, rendezvous, keepalive);
    /// default: [`ProtocolConfig::default`].
    pub fn with_proto(mut self, proto: ProtocolConfig) -> Self {
        self.proto = proto;
        self
    }

    /// The per-connection protocol limits (see [`with_proto`](Self::with_proto)).
    pub fn proto(&self) -> &ProtocolConfig {
        &self.proto
    }

    /// Sets how the progress thread and blocked calls wait for completions; default:
    /// [`Polling::Adaptive`] spinning [`DEFAULT_ADAPTIVE_SPIN`].
    pub fn with_polling(mut self, polling: Polling) -> Self {
        self.polling = polling;
        self
    }

    /// The polling mode (see [`with_polling`](Self::with_polling)).
    pub fn polling(&self) -> Polling {
        self.polling
    }

    /// Sets the bytes the endpoint's data pool may register; default 256 MiB, in bytes.
    ///
    /// The data pool holds copies of messages sent, rendezvous chunks and their READ
    /// destinations. (Receive buffers have a pool of their own, which grows with the
    /// connections: see [`with_connections_per_queue`](Self::with_connections_per_queue).)
    pub fn with_pool_bytes(mut self, bytes: usize) -> Self {
        self.pool_bytes = bytes;
        self
    }

    /// The bytes the data pool may register (see [`with_pool_bytes`](Self::with_pool_bytes)).
    pub fn pool_bytes(&self) -> usize {
        self.pool_bytes
    }

    /// Sets how many connections the endpoint serves at once; default 4,096. Past it, a
    /// connect fails with [`Error::TooManyConnections`](crate::Error::TooManyConnections) and
    /// a peer's connect request is refused ([`Error::PeerFull`](crate::Error::PeerFull) on
    /// its side).
    ///
    /// Nothing is made for connections not yet open: the endpoint's queues grow by blocks of
    /// [`connections_per_queue`](Self::with_connections_per_queue) as connections come.
    pub fn with_max_connections(mut self, n: u32) -> Self {
        self.max_connections = n;
        self
    }

    /// The connections the endpoint serves at once (see
    /// [`with_max_connections`](Self::with_max_connections)).
    pub fn max_connections(&self) -> u32 {
        self.max_connections
    }

    /// Sets how many connections share one completion queue and one shared receive queue;
    /// default 256. The endpoint makes its first pair when it opens and another each time
    /// every pair serves this many connections, up to
    /// [`max_connections`](Self::with_max_connections).
    ///
    /// Each pair holds a completion entry for every send-queue slot of its connections and a
    /// window of posted receives (a receive buffer of the frame size each) per connection,
    /// all of them posted when the pair is made: with the defaults, 8,224 receives of 4,160
    /// bytes, 32.6 MiB registered per pair. A smaller number makes the endpoint grow in smaller
    /// steps (and its first pair smaller); a larger one must fit the device's largest
    /// completion queue and shared receive queue
    /// ([`ConfigError::DeviceLimits`](crate::ConfigError::DeviceLimits) otherwise).
    pub fn with_connections_per_queue(mut self, n: u32) -> Self {
        self.connections_per_queue = n;
        self
    }

    /// The connections that share one completion queue and shared receive queue (see
    /// [`with_connections_per_queue`](Self::with_connections_per_queue)).
    pub fn connections_per_queue(&self) -> u32 {
        self.connections_per_queue
    }

    /// Sets whether incoming RPC requests are queued for
    /// [`Conn::recv_request`](crate::Conn::recv_request) (`true`, the default) or answered at
    /// once with "no handler" (`false`).
    pub fn with_serve_requests(mut self, serve: bool) -> Self {
        self.serve_requests = serve;
        self
    }

    /// Whether incoming RPC requests are queued (see
    /// [`with_serve_requests`](Self::with_serve_requests)).
    pub fn serve_requests(&self) -> bool {
        self.serve_requests
    }

    /// Sets the time a connect (resolution and handshake) may take, also what an accepted
    /// request gets to finish its handshake; default [`cm::DEFAULT_CONNECT_TIMEOUT`].
    pub fn with_connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// The time a connect may take (see [`with_connect_timeout`](Self::with_connect_timeout)).
    pub fn connect_timeout(&self) -> Duration {
        self.connect_timeout
    }

    /// Sets the one-sided operations (region reads and writes) in flight per connection;
    /// default 8 operations.
    pub fn with_max_one_sided(mut self, n: u32) -> Self {
        self.max_one_sided = n;
        self
    }

    /// The one-sided operations in flight per connection (see
    /// [`with_max_one_sided`](Self::with_max_one_sided)).
    pub fn max_one_sided(&self) -> u32 {
        self.max_one_sided
    }

    /// Sets the admission hook of the endpoint's listeners; default none (every request
    /// that passes the listener's own checks is accepted).
    ///
    /// After the listener's own checks (a protocol handshake it can read, room for another
    /// connection), this hook sees the peer's address and connect data and may reject it,
    /// before any queue pair or buffer exists for it.
    pub fn with_admit(
        mut self,
        f: impl Fn(&IncomingRequest<'_>) -> Admission + Send + Sync + 'static,
    ) -> Self {
        self.admit = Some(cm::AdmitHook::new(f));
        self
    }

    /// The admission hook, if one is set (see [`with_admit`](Self::with_admit)).
    pub fn admit(&self) -> Option<&AdmitHook> {
        self.admit.as_ref()
    }

    /// Sets how long a task that finds no message waiting polls the completion queue itself
    /// before it waits for a wakeup; default zero (the polling mode decides).
    ///
    /// It applies to [`Conn::poll_recv`](crate::Conn::poll_recv) (and so a byte stream's
    /// read), [`Conn::recv_request_async`](crate::Conn::recv_request_async) and
    /// [`Conn::call_async`](crate::Conn::call_async), whatever the polling mode; the spin
    /// stops early when the endpoint wakes another task. At zero, the polling mode decides
    /// ([`Polling::Adaptive`] spins one waiting task of the endpoint at a time, the others
    /// wait at once). Like Linux's `busy_read` for sockets, it trades the executor thread's
    /// time for latency: a message that comes within it is taken by the reading task itself,
    /// with no wakeup, but the thread's other tasks wait meanwhile. For a latency-critical
    /// connection on a runtime of its own.
    pub fn with_busy_read(mut self, spin: Duration) -> Self {
        self.busy_read = spin;
        self
    }

    /// How long a waiting task polls before it waits (see
    /// [`with_busy_read`](Self::with_busy_read)).
    pub fn busy_read(&self) -> Duration {
        self.busy_read
    }

    /// Sets how long a graceful close waits for the peer to have everything sent; default
    /// 10 s, as long as the keepalive timeout.
    ///
    /// It bounds [`Conn::close_async`](crate::Conn::close_async) and a byte stream's
    /// [`shutdown`](crate::stream::Stream::shutdown), which wait for every message to be
    /// received and every rendezvous chunk read by the peer and acknowledged, then fail with
    /// a timeout ([`Error::TimedOut`](crate::Error::TimedOut), `io::ErrorKind::TimedOut`);
    /// the close goes on meanwhile. A peer that is alive but reads nothing holds a close
    /// that long. ([`Conn::close`](crate::Conn::close) takes its bound as an argument.)
    pub fn with_linger(mut self, linger: Duration) -> Self {
        self.linger = linger;
        self
    }

    /// How long a graceful close waits (see [`with_linger`](Self::with_linger)).
    pub fn linger(&self) -> Duration {
        self.linger
    }

    /// Sets how long each connection's queue pair waits for the peer device's
    /// acknowledgement before it sends again; default [`DEFAULT_ACK_TIMEOUT`], about 67 ms.
    ///
    /// This is the local ACK timeout, rounded up to 4.096 µs × 2^n (see
    /// [`cm::ConnOptions::ack_timeout`]). A packet lost at the end of a burst, or a lost
    /// acknowledgement, costs this long; losses inside a burst are sent again at once. The
    /// default is perftest's (exponent 14), where the CM alone would derive half a second to
    /// a second from a RoCE path. Raise it where round trips under load come near it (a
    /// congested fabric, long links): a timeout shorter than the round trip sends again what
    /// was not lost, adding load where there is too much. A queue pair gives up after
    /// `retry_count` + 1 timeouts in a row without progress.
    pub fn with_ack_timeout(mut self, timeout: Duration) -> Self {
        self.ack_timeout = timeout;
        self
    }

    /// The queue pairs' ACK timeout (see [`with_ack_timeout`](Self::with_ack_timeout)).
    pub fn ack_timeout(&self) -> Duration {
        self.ack_timeout
    }

    /// Sets the times a queue pair sends again after an ACK timeout before it fails the
    /// connection (`retry_count` of the CM's connect parameters, 0 to 7); default 7.
    ///
    /// With `ack_timeout`, how long a link outage the connection survives on hardware:
    /// (7 + 1) × 67 ms, about half a second, by default. (rxe takes 7 as "retry forever";
    /// the keepalive timeout still ends a connection whose peer is gone.)
    pub fn with_retry_count(mut self, count: u8) -> Self {
        self.retry_count = count;
        self
    }

    /// The retries after an ACK timeout (see [`with_retry_count`](Self::with_retry_count)).
    pub fn retry_count(&self) -> u8 {
        self.retry_count
    }

    /// Checks the configuration; the error names what to change.
    pub fn validate(&self) -> crate::Result<()> {
        self.proto.validate().map_err(ConfigError::Protocol)?;
        let out_of_range = |field, value: String, requirement: String| {
            Err(ConfigError::OutOfRange {
                field,
                value,
                requirement,
            }
            .into())
        };
        if self.max_connections == 0 {
            return out_of_range("max_connections", "0".into(), "at least 1".into());
        }
        if self.connections_per_queue == 0 {
            return out_of_range("connections_per_queue", "0".into(), "at least 1".into());
        }
        if self.max_one_sided == 0 {
            return out_of_range("max_one_sided", "0".into(), "at least 1".into());
        }
        if self.retry_count > 7 {
            let value = self.retry_count.to_string();
            return out_of_range("retry_count", value, "0 to 7".into());
        }
        if self.ack_timeout.is_zero() || self.ack_timeout > cm::MAX_ACK_TIMEOUT {
            let value = format!("{:?}", self.ack_timeout);
            let requirement = format!("more than zero and at most {:?}", cm::MAX_ACK_TIMEOUT);
            return out_of_range("ack_timeout", value, requirement);
        }
        let chunk = self.proto.rndv_chunk_size as usize;
        if chunk > 1 << 20 {
            let requirement = "at most the pool's largest buffer (1 MiB)".into();
            return out_of_range("rndv_chunk_size", chunk.to_string(), requirement);
        }
        if self.pool_bytes < 4 * chunk {
            let requirement = format!("at least 4 rendezvous chunks ({} bytes)", 4 * chunk);
            return out_of_range("pool_bytes", self.pool_bytes.to_string(), requirement);
        }
        Ok(())
    }

    /// Connections on one completion queue and shared receive queue: at most
    /// `connections_per_queue`, and no more than the endpoint serves.
    pub(crate) fn queue_share(&self) -> u32 {
        self.connections_per_queue.min(self.max_connections)
    }

    /// How many queue pairs (completion queue and shared receive queue) the endpoint may
    /// make: enough for `max_connections`.
    pub(crate) fn max_queues(&self) -> u32 {
        self.max_connections.div_ceil(self.queue_share())
    }

    /// Receives a shared receive queue holds: the window of each of its connections.
    pub(crate) fn srq_depth(&self) -> u32 {
        self.queue_share().saturating_mul(self.proto.window)
    }

    /// Send-queue entries of each QP: the protocol's, the one-sided operations (two each
    /// when a WRITE is followed by a READ), and one for the keepalive probe.
    pub(crate) fn qp_send_depth(&self) -> u32 {
        let per_op = if self.write_completes_when_sent { 2 } else { 1 };
        self.proto.sq_depth + self.max_one_sided * per_op + 1
    }

    /// Entries of a completion queue: every send queue of its connections and every receive
    /// of its SRQ (the slack included), and a margin.
    pub(crate) fn cq_depth(&self) -> u32 {
        self.queue_share()
            .saturating_mul(self.qp_send_depth())
            .saturating_add(self.srq_depth())
            .saturating_add(SRQ_SLACK)
            .saturating_add(64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ack_timeout_and_retry_count_out_of_range_are_refused_by_name() {
        assert!(EndpointConfig::default().validate().is_ok());
        let refused = |c: EndpointConfig, field: &str| match c.validate() {
            Err(crate::Error::Config(ConfigError::OutOfRange { field: f, .. })) => {
                assert_eq!(f, field)
            }
            r => panic!("{field}: {r:?}"),
        };
        refused(EndpointConfig::default().with_retry_count(8), "retry_count");
        refused(
            EndpointConfig::default().with_connections_per_queue(0),
            "connections_per_queue",
        );
        refused(
            EndpointConfig::default().with_ack_timeout(Duration::ZERO),
            "ack_timeout",
        );
        refused(
            EndpointConfig::default().with_ack_timeout(Duration::from_secs(3 * 3600)),
            "ack_timeout",
        );
        assert_eq!(cm::ack_timeout_exponent(DEFAULT_ACK_TIMEOUT), 14);
    }

    #[test]
    fn defaults_are_the_documented_ones() {
        let c = EndpointConfig::default();
        assert_eq!(c.proto(), &proto::Config::default());
        assert_eq!(
            c.polling(),
            Polling::Adaptive {
                spin: Duration::from_micros(50)
            }
        );
        assert_eq!(DEFAULT_ADAPTIVE_SPIN, Duration::from_micros(50));
        assert_eq!(c.pool_bytes(), 256 << 20);
        assert_eq!(c.max_connections(), 4096);
        assert_eq!(c.connections_per_queue(), 256);
        assert!(c.serve_requests());
        assert_eq!(c.connect_timeout(), cm::DEFAULT_CONNECT_TIMEOUT);
        assert_eq!(c.max_one_sided(), 8);
        assert!(c.admit().is_none());
        assert_eq!(c.busy_read(), Duration::ZERO);
        assert_eq!(c.linger(), Duration::from_secs(10));
        assert_eq!(c.ack_timeout(), DEFAULT_ACK_TIMEOUT);
        assert!(
            c.ack_timeout() > Duration::from_millis(67)
                && c.ack_timeout() < Duration::from_millis(68)
        );
        assert_eq!(c.retry_count(), 7);
    }

    #[test]
    fn each_setter_sets_what_its_getter_returns() {
        let proto = proto::Config::default().with_window(64);
        let c = EndpointConfig::default()
            .with_proto(proto.clone())
            .with_polling(Polling::Busy)
            .with_pool_bytes(1 << 20)
            .with_max_connections(3)
            .with_connections_per_queue(2)
            .with_serve_requests(false)
            .with_connect_timeout(Duration::from_secs(2))
            .with_max_one_sided(5)
            .with_admit(|_| Admission::Reject(b"no".to_vec()))
            .with_busy_read(Duration::from_micros(7))
            .with_linger(Duration::from_millis(300))
            .with_ack_timeout(Duration::from_millis(9))
            .with_retry_count(2);
        assert_eq!(c.proto(), &proto);
        assert_eq!(c.polling(), Polling::Busy);
        assert_eq!(c.pool_bytes(), 1 << 20);
        assert_eq!(c.max_connections(), 3);
        assert_eq!(c.connections_per_queue(), 2);
        assert_eq!((c.queue_share(), c.max_queues()), (2, 2));
        let one = c.clone().with_max_connections(1);
        assert_eq!(
            (one.queue_share(), one.max_queues()),
            (1, 1),
            "no larger than the endpoint"
        );
        assert!(!c.serve_requests());
        assert_eq!(c.connect_timeout(), Duration::from_secs(2));
        assert_eq!(c.max_one_sided(), 5);
        assert!(c.admit().is_some());
        assert_eq!(c.busy_read(), Duration::from_micros(7));
        assert_eq!(c.linger(), Duration::from_millis(300));
        assert_eq!(c.ack_timeout(), Duration::from_millis(9));
        assert_eq!(c.retry_count(), 2);
        let reactor = Polling::Reactor {
            spin: Duration::from_micros(3),
        };
        assert_eq!(c.with_polling(reactor).polling(), reactor);
    }
}
