//! A writer process that exits right after its last write: the reader gets everything it
//! wrote and then the end, or an error, never a short clean end. A writer that awaited the
//! stream's `shutdown` or the connection's `close` before exiting lost nothing at all. The
//! writer is `transport-test-peer` on the peer's host (`stream-writer`, `message-writer`),
//! which exits as soon as its last call returned (after a connection dropped, a moment
//! later, as a program that has a little more to do), without dropping its endpoint. A close
//! or shutdown the peer cannot complete (it reads nothing) fails with a timeout within the
//! endpoint's linger, and completes once the peer reads.
use std::io::{ErrorKind, Read};

use transport::stream::Stream;
use transport::{Endpoint, Error, Listener};

use crate::failures::peer_program;
use crate::peer_patterns::{is_numbered, numbered, stream_byte, stream_bytes};
use crate::support::*;

#[test]
fn the_fast_patterns_are_the_patterns() {
    let len = 3 * (64 << 10) + 300;
    let slow: Vec<u8> = (0..len).map(stream_byte).collect();
    assert_eq!(stream_bytes(len), slow);
    let ramp: Vec<u8> = (0..512).map(|i| i as u8).collect();
    for (n, len) in [(0u64, 8usize), (7, 9), (300, 1000), (255, 4096)] {
        let mut slow: Vec<u8> = (0..len).map(|i| (n as u8).wrapping_add(i as u8)).collect();
        slow[..8].copy_from_slice(&n.to_le_bytes());
        assert_eq!(numbered(n, len), slow);
        assert!(is_numbered(&numbered(n, len), n, len, &ramp));
        let mut bad = numbered(n, len);
        *bad.last_mut().unwrap() ^= 1;
        assert!(!is_numbered(&bad, n, len, &ramp));
        assert!(!is_numbered(&numbered(n + 1, len), n, len, &ramp));
    }
}

/// How long a writer that dropped its connection goes on before it exits: long enough for
/// its CLOSE to go out, not for the reader to have read everything.
const PAUSE_MS: &str = "100";

/// How a reader's run ended: the bytes or messages it got intact, and then the end of
/// stream (`None`) or the error's kind.
#[derive(Debug)]
struct Ending {
    got: usize,
    error: Option<String>,
}

fn listener() -> (Endpoint, Listener) {
    let ep = Endpoint::with_config(local_ip(), config()).expect("reader endpoint");
    let listener = ep.listen(0).expect("listen");
    (ep, listener)
}

/// Starts the peer program in `mode` writing to `listener` with `args`, ending with `finish`
/// (its shutdown or close flag) or, without one, by pausing and exiting; returns it and the
/// accepted connection.
fn start_writer(
    listener: &Listener,
    mode: &str,
    args: &[&str],
    finish: Option<&str>,
) -> (testkit::ChildGuard, transport::Conn) {
    let addr = listener.local_addr().unwrap().to_string();
    let src = peer_ip().to_string();
    let mut all = vec![mode, "--src", &src, "--addr", &addr];
    all.extend(args);
    match finish {
        Some(flag) => all.push(flag),
        None => all.extend(["--pause-ms", PAUSE_MS]),
    }
    let (writer, _lines) = peer_program(&all);
    let conn = listener.accept_timeout(TIMEOUT).expect("accept the writer");
    (writer, conn)
}

