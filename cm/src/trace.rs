//! The crate's `tracing` events (target `cm`), with the `tracing` feature. Without it every
//! function here is empty and inlined away, so its call sites compile to nothing.
//!
//! Levels: debug for the lifecycle (each CM event received, connect, accept, reject,
//! disconnect), warn for what fails (an error event, a failed call, a resolution or connect
//! that gives up).

use crate::{CmEvent, CmId, Error, Result};

/// A CM event was read from a channel: failures (address, route or connect errors,
/// unreachable, rejected, device removal, multicast errors) at warn, the rest at debug.
#[cfg_attr(not(feature = "tracing"), inline(always))]
pub(crate) fn event(ev: &CmEvent) {
    #[cfg(feature = "tracing")]
    {
        use crate::EventKind::*;
        use tracing::field::display;
        let kind = ev.kind();
        let event: &dyn std::fmt::Debug = match &kind {
            Ok(kind) => kind,
            Err(raw) => raw,
        };
        let status = ev.status();
        let id = ev.id();
        let local = id.and_then(CmId::local_addr).map(display);
        let peer = id.and_then(CmId::peer_addr).map(display);
        let fault = matches!(
            kind,
            Ok(AddrError
                | RouteError
                | ConnectError
                | Unreachable
                | Rejected
                | DeviceRemoval
                | MulticastError)
        );
        if fault {
            tracing::warn!(target: "cm", ?event, status, local, peer, "CM event");
        } else {
            tracing::debug!(target: "cm", ?event, status, local, peer, "CM event");
        }
    }
    #[cfg(not(feature = "tracing"))]
    let _ = ev;
}

/// A call on `id` (`op`: "connect", "accept", "reject", "establish", "disconnect") returned
/// `result`, for the QP `qp_num` if it names one: done at debug, failed at warn (a failed
/// disconnect at debug: after the peer's own it is expected).
#[cfg_attr(not(feature = "tracing"), inline(always))]
pub(crate) fn call(op: &'static str, id: &CmId, qp_num: Option<u32>, result: &Result<()>) {
    #[cfg(feature = "tracing")]
    {
        use tracing::field::display;
        let local = id.local_addr().map(display);
        let peer = id.peer_addr().map(display);
        match result {
            Ok(()) => tracing::debug!(target: "cm", op, local, peer, qp_num, "{op}"),
            Err(e) if op == "disconnect" => {
                tracing::debug!(target: "cm", op, local, peer, error = %e, "{op} failed")
            }
            Err(e) => {
                tracing::warn!(target: "cm", op, local, peer, qp_num, error = %e, "{op} failed")
            }
        }
    }
    #[cfg(not(feature = "tracing"))]
    let _ = (op, id, qp_num, result);
}

/// An operation (`op`: "resolution", "connect", "accept", "drain", ...) gave up with `error`.
#[cold]
#[cfg_attr(not(feature = "tracing"), inline(always))]
pub(crate) fn gave_up(op: &'static str, error: &Error) {
    #[cfg(feature = "tracing")]
    tracing::warn!(target: "cm", op, error = %error, "{op} failed");
    #[cfg(not(feature = "tracing"))]
    let _ = (op, error);
}

/// A listener's admission hook refused a connect request from `id`'s peer.
#[cfg_attr(not(feature = "tracing"), inline(always))]
pub(crate) fn refused_by_admission(id: &CmId) {
    #[cfg(feature = "tracing")]
    tracing::debug!(
        target: "cm",
        local = id.local_addr().map(tracing::field::display),
        peer = id.peer_addr().map(tracing::field::display),
        "connect request refused by the admission hook"
    );
    #[cfg(not(feature = "tracing"))]
    let _ = id;
}
