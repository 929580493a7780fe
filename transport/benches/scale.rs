//! `cargo xtask bench scale`: N connections between two endpoints in one process (the peer's
//! device serves, this host's connects), every connection carrying traffic, for N = 1, 100,
//! 1,000 and 10,000 (`SCALE_CONNECTIONS=1,100` chooses others, `SCALE_CONNECTIONS=` none).
//! Per N, on fresh endpoints:
//!
//! - the connect rate: N connects, 64 in flight at a time (`Endpoint::connect_async`), beside
//!   rdma-core's `cmtime -c N` in the same boot (its steps from resolving the address to the
//!   connection, all N at once); a timing, reported, not a goal;
//! - per connection and per side, idle (all connected, nothing sent yet) and busy (after the
//!   traffic, every connection still open): the bytes the endpoint registered, all of it over
//!   N (receive buffers and the data pool, `EndpointStats::receive_bytes_registered` and the
//!   pool's figures), the heap's growth over N (live bytes of a counting allocator, halved for
//!   the two endpoints; the server's side includes the bench's echo task per connection),
//!   the completion-queue entries over N (`EndpointStats::completion_entries`) and queue
//!   pairs (one);
//! - the traffic: rounds of an echo on every connection at once (a message out on each, then
//!   every echo taken), of 64 B and of 4 KiB: messages per second over the rounds, and every
//!   echo checked (a missing or different one counts as lost);
//! - round trips: a 64 B echo on up to 1,000 of the connections, one at a time: p50 and p99.
//!
//! Instructions per message at each N (the cost bench's method) are not measured here: the
//! rows carry `null` for them.
//!
//! Then the idle endpoint: two endpoints of the default configuration, with 0 and with 64
//! connections between them (`SCALE_IDLE=0,64` chooses others), left alone for
//! [`IDLE_WINDOW`]: the process's wakeups (every thread's context switches, voluntary or
//! not, from `/proc/self/task/*/status`) and its CPU time (`/proc/self/task/*/stat`) per
//! second, per endpoint; the goal is at most [`IDLE_WAKEUPS_GOAL`] wakeups a second.
//!
//! Then churn: [`CHURN_WARM_UP`] and then 10,000 (`SCALE_CHURN=N` chooses another count,
//! `SCALE_CHURN=` none) connect / echo / close cycles on one pair of endpoints,
//! [`CHURN_IN_FLIGHT`] at a time: what the endpoints hold (registered bytes, heap, queue pairs,
//! completion entries, connections) after the warm-up and after the cycles, which should be
//! the same.
//!
//! Writes `SCALE_BENCH_JSON` (`scale.raw.json`): `{"bench", "device", "comparisons", "rows",
//! "idle", "churn"}`, the comparisons our connect rate against cmtime's per N, the rows, the
//! idle and the churn figures as the xtask writes them to `target/bench/scale.json`.
use std::alloc::{GlobalAlloc, Layout, System};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::atomic::{AtomicIsize, Ordering};
use std::time::{Duration, Instant};

use futures::stream::StreamExt;
use transport::{Conn, Endpoint, EndpointConfig, Listener, ProtocolConfig};

#[path = "transport/baseline.rs"]
#[allow(dead_code)]
mod baseline;

/// Live heap bytes of the process.
static LIVE: AtomicIsize = AtomicIsize::new(0);

/// The system allocator, counting live bytes.
struct Counting;

// SAFETY: every call goes to `System` with the caller's arguments unchanged, so the
// GlobalAlloc contract holds as it does for `System`; counting touches only an atomic.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: the caller's layout, as `GlobalAlloc::alloc` requires.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: `ptr` came from `alloc` above with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: as `alloc`.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE.fetch_add(
            new_size as isize - layout.size() as isize,
            Ordering::Relaxed,
        );
        // SAFETY: `ptr` came from this allocator with `layout`; the caller's new size.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Connects in flight at once.
