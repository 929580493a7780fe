//! Progress driven from a reactor ([`Polling::Reactor`]): tokio's (`spawn_tokio_driver`, on a
//! current-thread runtime) and one of our own (a thread waiting on `progress_fd`), with the
//! completions counted to show the reactor took part; the fallback when no reactor runs; busy
//! reads; the driver tasks of endpoints made in turn; and the driver's bad input. How the
//! completions split between the reactor and the waiting tasks depends on the host's speed:
//! printed, not asserted; a driver that hears its channel leaves the progress thread's
//! fallback poll next to nothing, which is.
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures::executor::block_on;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use transport::stream::StreamListener;
use transport::{ConfigError, Endpoint, EndpointConfig, Error, Polling, ProgressCounts};

use crate::stream::connect_pair;
use crate::support::*;

fn reactor_config() -> EndpointConfig {
    config().with_polling(Polling::Reactor {
        spin: Duration::ZERO,
    })
}

/// The reactor handled completions (how many, against the progress thread's per-tick
/// fallback poll, is the host's speed's to decide).
fn assert_reactor_carried(side: &str, c: ProgressCounts) {
    eprintln!("{side}: {c:?}");
    assert!(c.reactor > 0, "{side}: the reactor never ran: {c:?}");
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn tokio_driver_carries_a_stream_echo_on_a_current_thread_runtime() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let server = Endpoint::with_config(peer_ip(), reactor_config()).unwrap();
        let client = Endpoint::with_config(local_ip(), reactor_config()).unwrap();
        let drivers = [
            server.spawn_tokio_driver().unwrap(),
            client.spawn_tokio_driver().unwrap(),
        ];
        let listener = StreamListener::bind_on(&server, 0).unwrap();
        let (mut c, mut s) = connect_pair(&listener, &client).await;
        let echo = tokio::spawn(async move {
            let mut buf = vec![0u8; 1 << 16];
            loop {
                let n = s.read(&mut buf).await.unwrap();
                if n == 0 {
                    return;
                }
                s.write_all(&buf[..n]).await.unwrap();
            }
        });
        for i in 0..300u64 {
            let len = [1, 64, 1000, 4096, 20_000, 65_536][i as usize % 6];
            let data = pattern(i, len);
            c.write_all(&data).await.unwrap();
            let mut back = vec![0u8; len];
            tokio::time::timeout(TIMEOUT, c.read_exact(&mut back))
                .await
                .expect("echo within the bound")
                .unwrap();
            assert!(back == data, "echo {i} of {len} bytes differs");
        }
        c.shutdown().await.unwrap();
        tokio::time::timeout(TIMEOUT, echo).await.unwrap().unwrap();
        assert_reactor_carried("server", server.progress_counts());
        assert_reactor_carried("client", client.progress_counts());
        drop((c, listener, server, client));
        // The drivers end with their endpoints.
        for d in drivers {
            tokio::time::timeout(Duration::from_secs(10), d)
                .await
                .expect("the driver ends when its endpoint goes")
                .unwrap();
        }
    });
}

