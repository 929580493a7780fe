//! One-sided access: a token names exactly what the peer may read or write; the API refuses
//! out-of-range and disallowed access before sending anything.
use transport::{Access, Error, Token};

use crate::support::*;

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn read_and_write_an_exposed_region_through_its_token() {
    let (server, client) = pair();
    let ep = server_endpoint(&server);
    let region = ep.expose(3 << 20, Access::ReadWrite).unwrap();
    let content = pattern(7, 3 << 20);
    region.write(0, &content).unwrap();
    let token = Token::from_bytes(&region.token().to_bytes()).unwrap();

    let mut got = vec![0u8; (2 << 20) + 11];
    client.read(&token, 1000, &mut got, TIMEOUT).unwrap();
    assert!(got[..] == content[1000..1000 + got.len()], "read differs");

    let update = pattern(8, 70_000);
    client.write(&token, 5, &update, TIMEOUT).unwrap();
    let mut check = vec![0u8; update.len()];
    region.read(5, &mut check).unwrap();
    assert!(check == update, "write did not land");
    let mut before = [0u8; 5];
    region.read(0, &mut before).unwrap();
    assert_eq!(before[..], content[..5], "bytes before the write changed");
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn out_of_range_and_disallowed_access_is_refused_locally() {
    let (server, client) = pair();
    let ep = server_endpoint(&server);
    let region = ep.expose(4096, Access::Read).unwrap();
    let token = region.token();
    let mut buf = [0u8; 16];
    let r = client.read(&token, 4090, &mut buf, TIMEOUT);
    assert!(matches!(r, Err(Error::OutOfRange { .. })), "{r:?}");
    let r = client.write(&token, 0, b"no", TIMEOUT);
    assert!(
        matches!(r, Err(Error::AccessDenied { op: "write" })),
        "{r:?}"
    );
    let r = Token::from_bytes(&[0u8; 31]);
    assert!(matches!(r, Err(Error::BadToken(_))), "{r:?}");
    // Nothing was sent: the connection still works.
    client.read(&token, 4080, &mut buf, TIMEOUT).unwrap();
    client.send(b"alive").unwrap();
    assert_eq!(&server.recv(TIMEOUT).unwrap().bytes()[..], b"alive");
}

/// A region shared between threads through an `Arc` is written through `&self`, by several
/// threads at once, with no lock of the caller's; the peer reads what they wrote. A local copy
/// outside the region is refused with `OutOfRange`, like a peer's.
#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn a_region_in_an_arc_is_written_by_many_threads_without_a_lock() {
    let (server, client) = pair();
    let region = std::sync::Arc::new(
        server_endpoint(&server)
            .expose(1 << 16, Access::ReadWrite)
            .unwrap(),
    );
    let content = pattern(9, 1 << 16);
    std::thread::scope(|s| {
        for (i, part) in content.chunks(1 << 14).enumerate() {
            let region = region.clone();
            s.spawn(move || region.write((i << 14) as u64, part).unwrap());
        }
    });
    let mut got = vec![0u8; content.len()];
    client.read(&region.token(), 0, &mut got, TIMEOUT).unwrap();
    assert!(
        got == content,
        "the peer read something else than the threads wrote"
    );
    assert_eq!(region.len(), 1 << 16);
    let r = region.write(region.len() - 1, b"xy");
    assert!(matches!(r, Err(Error::OutOfRange { .. })), "{r:?}");
    let r = region.read(u64::MAX, &mut [0u8; 1]);
    assert!(matches!(r, Err(Error::OutOfRange { .. })), "{r:?}");
}

