//! [`EndpointConfig`]: the resources of an endpoint (pool, queues) and how it makes progress.

use std::time::Duration;

pub use cm::{Admission, IncomingRequest};

use crate::proto;

/// Receives posted on the SRQ beyond the credits of every connection (less if the device
/// allows fewer): replacing consumed receives can then wait for an idle poll, off the path
/// between a frame's arrival and its delivery, until this many are owed.
pub(crate) const SRQ_SLACK: u32 = 32;

/// How the endpoint waits for completions: its progress thread, and a thread blocked in a
/// call (which polls the completion queue itself while it spins, so the completion it waits
/// for needs no handoff between threads). A sender also polls once after each send. While
/// application threads poll like this, the progress thread runs only the timers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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
    /// message; calls that end early shrink it back towards `spin`. A wait also spins on
    /// while a large message of its connection moved (a chunk READ completed, a rendezvous
    /// frame arrived) less than twice the usual gap between such steps ago, at most 2 ms,
    /// one waiting thread per endpoint: each chunk and the answer that follows a large
    /// message come without a handoff, which counts most where a chunk's READ is slow (an
    /// emulated device).
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
    /// every other task), and stop as soon as an endpoint wakes another task. The spinning
    /// task polls for every connection of the endpoint, so the tasks it wakes are woken on
    /// its executor thread and run there next. The other waiting tasks register their
    /// wakers at once. Set [`EndpointConfig::busy_read`] to spin every waiting task anyway.
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

/// Configuration of an [`Endpoint`](crate::Endpoint): the protocol limits of each connection,
/// the pool and queues shared by all of them, and the polling mode.
#[derive(Debug, Clone)]
pub struct EndpointConfig {
    /// Per-connection protocol limits (credits, frame size, rendezvous, keepalive).
    pub proto: proto::Config,
    /// How the progress thread waits.
    pub polling: Polling,
    /// Bytes the endpoint's data pool may register: copies of messages sent, rendezvous
    /// chunks and their READ destinations. (Receive buffers have a pool of their own, sized
    /// from `max_connections` and the window.)
    pub pool_bytes: usize,
    /// Connections the endpoint sizes its completion queue and shared receive queue for.
    pub max_connections: u32,
    /// Whether incoming RPC requests are queued for [`Conn::recv_request`](crate::Conn::recv_request)
    /// (`true`) or answered at once with "no handler" (`false`).
    pub serve_requests: bool,
    /// Time a connect (resolution and handshake) may take; also what an accepted request gets
    /// to finish its handshake.
    pub connect_timeout: Duration,
    /// One-sided operations (region reads and writes) in flight per connection.
    pub max_one_sided: u32,
    /// Admission of incoming connections (set it with [`admit`](Self::admit)): after the
    /// listener's own checks (a protocol handshake it can read, room for another
    /// connection), this hook sees the peer's address and connect data and may reject it,
    /// before any queue pair or buffer exists for it.
    pub admit: Option<cm::AdmitHook>,
    /// How long a task that finds no message waiting polls the completion queue itself
    /// before [`Conn::poll_recv`](crate::Conn::poll_recv) (and so a byte stream's read),
    /// [`Conn::recv_request_async`](crate::Conn::recv_request_async) or
    /// [`Conn::call_async`](crate::Conn::call_async) waits for a wakeup, whatever the
    /// polling mode; it stops early when the endpoint wakes another task. Zero (the
    /// default): the polling mode decides ([`Polling::Adaptive`] spins one waiting task of
    /// the endpoint at a time, the others wait at once). Like Linux's `busy_read` for
    /// sockets, it trades the executor thread's time for latency: a message that comes
    /// within it is taken by the reading task itself, with no wakeup, but the thread's other
    /// tasks wait meanwhile. For a latency-critical connection on a runtime of its own.
    pub busy_read: Duration,
    /// How long [`Conn::close_async`](crate::Conn::close_async) and a byte stream's
    /// [`shutdown`](crate::stream::Stream::shutdown) wait for the peer to have everything
    /// sent (every message received, every rendezvous chunk read by the peer and
    /// acknowledged) before they fail with a timeout ([`Error::TimedOut`](crate::Error::TimedOut),
    /// `io::ErrorKind::TimedOut`); the close goes on meanwhile. 10 s by default, as long as
    /// the keepalive timeout: a peer that is alive but reads nothing holds a close that
    /// long. ([`Conn::close`](crate::Conn::close) takes its bound as an argument.)
    pub linger: Duration,
    /// How long each connection's queue pair waits for the peer device's acknowledgement
    /// before it sends again (the local ACK timeout, rounded up to 4.096 µs × 2^n; see
    /// [`cm::ConnOptions::ack_timeout`]). A packet lost at the end of a burst, or a lost
    /// acknowledgement, costs this long; losses inside a burst are sent again at once. 67 ms
    /// (perftest's default, exponent 14) by default, where the CM alone would derive half a
    /// second to a second from a RoCE path. Raise it where round trips under load come near
    /// it (a congested fabric, long links): a timeout shorter than the round trip sends again
    /// what was not lost, adding load where there is too much. A queue pair gives up after
    /// `retry_count` + 1 timeouts in a row without progress.
    pub ack_timeout: Duration,
    /// Times a queue pair sends again after an ACK timeout before it fails the connection
    /// (`retry_count` of the CM's connect parameters, 0 to 7). With `ack_timeout`, how long a
    /// link outage the connection survives on hardware: (7 + 1) × 67 ms, about half a second,
    /// by default. (rxe takes 7 as "retry forever"; the keepalive timeout still ends a
    /// connection whose peer is gone.)
    pub retry_count: u8,
}