/// A reactor of one's own: a thread that waits for `progress_fd` to be readable and calls
/// `progress_ready`, serving blocking calls and futures on a minimal executor alike.
#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn a_reactor_of_ones_own_serves_blocking_calls_and_futures() {
    let (listener, client) = endpoints(reactor_config(), reactor_config());
    let server = listener.endpoint().clone();
    let stop = Arc::new(AtomicBool::new(false));
    let reactors: Vec<_> = [server.clone(), client.clone()]
        .into_iter()
        .map(|ep| {
            let stop = stop.clone();
            std::thread::spawn(move || {
                ep.progress_ready();
                while !stop.load(Ordering::Relaxed) {
                    let fd = ep.progress_fd();
                    if verbs_sys::fd::wait_readable(fd, Some(Duration::from_millis(50))).unwrap() {
                        ep.progress_ready();
                    }
                }
            })
        })
        .collect();
    let addr = addr_of(&listener);
    let accepting = std::thread::spawn(move || listener.accept_timeout(TIMEOUT).unwrap());
    let conn = client.connect(addr).unwrap();
    let peer = accepting.join().unwrap();
    let serving = std::thread::spawn(move || {
        for i in 0..100u64 {
            let m = peer.recv(TIMEOUT).unwrap();
            assert!(m.to_vec() == pattern(i, 500), "message {i}");
        }
        peer.serve(|req| req.to_vec()).unwrap();
    });
    for i in 0..100u64 {
        conn.send(&pattern(i, 500)).unwrap();
    }
    for i in 0..100u64 {
        let req = pattern(1000 + i, 64 + i as usize);
        let resp = if i % 2 == 0 {
            conn.call(&req, TIMEOUT).unwrap()
        } else {
            block_on(conn.call_async(&req, TIMEOUT)).unwrap()
        };
        assert!(resp.to_vec() == req, "call {i}");
    }
    conn.close(TIMEOUT).unwrap();
    serving.join().unwrap();
    assert_reactor_carried("server", server.progress_counts());
    assert_reactor_carried("client", client.progress_counts());
    stop.store(true, Ordering::Relaxed);
    for r in reactors {
        r.join().unwrap();
    }
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn the_tokio_driver_refuses_an_endpoint_its_progress_thread_polls_and_a_missing_runtime() {
    let adaptive = Endpoint::with_config(local_ip(), config()).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let e = rt
        .block_on(async { adaptive.spawn_tokio_driver() })
        .unwrap_err();
    assert!(
        matches!(&e, Error::Config(ConfigError::NotReactor { .. })),
        "{e}"
    );
    let reactor = Endpoint::with_config(local_ip(), reactor_config()).unwrap();
    let e = reactor.spawn_tokio_driver().unwrap_err();
    assert!(matches!(&e, Error::NoRuntime), "{e}");
}

/// An endpoint made for a reactor that nobody runs still makes progress: its progress
/// thread polls once per tick, and blocked calls poll as they wait.
#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn without_a_reactor_the_progress_thread_still_carries_the_traffic() {
    let (server, client) = pair_with(reactor_config(), reactor_config());
    let serving = std::thread::spawn(move || {
        for i in 0..20u64 {
            let m = server.recv(TIMEOUT).unwrap();
            assert!(m.to_vec() == pattern(i, 3000), "message {i}");
        }
        server.serve(|req| req.to_vec()).unwrap();
        server.endpoint().progress_counts()
    });
    for i in 0..20u64 {
        client.send(&pattern(i, 3000)).unwrap();
    }
    for i in 0..10u64 {
        let req = pattern(100 + i, 200);
        assert!(
            client.call(&req, TIMEOUT).unwrap().to_vec() == req,
            "call {i}"
        );
    }
    let counts = client.endpoint().progress_counts();
    client.close(TIMEOUT).unwrap();
    for (side, c) in [("client", counts), ("server", serving.join().unwrap())] {
        assert_eq!(c.reactor, 0, "{side}: no reactor ran: {c:?}");
        assert!(c.progress_thread + c.callers > 0, "{side}: {c:?}");
    }
}

/// A reactor endpoint that busy-reads for `busy`.
fn busy_reading(busy: Duration) -> EndpointConfig {
    reactor_config().with_busy_read(busy)
}

