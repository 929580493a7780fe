//! Private data both ways, its limits as typed errors, and rejects carrying private data.
use std::net::SocketAddr;

use cm::{max_private_data, ConnParam, Connector, Error, Listener, PortSpace, PrivateDataOp};

use crate::support::*;

#[test]
fn connect_private_data_over_56_bytes_is_refused_before_any_io() {
    let e = Connector::new("192.0.2.1:1".parse().unwrap())
        .private_data(&[0; 57])
        .unwrap_err();
    assert!(
        matches!(e, Error::PrivateDataTooLong { len: 57, max: 56 }),
        "{e:?}"
    );
    assert!(Connector::new("192.0.2.1:1".parse().unwrap())
        .private_data(&[0; 56])
        .is_ok());
    let e = ConnParam::new().private_data(&[0; 300]).unwrap_err();
    assert!(
        matches!(e, Error::PrivateDataTooLong { len: 300, .. }),
        "{e:?}"
    );
    assert_eq!(max_private_data(PortSpace::Tcp, PrivateDataOp::Accept), 196);
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn largest_private_data_both_ways_between_hosts() {
    let port = port(2);
    let peer = spawn_peer_server(port, &["--count", "1"]);
    let mine: Vec<u8> = (1..=56).collect();
    let conn = connect_retry(SocketAddr::new(peer_ip(), port), &mine, TIMEOUT);
    // 16 bytes of region, then our 56 bytes back: 72 bytes in the accept, padded to 196 by
    // InfiniBand's CM (iWARP's MPA carries them as they are).
    let want = if local_transport() == verbs::Transport::Iwarp {
        72
    } else {
        196
    };
    assert_eq!(conn.private_data().len(), want);
    assert_eq!(&conn.private_data()[16..72], &mine[..]);
    assert!(conn.private_data()[72..].iter().all(|&b| b == 0));
    conn.disconnect(TIMEOUT).unwrap();
    finish_peer(peer);
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn accept_private_data_limit_is_typed() {
    let listener = Listener::bind(SocketAddr::new(local_ip(), 0), options()).unwrap();
    let addr = listener.local_addr().unwrap();
    let client = std::thread::spawn(move || {
        Connector::new(addr)
            .src(local_ip())
            .timeout(TIMEOUT)
            .connect()
    });
    let req = listener.get_request(TIMEOUT).unwrap();
    let e = req.accept(&[0; 197], TIMEOUT).unwrap_err();
    assert!(
        matches!(e, Error::PrivateDataTooLong { len: 197, max: 196 }),
        "{e:?}"
    );
    // The request was dropped: the client is turned away, within its timeout.
    let r = client.join().unwrap();
    assert!(
        matches!(
            r,
            Err(Error::Rejected { .. } | Error::Unreachable { .. } | Error::Timeout { .. })
        ),
        "{r:?}"
    );
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn reject_carries_private_data() {
    let port = port(3);
    let peer = spawn_peer_server(port, &["--count", "1", "--reject"]);
    // Until the peer listens, the CM itself rejects (status 8, no private data).
    let deadline = std::time::Instant::now() + TIMEOUT;
    let (status, data) = loop {
        let r = Connector::new(SocketAddr::new(peer_ip(), port))
            .src(local_ip())
            .timeout(TIMEOUT)
            .connect();
        match r {
            Err(Error::Rejected {
                status,
                private_data,
            }) if private_data.starts_with(b"go away") => break (status, private_data),
            Err(Error::Rejected { .. }) if std::time::Instant::now() < deadline => {
                std::thread::sleep(std::time::Duration::from_millis(100))
            }
            other => panic!("expected a reject with private data, got {other:?}"),
        }
    };
    // InfiniBand's CM says consumer reject; iWARP's MPA reject comes as a reset.
    if local_transport() == verbs::Transport::Iwarp {
        assert_eq!(status, -libc::ECONNRESET, "iWARP reject");
    } else {
        assert_eq!(status, 28, "IB CM consumer reject");
    }
    assert_eq!(&data[..7], b"go away");
    // Debug shows the sender's bytes and the padding's length, not 148 numbers.
    assert_eq!(data.trimmed(), b"go away");
    let debug = format!("{data:?}");
    assert!(
        debug.contains("b\"go away\"") && debug.contains(&format!("{} bytes", data.len())),
        "{debug}"
    );
    assert!(debug.len() < 80, "{debug}");
    let e = Error::Rejected {
        status,
        private_data: data,
    };
    // Either way the message says the peer's application refused.
    assert!(
        e.to_string()
            .contains("the peer's application refused the connection"),
        "{e}"
    );
    let out = finish_peer(peer);
    assert!(out.contains("rejected"), "{out}");
}