impl Default for EndpointConfig {
    fn default() -> Self {
        EndpointConfig {
            proto: proto::Config::default(),
            polling: Polling::Adaptive {
                spin: Duration::from_micros(50),
            },
            pool_bytes: 256 << 20,
            max_connections: 256,
            serve_requests: true,
            connect_timeout: cm::DEFAULT_CONNECT_TIMEOUT,
            max_one_sided: 8,
            admit: None,
            busy_read: Duration::ZERO,
            linger: Duration::from_secs(10),
            ack_timeout: DEFAULT_ACK_TIMEOUT,
            retry_count: 7,
        }
    }
}

impl EndpointConfig {
    /// Sets the admission hook of the endpoint's listeners (see the `admit` field).
    pub fn admit(
        mut self,
        f: impl Fn(&IncomingRequest<'_>) -> Admission + Send + Sync + 'static,
    ) -> Self {
        self.admit = Some(cm::AdmitHook::new(f));
        self
    }

    /// Checks the configuration; the error names what to change.
    pub fn validate(&self) -> crate::Result<()> {
        self.proto
            .validate()
            .map_err(|e| crate::Error::Config(e.to_string()))?;
        if self.max_connections == 0 {
            return Err(crate::Error::Config(
                "max_connections must be at least 1".into(),
            ));
        }
        if self.max_one_sided == 0 {
            return Err(crate::Error::Config(
                "max_one_sided must be at least 1".into(),
            ));
        }
        if self.retry_count > 7 {
            return Err(crate::Error::Config(format!(
                "retry_count {} is out of range: give 0 to 7",
                self.retry_count
            )));
        }
        if self.ack_timeout.is_zero() || self.ack_timeout > cm::MAX_ACK_TIMEOUT {
            return Err(crate::Error::Config(format!(
                "ack_timeout {:?} is out of range: give more than zero and at most {:?}",
                self.ack_timeout,
                cm::MAX_ACK_TIMEOUT
            )));
        }
        let chunk = self.proto.rndv_chunk_size as usize;
        if chunk > 1 << 20 {
            return Err(crate::Error::Config(format!(
                "rndv_chunk_size {chunk} exceeds the pool's largest buffer (1 MiB)"
            )));
        }
        if self.pool_bytes < 4 * chunk {
            return Err(crate::Error::Config(format!(
                "pool_bytes {} is too small for rendezvous: give it at least 4 chunks ({} bytes)",
                self.pool_bytes,
                4 * chunk
            )));
        }
        Ok(())
    }

    /// Receives the shared receive queue holds: every connection's window.
    pub(crate) fn srq_depth(&self) -> u32 {
        self.max_connections.saturating_mul(self.proto.window)
    }

    /// Send-queue entries of each QP: the protocol's, the one-sided operations, and one for
    /// the keepalive probe.
    pub(crate) fn qp_send_depth(&self) -> u32 {
        self.proto.sq_depth + self.max_one_sided + 1
    }

    /// Completion queue entries: every send queue and every receive (the SRQ's slack
    /// included), and a margin.
    pub(crate) fn cq_depth(&self) -> u32 {
        self.max_connections
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
            Err(crate::Error::Config(m)) => assert!(m.contains(field), "{m}"),
            r => panic!("{field}: {r:?}"),
        };
        refused(
            EndpointConfig {
                retry_count: 8,
                ..Default::default()
            },
            "retry_count",
        );
        refused(
            EndpointConfig {
                ack_timeout: Duration::ZERO,
                ..Default::default()
            },
            "ack_timeout",
        );
        refused(
            EndpointConfig {
                ack_timeout: Duration::from_secs(3 * 3600),
                ..Default::default()
            },
            "ack_timeout",
        );
        assert_eq!(cm::ack_timeout_exponent(DEFAULT_ACK_TIMEOUT), 14);
    }
}
