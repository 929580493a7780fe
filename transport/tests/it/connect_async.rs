//! Async connects and accepts complete through the endpoint's CM thread and wakers: many in
//! flight start no thread, a dropped listener frees its port at once, dropped futures leave
//! nothing behind, and a refused connect is the same typed error as the blocking one.
use std::net::SocketAddr;
use std::task::Poll;
use std::time::{Duration, Instant};

use futures::stream::{FuturesUnordered, StreamExt};
use transport::{Endpoint, EndpointConfig, Error};

use crate::support::*;

/// Connections each test may hold at once.
const MANY: usize = 16;

fn roomy() -> EndpointConfig {
    config().with_max_connections(2 * MANY as u32)
}

fn threads() -> usize {
    std::fs::read_dir("/proc/self/task").unwrap().count()
}

/// Waits (bounded) until `endpoint` holds no connection.
fn wait_no_connections(endpoint: &Endpoint, what: &str) {
    let deadline = Instant::now() + 3 * TIMEOUT;
    while endpoint.connections() > 0 {
        assert!(
            Instant::now() < deadline,
            "{what}: {} connections left",
            endpoint.connections()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Many connects and accepts in flight at once on one executor thread start no thread; the
/// data sent over each connection arrives intact.
#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn async_connects_and_accepts_in_flight_start_no_thread() {
    let (listener, client) = endpoints(roomy(), roomy());
    let addr = listener.local_addr().unwrap();
    futures::executor::block_on(async {
        let before = threads();
        let mut accepts: FuturesUnordered<_> = (0..MANY).map(|_| listener.accept_async()).collect();
        let mut connects: FuturesUnordered<_> = (0..MANY)
            .map(|i| {
                let client = &client;
                async move { (i, client.connect_async(addr).await) }
            })
            .collect();
        // One poll of each starts every connect (and waits for every accept): nothing more.
        let first_connect = futures::poll!(connects.next());
        let first_accept = futures::poll!(accepts.next());
        let during = threads();
        assert!(
            during <= before + 1,
            "{before} threads before, {during} with {MANY} connects and accepts in flight"
        );
        let mut clients = Vec::new();
        let mut servers = Vec::new();
        if let Poll::Ready(Some((i, r))) = first_connect {
            clients.push((i, r.expect("connect")));
        }
        if let Poll::Ready(Some(r)) = first_accept {
            servers.push(r.expect("accept"));
        }
        let (c, s) = futures::join!(
            async {
                while let Some((i, r)) = connects.next().await {
                    clients.push((i, r.expect("connect")));
                }
            },
            async {
                while servers.len() < MANY {
                    let r = accepts.next().await.expect("an accept per connect");
                    servers.push(r.expect("accept"));
                }
            }
        );
        let ((), ()) = (c, s);
        let after = threads();
        assert!(
            after <= before + 1,
            "{before} threads before, {after} after {MANY} connects and accepts"
        );
        for (i, conn) in &clients {
            conn.send_async(&pattern(*i as u64, 4096 + *i))
                .await
                .unwrap();
        }
        let mut got = Vec::new();
        for conn in &servers {
            let m = conn.recv_async().await.unwrap().expect("a message");
            got.push(m.bytes().to_vec());
        }
        got.sort();
        let mut sent: Vec<_> = (0..MANY).map(|i| pattern(i as u64, 4096 + i)).collect();
        sent.sort();
        assert!(got == sent, "the messages differ from what was sent");
    });
}

/// A dropped listener frees its port at once: the same port is bound again right away and
/// serves.
#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn a_dropped_listener_frees_its_port_at_once() {
    let (mut listener, client) = endpoints(config(), config());
    let server = listener.endpoint().clone();
    let port = listener.local_addr().unwrap().port();
    for round in 0..3u8 {
        // An async accept waiting on it, as a server loop would have.
        futures::executor::block_on(async {
            assert!(futures::poll!(std::pin::pin!(listener.accept_async())).is_pending());
        });
        drop(listener);
        listener = server.listen(port).expect("the port bound again at once");
        let c = client
            .connect(listener.local_addr().unwrap())
            .expect("connect");
        let s = listener.accept_timeout(TIMEOUT).expect("accept");
        c.send(&[round]).unwrap();
        assert_eq!(&s.recv(TIMEOUT).unwrap().bytes()[..], &[round]);
    }
}

/// A dropped connect future (at any point) and a dropped accept future leave nothing behind:
/// every connection goes, and the listener keeps serving.
#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn dropped_connect_and_accept_futures_leave_nothing_behind() {
    let (listener, client) = endpoints(roomy(), roomy());
    let server = listener.endpoint().clone();
    let addr = listener.local_addr().unwrap();
    futures::executor::block_on(async {
        // A dropped accept future loses nothing: the connection made meanwhile is taken by
        // the next accept.
        assert!(futures::poll!(std::pin::pin!(listener.accept_async())).is_pending());
        let c = client.connect_async(addr).await.expect("connect");
        let s = listener.accept_async().await.expect("accept");
        c.send_async(b"kept").await.unwrap();
        assert_eq!(&s.recv_async().await.unwrap().unwrap().bytes()[..], b"kept");
        drop((c, s));

        // Connect futures dropped after their first poll, and after their request went out.
        for late in [false, true] {
            for _ in 0..4 {
                let mut connect = Box::pin(client.connect_async(addr));
                if futures::poll!(connect.as_mut()).is_ready() {
                    continue;
                }
                if late {
                    let deadline = Instant::now() + TIMEOUT;
                    while client.connections() == 0 && Instant::now() < deadline {
                        std::thread::sleep(Duration::from_millis(1));
                    }
                }
                drop(connect);
            }
        }
    });
    // Whatever the server accepted meanwhile and nobody took goes with the listener's backlog
    // or ends; the client keeps nothing.
    wait_no_connections(&client, "client");
    while let Ok(c) = listener.accept_timeout(Duration::from_millis(1)) {
        drop(c);
    }
    wait_no_connections(&server, "server");
    // The listener keeps serving.
    let c = client.connect(addr).expect("connect after the drops");
    let s = listener
        .accept_timeout(TIMEOUT)
        .expect("accept after the drops");
    c.send(b"still serving").unwrap();
    assert_eq!(&s.recv(TIMEOUT).unwrap().bytes()[..], b"still serving");
}

/// A connect to a port nobody listens on is the same typed error, async or blocking.
#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn async_connect_to_nobody_is_the_blocking_error() {
    let client = Endpoint::with_config(local_ip(), config()).unwrap();
    let nobody = SocketAddr::new(peer_ip(), 7998);
    let blocking = client.connect(nobody).unwrap_err();
    let async_ = futures::executor::block_on(client.connect_async(nobody)).unwrap_err();
    let refused = |e: &Error| {
        matches!(
            e,
            Error::Cm(cm::Error::Rejected { .. } | cm::Error::Unreachable { .. })
        )
    };
    assert!(refused(&blocking), "{blocking:?}");
    assert!(refused(&async_), "{async_:?}");
    assert_eq!(
        std::mem::discriminant(&blocking),
        std::mem::discriminant(&async_),
        "{blocking:?} / {async_:?}"
    );
    assert_eq!(client.connections(), 0);
}
