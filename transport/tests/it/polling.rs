//! Every polling mode (busy, event, adaptive) carries messages and calls both ways, and a
//! mix of modes on the two ends works too; a busy endpoint without connections does not spin.
//! Adaptive polling's waits deliver every answer whatever the round trip: slower than the
//! spin, through large transfers, from async tasks alone, beside other connections, and from
//! several tasks of one endpoint. Who polled which completion depends on the host's speed, so
//! it is printed, never asserted: the spin policy itself is tested on the host with time
//! passed in (`engine::spin`).
use std::collections::HashSet;
use std::time::{Duration, Instant};

use transport::{Endpoint, EndpointConfig, Polling};

use crate::support::*;

fn with(polling: Polling) -> EndpointConfig {
    config().with_polling(polling)
}

/// Adaptive polling with a 50 us spin.
fn adaptive() -> EndpointConfig {
    with(Polling::Adaptive {
        spin: Duration::from_micros(50),
    })
}

/// A connected pair (server side, client side), both ends on [`adaptive`] polling.
fn adaptive_pair() -> (transport::Conn, transport::Conn) {
    pair_with(adaptive(), adaptive())
}

fn exchange(server_mode: Polling, client_mode: Polling) {
    let (server, client) = pair_with(with(server_mode), with(client_mode));
    let serving = std::thread::spawn(move || {
        for i in 0..50u64 {
            let m = server.recv(TIMEOUT).unwrap();
            assert!(m.to_vec() == pattern(i, 300), "message {i}");
        }
        server.serve(|req| req.to_vec()).unwrap();
    });
    for i in 0..50u64 {
        client.send(&pattern(i, 300)).unwrap();
    }
    for i in 0..50u64 {
        let req = pattern(1000 + i, 100 + i as usize);
        assert!(
            client.call(&req, TIMEOUT).unwrap().to_vec() == req,
            "call {i}"
        );
    }
    client.close(TIMEOUT).unwrap();
    serving.join().unwrap();
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn busy_polling_both_ends() {
    exchange(Polling::Busy, Polling::Busy);
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn event_mode_both_ends() {
    exchange(Polling::Event, Polling::Event);
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn adaptive_against_event_mode() {
    exchange(
        Polling::Adaptive {
            spin: Duration::from_micros(20),
        },
        Polling::Event,
    );
}

/// The progress thread's name as /proc shows it (at most 15 bytes).
const PROGRESS: &str = "transport-progr";

/// CPU time (clock ticks, user and system) of each thread of this process named `name`, by
/// thread id.
fn thread_cpu_ticks(name: &str) -> Vec<(u32, u64)> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc/self/task").unwrap() {
        let path = entry.unwrap().path();
        let (Ok(comm), Ok(stat)) = (
            std::fs::read_to_string(path.join("comm")),
            std::fs::read_to_string(path.join("stat")),
        ) else {
            continue; // the thread ended meanwhile
        };
        if comm.trim_end() != name {
            continue;
        }
        // After the command's closing parenthesis: field 3 (state) on; utime is field 14,
        // stime field 15.
        let fields: Vec<&str> = stat[stat.rfind(')').unwrap() + 2..]
            .split_whitespace()
            .collect();
        let ticks = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
        let tid = path.file_name().unwrap().to_str().unwrap().parse().unwrap();
        out.push((tid, ticks));
    }
    out
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn a_busy_endpoint_without_connections_leaves_the_core_alone() {
    let earlier: HashSet<u32> = thread_cpu_ticks(PROGRESS).iter().map(|t| t.0).collect();
    let server = Endpoint::with_config(peer_ip(), with(Polling::Busy)).unwrap();
    let listener = server.listen(0).unwrap();
    let ours = || -> Vec<(u32, u64)> {
        thread_cpu_ticks(PROGRESS)
            .into_iter()
            .filter(|(tid, _)| !earlier.contains(tid))
            .collect()
    };
    // A new thread names itself once it runs: give it a moment to show up under its name.
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    let mut start = ours();
    while start.is_empty() && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
        start = ours();
    }
    assert_eq!(start.len(), 1, "one new progress thread: {start:?}");
    std::thread::sleep(Duration::from_millis(600));
    let end = ours();
    let used = end[0].1 - start[0].1;
    // Spinning, it would have used about 60 ticks (100 a second).
    assert!(
        used <= 15,
        "the idle progress thread used {used} ticks in 600 ms"
    );

    // A connection still gets going at once, and carries traffic.
    let client = Endpoint::with_config(local_ip(), with(Polling::Busy)).unwrap();
    let addr = listener.local_addr().unwrap();
    let accept = std::thread::spawn(move || listener.accept_timeout(TIMEOUT).unwrap());
    let c = client.connect(addr).unwrap();
    let s = accept.join().unwrap();
    for i in 0..20u64 {
        c.send(&pattern(i, 64)).unwrap();
        assert!(
            s.recv(TIMEOUT).unwrap().to_vec() == pattern(i, 64),
            "message {i}"
        );
    }
    c.close(TIMEOUT).unwrap();
}

/// Calls whose round trip is several times the configured spin (the handler alone takes
/// three times it): every call is answered intact within its bound, whether the caller's wait
/// spun through the round trip or slept.
#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn adaptive_calls_slower_than_the_spin_are_all_answered() {
    let (server, client) = adaptive_pair();
    let serving = slow_server(server, Duration::from_micros(150));
    report(
        "the caller",
        polled_during(&client, || {
            for i in 0..300u64 {
                let req = pattern(i, 48);
                assert!(
                    client.call(&req, TIMEOUT).unwrap().to_vec() == req,
                    "call {i}"
                );
            }
        }),
    );
    client.close(TIMEOUT).unwrap();
    serving.join().unwrap();
}

