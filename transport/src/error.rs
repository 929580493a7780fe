//! The transport's error type: what went wrong, in words that say what to do; the typed
//! configuration faults ([`ConfigError`]); and the one mapping of both onto the
//! `io::ErrorKind`s a socket user expects ([`Error::io_kind`], `From<Error> for io::Error`),
//! which the byte stream uses too.

use std::io;
use std::net::IpAddr;
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
    /// A configuration that cannot work: the setting to change is named.
    #[error("invalid configuration: {0}")]
    Config(ConfigError),
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
    /// The endpoint already serves `max` connections (`EndpointConfig::max_connections`).
    #[error("the endpoint already serves its maximum of {max} connections: close some, or raise EndpointConfig::max_connections")]
    TooManyConnections {
        /// The configured maximum.
        max: u32,
    },
    /// The listening peer refused the connection: its endpoint serves its maximum of
    /// connections.
    #[error("connection refused: the peer's endpoint already serves its maximum of {max} connections: retry once some close, or raise EndpointConfig::max_connections on the listening side (StreamListener::bind_with)")]
    PeerFull {
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
    /// The protocol refused a send for a reason other than backpressure, size or the end of
    /// the connection (a buffer without header room, say).
    #[error(transparent)]
    Send(proto::SendErrorKind),
    /// A future polled again after it completed.
    #[error("{what} was polled after it completed")]
    PolledAfterEnd {
        /// The future.
        what: &'static str,
    },
    /// A call that needs a tokio runtime was made outside one.
    #[error("no tokio runtime here: call it from within one (a task, or Runtime::enter)")]
    NoRuntime,
    /// tokio's reactor would not take the endpoint's completion channel.
    #[error("cannot register the completion channel with tokio's reactor")]
    Reactor(#[source] io::Error),
}

/// A configuration that cannot work, naming the setting to change.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The protocol's part ([`ProtocolConfig`](crate::ProtocolConfig)).
    #[error(transparent)]
    Protocol(#[from] proto::ConfigError),
    /// A setting outside its range.
    #[error("{field} is {value}, but it must be {requirement}; change it and retry")]
    OutOfRange {
        /// The setting (`EndpointConfig`'s field).
        field: &'static str,
        /// Its value, printed.
        value: String,
        /// What it must be.
        requirement: String,
    },
    /// The device cannot hold the queues the settings ask for.
    #[error("the device allows {max_cqe} CQ entries and {max_srq_wr} SRQ receives, but {connections_per_queue} connections per queue with window {window} need {cq_depth} and {srq_depth}: lower connections_per_queue (EndpointConfig::with_connections_per_queue) or window")]
    DeviceLimits {
        /// The device's largest completion queue.
        max_cqe: u32,
        /// The device's largest shared receive queue.
        max_srq_wr: u32,
        /// Connections per completion queue and shared receive queue (the setting, or
        /// `max_connections` when that is lower).
        connections_per_queue: u32,
        /// The setting.
        window: u32,
        /// The completion queue the settings need.
        cq_depth: u32,
        /// The shared receive queue the settings need.
        srq_depth: u32,
    },
    /// A protection domain of another device than the one serving the address.
    #[error("the protection domain is on device {pd_device}, but {addr} is served by {device}: allocate it on the device of that address (verbs::Context::open_by_addr)")]
    PdOnOtherDevice {
        /// The PD's device.
        pd_device: String,
        /// The endpoint's address.
        addr: IpAddr,
        /// Its device.
        device: String,
    },
    /// A memory pool without the access the transport needs.
    #[error("the pool's access is {access}; the transport needs LOCAL_WRITE | REMOTE_READ (peers read rendezvous chunks from it)")]
    PoolAccess {
        /// The pool's access, printed.
        access: String,
    },
    /// An operation for endpoints that poll from a reactor, on one that does not.
    #[error("the endpoint polls {polling}: its progress thread waits on the completion channel; create it with Polling::Reactor to drive it from a reactor")]
    NotReactor {
        /// The endpoint's polling, printed.
        polling: String,
    },
}

impl From<ConfigError> for Error {
    fn from(e: ConfigError) -> Error {
        Error::Config(e)
    }
}

impl Error {
    /// Whether the error is backpressure (retry later).
    pub fn is_would_block(&self) -> bool {
        matches!(self, Error::WouldBlock)
    }

    /// The `io::ErrorKind` a socket user would get for this: nobody listening
    /// `ConnectionRefused`, a peer gone `ConnectionReset`, a peer silent or a wait past its
    /// bound `TimedOut`, an address no RDMA device serves `AddrNotAvailable`, a port in use
    /// `AddrInUse`, a bad argument or configuration `InvalidInput`, sending after a close
    /// `BrokenPipe`, backpressure `WouldBlock`; what sockets have no kind for, `Other`. The
    /// byte stream's errors are these.
    pub fn io_kind(&self) -> io::ErrorKind {
        use io::ErrorKind as K;
        use proto::ConnError;
        match self {
            Error::Closed { cause: None } | Error::ClosedLocally => K::BrokenPipe,
            Error::Closed {
                cause: Some(ConnError::PeerGone(_)),
            } => K::ConnectionReset,
            Error::Closed {
                cause: Some(ConnError::PeerDead { .. }),
            } => K::TimedOut,
            Error::Closed {
                cause: Some(ConnError::Aborted),
            } => K::ConnectionAborted,
            Error::Closed { .. } | Error::Handshake(_) => K::InvalidData,
            Error::TimedOut { .. } => K::TimedOut,
            Error::WouldBlock => K::WouldBlock,
            Error::TooLarge { .. }
            | Error::Config(_)
            | Error::Send(_)
            | Error::OutOfRange { .. }
            | Error::BadToken(_) => K::InvalidInput,
            Error::AccessDenied { .. } => K::PermissionDenied,
            Error::NoAddress { .. } => K::NotConnected,
            // Whatever binding said: no device has the address (or there is no RDMA at all).
            Error::NoDevice { .. } => K::AddrNotAvailable,
            Error::Cm(c) => cm_kind(c),
            Error::PeerFull { .. } => K::ConnectionRefused,
            Error::Call(proto::CallError::TimedOut) => K::TimedOut,
            Error::Call(proto::CallError::Failed(_)) => K::ConnectionReset,
            _ => K::Other,
        }
    }
}

/// The transport's error as the `io::Error` of [`Error::io_kind`], with the transport's error
/// inside: `get_ref()` / `into_inner()` and a downcast give it back, and `source()` goes on
/// with its cause.
impl From<Error> for io::Error {
    fn from(e: Error) -> io::Error {
        io::Error::new(e.io_kind(), e)
    }
}

/// The kind of a connection-management error: what the CM said, in the kinds socket calls
/// give (a port in use is `AddrInUse`, a resolution that timed out `TimedOut`).
fn cm_kind(c: &cm::Error) -> io::ErrorKind {
    use io::ErrorKind as K;
    match c {
        // The connect timed out at the peer's address: TCP's "connection timed out".
        cm::Error::Unreachable { status, .. } if *status == -libc::ETIMEDOUT => K::TimedOut,
        // Nothing serving RDMA at a destination of this host is a port nobody listens on.
        cm::Error::Rejected { .. }
        | cm::Error::Unreachable { .. }
        | cm::Error::LocalNotRdma { .. } => K::ConnectionRefused,
        cm::Error::Timeout { .. } => K::TimedOut,
        cm::Error::NotRdmaAddress { .. }
        | cm::Error::NoRdmaRoute { .. }
        | cm::Error::CreateChannel(_) => K::AddrNotAvailable,
        cm::Error::PrivateDataTooLong { .. } => K::InvalidInput,
        cm::Error::Disconnected => K::ConnectionReset,
        _ => match os_kind(c) {
            Some(kind) => kind,
            None if matches!(c, cm::Error::Bind { .. }) => K::AddrNotAvailable,
            None => K::Other,
        },
    }
}

/// The kind of the OS error `c` carries, when it is one a socket user would recognise.
fn os_kind(c: &cm::Error) -> Option<io::ErrorKind> {
    use io::ErrorKind as K;
    let kind = std::error::Error::source(c)?
        .downcast_ref::<io::Error>()?
        .kind();
    matches!(
        kind,
        K::AddrInUse
            | K::AddrNotAvailable
            | K::TimedOut
            | K::ConnectionRefused
            | K::ConnectionReset
            | K::PermissionDenied
    )
    .then_some(kind)
}

/// `Result` with the transport's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use std::io::ErrorKind as K;

    use super::*;
    use crate::proto::{ConnError, PeerGone};

    fn os(errno: i32) -> io::Error {
        io::Error::from_raw_os_error(errno)
    }

    fn kind(e: cm::Error) -> K {
        Error::Cm(e).io_kind()
    }

    #[test]
    fn cm_failures_get_the_kinds_socket_calls_give() {
        let addr = "10.0.0.1:7471".parse().unwrap();
        let bind = |errno| cm::Error::Bind {
            addr,
            source: os(errno),
        };
        assert_eq!(kind(bind(libc::EADDRINUSE)), K::AddrInUse);
        assert_eq!(kind(bind(libc::EADDRNOTAVAIL)), K::AddrNotAvailable);
        assert_eq!(kind(bind(libc::ENODEV)), K::AddrNotAvailable);
        assert_eq!(kind(cm::Error::Listen(os(libc::EADDRINUSE))), K::AddrInUse);
        let resolve = cm::Error::ResolveAddr {
            dst: addr,
            source: os(libc::ETIMEDOUT),
        };
        assert_eq!(kind(resolve), K::TimedOut);
        let local = cm::Error::LocalNotRdma {
            dst: addr,
            served: String::new(),
        };
        assert_eq!(kind(local), K::ConnectionRefused);
        assert_eq!(kind(cm::Error::Disconnected), K::ConnectionReset);
        // No RDMA stack at all: no device can serve the address.
        assert_eq!(
            kind(cm::Error::CreateChannel(os(libc::ENODEV))),
            K::AddrNotAvailable
        );
        let unreachable = |status| cm::Error::Unreachable {
            event: cm::EventKind::Unreachable,
            status,
        };
        assert_eq!(
            kind(unreachable(-libc::ETIMEDOUT)),
            K::TimedOut,
            "as TCP's connect"
        );
        assert_eq!(kind(unreachable(-libc::ECONNREFUSED)), K::ConnectionRefused);
    }

    #[test]
    fn transport_errors_get_the_kinds_a_socket_user_expects() {
        let no_device = Error::NoDevice {
            addr: "10.0.0.9".parse().unwrap(),
            source: cm::Error::CreateChannel(os(libc::ENOENT)),
        };
        assert_eq!(
            no_device.io_kind(),
            K::AddrNotAvailable,
            "whatever binding said"
        );
        let config = Error::Config(ConfigError::OutOfRange {
            field: "max_connections",
            value: "0".into(),
            requirement: "at least 1".into(),
        });
        assert_eq!(config.io_kind(), K::InvalidInput);
        let gone = Error::Closed {
            cause: Some(ConnError::PeerGone(PeerGone::Disconnected)),
        };
        assert_eq!(gone.io_kind(), K::ConnectionReset);
        assert_eq!(Error::Closed { cause: None }.io_kind(), K::BrokenPipe);
        assert_eq!(
            Error::Call(proto::CallError::TimedOut).io_kind(),
            K::TimedOut
        );
        assert_eq!(Error::WouldBlock.io_kind(), K::WouldBlock);
        assert_eq!(
            Error::AccessDenied { op: "read" }.io_kind(),
            K::PermissionDenied
        );
        assert_eq!(Error::NoRuntime.io_kind(), K::Other);
    }

    /// The chain of `e`'s messages, through `source()`.
    fn chain(e: &dyn std::error::Error) -> Vec<String> {
        let mut out = vec![e.to_string()];
        let mut at = e.source();
        while let Some(s) = at {
            out.push(s.to_string());
            at = s.source();
        }
        out
    }

    #[test]
    fn source_chains_say_each_cause_once_and_the_io_error_keeps_the_transport_error() {
        let addr = "10.0.0.1:7471".parse().unwrap();
        let errors = || {
            vec![
                Error::NoDevice {
                    addr: "10.0.0.1".parse().unwrap(),
                    source: cm::Error::Bind {
                        addr,
                        source: os(libc::ENODEV),
                    },
                },
                Error::Cm(cm::Error::ResolveAddr {
                    dst: addr,
                    source: os(libc::ETIMEDOUT),
                }),
                Error::Config(ConfigError::Protocol(proto::ConfigError::OutOfRange {
                    field: "window",
                    value: "0".into(),
                    requirement: "at least 2",
                })),
                Error::Closed {
                    cause: Some(ConnError::PeerDead {
                        silent_for: Duration::from_secs(3),
                    }),
                },
                Error::Call(proto::CallError::Failed(ConnError::PeerGone(
                    PeerGone::QueuePairError,
                ))),
                Error::Thread(os(libc::EAGAIN)),
                Error::Reactor(os(libc::EBADF)),
                Error::Send(proto::SendErrorKind::NoHeaderRoom { len: 3, need: 16 }),
            ]
        };
        for e in errors() {
            let levels = chain(&e);
            for pair in levels.windows(2) {
                assert!(
                    !pair[0].contains(&pair[1]),
                    "a cause said twice in {levels:#?}"
                );
            }
            // As an io::Error: the kind of io_kind, the transport's error inside, and the
            // rest of its chain after it.
            let kind = e.io_kind();
            let io: io::Error = e.into();
            assert_eq!(io.kind(), kind);
            let inner = io
                .get_ref()
                .and_then(|i| i.downcast_ref::<Error>())
                .expect("the transport's error inside");
            assert_eq!(chain(inner), levels);
            assert_eq!(chain(&io), levels, "io::Error's chain is the transport's");
        }
    }
}
