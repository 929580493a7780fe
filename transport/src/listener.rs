//! [`Listener`]: accepts connections on an endpoint's address and port, checking the peer's
//! protocol version before anything is set up for it; blocking or async.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::proto::{self, ConnectInfo};
use crate::task::push_waker;
use crate::{Conn, Endpoint, Error, Result};

/// Connections the async acceptor accepts ahead of `accept_async` callers (a backlog).
const BACKLOG: usize = 64;
/// How often the acceptor thread checks whether its listener is gone.
const ACCEPT_SLICE: Duration = Duration::from_millis(100);

/// Listens for connections; every accepted one shares the endpoint's resources.
#[derive(Debug)]
pub struct Listener {
    pub(crate) inner: Arc<cm::Listener>,
    pub(crate) endpoint: Endpoint,
    acceptor: OnceLock<Arc<Acceptor>>,
}

/// Connections accepted by the background thread of [`Listener::poll_accept`].
#[derive(Debug, Default)]
struct Acceptor {
    queue: Mutex<(VecDeque<Result<Conn>>, Vec<Waker>)>,
    stop: AtomicBool,
    gone: AtomicBool,
}

impl Listener {
    pub(crate) fn new(inner: cm::Listener, endpoint: Endpoint) -> Listener {
        Listener {
            inner: Arc::new(inner),
            endpoint,
            acceptor: OnceLock::new(),
        }
    }

    /// The address it listens on.
    pub fn local_addr(&self) -> Result<SocketAddr> {
        self.inner.local_addr().ok_or(Error::NoAddress {
            what: "the local end",
        })
    }

    /// The endpoint whose resources its connections use.
    pub fn endpoint(&self) -> &Endpoint {
        &self.endpoint
    }

    /// Waits up to `timeout` for a connection and accepts it. A peer that speaks another
    /// protocol version is rejected (it gets our version with the rejection) and the wait goes
    /// on. Do not mix with [`accept_async`](Self::accept_async) on the same listener: the
    /// async acceptor takes connections ahead of callers.
    pub fn accept(&self, timeout: Duration) -> Result<Conn> {
        accept_one(&self.inner, &self.endpoint, timeout)
    }

    /// Polls for an accepted connection. The first call starts a thread that accepts ahead
    /// (up to a backlog of 64) until the listener is dropped; accepted connections wait in
    /// that backlog, so a dropped future loses none.
    pub fn poll_accept(&self, cx: &mut Context<'_>) -> Poll<Result<Conn>> {
        self.endpoint.drive_from_current_runtime();
        let acceptor = self.acceptor.get_or_init(|| self.start_acceptor());
        let mut q = acceptor.queue.lock();
        if let Some(r) = q.0.pop_front() {
            return Poll::Ready(r);
        }
        if acceptor.gone.load(Ordering::Acquire) {
            return Poll::Ready(Err(Error::Config(
                "the listener's accept thread ended; bind a new listener".into(),
            )));
        }
        push_waker(&mut q.1, cx.waker());
        Poll::Pending
    }

    /// Accepts the next connection. Cancel safe (see [`poll_accept`](Self::poll_accept)).
    pub async fn accept_async(&self) -> Result<Conn> {
        std::future::poll_fn(|cx| self.poll_accept(cx)).await
    }

    fn start_acceptor(&self) -> Arc<Acceptor> {
        let acceptor = Arc::new(Acceptor::default());
        let (a, inner, endpoint) = (acceptor.clone(), self.inner.clone(), self.endpoint.clone());
        let spawned = std::thread::Builder::new()
            .name("transport-accept".into())
            .spawn(move || {
                while !a.stop.load(Ordering::Acquire) {
                    if a.queue.lock().0.len() >= BACKLOG {
                        std::thread::sleep(Duration::from_millis(5));
                        continue;
                    }
                    let r = match accept_one(&inner, &endpoint, ACCEPT_SLICE) {
                        Err(Error::TimedOut { .. }) => continue,
                        r => r,
                    };
                    let wakers = {
                        let mut q = a.queue.lock();
                        q.0.push_back(r);
                        std::mem::take(&mut q.1)
                    };
                    wakers.into_iter().for_each(Waker::wake);
                }
                a.gone.store(true, Ordering::Release);
            });
        if spawned.is_err() {
            acceptor.gone.store(true, Ordering::Release);
        }
        acceptor
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        if let Some(a) = self.acceptor.get() {
            a.stop.store(true, Ordering::Release);
        }
    }
}

/// The listener's admission: refuse, before anything is created for it, a peer whose connect
/// data is no handshake of ours (it gets our version with the rejection) or that would
/// exceed the endpoint's connections; then ask the configured hook.
pub(crate) fn admission(endpoint: &Endpoint) -> cm::AdmitHook {
    let ep = endpoint.clone();
    let user = endpoint.config().admit.clone();
    cm::AdmitHook::new(move |req| {
        let ours = ep.config().proto.connect_info().encode().to_vec();
        if ep.check_room().is_err() || ConnectInfo::decode(req.private_data()).is_err() {
            return cm::Admission::Reject(ours);
        }
        user.as_ref().map_or(cm::Admission::Accept, |h| h.call(req))
    })
}

fn accept_one(inner: &cm::Listener, endpoint: &Endpoint, timeout: Duration) -> Result<Conn> {
    let deadline = Instant::now() + timeout;
    let ours = endpoint.config().proto.connect_info();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let req = match inner.get_request(left) {
            Ok(r) => r,
            Err(cm::Error::Timeout { .. }) => {
                return Err(Error::TimedOut {
                    op: "accept",
                    after: timeout,
                })
            }
            Err(e) => return Err(e.into()),
        };
        if endpoint.check_room().is_err() {
            // Full: refuse this peer (its SRQ share could not be backed), keep serving others.
            let _ = req.reject(&ours.encode());
            continue;
        }
        let peer = match ConnectInfo::decode(req.private_data()) {
            Ok(p) => p,
            Err(_) => {
                let _ = req.reject(&ours.encode());
                continue;
            }
        };
        let proto = proto::Connection::new(&endpoint.config().proto, &peer, Instant::now())
            .map_err(|e| Error::Config(e.to_string()))?;
        let conn = endpoint.register(req.qp().clone(), req.id().clone(), Some(proto));
        // A request that arrived gets the connect timeout to finish its handshake, however
        // little of the caller's wait is left (the async acceptor waits in short slices):
        // under packet loss the CM's retransmissions take seconds.
        let left = deadline
            .saturating_duration_since(Instant::now())
            .max(endpoint.config().connect_timeout);
        let parts = match req.accept(&ours.encode(), left) {
            Ok(c) => c.into_parts(),
            Err(e) => {
                endpoint.unregister(&conn);
                return Err(e.into());
            }
        };
        endpoint.establish(&conn, &parts.id, &peer)?;
        return Ok(Conn {
            inner: conn,
            engine: endpoint.engine.clone(),
        });
    }
}
