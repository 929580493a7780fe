//! The crate's error type: one variant per operation, each naming the librdmacm call.
use std::io;
use std::time::Duration;

/// Result of this crate's operations.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Connection-management errors.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// `rdma_create_event_channel` failed (often: no RDMA CM in the kernel, `rdma_ucm` not
    /// loaded).
    #[error("rdma_create_event_channel failed (is the rdma_ucm module loaded?)")]
    CreateChannel(#[source] io::Error),
    /// `rdma_get_cm_event` (or the poll before it) failed.
    #[error("rdma_get_cm_event failed")]
    GetEvent(#[source] io::Error),
    /// `rdma_create_id` failed.
    #[error("rdma_create_id ({port_space:?}) failed")]
    CreateId {
        /// The port space asked for.
        port_space: crate::PortSpace,
        /// Cause.
        #[source]
        source: io::Error,
    },
    /// `rdma_bind_addr` failed.
    #[error("rdma_bind_addr to {addr} failed")]
    Bind {
        /// The address.
        addr: std::net::SocketAddr,
        /// Cause.
        #[source]
        source: io::Error,
    },
    /// `rdma_resolve_addr` failed to start, or finished with `RDMA_CM_EVENT_ADDR_ERROR`.
    #[error("address resolution of {dst} failed")]
    ResolveAddr {
        /// The destination.
        dst: std::net::SocketAddr,
        /// Cause.
        #[source]
        source: io::Error,
    },
    /// `rdma_resolve_route` failed to start, or finished with `RDMA_CM_EVENT_ROUTE_ERROR`.
    #[error("route resolution failed")]
    ResolveRoute(#[source] io::Error),
    /// `rdma_set_option` failed (the kernel refused the option).
    #[error("rdma_set_option ({option}) failed")]
    SetOption {
        /// The option.
        option: &'static str,
        /// Cause.
        #[source]
        source: io::Error,
    },
    /// `rdma_listen` failed.
    #[error("rdma_listen failed")]
    Listen(#[source] io::Error),
    /// `rdma_connect` failed.
    #[error("rdma_connect failed")]
    Connect(#[source] io::Error),
    /// `rdma_accept` failed.
    #[error("rdma_accept failed")]
    Accept(#[source] io::Error),
    /// `rdma_reject` failed.
    #[error("rdma_reject failed")]
    Reject(#[source] io::Error),
    /// `rdma_establish` failed.
    #[error("rdma_establish failed")]
    Establish(#[source] io::Error),
    /// `rdma_disconnect` failed.
    #[error("rdma_disconnect failed")]
    Disconnect(#[source] io::Error),
    /// `rdma_migrate_id` failed.
    #[error("rdma_migrate_id failed")]
    Migrate(#[source] io::Error),
    /// `rdma_init_qp_attr` failed.
    #[error("rdma_init_qp_attr ({state:?}) failed")]
    InitQpAttr {
        /// The target QP state.
        state: verbs::QpState,
        /// Cause.
        #[source]
        source: io::Error,
    },
    /// The id has no device yet (bind to an RDMA address or resolve one first).
    #[error("the CM id is not bound to an RDMA device yet")]
    NoDevice,
    /// Address resolution without a source address failed because the route to `dst` leaves
    /// through a netdev without an RDMA device (`ENODEV`).
    #[error(
        "no RDMA device on the route to {dst}{}: connect from an RDMA address with Connector::src; RDMA addresses on this host: {served}",
        .src.map(|a| format!(" (it leaves from {a})")).unwrap_or_default()
    )]
    NoRdmaRoute {
        /// The destination.
        dst: std::net::SocketAddr,
        /// The source address the kernel's route picks, if it could be found.
        src: Option<std::net::IpAddr>,
        /// What librdmacm reported.
        #[source]
        source: io::Error,
        /// The addresses that are served, with device, port and GID index.
        served: String,
    },
    /// The destination is an address of this host that no RDMA device serves (127.0.0.1, or
    /// a netdev without an RDMA device): nothing there can answer, so the connection is
    /// refused at once instead of waiting out its timeout.
    #[error(
        "{dst} is an address of this host that no RDMA device serves, so nothing there can accept an RDMA connection: connect to an RDMA address; RDMA addresses on this host: {served}"
    )]
    LocalNotRdma {
        /// The destination.
        dst: std::net::SocketAddr,
        /// The addresses that are served, with device, port and GID index.
        served: String,
    },
    /// The shared PD given in [`ConnOptions::pd`](crate::ConnOptions::pd) belongs to another
    /// device than the one the CM id is bound to (by its local address).
    #[error(
        "the shared PD is on device {pd_device}, but the connection uses {id_device}{}: open the PD on the device that serves the local address (verbs::Context::open_by_addr)",
        .local.map(|a| format!(" (local address {a})")).unwrap_or_default()
    )]
    PdOnOtherDevice {
        /// The PD's device.
        pd_device: String,
        /// The device the id is bound to.
        id_device: String,
        /// The id's local address.
        local: Option<std::net::IpAddr>,
    },
    /// A wait ran out of time.
    #[error("{op} timed out after {after:?}")]
    Timeout {
        /// What was being waited for.
        op: &'static str,
        /// The time allowed.
        after: Duration,
    },
    /// A connection's drain ran out of time with owned requests still in flight: their
    /// completions were not polled from the connection's CQ, or were polled elsewhere without
    /// [`Qp::reclaim`](verbs::Qp::reclaim).
    #[error(
        "drain timed out after {after:?} with {} send and {} receive requests outstanding ({}): poll their completions on this connection's CQ and pass each to Qp::reclaim",
        .outstanding.iter().filter(|r| !r.recv).count(),
        .outstanding.iter().filter(|r| r.recv).count(),
        list_requests(.outstanding)
    )]
    DrainTimeout {
        /// The time allowed.
        after: Duration,
        /// The requests still in flight, sends first, oldest first.
        outstanding: Vec<verbs::Outstanding>,
    },
    /// The peer rejected the connection (`RDMA_CM_EVENT_REJECTED`); also what a connection to a
    /// port without a listener gives. `status` is the transport's reject reason (IB CM: 28 is
    /// "consumer reject", 8 "invalid service id", i.e. no listener; see [`reject_reason`]).
    ///
    /// [`reject_reason`]: crate::reject_reason
    #[error(
        "connection rejected: {} (reject reason {status})",
        reject_words(*.status)
    )]
    Rejected {
        /// Reject reason.
        status: i32,
        /// The peer's private data (padded by the transport; empty when it sent none).
        private_data: crate::PrivateData,
    },
    /// The local address given (to bind, or as the source of a connection) is not one an RDMA
    /// device serves: no device has a RoCE v2 GID for it, so the CM cannot bind to it.
    #[error("{addr} is not an address of an RDMA device; RDMA addresses on this host: {served}")]
    NotRdmaAddress {
        /// The address.
        addr: std::net::IpAddr,
        /// What librdmacm reported.
        #[source]
        source: io::Error,
        /// The addresses that are served, with device, port and GID index.
        served: String,
    },
    /// The peer could not be reached (`RDMA_CM_EVENT_UNREACHABLE` or
    /// `RDMA_CM_EVENT_CONNECT_ERROR`).
    #[error("peer unreachable ({event:?}, status {status}{}): is the peer up, and the address right?", status_words(*.status))]
    Unreachable {
        /// The event that said so.
        event: crate::EventKind,
        /// Its status.
        status: i32,
    },
    /// Private data longer than the transport carries for this message.
    #[error("private data of {len} bytes exceeds the limit of {max} bytes")]
    PrivateDataTooLong {
        /// Bytes given.
        len: usize,
        /// Bytes allowed.
        max: usize,
    },
    /// The connection was disconnected (by the peer, or the device went away).
    #[error("connection disconnected")]
    Disconnected,
    /// An event arrived that makes no sense at this point of the protocol.
    #[error("unexpected CM event {event:?} (status {status}) while waiting for {expected}")]
    UnexpectedEvent {
        /// What arrived.
        event: crate::EventKind,
        /// Its status.
        status: i32,
        /// What was expected.
        expected: &'static str,
    },
    /// Joining or leaving a multicast group failed.
    #[error("{op} for multicast group {group} failed")]
    Multicast {
        /// The call or event.
        op: &'static str,
        /// The group.
        group: std::net::IpAddr,
        /// The errno.
        #[source]
        source: io::Error,
    },
    /// A verbs call (PD, CQ, QP, MR, posting) failed.
    #[error(transparent)]
    Verbs(#[from] verbs::Error),
}

