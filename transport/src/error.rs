//! The transport's error type: what went wrong, in words that say what to do.

use std::io;
use std::time::Duration;

use crate::proto;

/// Errors of the transport's API.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The operation would have to wait (no credit, full queue, exhausted pool) and was asked
    /// not to (`try_*`).
    #[error("would block: the peer has not granted credit or the send queue is full; retry, or use the blocking call")]
    WouldBlock,
    /// A blocking operation ran out of time.
    #[error("{op} timed out after {after:?}")]
    TimedOut {
        /// What was waited for.
        op: &'static str,
        /// The timeout.
        after: Duration,
    },
    /// The connection is closed (by either side) or failed; `cause` says which.
    #[error("connection closed{}", match .cause { Some(c) => format!(": {c}"), None => " by the peer (end of stream)".to_string() })]
    Closed {
        /// Why, if not a graceful close.
        cause: Option<proto::ConnError>,
    },
    /// This side closed the connection; nothing more can be sent.
    #[error("the connection was closed by this side; open a new one to send more")]
    ClosedLocally,
    /// A message larger than allowed.
    #[error("message of {len} bytes exceeds the limit of {limit} bytes; raise max_message on both ends or split it")]
    TooLarge {
        /// Its length.
        len: u64,
        /// The limit.
        limit: u64,
    },
    /// An RPC call failed.
    #[error(transparent)]
    Call(#[from] proto::CallError),
    /// The peer speaks another protocol or version, or sent unusable connect data.
    #[error(transparent)]
    Handshake(#[from] proto::HandshakeError),
    /// A configuration that cannot work.
    #[error("invalid configuration: {0}")]
    Config(String),
    /// No RDMA device serves the given local address.
    #[error("no RDMA device has the address {addr}: give the IP of an RDMA netdev (`rdma link` lists them), or add one (`rdma link add rxe0 type rxe netdev ETH` for Soft-RoCE on the netdev with this address)")]
    NoDevice {
        /// The address.
        addr: std::net::IpAddr,
        /// What binding to it said.
        #[source]
        source: cm::Error,
    },
    /// Connection management failed (resolve, connect, accept, reject).
    #[error(transparent)]
    Cm(#[from] cm::Error),
    /// A verbs call failed.
    #[error(transparent)]
    Verbs(#[from] verbs::Error),
    /// The memory pool failed (other than running out, which is backpressure).
    #[error(transparent)]
    Memory(#[from] memory::Error),
    /// A one-sided access outside the exposed region, refused before anything was sent.
    #[error("access of {len} bytes at offset {offset} is outside the {region_len}-byte region the token names")]
    OutOfRange {
        /// Offset asked for.
        offset: u64,
        /// Length asked for.
        len: u64,
        /// Length of the region.
        region_len: u64,
    },
    /// A one-sided access the token does not allow.
    #[error("the token does not allow {op}: expose the region with that access")]
    AccessDenied {
        /// "read" or "write".
        op: &'static str,
    },
    /// A token that is not 32 bytes of a valid token.
    #[error("malformed region token: {0}")]
    BadToken(&'static str),
    /// An RDMA operation completed with an error.
    #[error("{op} failed: {status}")]
    Completion {
        /// The operation.
        op: &'static str,
        /// The work completion's status, in words.
        status: String,
    },
    /// The endpoint already has `max` connections (its shared receive queue is sized for
    /// them: more would let peers send without a posted receive).
    #[error("the endpoint already serves its maximum of {max} connections: close some, or raise EndpointConfig::max_connections")]
    TooManyConnections {
        /// The configured maximum.
        max: u32,
    },
    /// A connection or listener that has no address (its CM identifier was never bound).
    #[error("{what} has no address: the connection or listener is not bound or connected")]
    NoAddress {
        /// "the local end" or "the peer".
        what: &'static str,
    },
    /// A thread of the endpoint could not be started.
    #[error("cannot start the endpoint's progress thread")]
    Thread(#[source] io::Error),
}

impl Error {
    /// Whether the error is backpressure (retry later).
    pub fn is_would_block(&self) -> bool {
        matches!(self, Error::WouldBlock)
    }
}

/// `Result` with the transport's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
