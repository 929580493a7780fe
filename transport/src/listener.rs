//! [`Listener`]: accepts connections on an endpoint's address and port, checking the peer's
//! protocol version before anything is set up for it; blocking or async.
//!
//! The listening id's events come to the endpoint's CM thread, which admits each request,
//! accepts it and, once the connection is established, puts it in the listener's backlog;
//! `accept` and its forms take from there. No thread per listener or per accept.

use std::net::SocketAddr;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use crate::engine::Backlog;
use crate::proto::ConnectInfo;
use crate::{Conn, Endpoint, Error, Result};

/// Listens for connections; every accepted one shares the endpoint's resources. Dropping it
/// stops listening at once (the port can be bound again right away); connections accepted
/// and not yet taken close.
#[derive(Debug)]
pub struct Listener {
    backlog: Arc<Backlog>,
    endpoint: Endpoint,
}

impl Listener {
    pub(crate) fn new(backlog: Arc<Backlog>, endpoint: Endpoint) -> Listener {
        Listener { backlog, endpoint }
    }

    /// The address it listens on.
    pub fn local_addr(&self) -> Result<SocketAddr> {
        self.backlog.listener.local_addr().ok_or(Error::NoAddress {
            what: "the local end",
        })
    }

    /// The endpoint whose resources its connections use.
    pub fn endpoint(&self) -> &Endpoint {
        &self.endpoint
    }

    /// Waits for a connection and takes it, as `TcpListener::accept` does: no bound but a
    /// connection coming (use [`accept_timeout`](Self::accept_timeout) for one). A peer that
    /// speaks another protocol version is rejected (it gets our version with the rejection),
    /// as is one the endpoint has no room for, and the wait goes on; so does it past a peer
    /// whose handshake fails.
    pub fn accept(&self) -> Result<Conn> {
        match crate::task::block_on(None, |cx| self.poll_accept(cx)) {
            Some(r) => r,
            None => unreachable!("a wait without a deadline ends with a connection"),
        }
    }

    /// Waits up to `timeout` for a connection and takes it (see [`accept`](Self::accept));
    /// [`Error::TimedOut`] when none came.
    pub fn accept_timeout(&self, timeout: Duration) -> Result<Conn> {
        match crate::task::block_on(Some(timeout), |cx| self.poll_accept(cx)) {
            Some(r) => r,
            None => Err(Error::TimedOut {
                op: "accept",
                after: timeout,
            }),
        }
    }

    /// Polls for an accepted connection: `Ready` takes it from the backlog; `Pending` takes
    /// nothing and wakes the task when one is there. Cancel safe: accepted connections wait
    /// in the backlog, so a dropped future loses none.
    pub fn poll_accept(&self, cx: &mut Context<'_>) -> Poll<Result<Conn>> {
        self.endpoint.drive_from_current_runtime();
        self.backlog.poll(cx).map(|r| {
            r.map(|inner| Conn {
                inner,
                engine: self.endpoint.engine.clone(),
            })
        })
    }

    /// Accepts the next connection. Cancel safe (see [`poll_accept`](Self::poll_accept)).
    pub async fn accept_async(&self) -> Result<Conn> {
        std::future::poll_fn(|cx| self.poll_accept(cx)).await
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        self.endpoint.engine.shared.unlisten(&self.backlog);
    }
}

/// The listener's admission: refuse, before anything is created for it, a peer whose connect
/// data is no handshake of ours (it gets our version with the rejection) or that would
/// exceed the endpoint's connections; then ask the configured hook. It holds the engine
/// weakly: the listening id it serves lives in the engine.
pub(crate) fn admission(endpoint: &Endpoint) -> cm::AdmitHook {
    let shared = Arc::downgrade(&endpoint.engine.shared);
    let user = endpoint.config().admit.clone();
    cm::AdmitHook::new(move |req| {
        let Some(shared) = shared.upgrade() else {
            return cm::Admission::Reject(Vec::new());
        };
        let info = shared.cfg.proto.connect_info();
        if shared.check_room().is_err() {
            return cm::Admission::Reject(shared.full_refusal(&info).to_vec());
        }
        if ConnectInfo::decode(req.private_data()).is_err() {
            return cm::Admission::Reject(info.encode().to_vec());
        }
        user.as_ref().map_or(cm::Admission::Accept, |h| h.call(req))
    })
}
