//! Every polling mode (busy, event, adaptive) carries messages and calls both ways, and a
//! mix of modes on the two ends works too; a busy endpoint without connections does not spin;
//! adaptive polling stretches its spin to a ping-pong slower than the configured spin, spins
//! through large transfers, and spins the async waits of one task of an endpoint at a time,
//! which polls for all its connections.
use std::collections::HashSet;
use std::time::{Duration, Instant};

use transport::{Endpoint, EndpointConfig, Polling};

use crate::support::*;

fn with(polling: Polling) -> EndpointConfig {
    EndpointConfig {
        polling,
        ..config()
    }
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
    let accept = std::thread::spawn(move || listener.accept(TIMEOUT).unwrap());
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

/// Calls whose round trip is several times the configured spin: the caller's first waits
/// outlast the spin and sleep (the progress thread then polls the response and wakes it), then
/// the connection's spin budget covers the round trip and the caller polls the responses
/// itself. Counted: who polled the client's completions during the calls.
#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn adaptive_polling_stretches_its_spin_to_the_round_trip() {
    let (server, client) = adaptive_pair();
    // A handler that takes 150 us: three times the spin.
    let serving = slow_server(server, Duration::from_micros(150));
    let (callers, thread) = polled_during(&client, || {
        for i in 0..300u64 {
            let req = pattern(i, 48);
            assert!(
                client.call(&req, TIMEOUT).unwrap().to_vec() == req,
                "call {i}"
            );
        }
    });
    eprintln!("completions polled by the caller {callers}, by the progress thread {thread}");
    assert!(
        callers >= 3 * (callers + thread) / 4,
        "the caller polled {callers} of {} completions: its waits kept sleeping",
        callers + thread
    );
    client.close(TIMEOUT).unwrap();
    serving.join().unwrap();
}

/// An echo of 64 KiB messages (rendezvous: the peer READs each, a chunk of about a
/// millisecond on rxe, far past the spin): the waits of both ends spin through the transfers
/// and the answers that follow them, so the application threads poll many of the completions
/// themselves, READs included: half to four fifths in test builds (the progress threads take
/// those that come while the threads copy and compare), against one in twenty when the waits
/// sleep through transfers.
#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn adaptive_waits_spin_through_large_transfers() {
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
    let (callers, thread) = polled_during(&client, || {
        for i in 0..ROUNDS {
            let msg = &msgs[i % 2];
            client.send_timeout(msg, TIMEOUT).unwrap();
            assert!(*client.recv(TIMEOUT).unwrap().bytes() == **msg, "echo {i}");
        }
    });
    serving.join().unwrap();
    let (server_callers, server_thread) = polled_since(&server_ep, server_before);
    eprintln!(
        "completions polled by the application threads: client {callers}, server {server_callers}; by the progress threads: client {thread}, server {server_thread}"
    );
    let (callers, all) = (
        callers + server_callers,
        callers + server_callers + thread + server_thread,
    );
    assert!(
        callers >= all / 4,
        "the application threads polled {callers} of {all} completions: their waits slept through transfers",
    );
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

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn adaptive_async_waits_of_a_lone_connection_poll_their_own_completions() {
    let (server, client) = adaptive_pair();
    // A round trip past the spin (the handler alone takes 60 us): the task's spin stretches
    // to it.
    let serving = slow_server(server, Duration::from_micros(60));
    let (callers, thread) = async_calls(&client, 300);
    eprintln!("completions polled by the task {callers}, by the progress thread {thread}");
    // Most, not all: in a slow phase of the host some round trips outlast even the stretched
    // spin (2 of 3 polled by the task in one such run). A task that does not spin polls at
    // most a quarter (the test below).
    assert!(
        callers >= (callers + thread) / 2,
        "the task polled {callers} of {} completions: its waits did not spin",
        callers + thread
    );
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
        let a = listener.accept(TIMEOUT).expect("accept");
        let b = listener.accept(TIMEOUT).expect("accept");
        [slow_server(a, delay), slow_server(b, delay)]
    });
    let clients = [
        client_ep.connect(addr).expect("connect"),
        client_ep.connect(addr).expect("connect"),
    ];
    (clients, accept.join().unwrap())
}

/// A task waiting on one connection of an endpoint with two still spins (the second one is
/// idle): one task of the endpoint at a time spins, whatever the number of connections.
#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn adaptive_async_waits_spin_beside_another_connection() {
    let ([client, idle], serving) = two_served_connections(adaptive(), Duration::from_micros(60));
    let (callers, thread) = async_calls(&client, 300);
    eprintln!("completions polled by the task {callers}, by the progress thread {thread}");
    assert!(
        callers >= 3 * (callers + thread) / 4,
        "the task polled {callers} of {} completions: it did not spin beside the idle connection",
        callers + thread
    );
    client.close(TIMEOUT).unwrap();
    idle.close(TIMEOUT).unwrap();
    for s in serving {
        s.join().unwrap();
    }
}

/// Two tasks of a multi-threaded tokio runtime calling on two connections of one endpoint:
/// one of them spins at a time and polls the completions of both connections, waking the
/// other task on its own worker, so the progress thread polls few of them (without the
/// spinning task it would poll them all, and each answer would cost a thread handoff).
#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn adaptive_async_waits_of_several_connections_are_served_by_one_spinning_task() {
    let (clients, serving) = two_served_connections(adaptive(), Duration::from_micros(60));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .unwrap();
    let (callers, thread) = polled_during(&clients[0], || {
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
    eprintln!("completions polled by the tasks {callers}, by the progress thread {thread}");
    assert!(
        callers >= (callers + thread) / 2,
        "the tasks polled {callers} of {} completions: none of them spun for the endpoint",
        callers + thread
    );
    for c in clients {
        c.close(TIMEOUT).unwrap();
    }
    for s in serving {
        s.join().unwrap();
    }
}
