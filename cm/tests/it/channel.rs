//! An event channel served until told to stop: a wait ends on an event, on its time bound, or
//! on the stop wakeup, whichever comes first.
use std::net::SocketAddr;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use cm::{CmId, EventChannel, EventKind, PortSpace, Wakeup};

use crate::support::*;

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn a_channel_wait_ends_on_an_event_its_bound_or_its_wakeup() {
    let channel = EventChannel::new().unwrap();
    let stop = Arc::new(Wakeup::new().unwrap());

    // Nothing happens on the channel: the time bound ends the wait.
    let bound = Duration::from_millis(50);
    let start = Instant::now();
    let ev = channel.get_event_unless(&stop, Some(bound)).unwrap();
    assert!(ev.is_none(), "{ev:?}");
    assert!(
        start.elapsed() >= bound,
        "returned after {:?}",
        start.elapsed()
    );

    // An event ends it: resolving an address with an id of this channel.
    let id = CmId::new(&channel, PortSpace::Tcp).unwrap();
    let dst = SocketAddr::new(peer_ip(), port(45));
    id.resolve_addr(Some(SocketAddr::new(local_ip(), 0)), dst, TIMEOUT)
        .unwrap();
    // The resolution ends within its own bound (TIMEOUT) with an event; wait past that bound,
    // so the event, however late the kernel's work queue gets to it, ends this wait.
    let ev = channel
        .get_event_unless(&stop, Some(2 * TIMEOUT))
        .unwrap()
        .expect("the address resolution's event");
    assert!(ev.is(EventKind::AddrResolved), "{ev:?}");
    drop(ev);

    // Woken from another thread while it waits without a bound; and woken for good after.
    let waker = {
        let stop = stop.clone();
        thread::spawn(move || {
            thread::sleep(Duration::from_millis(50));
            stop.wake();
        })
    };
    let start = Instant::now();
    let ev = channel.get_event_unless(&stop, None).unwrap();
    assert!(ev.is_none(), "{ev:?}");
    assert!(
        start.elapsed() < TIMEOUT,
        "woken after {:?}",
        start.elapsed()
    );
    waker.join().unwrap();
    let ev = channel.get_event_unless(&stop, None).unwrap();
    assert!(ev.is_none(), "{ev:?}");
}