const CONNECTING: usize = 64;
/// Rounds of the echo on every connection, per size.
const ROUNDS: usize = 3;
/// Connections whose round trip is timed, at most.
const TIMED: usize = 1000;
/// Bound of every wait.
const TIMEOUT: Duration = Duration::from_secs(120);
/// The run gives up after this.
const WATCHDOG: Duration = Duration::from_secs(3600);
/// How long an idle endpoint is watched.
const IDLE_WINDOW: Duration = Duration::from_secs(5);
/// Wakeups per second an idle endpoint may cost.
const IDLE_WAKEUPS_GOAL: f64 = 10.0;
/// Churn cycles before the first look (caches, pools and tables at their working size).
const CHURN_WARM_UP: usize = 200;
/// Churn cycles in progress at once.
const CHURN_IN_FLIGHT: usize = 16;
/// The churn endpoints' room for connections: those in progress and those closed whose
/// queue pairs are still draining.
const CHURN_ROOM: usize = 256;

type Res<T> = Result<T, String>;

/// The endpoints' configuration: a window of 8 frames (a connection's receives, 8 x 4 KiB,
/// are what it registers), keepalives rare enough that idle connections are no load of their
/// own, and room for `n` connections.
fn config(n: usize) -> EndpointConfig {
    EndpointConfig::default()
        .with_max_connections(n as u32)
        .with_pool_bytes(64 << 20)
        .with_connect_timeout(Duration::from_secs(120))
        .with_proto(
            ProtocolConfig::default()
                .with_window(8)
                .with_sq_depth(16)
                .with_keepalive_interval(Duration::from_secs(30))
                .with_keepalive_timeout(Duration::from_secs(300)),
        )
}

/// What one side holds: registered bytes, heap bytes, completion entries.
#[derive(Clone, Copy)]
struct Held {
    registered: f64,
    heap: f64,
    cqes: f64,
}

fn held(eps: [&Endpoint; 2]) -> Held {
    let mut h = Held {
        registered: 0.0,
        heap: LIVE.load(Ordering::Relaxed) as f64 / 2.0,
        cqes: 0.0,
    };
    for ep in eps {
        let s = ep.stats();
        h.registered += (s.receive_bytes_registered + ep.pool().stats().bytes_registered) as f64;
        h.cqes += s.completion_entries as f64;
    }
    h.registered /= 2.0;
    h.cqes /= 2.0;
    h
}

/// One N's figures.
struct Figures {
    n: usize,
    connects_per_s: f64,
    idle: Held,
    busy: Held,
    base: Held,
    messages: u64,
    lost: u64,
    rate_64: f64,
    rate_4k: f64,
    p50_us: f64,
    p99_us: f64,
    queues: usize,
}