/// An echo of 64 KiB messages (rendezvous: the peer READs each, a chunk of about a
/// millisecond on rxe, far past the spin): every echo comes back intact, and both ends close.
#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn adaptive_waits_through_large_transfers_deliver_every_echo() {
    let (server, client) = adaptive_pair();
    const ROUNDS: usize = 40;
    let msgs = [pattern(1, 64 << 10), pattern(2, 64 << 10)];
    let server_ep = server.endpoint().clone();
    let server_before = server_ep.progress_counts();
    let serving = std::thread::spawn(move || {
        for _ in 0..ROUNDS {
            let m = server.recv(TIMEOUT).unwrap();
            server.send_timeout(&m.bytes(), TIMEOUT).unwrap();
        }
        server.close(TIMEOUT).unwrap();
    });
    report(
        "the client's thread",
        polled_during(&client, || {
            for i in 0..ROUNDS {
                let msg = &msgs[i % 2];
                client.send_timeout(msg, TIMEOUT).unwrap();
                assert!(*client.recv(TIMEOUT).unwrap().bytes() == **msg, "echo {i}");
            }
        }),
    );
    serving.join().unwrap();
    report(
        "the server's thread",
        polled_since(&server_ep, server_before),
    );
}

/// Prints who polled the completions counted in `(callers, progress thread)`: a figure to
/// read, which the host's speed decides.
fn report(callers: &str, (by_callers, by_thread): (u64, u64)) {
    eprintln!("completions polled by {callers}: {by_callers}, by the progress thread: {by_thread}");
}

/// A server whose handler takes `delay` (spinning), answering calls until its peer closes.
fn slow_server(server: transport::Conn, delay: Duration) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        server
            .serve(move |req| {
                let t = Instant::now();
                while t.elapsed() < delay {
                    std::hint::spin_loop();
                }
                req.to_vec()
            })
            .unwrap();
    })
}

/// Runs `f`; returns the completions of `client`'s endpoint polled meanwhile by callers and
/// by the progress thread.
fn polled_during(client: &transport::Conn, f: impl FnOnce()) -> (u64, u64) {
    let ep = client.endpoint();
    let before = ep.progress_counts();
    f();
    polled_since(&ep, before)
}