impl Error {
    /// Whether this error is a timeout.
    pub fn is_timeout(&self) -> bool {
        matches!(self, Error::Timeout { .. } | Error::DrainTimeout { .. })
    }
}

/// A reject status in words: an IB CM reason, or (iWARP) a negative errno.
fn reject_words(status: i32) -> String {
    match crate::reject_reason(status) {
        Some(words) => words.to_owned(),
        None if status < 0 => status_words(status).trim_start_matches(": ").to_owned(),
        None => "a reason the IB CM does not define".to_owned(),
    }
}

/// A negative-errno event status in words (", Connection timed out").
fn status_words(status: i32) -> String {
    match status.checked_neg() {
        Some(errno) if errno > 0 => format!(": {}", io::Error::from_raw_os_error(errno)),
        _ => String::new(),
    }
}

/// The first few requests of a list, and how many more there are.
fn list_requests(reqs: &[verbs::Outstanding]) -> String {
    const SHOWN: usize = 8;
    let mut s = reqs
        .iter()
        .take(SHOWN)
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ");
    if reqs.len() > SHOWN {
        s.push_str(&format!(", and {} more", reqs.len() - SHOWN));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_and_unreachable_peers_are_described_in_words() {
        let rejected = |status| Error::Rejected {
            status,
            private_data: crate::PrivateData::default(),
        };
        let text = rejected(8).to_string();
        assert_eq!(
            text,
            "connection rejected: invalid service ID: nothing listens on that port (start the server, or check the address and port) (reject reason 8)"
        );
        assert!(rejected(28).to_string().contains("consumer reject"));
        assert!(rejected(-libc::ECONNREFUSED)
            .to_string()
            .contains("connection refused: nothing listens on that port"));
        assert!(rejected(99).to_string().contains("does not define"));
        let unreachable = Error::Unreachable {
            event: crate::EventKind::Unreachable,
            status: -libc::ETIMEDOUT,
        };
        assert!(
            unreachable.to_string().contains("timed out"),
            "{unreachable}"
        );
    }
}
