//! Admission of incoming connections: the listener refuses a foreign handshake and asks the
//! configured hook, before anything is set up for the peer; a refused peer gets a typed
//! rejection and the listener keeps serving.
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use transport::proto::ConnectInfo;
use transport::{Admission, Error};

use crate::support::*;

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn the_admission_hook_refuses_and_admits_by_peer_and_handshake() {
    let closed = Arc::new(AtomicBool::new(true));
    let calls = Arc::new(AtomicUsize::new(0));
    let (c, n) = (closed.clone(), calls.clone());
    let me = local_ip();
    let cfg = config().with_admit(move |req| {
        n.fetch_add(1, Ordering::Relaxed);
        assert_eq!(req.peer_addr().map(|a| a.ip()), Some(me));
        // What the hook sees is the transport's own handshake.
        assert!(ConnectInfo::decode(req.private_data()).is_ok());
        if c.load(Ordering::Relaxed) {
            Admission::Reject(b"closed".to_vec())
        } else {
            Admission::Accept
        }
    });
    let (listener, client) = endpoints(cfg, config());
    let addr = addr_of(&listener);
    let serving = std::thread::spawn(move || {
        let conn = listener.accept_timeout(TIMEOUT).expect("accept");
        let m = conn.recv(TIMEOUT).expect("recv");
        conn.send(&m.bytes()).expect("echo");
        conn
    });

    // Refused by the hook: the client sees the hook's private data.
    match client.connect_timeout(addr, TIMEOUT) {
        Err(Error::Cm(cm::Error::Rejected { private_data, .. })) => {
            assert!(private_data.starts_with(b"closed"), "{private_data:?}")
        }
        other => panic!("expected the hook's rejection, got {other:?}"),
    }
    assert_eq!(calls.load(Ordering::Relaxed), 1);

    // A peer that is no transport client is refused before the hook, with our handshake.
    let junk = [0xa5u8; 56];
    let attempt = cm::Connector::new(addr)
        .src(local_ip())
        .private_data(&junk)
        .unwrap()
        .timeout(TIMEOUT)
        .connect();
    match attempt {
        Err(cm::Error::Rejected { private_data, .. }) => {
            assert_eq!(
                ConnectInfo::decode(&private_data).unwrap().version,
                ConnectInfo::VERSION
            );
        }
        other => panic!("expected a rejection, got {other:?}"),
    }
    assert_eq!(
        calls.load(Ordering::Relaxed),
        1,
        "the hook never saw the junk"
    );

    // Admitted: a message goes both ways.
    closed.store(false, Ordering::Relaxed);
    let conn = client.connect_timeout(addr, TIMEOUT).expect("connect");
    let msg = pattern(7, 3000);
    conn.send(&msg).unwrap();
    let echo = conn.recv(TIMEOUT).unwrap();
    assert_eq!(&echo.bytes()[..], &msg[..]);
    assert_eq!(calls.load(Ordering::Relaxed), 2);
    let server_conn = serving.join().unwrap();
    conn.close(Duration::from_secs(5)).ok();
    drop(server_conn);
}
