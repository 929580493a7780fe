//! The crate's `tracing` events (target `verbs`), with the `tracing` feature. Without it every
//! function here is empty and inlined away, so its call sites compile to nothing.
//!
//! Events go on cold paths only: opening a device, reading an async event, a QP moved to (or
//! found in) Err, a failed modify, and posts the crate or the provider refuses, reported from
//! their error branches so that a successful post runs no instruction for them.

use crate::context::AsyncEvent;
#[cfg(feature = "tracing")]
use crate::context::{AsyncEventKind, EventElement};
use crate::qp::QpState;
use crate::Error;

/// A device context was opened (or a borrowed one wrapped).
#[cfg_attr(not(feature = "tracing"), inline(always))]
pub(crate) fn device_opened(device: &str, borrowed: bool) {
    #[cfg(feature = "tracing")]
    tracing::debug!(target: "verbs", device, borrowed, "device opened");
    #[cfg(not(feature = "tracing"))]
    let _ = (device, borrowed);
}

/// An async event was read (and acknowledged): faults at warn, the rest at debug.
#[cfg_attr(not(feature = "tracing"), inline(always))]
pub(crate) fn async_event(device: &str, ev: &AsyncEvent) {
    #[cfg(feature = "tracing")]
    {
        use AsyncEventKind::*;
        let (mut qp_num, mut port, mut cq, mut srq) = (None, None, None, None);
        match ev.element {
            EventElement::Qp(n) => qp_num = Some(n),
            EventElement::Port(p) => port = Some(p),
            EventElement::Cq(a) => cq = Some(a),
            EventElement::Srq(a) | EventElement::Wq(a) => srq = Some(a),
            EventElement::Device => {}
        }
        let event: &dyn std::fmt::Debug = match &ev.kind {
            Ok(kind) => kind,
            Err(raw) => raw,
        };
        let fault = matches!(
            ev.kind,
            Ok(CqErr
                | QpFatal
                | QpReqErr
                | QpAccessErr
                | PathMigErr
                | DeviceFatal
                | PortErr
                | SrqErr
                | WqFatal)
        );
        if fault {
            tracing::warn!(target: "verbs", device, ?event, qp_num, port, cq, srq, "async event");
        } else {
            tracing::debug!(target: "verbs", device, ?event, qp_num, port, cq, srq, "async event");
        }
    }
    #[cfg(not(feature = "tracing"))]
    let _ = (device, ev);
}

/// A QP was moved to Err through its handle (`from`: the state it left).
#[cfg_attr(not(feature = "tracing"), inline(always))]
pub(crate) fn qp_to_error(qp_num: u32, from: QpState) {
    #[cfg(feature = "tracing")]
    tracing::debug!(target: "verbs", qp_num, ?from, "QP moved to Err");
    #[cfg(not(feature = "tracing"))]
    let _ = (qp_num, from);
}

/// A query found a QP in Err that its handle last knew in `was`: the device moved it there.
#[cold]
#[cfg_attr(not(feature = "tracing"), inline(always))]
pub(crate) fn qp_found_in_error(qp_num: u32, was: QpState) {
    #[cfg(feature = "tracing")]
    tracing::warn!(target: "verbs", qp_num, ?was, "QP found in Err (moved there by the device)");
    #[cfg(not(feature = "tracing"))]
    let _ = (qp_num, was);
}

/// `ibv_modify_qp` refused a transition the table allowed.
#[cold]
#[cfg_attr(not(feature = "tracing"), inline(always))]
pub(crate) fn modify_failed(qp_num: u32, from: QpState, to: QpState, error: &Error) {
    #[cfg(feature = "tracing")]
    tracing::warn!(
        target: "verbs",
        qp_num,
        ?from,
        ?to,
        errno = errno(error),
        error = %error,
        "ibv_modify_qp failed"
    );
    #[cfg(not(feature = "tracing"))]
    let _ = (qp_num, from, to, error);
}

/// A post was refused with `error`: by the provider (`by_provider`) or by this crate's checks
/// before calling it. A full queue (backpressure) is reported at debug, anything else at warn.
/// Called from error branches only.
#[cold]
#[cfg_attr(feature = "tracing", inline(never))]
#[cfg_attr(not(feature = "tracing"), inline(always))]
pub(crate) fn refused(error: &Error, by_provider: bool) {
    #[cfg(feature = "tracing")]
    {
        let qp_num = match error {
            Error::PostSend { qp_num, .. }
            | Error::PostRecv { qp_num, .. }
            | Error::QueueFull { qp_num, .. }
            | Error::InvalidWorkRequest { qp_num, .. }
            | Error::InlineTooLong { qp_num, .. } => Some(*qp_num),
            _ => None,
        };
        let errno = errno(error);
        if error.is_queue_full() {
            tracing::debug!(target: "verbs", qp_num, errno, by_provider, error = %error, "post refused");
        } else {
            tracing::warn!(target: "verbs", qp_num, errno, by_provider, error = %error, "post refused");
        }
    }
    #[cfg(not(feature = "tracing"))]
    let _ = (error, by_provider);
}

/// The errno of `error`: the OS error it carries, or for a refusal made by this crate the one
/// the verbs give such a request (ENOMEM for a full queue, EINVAL otherwise).
#[cfg(feature = "tracing")]
fn errno(error: &Error) -> i32 {
    use std::error::Error as _;
    if error.is_queue_full() {
        return libc::ENOMEM;
    }
    error
        .source()
        .and_then(|s| s.downcast_ref::<std::io::Error>())
        .and_then(std::io::Error::raw_os_error)
        .unwrap_or(libc::EINVAL)
}

/// [`refused`] for a refusal made by this crate, passing the error on: `Err(refusing(e))`.
#[cold]
#[cfg_attr(feature = "tracing", inline(never))]
#[cfg_attr(not(feature = "tracing"), inline(always))]
pub(crate) fn refusing(error: Error) -> Error {
    refused(&error, false);
    error
}