fn main() -> ExitCode {
    if !std::env::args().any(|a| a == "--bench") {
        println!("scale bench: run with `cargo xtask bench scale` (needs two RDMA devices)");
        return ExitCode::SUCCESS;
    }
    std::thread::spawn(|| {
        std::thread::sleep(WATCHDOG);
        eprintln!("scale bench: still running after {WATCHDOG:?}, giving up");
        std::process::exit(2);
    });
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("scale bench: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> Res<()> {
    let hosts = baseline::Hosts::from_env();
    // Set and empty: no N (the idle endpoint only).
    let ns = counts("SCALE_CONNECTIONS", &[1, 100, 1000, 10_000])?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| format!("runtime: {e}"))?;
    // A first connection, cmtime's and not counted, so that no N pays for resolving the
    // peer's address (our endpoints are made for each N only: see the docs).
    hosts
        .cmtime_connects_per_s(1, 19_999)
        .map_err(|e| format!("warm-up: {e}"))?;
    let mut rows = Vec::new();
    let mut comparisons = Vec::new();
    for (i, &n) in ns.iter().enumerate() {
        println!("scale: {n} connections");
        let f = rt.block_on(one(&hosts, n))?;
        let port = 20_000 + i as u16;
        let baseline = hosts.cmtime_connects_per_s(n, port);
        if let Err(e) = &baseline {
            eprintln!("scale: cmtime -c {n}: {e}");
        }
        let baseline = baseline.ok();
        // Registered memory is shared by the connections: all of it, over N. The heap
        // and the completion entries grow with them: the growth, over N.
        let per = |x: f64, base: f64| (x - base) / f.n as f64;
        let shared = |x: f64| x / f.n as f64;
        println!(
            "scale: {n}: {:.0} connects/s (cmtime {}), {:.0} B registered and {:.0} B heap per \
             connection idle, {} lost of {}, p50 {:.0} us p99 {:.0} us, {} queue pairs",
            f.connects_per_s,
            baseline.map_or("-".into(), |b| format!("{b:.0}")),
            shared(f.idle.registered),
            per(f.idle.heap, f.base.heap),
            f.lost,
            f.messages,
            f.p50_us,
            f.p99_us,
            f.queues,
        );
        rows.push(serde_json::json!({
            "device": hosts.device(),
            "connections": n,
            "messages": f.messages,
            "messages_lost": f.lost,
            "registered_bytes_per_conn": shared(f.idle.registered),
            "registered_bytes_per_conn_busy": shared(f.busy.registered),
            "heap_bytes_per_conn": per(f.idle.heap, f.base.heap),
            "heap_bytes_per_conn_busy": per(f.busy.heap, f.base.heap),
            "qps_per_conn": 1,
            "cqes_per_conn": shared(f.idle.cqes),
            "queue_pairs": f.queues,
            "instructions_per_message": null,
            "connects_per_s": f.connects_per_s,
            "baseline_connects_per_s": baseline,
            "messages_per_s_64": f.rate_64,
            "messages_per_s_4096": f.rate_4k,
            "p50_us": f.p50_us,
            "p99_us": f.p99_us,
        }));
        comparisons.push(serde_json::json!({
            "case": format!("connect {n} connections"),
            "metric": "connects per second",
            "unit": "1/s",
            "ours": f.connects_per_s,
            "baseline": baseline,
            "baseline_name": format!("cmtime -c {n}"),
            "better": "higher",
            "goal": null,
        }));
    }
    let idle_ns = counts("SCALE_IDLE", &[0, 64])?;
    let mut idle_rows = Vec::new();
    for n in idle_ns {
        let (wakeups, cpu_ms) = rt.block_on(idle(&hosts, n))?;
        println!(
            "scale: idle endpoint, {n} connections: {wakeups:.1} wakeups/s and {cpu_ms:.2} ms \
             CPU/s per endpoint"
        );
        idle_rows.push(serde_json::json!({
            "device": hosts.device(),
            "connections": n,
            "wakeups_per_s_per_endpoint": wakeups,
            "cpu_ms_per_s_per_endpoint": cpu_ms,
            "goal_wakeups_per_s": IDLE_WAKEUPS_GOAL,
        }));
    }
    let mut churn_rows = Vec::new();
    for cycles in counts("SCALE_CHURN", &[10_000])? {
        let row = rt.block_on(churn(&hosts, cycles))?;
        println!("scale: churn, {cycles} cycles: {row}");
        churn_rows.push(row);
    }
    let json = serde_json::json!({
        "bench": "scale",
        "device": hosts.device(),
        "comparisons": comparisons,
        "rows": rows,
        "idle": idle_rows,
        "churn": churn_rows,
    });
    let path = testkit::bench_json_path("SCALE_BENCH_JSON", "scale.raw.json");
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    }
    std::fs::write(&path, format!("{json:#}\n")).map_err(|e| format!("{}: {e}", path.display()))?;
    println!("JSON: {}", path.display());
    Ok(())
}

/// The connection counts of environment variable `var` (`1,100`; set and empty: none), or
/// `default` when it is not set.
fn counts(var: &str, default: &[usize]) -> Res<Vec<usize>> {
    match std::env::var(var) {
        Ok(v) => v
            .split(',')
            .filter(|s| !s.trim().is_empty())
            .map(|s| s.trim().parse().map_err(|e| format!("{var} {s:?}: {e}")))
            .collect(),
        Err(_) => Ok(default.to_vec()),
    }
}

