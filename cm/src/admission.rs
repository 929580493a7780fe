//! Connection admission: a listener's hook that accepts or rejects each connect request by
//! the peer's address and private data before anything (channel, PD, CQ, QP, buffers) is
//! created for it.
use std::fmt;
use std::net::SocketAddr;
use std::sync::Arc;

/// What a connect request carries, as the admission hook sees it.
#[derive(Debug, Clone, Copy)]
pub struct IncomingRequest<'a> {
    pub(crate) peer_addr: Option<SocketAddr>,
    pub(crate) local_addr: Option<SocketAddr>,
    pub(crate) private_data: &'a [u8],
}

impl<'a> IncomingRequest<'a> {
    /// The peer's address.
    pub fn peer_addr(&self) -> Option<SocketAddr> {
        self.peer_addr
    }
    /// The address the request arrived at.
    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.local_addr
    }
    /// The peer's private data (padded by the transport to 56 bytes on IB/RoCE).
    pub fn private_data(&self) -> &'a [u8] {
        self.private_data
    }
}

/// The hook's verdict.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Admission {
    /// Go on: set the connection up and hand the request to the listener's caller.
    Accept,
    /// Turn the peer away with this private data (at most 148 bytes on IB/RoCE; longer data
    /// is cut there) and wait for the next request.
    Reject(Vec<u8>),
}

/// An admission hook, shared by the clones of the options that carry it.
#[derive(Clone)]
pub struct AdmitHook(Arc<dyn Fn(&IncomingRequest<'_>) -> Admission + Send + Sync>);

impl AdmitHook {
    /// Wraps `f`.
    pub fn new(f: impl Fn(&IncomingRequest<'_>) -> Admission + Send + Sync + 'static) -> Self {
        AdmitHook(Arc::new(f))
    }
    /// Runs the hook.
    pub fn call(&self, req: &IncomingRequest<'_>) -> Admission {
        (self.0)(req)
    }
}

/// Two hooks are equal when they are clones of one (the same closure, shared).
impl PartialEq for AdmitHook {
    fn eq(&self, other: &Self) -> bool {
        std::ptr::eq(
            Arc::as_ptr(&self.0).cast::<()>(),
            Arc::as_ptr(&other.0).cast::<()>(),
        )
    }
}

impl Eq for AdmitHook {}

impl fmt::Debug for AdmitHook {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("AdmitHook(..)")
    }
}
