//! One PD and one memory pool shared by many connections on each side (the `shared_pool`
//! example, run between the two hosts), and a shared PD of the wrong device refused.
use std::net::SocketAddr;

use cm::{ConnOptions, Connector, Error, Listener};

use crate::support::*;

#[path = "../../examples/shared_pool.rs"]
mod example;

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn one_pd_and_one_pool_serve_every_connection() {
    const N: usize = 4;
    let addr = SocketAddr::new(peer_ip(), port(13));
    let (listener, served) = example::listen(addr).unwrap();
    let server = {
        let pool = served.clone();
        std::thread::spawn(move || example::serve(listener, &pool, N).map_err(|e| e.to_string()))
    };
    let clients = example::connect(addr, local_ip(), N).unwrap();
    server.join().unwrap().unwrap();
    // On each side, one registration per size class served all the connections' buffers,
    // and every buffer came back.
    for pool in [&clients, &served] {
        let stats = pool.stats();
        assert!(stats.classes.iter().all(|c| c.chunks <= 1), "{stats:?}");
        let receives = stats.classes.iter().find(|c| c.size == 4096).unwrap();
        assert_eq!(receives.chunks, 1, "{stats:?}");
        assert!(receives.high_water >= 1, "{stats:?}");
        assert_eq!(stats.buffers_in_use(), 0, "{stats:?}");
    }
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn a_shared_pd_of_another_device_is_refused() {
    // The peer's device's PD, for connections of this host's device.
    let (ctx, _) = verbs::Context::open_by_addr(peer_ip()).unwrap();
    if ctx.name() == testkit::device().name {
        testkit::skip(
            "a_shared_pd_of_another_device_is_refused",
            "one device serves both addresses (no second host)",
        );
        return;
    }
    let wrong = ctx.alloc_pd().unwrap();
    let check = |e: Error| {
        match &e {
            Error::PdOnOtherDevice {
                pd_device,
                id_device,
                local,
            } => {
                assert_eq!(pd_device, ctx.name());
                assert_eq!(*id_device, testkit::device().name);
                assert_eq!(*local, Some(local_ip()));
            }
            other => panic!("expected PdOnOtherDevice, got {other:?}"),
        }
        assert!(e.to_string().contains("open_by_addr"), "{e}");
    };
    let e = Listener::bind(
        SocketAddr::new(local_ip(), port(14)),
        ConnOptions::new().pd(&wrong),
    )
    .unwrap_err();
    check(e);
    let e = Connector::new(SocketAddr::new(peer_ip(), port(14)))
        .src(local_ip())
        .pd(&wrong)
        .timeout(TIMEOUT)
        .resolve()
        .unwrap_err();
    check(e);
}