/// A fresh pair of endpoints of configuration `cfg`: the server's on the peer's device,
/// listening at the address returned, and the client's on this host's.
fn endpoints(
    hosts: &baseline::Hosts,
    cfg: EndpointConfig,
) -> Res<(Endpoint, Endpoint, Listener, SocketAddr)> {
    let (sip, cip) = hosts.ips();
    let e = |what: &'static str| move |e: transport::Error| format!("{what}: {e}");
    let server = Endpoint::with_config(sip, cfg.clone()).map_err(e("server endpoint"))?;
    let client = Endpoint::with_config(cip, cfg).map_err(e("client endpoint"))?;
    let listener = server.listen(0).map_err(e("listen"))?;
    let addr = SocketAddr::new(sip, listener.local_addr().map_err(e("address"))?.port());
    Ok((server, client, listener, addr))
}

/// N connections on fresh endpoints: connected, measured idle, carrying the echo rounds and
/// the timed round trips, measured busy, closed.
async fn one(hosts: &baseline::Hosts, n: usize) -> Res<Figures> {
    let e = |what: &'static str| move |e: transport::Error| format!("{what}: {e}");
    let (server, client, listener, addr) = endpoints(hosts, config(n))?;
    let base = held([&server, &client]);
    // Every accepted connection echoes in a task of its own until its peer closes.
    let accepting = tokio::spawn(async move {
        let mut echoes = Vec::with_capacity(n);
        for _ in 0..n {
            let c = listener.accept_async().await?;
            echoes.push(tokio::spawn(echo(c)));
        }
        Ok::<_, transport::Error>((listener, echoes))
    });
    let started = Instant::now();
    let conns: Vec<Conn> = futures::stream::iter(0..n)
        .map(|_| client.connect_async(addr))
        .buffered(CONNECTING)
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect::<Result<_, _>>()
        .map_err(e("connect"))?;
    let connects_per_s = n as f64 / started.elapsed().as_secs_f64();
    let (listener, echoes) = accepting
        .await
        .map_err(|e| format!("accept task: {e}"))?
        .map_err(e("accept"))?;
    let idle = held([&server, &client]);
    let queues = server.stats().queues;

    let mut messages = 0u64;
    let mut lost = 0u64;
    let mut rates = [0.0; 2];
    for (k, size) in [64usize, 4096].into_iter().enumerate() {
        let started = Instant::now();
        for round in 0..ROUNDS {
            let data = |i: usize| pattern((round * n + i) as u64, size);
            for (i, c) in conns.iter().enumerate() {
                c.send_async(&data(i)).await.map_err(e("send"))?;
            }
            for (i, c) in conns.iter().enumerate() {
                messages += 2;
                match tokio::time::timeout(TIMEOUT, c.recv_async()).await {
                    Ok(Ok(Some(m))) if m.to_vec() == data(i) => {}
                    _ => lost += 1,
                }
            }
        }
        rates[k] = (2 * ROUNDS * n) as f64 / started.elapsed().as_secs_f64();
    }
    let step = n.div_ceil(TIMED);
    let mut rtts = Vec::with_capacity(TIMED);
    for c in conns.iter().step_by(step) {
        let t = Instant::now();
        c.send_async(b"ping-pong, sixty-four bytes of it, timed as one round trip....!!")
            .await
            .map_err(e("send"))?;
        match c.recv_async().await {
            Ok(Some(_)) => rtts.push(t.elapsed().as_secs_f64() * 1e6),
            _ => lost += 1,
        }
        messages += 2;
    }
    rtts.sort_by(f64::total_cmp);
    let pct = |p: f64| rtts[((rtts.len() - 1) as f64 * p).round() as usize];
    let busy = held([&server, &client]);
    for c in conns {
        c.close_async().await.map_err(e("close"))?;
    }
    for t in echoes {
        let _ = t.await;
    }
    drop(listener);
    Ok(Figures {
        n,
        connects_per_s,
        idle,
        busy,
        base,
        messages,
        lost,
        rate_64: rates[0],
        rate_4k: rates[1],
        p50_us: pct(0.5),
        p99_us: pct(0.99),
        queues,
    })
}

