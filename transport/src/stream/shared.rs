//! The process's shared endpoints of the byte stream: one [`Endpoint`] per local address and
//! configuration, made on first use, so streams connected or accepted without an endpoint of
//! their own share one device context, completion queue, receive queue and pool (as sockets
//! share the kernel's stack) instead of opening them per connection. Opening one (the device,
//! its queues, the pool's registration: milliseconds) happens off the runtime's threads when
//! an async caller asks for it ([`open`]).

use std::io;
use std::net::IpAddr;
use std::sync::{Arc, OnceLock};

use parking_lot::Mutex;

use super::error::to_io;
use crate::{Endpoint, EndpointConfig};

/// The shared endpoint of one local address and configuration, once opened. Its lock is held
/// while it is opened, so two first callers open one; the list's lock only while a slot is
/// looked up, so an opening never holds up callers of another slot.
type Slot = Arc<Mutex<Option<Endpoint>>>;

/// The slots so far: a few (one per local address and configuration in use), found by a scan.
static SHARED: OnceLock<Mutex<Vec<(IpAddr, EndpointConfig, Slot)>>> = OnceLock::new();

/// The endpoint [`Stream::connect`](super::Stream::connect),
/// [`Stream::connect_from`](super::Stream::connect_from) and
/// [`StreamListener::bind`](super::StreamListener::bind) use for `local_ip`: made with the
/// default [`EndpointConfig`] the first time it is asked for, then the same endpoint (a clone
/// of its handle) for the rest of the process. It serves up to `max_connections` (4,096)
/// streams at once, listeners and connectors alike; for another configuration, see
/// [`shared_endpoint_with`] ([`StreamListener::bind_with`](super::StreamListener::bind_with),
/// [`Stream::connect_with`](super::Stream::connect_with)), or make an [`Endpoint`] of your
/// own and use [`Stream::connect_on`](super::Stream::connect_on) and
/// [`StreamListener::bind_on`](super::StreamListener::bind_on).
///
/// A failure (no RDMA device has `local_ip`) is not remembered: the next call tries again.
///
/// The shared endpoints are never dropped, so nothing lingers for streams still closing when
/// the process exits (an endpoint of your own lingers up to 2 s for them when its last
/// handle goes): await [`shutdown`](super::Stream::shutdown), which returns once the peer
/// has everything, before exiting. A stream whose process ends before its peer had
/// everything is an error for the peer (`ConnectionReset`), never a short end of stream.
pub fn shared_endpoint(local_ip: IpAddr) -> io::Result<Endpoint> {
    shared_endpoint_with(local_ip, &EndpointConfig::default())
}

/// The shared endpoint of `local_ip` with `config`: as [`shared_endpoint`], one per local
/// address and configuration (configurations compare field by field; an admission hook by
/// identity, its clones alike). Streams bound or connected with equal configurations share
/// it; its `max_connections` is how many streams it serves at once. Under
/// [`Polling::Reactor`](crate::Polling::Reactor), the async entry points
/// ([`StreamListener::bind_with`](super::StreamListener::bind_with),
/// [`Stream::connect_with`](super::Stream::connect_with)) spawn its tokio driver on their
/// runtime when none lives.
pub fn shared_endpoint_with(local_ip: IpAddr, config: &EndpointConfig) -> io::Result<Endpoint> {
    shared(local_ip, config).map_err(to_io)
}

/// The slot of `local_ip` and `config`, made empty if there is none.
fn slot(local_ip: IpAddr, config: &EndpointConfig) -> Slot {
    let mut map = SHARED.get_or_init(Default::default).lock();
    if let Some((_, _, slot)) = map.iter().find(|(ip, c, _)| *ip == local_ip && c == config) {
        return slot.clone();
    }
    let slot = Slot::default();
    map.push((local_ip, config.clone(), slot.clone()));
    slot
}

pub(crate) fn shared(local_ip: IpAddr, config: &EndpointConfig) -> crate::Result<Endpoint> {
    let slot = slot(local_ip, config);
    let mut opened = slot.lock();
    if let Some(ep) = &*opened {
        return Ok(ep.clone());
    }
    // Opened under the slot's lock: two first connects at once must not open two endpoints.
    let ep = Endpoint::with_config(local_ip, config.clone())?;
    *opened = Some(ep.clone());
    Ok(ep)
}

/// [`shared`] for async callers: an endpoint that exists is returned at once; one to be opened
/// is opened [off the runtime's threads](super::off_runtime). Under
/// [`Polling::Reactor`](crate::Polling::Reactor), a tokio driver is spawned on the caller's
/// runtime when none lives (as `Endpoint::spawn_tokio_driver` would).
pub(crate) async fn open(local_ip: IpAddr, config: &EndpointConfig) -> io::Result<Endpoint> {
    // An endpoint being opened holds its slot: the wait for it goes off the runtime too.
    let found = slot(local_ip, config)
        .try_lock()
        .and_then(|opened| opened.clone());
    let ep = match found {
        Some(ep) => ep,
        None => {
            let config = config.clone();
            super::off_runtime(move || shared(local_ip, &config).map_err(to_io)).await?
        }
    };
    #[cfg(feature = "tokio")]
    ep.drive_reactor_from_current_runtime();
    Ok(ep)
}
