//! [`Listener`]: accepts connections on an endpoint's address and port, checking the peer's
//! protocol version before anything is set up for it.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use crate::proto::{self, ConnectInfo};
use crate::{Conn, Endpoint, Error, Result};

/// Listens for connections; every accepted one shares the endpoint's resources.
#[derive(Debug)]
pub struct Listener {
    pub(crate) inner: cm::Listener,
    pub(crate) endpoint: Endpoint,
}

impl Listener {
    /// The address it listens on.
    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.inner.local_addr()
    }

    /// The endpoint whose resources its connections use.
    pub fn endpoint(&self) -> &Endpoint {
        &self.endpoint
    }

    /// Waits up to `timeout` for a connection and accepts it. A peer that speaks another
    /// protocol version is rejected (it gets our version with the rejection) and the wait goes
    /// on.
    pub fn accept(&self, timeout: Duration) -> Result<Conn> {
        let deadline = Instant::now() + timeout;
        let ours = self.endpoint.config().proto.connect_info();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let req = match self.inner.get_request(left) {
                Ok(r) => r,
                Err(cm::Error::Timeout { .. }) => {
                    return Err(Error::TimedOut {
                        op: "accept",
                        after: timeout,
                    })
                }
                Err(e) => return Err(e.into()),
            };
            let peer = match ConnectInfo::decode(req.private_data()) {
                Ok(p) => p,
                Err(_) => {
                    let _ = req.reject(&ours.encode());
                    continue;
                }
            };
            let proto =
                proto::Connection::new(&self.endpoint.config().proto, &peer, Instant::now())
                    .map_err(|e| Error::Config(e.to_string()))?;
            let conn = self
                .endpoint
                .register(req.qp().clone(), req.id().clone(), Some(proto));
            let left = deadline
                .saturating_duration_since(Instant::now())
                .max(Duration::from_secs(1));
            let parts = match req.accept(&ours.encode(), left) {
                Ok(c) => c.into_parts(),
                Err(e) => {
                    self.endpoint.unregister(&conn);
                    return Err(e.into());
                }
            };
            self.endpoint.establish(&conn, &parts.id, &peer)?;
            return Ok(Conn {
                inner: conn,
                engine: self.endpoint.engine.clone(),
            });
        }
    }
}