/// Two endpoints of the default configuration with `n` connections between them, idle for
/// [`IDLE_WINDOW`] after a second to settle: the process's wakeups and CPU milliseconds per
/// second, per endpoint.
async fn idle(hosts: &baseline::Hosts, n: usize) -> Res<(f64, f64)> {
    let e = |what: &'static str| move |e: transport::Error| format!("{what}: {e}");
    let (_server, client, listener, addr) = endpoints(hosts, EndpointConfig::default())?;
    let accepting = tokio::spawn(async move {
        let mut accepted = Vec::with_capacity(n);
        for _ in 0..n {
            accepted.push(listener.accept_async().await?);
        }
        Ok::<_, transport::Error>(accepted)
    });
    let mut conns = Vec::with_capacity(n);
    for _ in 0..n {
        conns.push(client.connect_async(addr).await.map_err(e("connect"))?);
    }
    let accepted = accepting
        .await
        .map_err(|e| format!("accept task: {e}"))?
        .map_err(e("accept"))?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let before = process_wakeups_and_cpu()?;
    let started = Instant::now();
    tokio::time::sleep(IDLE_WINDOW).await;
    let after = process_wakeups_and_cpu()?;
    let per_s = 2.0 * started.elapsed().as_secs_f64();
    let by_thread: Vec<String> = after
        .2
        .iter()
        .map(|(name, n)| (name, n - before.2.get(name).copied().unwrap_or(0)))
        .filter(|(_, n)| *n > 0)
        .map(|(name, n)| format!("{name} {:.1}", n as f64 / per_s))
        .collect();
    println!(
        "scale: idle, {n} connections: wakeups/s per endpoint by thread: {}",
        by_thread.join(", ")
    );
    for c in conns.iter().chain(&accepted) {
        c.close_async().await.map_err(e("close"))?;
    }
    Ok((
        (after.0 - before.0) as f64 / per_s,
        (after.1 - before.1) / per_s,
    ))
}