/// Waits for the writer to exit; whether it succeeded (what it printed is shown if not).
fn writer_succeeded(writer: testkit::ChildGuard) -> bool {
    let out = writer.wait_output(TIMEOUT);
    if !out.status.success() {
        eprintln!(
            "writer: {}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    out.status.success()
}

/// One run of `stream-writer` writing `size` bytes in writes of at most `max_write`: what the reader got, checked byte by
/// byte, and whether the writer exited successfully.
fn stream_run(
    listener: &Listener,
    size: usize,
    max_write: usize,
    shutdown: bool,
) -> (Ending, bool) {
    let (size_arg, max_write_arg) = (size.to_string(), max_write.to_string());
    let (writer, conn) = start_writer(
        listener,
        "stream-writer",
        &["--size", &size_arg, "--max-write", &max_write_arg],
        shutdown.then_some("--shutdown"),
    );
    let mut stream = Stream::from_conn(conn);
    stream.set_read_timeout(Some(TIMEOUT)).unwrap();
    let want = stream_bytes(size);
    let mut buf = vec![0u8; 256 << 10];
    let mut got = 0usize;
    let error = loop {
        match stream.read(&mut buf) {
            Ok(0) => break None,
            Ok(n) => {
                assert!(got + n <= size, "{} bytes of {size}", got + n);
                if buf[..n] != want[got..got + n] {
                    let k = (0..n).find(|&k| buf[k] != want[got + k]).unwrap_or(0);
                    panic!(
                        "byte {} of {size} is {}, not {}",
                        got + k,
                        buf[k],
                        want[got + k]
                    );
                }
                got += n;
            }
            Err(e) => {
                assert_ne!(e.kind(), ErrorKind::TimedOut, "the read waited {TIMEOUT:?}");
                break Some(format!("{:?}: {e}", e.kind()));
            }
        }
    };
    (Ending { got, error }, writer_succeeded(writer))
}

/// One run of `message-writer` sending `count` messages of `size` bytes: what the reader
/// got, checked, and whether the writer exited successfully.
fn message_run(listener: &Listener, count: u64, size: usize, close: bool) -> (Ending, bool) {
    let (count_arg, size_arg) = (count.to_string(), size.to_string());
    let (writer, conn) = start_writer(
        listener,
        "message-writer",
        &["--count", &count_arg, "--size", &size_arg],
        close.then_some("--close"),
    );
    let ramp: Vec<u8> = (0..512).map(|i| i as u8).collect();
    let mut got = 0usize;
    let error = loop {
        match conn.recv(TIMEOUT) {
            Ok(m) => {
                assert!(
                    is_numbered(&m.bytes(), got as u64, size, &ramp),
                    "message {got} of {count} intact"
                );
                got += 1;
            }
            Err(Error::Closed { cause: None }) => break None,
            Err(e) => {
                assert!(
                    !matches!(e, Error::TimedOut { .. }),
                    "the receive waited {TIMEOUT:?}"
                );
                break Some(e.to_string());
            }
        }
    };
    (Ending { got, error }, writer_succeeded(writer))
}

/// Asserts what every writer that completed its shutdown or close may rely on: each run
/// ended with everything and the end, no short clean end and no error.
fn assert_all_delivered(endings: &[(usize, Ending)], what: &str) {
    let short = short_ends(endings, |n| n);
    assert!(short.is_empty(), "short clean ends: {short:?}");
    let failed: Vec<_> = endings.iter().filter(|(_, e)| e.error.is_some()).collect();
    assert!(failed.is_empty(), "{what} lost data: {failed:?}");
}

/// The runs that ended early without an error: a short clean end.
fn short_ends(endings: &[(usize, Ending)], whole: impl Fn(usize) -> usize) -> Vec<String> {
    endings
        .iter()
        .filter(|(n, e)| e.error.is_none() && e.got != whole(*n))
        .map(|(n, e)| format!("{} of {}", e.got, whole(*n)))
        .collect()
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn a_stream_writer_that_awaited_shutdown_and_exited_lost_nothing() {
    let (_ep, listener) = listener();
    let mut endings = Vec::new();
    for (size, runs) in [
        (1, 1),
        (4 << 10, 1),
        ((64 << 10) + 1, 2),
        (1 << 20, 2),
        (16 << 20, 1),
    ] {
        for _ in 0..runs {
            let (ending, writer_ok) = stream_run(&listener, size, 64 << 10, true);
            eprintln!("{size} bytes: {ending:?}, writer succeeded: {writer_ok}");
            assert!(writer_ok, "the writer's shutdown failed");
            endings.push((size, ending));
        }
    }
    assert_all_delivered(&endings, "a writer whose shutdown returned");
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn a_stream_writer_that_exited_without_shutdown_gives_everything_or_an_error() {
    let (_ep, listener) = listener();
    let mut endings = Vec::new();
    // Writes of 1 MiB: many bytes still to read when the writer's CLOSE has gone.
    for (size, runs) in [((64 << 10) + 1, 1), (1 << 20, 2), (16 << 20, 1)] {
        for _ in 0..runs {
            let (ending, _) = stream_run(&listener, size, 1 << 20, false);
            eprintln!("{size} bytes: {ending:?}");
            endings.push((size, ending));
        }
    }
    let short = short_ends(&endings, |n| n);
    assert!(short.is_empty(), "short clean ends: {short:?}");
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn a_sender_that_awaited_close_and_exited_lost_no_message() {
    let (_ep, listener) = listener();
    let mut endings = Vec::new();
    for _ in 0..3 {
        let (ending, writer_ok) = message_run(&listener, 16, 64 << 10, true);
        eprintln!("16 messages: {ending:?}, writer succeeded: {writer_ok}");
        assert!(writer_ok, "the writer's close failed");
        endings.push((16, ending));
    }
    assert_all_delivered(&endings, "a sender whose close returned");
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn a_sender_that_dropped_its_connection_and_exited_gives_every_message_or_an_error() {
    let (_ep, listener) = listener();
    let mut endings = Vec::new();
    for (count, size, runs) in [(16, 64 << 10, 1), (16, 1 << 20, 2)] {
        for _ in 0..runs {
            let (ending, _) = message_run(&listener, count, size, false);
            eprintln!("{count} messages of {size} bytes: {ending:?}");
            endings.push((count as usize, ending));
        }
    }
    let short = short_ends(&endings, |n| n);
    assert!(short.is_empty(), "short clean ends: {short:?}");
}

/// Endpoints whose closes give up after a second.
fn lingering_a_second() -> transport::EndpointConfig {
    config().with_linger(std::time::Duration::from_secs(1))
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn a_close_the_peer_cannot_complete_fails_with_a_timeout_within_the_linger() {
    let (server, client) = pair_with(lingering_a_second(), lingering_a_second());
    // The server reads nothing: the client's messages beyond its window never go.
    let mut sent = 0;
    while client.try_send(&[7u8; 1024]).is_ok() {
        sent += 1;
        assert!(sent < 10_000, "the sends never met backpressure");
    }
    let started = std::time::Instant::now();
    let r = futures::executor::block_on(client.close_async());
    assert!(
        matches!(r, Err(Error::TimedOut { op: "close", .. })),
        "{r:?}"
    );
    assert!(
        started.elapsed() < TIMEOUT,
        "the close waited past its bound"
    );
    // Once the server reads, everything arrives and then the end.
    for k in 0..sent {
        let m = server
            .recv(TIMEOUT)
            .unwrap_or_else(|e| panic!("message {k}: {e}"));
        assert!(m.bytes().iter().all(|&b| b == 7));
    }
    assert!(matches!(
        server.recv(TIMEOUT),
        Err(Error::Closed { cause: None })
    ));
    client.close(TIMEOUT).unwrap();
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn a_stream_shutdown_the_peer_cannot_complete_fails_with_a_timeout_within_the_linger() {
    let (server, client) = pair_with(lingering_a_second(), lingering_a_second());
    let (mut server, mut client) = (Stream::from_conn(server), Stream::from_conn(client));
    // The server reads nothing: fill what the connection holds.
    client
        .set_write_timeout(Some(std::time::Duration::from_millis(200)))
        .unwrap();
    let mut written = Vec::new();
    loop {
        let chunk = pattern(written.len() as u64, 4096);
        match std::io::Write::write(&mut client, &chunk) {
            Ok(n) => written.extend_from_slice(&chunk[..n]),
            Err(e) => {
                assert_eq!(e.kind(), ErrorKind::TimedOut, "{e}");
                break;
            }
        }
        assert!(
            written.len() < 64 << 20,
            "the writes never met backpressure"
        );
    }
    client.set_write_timeout(None).unwrap();
    let started = std::time::Instant::now();
    let e = client
        .shutdown_blocking()
        .expect_err("the peer reads nothing");
    assert_eq!(e.kind(), ErrorKind::TimedOut, "{e}");
    assert!(
        started.elapsed() < TIMEOUT,
        "the shutdown waited past its bound"
    );
    // Once the server reads, the shutdown completes and the server gets every byte.
    let reader = std::thread::spawn(move || {
        server.set_read_timeout(Some(TIMEOUT)).unwrap();
        let mut all = Vec::new();
        server.read_to_end(&mut all).map(|_| all)
    });
    client.shutdown_blocking().unwrap();
    let all = reader.join().unwrap().unwrap();
    assert!(
        all == written,
        "{} bytes read of {}",
        all.len(),
        written.len()
    );
}
