//! The process's shared endpoints of the byte stream: one [`Endpoint`] per local address,
//! made on first use, so streams connected or accepted without an endpoint of their own share
//! one device context, completion queue, receive queue and pool (as sockets share the kernel's
//! stack) instead of opening them per connection.

use std::collections::HashMap;
use std::io;
use std::net::IpAddr;
use std::sync::OnceLock;

use parking_lot::Mutex;

use super::error::to_io;
use crate::Endpoint;

static SHARED: OnceLock<Mutex<HashMap<IpAddr, Endpoint>>> = OnceLock::new();

/// The endpoint [`Stream::connect`](super::Stream::connect),
/// [`Stream::connect_from`](super::Stream::connect_from) and
/// [`StreamListener::bind`](super::StreamListener::bind) use for `local_ip`: made with the
/// default [`EndpointConfig`](crate::EndpointConfig) the first time it is asked for, then the
/// same endpoint (a clone of its handle) for the rest of the process. It serves up to
/// `max_connections` (256) streams at once, listeners and connectors alike; for another
/// configuration make an [`Endpoint`] and use [`Stream::connect_on`](super::Stream::connect_on)
/// and [`StreamListener::bind_on`](super::StreamListener::bind_on).
///
/// A failure (no RDMA device has `local_ip`) is not remembered: the next call tries again.
///
/// The shared endpoints are never dropped, so nothing lingers for streams still closing when
/// the process exits (an endpoint of your own lingers up to 2 s for them when its last
/// handle goes): await [`shutdown`](super::Stream::shutdown), which returns once the peer
/// has everything, before exiting. A stream whose process ends before its peer had
/// everything is an error for the peer (`ConnectionReset`), never a short end of stream.
pub fn shared_endpoint(local_ip: IpAddr) -> io::Result<Endpoint> {
    shared(local_ip).map_err(to_io)
}

pub(crate) fn shared(local_ip: IpAddr) -> crate::Result<Endpoint> {
    let mut map = SHARED.get_or_init(Default::default).lock();
    if let Some(ep) = map.get(&local_ip) {
        return Ok(ep.clone());
    }
    // Made under the lock: two first connects at once must not open two endpoints.
    let ep = Endpoint::new(local_ip)?;
    map.insert(local_ip, ep.clone());
    Ok(ep)
}