/// `cycles` connect / echo / close cycles on one pair of fresh endpoints, after
/// [`CHURN_WARM_UP`]: what the endpoints hold after the warm-up and after the cycles.
async fn churn(hosts: &baseline::Hosts, cycles: usize) -> Res<serde_json::Value> {
    let e = |what: &'static str| move |e: transport::Error| format!("{what}: {e}");
    let (server, client, listener, addr) = endpoints(hosts, config(CHURN_ROOM))?;
    let total = CHURN_WARM_UP + cycles;
    let serving = tokio::spawn(async move {
        for _ in 0..total {
            let c = listener.accept_async().await?;
            tokio::spawn(echo(c));
        }
        Ok::<_, transport::Error>(listener)
    });
    let cycle = |i: usize| {
        let client = &client;
        async move {
            let c = client.connect_async(addr).await.map_err(e("connect"))?;
            let data = pattern(i as u64, 64);
            c.send_async(&data).await.map_err(e("send"))?;
            match tokio::time::timeout(TIMEOUT, c.recv_async()).await {
                Ok(Ok(Some(m))) if m.to_vec() == data => {}
                _ => return Err(format!("churn cycle {i}: no echo, or a different one")),
            }
            c.close_async().await.map_err(e("close"))
        }
    };
    let run = |range: std::ops::Range<usize>| {
        futures::stream::iter(range)
            .map(cycle)
            .buffer_unordered(CHURN_IN_FLIGHT)
            .collect::<Vec<Res<()>>>()
    };
    let quiet = || async {
        // A closed connection leaves the table once its queue pair drained.
        let end = Instant::now() + TIMEOUT;
        while server.stats().connections + client.stats().connections > 0 {
            if Instant::now() > end {
                return Err("connections left after every close".to_string());
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        // What the engine's threads free a little later (a queue pair's books): the least
        // live heap over half a second.
        let mut least = isize::MAX;
        for _ in 0..50 {
            least = least.min(LIVE.load(Ordering::Relaxed));
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        Ok(least)
    };
    run(0..CHURN_WARM_UP)
        .await
        .into_iter()
        .collect::<Res<()>>()?;
    let heap_before = quiet().await?;
    let before = (held([&server, &client]), server.stats(), client.stats());
    let started = Instant::now();
    run(CHURN_WARM_UP..total)
        .await
        .into_iter()
        .collect::<Res<()>>()?;
    let secs = started.elapsed().as_secs_f64();
    let heap_after = quiet().await?;
    let after = (held([&server, &client]), server.stats(), client.stats());
    drop(serving.await.map_err(|e| format!("accept task: {e}"))?);
    let queues = |s: &transport::EndpointStats| s.queues;
    Ok(serde_json::json!({
        "device": hosts.device(),
        "cycles": cycles,
        "cycles_per_s": cycles as f64 / secs,
        // Before and after the cycles: per endpoint (the mean of the two), the heap the
        // process's.
        "registered_bytes_per_endpoint": [before.0.registered, after.0.registered],
        "heap_bytes_process": [heap_before, heap_after],
        "cqes_per_endpoint": [before.0.cqes, after.0.cqes],
        "queue_pairs": [queues(&before.1) + queues(&before.2), queues(&after.1) + queues(&after.2)],
        "connections_after": after.1.connections + after.2.connections,
    }))
}

/// Context switches of every thread of this process, and their CPU time in milliseconds;
/// the switches also by thread name.
fn process_wakeups_and_cpu() -> Res<(u64, f64, BTreeMap<String, u64>)> {
    let io = |what: String| move |e: std::io::Error| format!("{what}: {e}");
    // The kernel's clock ticks (USER_HZ), 100 on Linux.
    const TICK_MS: f64 = 10.0;
    let mut switches = 0;
    let mut ticks = 0u64;
    let mut by_name = BTreeMap::new();
    for task in std::fs::read_dir("/proc/self/task").map_err(io("/proc/self/task".into()))? {
        let dir = task.map_err(io("/proc/self/task".into()))?.path();
        let Ok(status) = std::fs::read_to_string(dir.join("status")) else {
            continue; // a thread that ended meanwhile
        };
        let name = status
            .lines()
            .find_map(|l| l.strip_prefix("Name:"))
            .map_or("?", str::trim)
            .to_string();
        let n = status
            .lines()
            .filter(|l| l.contains("ctxt_switches:"))
            .filter_map(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
            .sum::<u64>();
        switches += n;
        *by_name.entry(name).or_insert(0) += n;
        let Ok(stat) = std::fs::read_to_string(dir.join("stat")) else {
            continue;
        };
        // After the command's closing parenthesis: utime and stime are fields 14 and 15.
        let fields: Vec<&str> = stat
            .rsplit_once(')')
            .map_or("", |(_, rest)| rest)
            .split_whitespace()
            .collect();
        ticks += fields
            .get(11..13)
            .map_or(0, |f| f.iter().filter_map(|v| v.parse::<u64>().ok()).sum());
    }
    Ok((switches, ticks as f64 * TICK_MS, by_name))
}

/// Echoes every message on `c` until the peer closes.
async fn echo(c: Conn) {
    while let Ok(Some(m)) = c.recv_async().await {
        let data = m.to_vec();
        drop(m);
        if c.send_async(&data).await.is_err() {
            return;
        }
    }
}

/// `len` bytes (at least 8) that differ by `seed`: the seed, then bytes counting from it.
fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut v: Vec<u8> = (0..len).map(|k| (k as u64 + seed) as u8).collect();
    v[..8].copy_from_slice(&seed.to_le_bytes());
    v
}
