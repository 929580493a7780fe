//! An id's getters read a snapshot taken under the channel's field lock, never the fields
//! librdmacm rewrites while it processes events: readers on other threads only ever see an
//! address the id really had.
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use cm::{CmId, PortSpace};

use crate::support::*;

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn getters_race_free_while_resolving() {
    let dst = SocketAddr::new(peer_ip(), port(42));
    for round in 0..20 {
        let id = CmId::with_own_channel(PortSpace::Tcp).unwrap();
        let done = Arc::new(AtomicBool::new(false));
        let reader = {
            let (id, done) = (id.clone(), done.clone());
            std::thread::spawn(move || {
                let mut seen = 0u64;
                while !done.load(Ordering::Relaxed) {
                    if let Some(peer) = id.peer_addr() {
                        assert_eq!(peer, dst, "torn or foreign peer address");
                        seen += 1;
                    }
                    if let Some(local) = id.local_addr() {
                        assert_eq!(local.ip(), local_ip(), "torn local address");
                    }
                    let _ = format!("{id:?}");
                    let _ = id.port_num();
                }
                seen
            })
        };
        id.resolve_addr(Some(SocketAddr::new(local_ip(), 0)), dst, TIMEOUT)
            .unwrap();
        let ev = id.wait_event(TIMEOUT, "address resolution").unwrap();
        assert!(ev.is(cm::EventKind::AddrResolved), "{ev:?}");
        drop(ev);
        id.resolve_route(TIMEOUT).unwrap();
        let ev = id.wait_event(TIMEOUT, "route resolution").unwrap();
        assert!(ev.is(cm::EventKind::RouteResolved), "{ev:?}");
        drop(ev);
        assert_eq!(id.peer_addr(), Some(dst));
        assert_eq!(id.local_addr().map(|a| a.ip()), Some(local_ip()));
        assert_ne!(id.port_num(), 0);
        id.context().unwrap().query_device().unwrap();
        done.store(true, Ordering::Relaxed);
        let seen = reader.join().unwrap();
        eprintln!("round {round}: {seen} reads of the peer address");
    }
}