/// The completions of `ep` polled by callers and by the progress thread since `before`.
fn polled_since(ep: &Endpoint, before: transport::ProgressCounts) -> (u64, u64) {
    let after = ep.progress_counts();
    (
        after.callers - before.callers,
        after.progress_thread - before.progress_thread,
    )
}

/// `n` async calls of `client` on a plain executor (no runtime: a parked thread); returns
/// who polled its endpoint's completions meanwhile (see [`polled_during`]).
fn async_calls(client: &transport::Conn, n: u64) -> (u64, u64) {
    polled_during(client, || {
        futures::executor::block_on(async {
            for i in 0..n {
                let req = pattern(i, 48);
                let back = client.call_async(&req, TIMEOUT).await.unwrap();
                assert!(back.to_vec() == req, "call {i}");
            }
        })
    })
}

/// Async calls on a plain executor against a handler slower than the spin: every call is
/// answered intact.
#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn adaptive_async_calls_of_a_lone_connection_are_all_answered() {
    let (server, client) = adaptive_pair();
    let serving = slow_server(server, Duration::from_micros(60));
    report("the task", async_calls(&client, 300));
    client.close(TIMEOUT).unwrap();
    serving.join().unwrap();
}

/// Two connections from `cfg` endpoints, each served by a handler that takes `delay`:
/// the client's two connections, and the threads serving the server's.
fn two_served_connections(
    cfg: EndpointConfig,
    delay: Duration,
) -> ([transport::Conn; 2], [std::thread::JoinHandle<()>; 2]) {
    let (listener, client_ep) = endpoints(cfg.clone(), cfg);
    let addr = listener.local_addr().unwrap();
    let accept = std::thread::spawn(move || {
        let a = listener.accept_timeout(TIMEOUT).expect("accept");
        let b = listener.accept_timeout(TIMEOUT).expect("accept");
        [slow_server(a, delay), slow_server(b, delay)]
    });
    let clients = [
        client_ep.connect(addr).expect("connect"),
        client_ep.connect(addr).expect("connect"),
    ];
    (clients, accept.join().unwrap())
}

/// Async calls on one connection of an endpoint with two (the second idle): every call is
/// answered intact, and both connections close.
#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn adaptive_async_calls_beside_an_idle_connection_are_all_answered() {
    let ([client, idle], serving) = two_served_connections(adaptive(), Duration::from_micros(60));
    report("the task", async_calls(&client, 300));
    client.close(TIMEOUT).unwrap();
    idle.close(TIMEOUT).unwrap();
    for s in serving {
        s.join().unwrap();
    }
}

/// Two tasks of a multi-threaded tokio runtime calling on two connections of one endpoint
/// (one task of an endpoint spins at a time and polls for both connections, waking the other
/// task): every call of both tasks is answered intact.
#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn adaptive_async_calls_of_two_tasks_on_one_endpoint_are_all_answered() {
    let (clients, serving) = two_served_connections(adaptive(), Duration::from_micros(60));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .unwrap();
    let polled = polled_during(&clients[0], || {
        rt.block_on(async {
            let tasks: Vec<_> = clients
                .iter()
                .cloned()
                .enumerate()
                .map(|(c, client)| {
                    tokio::spawn(async move {
                        for i in 0..300u64 {
                            let req = pattern(i + 1000 * c as u64, 48);
                            let back = client.call_async(&req, TIMEOUT).await.unwrap();
                            assert!(back.to_vec() == req, "connection {c}, call {i}");
                        }
                    })
                })
                .collect();
            for t in tasks {
                t.await.unwrap();
            }
        })
    });
    report("the tasks", polled);
    for c in clients {
        c.close(TIMEOUT).unwrap();
    }
    for s in serving {
        s.join().unwrap();
    }
}
