//! The crate's `tracing` events (target `transport`), with the `tracing` feature (on by
//! default). Without it every function here is empty and inlined away, and [`ConnSpan`]
//! holds nothing. With it and no subscriber listening, an event costs a check of its
//! call site's interest, and none of them is on the data path of a message: they mark
//! what happens once per connection, per failure or per rendezvous transfer.
//!
//! Levels: debug for a connection's life (connecting, established, closed, removed with its
//! counters), stalls for credit past [`STALL_REPORTED`], keepalive misses and rendezvous
//! transfers; warn for what fails (a protocol error, a peer gone or silent past the
//! keepalive timeout); the old debug events (a blocking call timing out) stay at debug.
//! Each connection has a span, `conn`, with its QP number and addresses: its events are
//! children of it.

use std::net::SocketAddr;
use std::time::Duration;

use crate::proto::{ConnError, Stats};

/// A credit stall shorter than this raises no event (it still counts in the statistics).
#[cfg_attr(not(feature = "tracing"), allow(dead_code))]
pub(crate) const STALL_REPORTED: Duration = Duration::from_millis(10);

/// The span of one connection: `conn` with `qp`, `local` and `peer`.
#[derive(Debug, Clone)]
pub(crate) struct ConnSpan {
    #[cfg(feature = "tracing")]
    span: tracing::Span,
}

impl ConnSpan {
    /// The span of the connection on QP `qp` between `local` and `peer`.
    #[cfg_attr(not(feature = "tracing"), inline(always))]
    pub(crate) fn new(qp: u32, local: Option<SocketAddr>, peer: Option<SocketAddr>) -> Self {
        #[cfg(feature = "tracing")]
        {
            ConnSpan {
                span: tracing::debug_span!(
                    target: "transport",
                    "conn",
                    qp,
                    local = local.map(tracing::field::display),
                    peer = peer.map(tracing::field::display)
                ),
            }
        }
        #[cfg(not(feature = "tracing"))]
        {
            let _ = (qp, local, peer);
            ConnSpan {}
        }
    }

    /// The protocol started: the peer's connect data arrived (either side).
    #[cfg_attr(not(feature = "tracing"), inline(always))]
    pub(crate) fn established(&self, eager_limit: usize) {
        #[cfg(feature = "tracing")]
        tracing::debug!(target: "transport", parent: &self.span, eager_limit, "established");
        #[cfg(not(feature = "tracing"))]
        let _ = eager_limit;
    }

    /// The protocol ended: gracefully (`None`) at debug, a failure at warn.
    #[cfg_attr(not(feature = "tracing"), inline(always))]
    pub(crate) fn ended(&self, error: Option<&ConnError>) {
        #[cfg(feature = "tracing")]
        match error {
            None => tracing::debug!(target: "transport", parent: &self.span, "closed"),
            Some(e) => {
                let kind = match e {
                    ConnError::Protocol(_) => "protocol error",
                    ConnError::PeerDead { .. } => "peer dead",
                    ConnError::PeerGone(_) => "peer gone",
                    ConnError::Aborted => "aborted",
                };
                tracing::warn!(target: "transport", parent: &self.span, kind, error = %e, "connection failed")
            }
        }
        #[cfg(not(feature = "tracing"))]
        let _ = error;
    }

    /// The connection was torn down and removed, with what it counted.
    #[cfg_attr(not(feature = "tracing"), inline(always))]
    pub(crate) fn removed(&self, s: &Stats) {
        #[cfg(feature = "tracing")]
        tracing::debug!(
            target: "transport",
            parent: &self.span,
            messages_sent = s.messages_sent,
            bytes_sent = s.bytes_sent,
            messages_received = s.messages_received,
            bytes_received = s.bytes_received,
            calls = s.calls,
            credit_stalls = s.credit_stalls,
            rtt = ?s.rtt,
            "removed"
        );
        #[cfg(not(feature = "tracing"))]
        let _ = s;
    }
}

/// A connect to `addr` began.
#[cfg_attr(not(feature = "tracing"), inline(always))]
pub(crate) fn connecting(addr: SocketAddr) {
    #[cfg(feature = "tracing")]
    tracing::debug!(target: "transport", peer = %addr, "connecting");
    #[cfg(not(feature = "tracing"))]
    let _ = addr;
}

/// The protocol of the connection labelled `qp` sent a PING that found the one before it
/// unanswered (`misses` so far).
#[cfg_attr(not(feature = "tracing"), inline(always))]
pub(crate) fn keepalive_miss(qp: u32, misses: u64) {
    #[cfg(feature = "tracing")]
    tracing::debug!(target: "transport", qp, misses, "keepalive PING unanswered");
    #[cfg(not(feature = "tracing"))]
    let _ = (qp, misses);
}

/// Data of the connection labelled `qp` waited `stalled` for credit (the peer's receive
/// window was full): reported past [`STALL_REPORTED`].
#[cfg_attr(not(feature = "tracing"), inline(always))]
pub(crate) fn credit_stall(qp: u32, stalled: Duration) {
    #[cfg(feature = "tracing")]
    if stalled >= STALL_REPORTED {
        tracing::debug!(target: "transport", qp, ?stalled, "stalled for credit: the peer's receive window was full");
    }
    #[cfg(not(feature = "tracing"))]
    let _ = (qp, stalled);
}

/// A rendezvous transfer of `len` bytes began on the connection labelled `qp`: sending
/// (announced) or receiving (the announcement arrived).
#[cfg_attr(not(feature = "tracing"), inline(always))]
pub(crate) fn rendezvous(qp: u32, sending: bool, len: u64) {
    #[cfg(feature = "tracing")]
    {
        let direction = if sending { "send" } else { "receive" };
        tracing::debug!(target: "transport", qp, direction, len, "rendezvous");
    }
    #[cfg(not(feature = "tracing"))]
    let _ = (qp, sending, len);
}
