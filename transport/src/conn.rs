//! [`Conn`]: a reliable connection to a peer, its handles and what it says of itself. Its
//! operations have a file each, every one in both forms: messages (`messages.rs`), RPC
//! (`rpc.rs`), closing (`close.rs`), one-sided access (`one_sided.rs`); the attempts of sends
//! they share are in `send_core.rs`, the waits around attempts in `wait.rs`.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use crate::engine::{ConnShared, Engine};
use crate::{Error, Result};

/// Default bound of blocking calls that take no timeout (`send`, `respond`).
pub const DEFAULT_OP_TIMEOUT: Duration = Duration::from_secs(30);

/// A connection. Send and receive from any thread (`&Conn` is enough); every blocking call has
/// a bound. Dropping it closes the connection gracefully in the background (what was sent is
/// still delivered).
#[derive(Debug)]
pub struct Conn {
    pub(crate) inner: Arc<ConnShared>,
    pub(crate) engine: Arc<Engine>,
}

impl Clone for Conn {
    /// Another handle to the same connection (the connection closes when the last is dropped).
    fn clone(&self) -> Self {
        self.inner
            .handles
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Conn {
            inner: self.inner.clone(),
            engine: self.engine.clone(),
        }
    }
}

impl Conn {
    /// The endpoint the connection belongs to.
    pub fn endpoint(&self) -> crate::Endpoint {
        crate::Endpoint {
            engine: self.engine.clone(),
        }
    }

    /// The local address.
    pub fn local_addr(&self) -> Result<SocketAddr> {
        self.inner.local_addr.ok_or(Error::NoAddress {
            what: "the local end",
        })
    }

    /// The peer's address.
    pub fn peer_addr(&self) -> Result<SocketAddr> {
        self.inner
            .peer_addr
            .ok_or(Error::NoAddress { what: "the peer" })
    }

    /// Whether the connection ended (closed by either side, or failed).
    pub fn is_closed(&self) -> bool {
        self.inner.state.lock().end.is_some()
    }

    /// The connection's counters: messages and bytes each way, calls, rendezvous
    /// transfers, stalls, keepalive, the smoothed round-trip time. They stay readable after
    /// the connection ended.
    ///
    /// ```no_run
    /// # fn f(conn: &transport::Conn) {
    /// let s = conn.stats();
    /// println!(
    ///     "{} messages ({} bytes) out, {} in; {} credit stalls ({:?}); rtt {:?}",
    ///     s.messages_sent, s.bytes_sent, s.messages_received, s.credit_stalls,
    ///     s.credit_stall_time, s.rtt,
    /// );
    /// # }
    /// ```
    pub fn stats(&self) -> crate::Stats {
        let st = self.inner.state.lock();
        st.proto.as_ref().map(|p| p.stats()).unwrap_or_default()
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        self.inner.release_handle();
    }
}