/// Runs `wait` (a task waiting for `what` on `c`) and prints who polled the completions
/// meanwhile: the busy-reading task takes them unless the progress thread's fallback poll
/// comes first while the task is off its core (on a busy host it may).
fn polled_by_caller<T>(c: &transport::Conn, what: &str, wait: impl FnOnce() -> T) -> T {
    let before = c.endpoint().progress_counts();
    let got = wait();
    let after = c.endpoint().progress_counts();
    eprintln!("while waiting for the {what}: {before:?} -> {after:?}");
    got
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn a_busy_reading_task_gets_a_message_sent_while_it_spins() {
    // No driver runs: without the busy read only the progress thread's per-tick fallback
    // would see the message.
    let (s, c) = pair_with(reactor_config(), busy_reading(Duration::from_secs(5)));
    let data = pattern(7, 64);
    let sent = data.clone();
    let sender = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(50));
        s.send(&sent).unwrap();
        s
    });
    let msg = polled_by_caller(&c, "message", || block_on(c.recv_async()).unwrap().unwrap());
    assert_eq!(msg.bytes(), data);
    drop(msg);
    let _s = sender.join().unwrap();
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn busy_read_gives_up_after_its_time() {
    let busy = Duration::from_millis(100);
    let (_s, c) = pair_with(reactor_config(), busy_reading(busy));
    let mut cx = std::task::Context::from_waker(futures::task::noop_waker_ref());
    let started = std::time::Instant::now();
    assert!(c.poll_recv(&mut cx).is_pending(), "no message was sent");
    let took = started.elapsed();
    assert!(
        took >= busy && took < busy + Duration::from_secs(2),
        "a busy read of {busy:?} returned after {took:?}"
    );
    // Without a busy read, a poll returns at once.
    let (_s, c) = pair_with(reactor_config(), reactor_config());
    let started = std::time::Instant::now();
    assert!(c.poll_recv(&mut cx).is_pending());
    assert!(started.elapsed() < busy, "{:?}", started.elapsed());
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn a_busy_reading_call_gets_its_response() {
    let (s, c) = pair_with(reactor_config(), busy_reading(Duration::from_secs(5)));
    let server = std::thread::spawn(move || {
        let req = s.recv_request(TIMEOUT).unwrap();
        let mut answer = req.message().to_vec();
        answer.reverse();
        std::thread::sleep(Duration::from_millis(50));
        req.respond(&answer).unwrap();
        s
    });
    let request = pattern(9, 100);
    let response = polled_by_caller(&c, "response", || {
        block_on(c.call_async(&request, TIMEOUT)).unwrap()
    });
    let expected: Vec<u8> = request.iter().rev().copied().collect();
    assert_eq!(response.bytes(), expected);
    drop(response);
    let _s = server.join().unwrap();
}

/// Endpoints made one after another under one multi-threaded tokio runtime, each pair
/// exchanging lone messages with pauses between them (so their threads sleep between): each
/// endpoint's driver task takes its completions, the progress thread's fallback poll at most
/// a few. A progress thread that slept on the completion channel when the driver began used
/// to take the event the driver had armed the queue for without arming it again: the
/// driver then never heard its channel, and every message waited for the fallback poll.
#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn each_endpoint_made_in_turn_is_driven_by_its_task_not_the_fallback_poll() {
    const PAIRS: u64 = 6;
    const MESSAGES: u64 = 20;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        for pair in 0..PAIRS {
            let server = Endpoint::with_config(peer_ip(), config()).unwrap();
            let listener = server.listen(0).unwrap();
            let addr = addr_of(&listener);
            let client = Endpoint::with_config(local_ip(), config()).unwrap();
            let accept = tokio::spawn(async move { listener.accept_async().await.unwrap() });
            let c = client.connect_async(addr).await.unwrap();
            let s = accept.await.unwrap();
            let echo = tokio::spawn(async move {
                while let Ok(Some(m)) = s.recv_async().await {
                    let data = m.to_vec();
                    drop(m);
                    s.send_async(&data).await.unwrap();
                }
            });
            for i in 0..MESSAGES {
                tokio::time::sleep(Duration::from_millis(20)).await;
                let data = pattern(pair * MESSAGES + i, 64);
                c.send_async(&data).await.unwrap();
                let back = tokio::time::timeout(Duration::from_secs(20), c.recv_async())
                    .await
                    .expect("an echo within 20 s")
                    .unwrap()
                    .unwrap();
                assert_eq!(back.to_vec(), data, "pair {pair}, message {i}");
            }
            c.close_async().await.unwrap();
            echo.await.unwrap();
            for (side, ep) in [("server", &server), ("client", &client)] {
                let counts = ep.progress_counts();
                eprintln!("pair {pair} {side}: {counts:?}");
                assert!(
                    counts.progress_thread <= 3,
                    "pair {pair} {side}: the progress thread's fallback poll took what the \
                     driver task should have: {counts:?}"
                );
            }
        }
    });
}