/// The endpoint a connection belongs to.
fn server_endpoint(conn: &transport::Conn) -> transport::Endpoint {
    conn.endpoint()
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn access_after_revoke_fails_and_the_owner_keeps_serving() {
    let (server, client) = pair();
    let ep = server_endpoint(&server);
    let region = ep.expose(4096, Access::ReadWrite).unwrap();
    region.write(0, b"secret").unwrap();
    let token = region.token();
    let mut buf = [0u8; 6];
    client.read(&token, 0, &mut buf, TIMEOUT).unwrap();
    assert_eq!(&buf, b"secret");
    region.revoke();
    // The key is gone: the device refuses the access (RC then ends the connection).
    let r = client.write(&token, 0, b"xx", TIMEOUT);
    assert!(
        matches!(r, Err(Error::Completion { .. } | Error::Closed { .. })),
        "{r:?}"
    );
    // The owner's endpoint serves a new connection.
    let listener = ep.listen(0).unwrap();
    let addr = listener.local_addr().unwrap();
    let t = std::thread::spawn(move || listener.accept_timeout(TIMEOUT).unwrap());
    let again = client.endpoint().connect(addr).unwrap();
    let s2 = t.join().unwrap();
    again.send(b"next").unwrap();
    assert_eq!(&s2.recv(TIMEOUT).unwrap().bytes()[..], b"next");
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn async_read_and_write_of_an_exposed_region_on_a_minimal_executor() {
    let (server, client) = pair();
    let ep = server_endpoint(&server);
    let region = ep.expose(1 << 20, Access::ReadWrite).unwrap();
    let content = pattern(17, 1 << 20);
    region.write(0, &content).unwrap();
    let token = region.token();
    futures::executor::block_on(async {
        let mut got = vec![0u8; 500_000];
        client
            .read_async(&token, 300, &mut got, TIMEOUT)
            .await
            .unwrap();
        assert!(got[..] == content[300..500_300], "async read differs");
        let update = pattern(18, 9000);
        client
            .write_async(&token, 64, &update, TIMEOUT)
            .await
            .unwrap();
        let mut check = vec![0u8; update.len()];
        region.read(64, &mut check).unwrap();
        assert!(check == update, "async write did not land");
        let r = client
            .read_async(&token, (1 << 20) - 4, &mut [0u8; 8], TIMEOUT)
            .await;
        assert!(matches!(r, Err(Error::OutOfRange { .. })), "{r:?}");
    });
}

/// Threads of this process.
fn threads() -> usize {
    std::fs::read_dir("/proc/self/task").unwrap().count()
}

/// Many async reads and writes in flight at once start no thread: each is a request the
/// engine completes and a waker it wakes. Every byte arrives.
#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn async_one_sided_operations_in_flight_start_no_thread() {
    use futures::stream::{FuturesUnordered, StreamExt};
    let (server, client) = pair();
    let region = server_endpoint(&server)
        .expose(1 << 20, Access::ReadWrite)
        .unwrap();
    let content = pattern(21, 1 << 20);
    region.write(0, &content).unwrap();
    let update = pattern(22, 1 << 20);
    let token = region.token();
    let piece = (1 << 20) / 32;
    let mut out = vec![vec![0u8; piece]; 32];
    futures::executor::block_on(async {
        let before = threads();
        let mut reads: FuturesUnordered<_> = out
            .iter_mut()
            .enumerate()
            .map(|(i, dst)| {
                let client = &client;
                async move {
                    client
                        .read_async(&token, (i * piece) as u64, dst, TIMEOUT)
                        .await
                }
            })
            .collect();
        // One poll of each posts its READ (or waits for a slot): nothing more.
        let first = futures::poll!(reads.next());
        let during = threads();
        assert!(
            during <= before + 1,
            "{before} threads before, {during} with 32 reads in flight"
        );
        if let std::task::Poll::Ready(Some(r)) = first {
            r.unwrap();
        }
        while let Some(r) = reads.next().await {
            r.unwrap();
        }
        let writes: FuturesUnordered<_> = (0..32)
            .map(|i| {
                let client = &client;
                let part = &update[i * piece..(i + 1) * piece];
                async move {
                    client
                        .write_async(&token, (i * piece) as u64, part, TIMEOUT)
                        .await
                }
            })
            .collect();
        let done: Vec<_> = writes.collect().await;
        assert!(done.iter().all(Result::is_ok), "{done:?}");
    });
    assert!(
        out.concat() == content,
        "the async reads differ from the region"
    );
    let mut after = vec![0u8; 1 << 20];
    region.read(0, &mut after).unwrap();
    assert!(after == update, "the async writes did not land");
}

/// A token forged to name more than was exposed (past the end, or longer): the local checks
/// pass, since the token itself says so, but the device refuses the access (each exposed
/// region is a registration of exactly its bytes) and the region is untouched.
#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn a_forged_token_fails_at_the_device_and_the_memory_is_untouched() {
    // (offset into the forged token, bytes written): past the end; one byte too long.
    for (offset, len) in [(64u64, 64usize), (0, 65)] {
        let (server, client) = pair();
        let ep = server_endpoint(&server);
        let region = ep.expose(64, Access::ReadWrite).unwrap();
        let content = pattern(3, 64);
        region.write(0, &content).unwrap();
        let mut bytes = region.token().to_bytes();
        bytes[16..24].copy_from_slice(&4096u64.to_le_bytes());
        let forged = Token::from_bytes(&bytes).unwrap();
        let r = client.write(&forged, offset, &pattern(4, len), TIMEOUT);
        match &r {
            // An iWARP device refuses with a TERMINATE that ends the connection: the write's
            // zero-length READ behind it is flushed.
            Err(Error::Completion { status, .. }) => assert!(
                status.contains("remote access")
                    || (crate::fault_suite::iwarp() && status.contains("flushed")),
                "{status}"
            ),
            Err(Error::Closed { .. }) => {}
            other => panic!("write of {len} bytes at {offset}: {other:?}"),
        }
        let mut now = vec![0u8; 64];
        region.read(0, &mut now).unwrap();
        assert_eq!(now, content, "the region changed");
    }
}
