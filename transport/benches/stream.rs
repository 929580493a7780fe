//! Device benchmark of the byte stream (`transport::stream`, tokio) against rdma-core's
//! `rstream` (rsocket) measured in the same run: throughput of 64 B, 4 KiB, 64 KiB and 1 MiB
//! writes, and the 64 B echo round trip (median and p99); plus the same echo over tokio's
//! `TcpStream` between the same two addresses (a ratio to report, no goal), against our best
//! mode and against our default configuration on the same multi-threaded runtime (what a
//! `#[tokio::main]` program gets without tuning).
//!
//! Run on two devices (`cargo xtask bench stream`, or by hand in the two-hosts guest:
//! `cargo bench -p rdma-transport --bench stream --no-run`, then `EXE --bench` with
//! `ulimit -l unlimited`). The server is on the peer's device and address
//! (`RDMA_TEST_PEER_*`), the client on this host's (`RDMA_TEST_*`): ours as two endpoints of
//! the default configuration in this process on one multi-threaded tokio runtime, run with
//! adaptive polling (the default), busy, and from tokio's reactor (`spawn_tokio_driver`), and
//! in three rounds with each side on a current-thread runtime in a thread of its own (the
//! shape of rstream's two processes; the medians of the rounds count), each row taking the
//! best (its `polling` field says which); rstream (three rounds, each after one of ours with
//! a runtime per side, the medians counting) as bounded child
//! processes once ours are gone. Prints a table and writes JSON to
//! `STREAM_BENCH_JSON`, else `<target dir>/bench/stream.raw.json`. Exits non-zero if a
//! measurement of ours failed; a failed baseline gets a null baseline and ratio.
//!
//! Units: MB/s are 10^6 bytes per second; round trips in microseconds. rstream reports a mean
//! time per transfer and no percentiles: its round trip is 2 x that mean, the baseline of
//! our median and of our p99 (a tail above a mean says little). So that a tail compares with a
//! tail, each round also times every round trip of rstream's latency test from an rsocket
//! client of ours against an `rstream` server (`stream/rsocket.rs`): two more rows, our median
//! and p99 against rsocket's.
//!
//! The rows are reports without goals (`goal: null`): timing under emulation varies more than
//! the differences it would decide; decisions about speed go through `cargo xtask bench cost`.
//!
//! Concurrency (`stream/concurrency.rs`): the echo on 8 connections at once (one message in
//! flight each, default endpoints, one multi-threaded runtime) against the same on 1
//! connection and against rstream's latency test with 8 transfers in flight (`-C 8`), each
//! the median of 3 rounds in the same run; and the p99 of the 8 connections' round trips
//! against their median. These rows carry goals (8 connections at least as many messages per
//! second as 1 and as rstream; a p99 within 10 times the median): the gaps they guard against
//! were many times the control's spread. On the emulated two hosts the first stays near 0.95,
//! where rxe's work in the kernel bounds both counts (`docs/benchmarks.md`, "Eight
//! connections against one").
//!
//! Two control rows measure the noise floor of the ratios in the same run: in every round
//! rstream's 4 KiB throughput and 64 B latency tests each run a second time right after the
//! first, and the second runs are compared with the first (no goal).

#[path = "transport/baseline.rs"]
#[allow(dead_code)]
mod baseline;
#[path = "stream/concurrency.rs"]
mod concurrency;
#[path = "stream/ours.rs"]
mod ours;
#[path = "transport/report.rs"]
mod report;
#[path = "stream/rsocket.rs"]
mod rsocket;

use std::net::{IpAddr, SocketAddr};
use std::process::ExitCode;
use std::time::Duration;

use tokio::net::{TcpListener, TcpSocket};
use transport::stream::{Stream, StreamListener};
use transport::{Endpoint, EndpointConfig, Polling};

use baseline::Hosts;
use ours::Res;
use report::{baseline, human, median, median_of, Row};

const SIZES: [usize; 4] = [64, 4 << 10, 64 << 10, 1 << 20];
const ECHO_SIZE: usize = 64;
const ECHO_WARM: u64 = 100;
const ECHO_N: u64 = 1000;
/// Longer than an endpoint's linger after its last handle, so its threads are gone.
const SETTLE: Duration = Duration::from_millis(2500);

/// Writes of a throughput run: about 8 MiB, at least 16, at most 4000 (as the transport
/// bench runs rstream).
fn count(size: usize) -> u64 {
    ((8usize << 20) / size).clamp(16, 4000) as u64
}

fn io(what: &'static str) -> impl Fn(std::io::Error) -> String {
    move |e| format!("{what}: {e}")
}

/// Our measurements: (MB/s per size, echo median and p99 in us).
struct Ours {
    throughput: Vec<f64>,
    echo: (f64, f64),
}

/// A connected pair of our streams: (server side, client side).
async fn stream_pair(listener: &StreamListener, client: &Endpoint) -> Res<(Stream, Stream)> {
    let addr = listener.local_addr().map_err(io("listener address"))?;
    let (c, s) = tokio::join!(Stream::connect_on(client, addr), listener.accept());
    Ok((s.map_err(io("accept"))?.0, c.map_err(io("connect"))?))
}

async fn ours(sip: IpAddr, cip: IpAddr, polling: Polling) -> Res<Ours> {
    let cfg = EndpointConfig::default().with_polling(polling);
    let server =
        Endpoint::with_config(sip, cfg.clone()).map_err(|e| format!("server endpoint: {e}"))?;
    let client = Endpoint::with_config(cip, cfg).map_err(|e| format!("client endpoint: {e}"))?;
    if matches!(polling, Polling::Reactor { .. }) {
        for ep in [&server, &client] {
            ep.spawn_tokio_driver()
                .map_err(|e| format!("tokio driver: {e}"))?;
        }
    }
    let listener = StreamListener::bind_on(&server, 0).map_err(io("listen"))?;
    let mut throughput = Vec::new();
    for size in SIZES {
        let n = count(size);
        // A warm-up run, then the measured one, each on a fresh connection.
        let mut best = 0.0;
        for (i, n) in [(n / 10).max(4), n].into_iter().enumerate() {
            let (s, mut c) = stream_pair(&listener, &client).await?;
            let sink = tokio::spawn(ours::sink(s, size as u64 * n));
            let mbs = ours::source(&mut c, size, n).await?;
            sink.await.map_err(|e| e.to_string())??;
            if i == 1 {
                best = mbs;
            }
        }
        println!("stream {:>8} writes: {best:>10.2} MB/s", human(size));
        throughput.push(best);
    }
    let (s, mut c) = stream_pair(&listener, &client).await?;
    let echo = tokio::spawn(ours::echo(s));
    let times = ours::round_trips(&mut c, ECHO_SIZE, ECHO_WARM, ECHO_N).await?;
    c.shutdown().await.map_err(io("shutdown"))?;
    echo.await.map_err(|e| e.to_string())??;
    let echo = ours::percentiles(times);
    println!(
        "stream echo {ECHO_SIZE} B: median {:.1} us, p99 {:.1} us",
        echo.0, echo.1
    );
    Ok(Ours { throughput, echo })
}

/// The same echo over tokio's TCP between the two addresses: median and p99 in us.
async fn tcp_echo(sip: IpAddr, cip: IpAddr) -> Res<(f64, f64)> {
    let listener = TcpListener::bind(SocketAddr::new(sip, 0))
        .await
        .map_err(io("tcp bind"))?;
    let addr = listener.local_addr().map_err(io("tcp address"))?;
    let socket = TcpSocket::new_v4().map_err(io("tcp socket"))?;
    socket
        .bind(SocketAddr::new(cip, 0))
        .map_err(io("tcp bind client"))?;
    let (c, s) = tokio::join!(socket.connect(addr), listener.accept());
    let (mut c, (s, _)) = (c.map_err(io("tcp connect"))?, s.map_err(io("tcp accept"))?);
    c.set_nodelay(true).map_err(io("nodelay"))?;
    s.set_nodelay(true).map_err(io("nodelay"))?;
    let echo = tokio::spawn(ours::echo(s));
    let times = ours::round_trips(&mut c, ECHO_SIZE, ECHO_WARM, ECHO_N).await?;
    drop(c);
    echo.await.map_err(|e| e.to_string())??;
    let r = ours::percentiles(times);
    println!(
        "tcp echo {ECHO_SIZE} B: median {:.1} us, p99 {:.1} us",
        r.0, r.1
    );
    Ok(r)
}

/// Rounds of the runs with a runtime per side, and of rstream beside them.
const ROUNDS: usize = 3;
const ROUNDS_NOTE: &str = "median of 3 rounds, each after ours with a runtime per side";

/// The runs with a current-thread runtime per side.
const PER_SIDE: &str = "reactor, spinning, busy read, a current-thread runtime per side";

/// Every case with each side on a current-thread runtime in a thread of its own (the shape of
/// rstream's two single-threaded processes), progress from tokio's reactor, spinning 1 ms,
/// and reads that busy-poll for 1 ms before they wait (`busy_read`).
fn per_side(sip: IpAddr, cip: IpAddr) -> Res<Ours> {
    let cfg = EndpointConfig::default()
        .with_polling(Polling::Reactor {
            spin: Duration::from_millis(1),
        })
        .with_busy_read(Duration::from_millis(1));
    let current = || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(io("runtime"))
    };
    let driver = |e: transport::Error| format!("tokio driver: {e}");
    let server =
        Endpoint::with_config(sip, cfg.clone()).map_err(|e| format!("server endpoint: {e}"))?;
    let listener = StreamListener::bind_on(&server, 0).map_err(io("listen"))?;
    let addr = listener.local_addr().map_err(io("listener address"))?;
    let server_rt = current()?;
    // The server takes the connections in the client's order: per size a warm-up and a
    // measured run, then the echo.
    let serving = std::thread::spawn(move || -> Res<()> {
        server_rt.block_on(async move {
            server.spawn_tokio_driver().map_err(driver)?;
            for size in SIZES {
                let n = count(size);
                for n in [(n / 10).max(4), n] {
                    let (s, _) = listener.accept().await.map_err(io("accept"))?;
                    ours::sink(s, size as u64 * n).await?;
                }
            }
            let (s, _) = listener.accept().await.map_err(io("accept"))?;
            ours::echo(s).await
        })
    });
    let ours = current()?.block_on(async {
        let client =
            Endpoint::with_config(cip, cfg).map_err(|e| format!("client endpoint: {e}"))?;
        client.spawn_tokio_driver().map_err(driver)?;
        let connect = || async {
            Stream::connect_on(&client, addr)
                .await
                .map_err(io("connect"))
        };
        let mut throughput = Vec::new();
        for size in SIZES {
            let n = count(size);
            let mut mbs = 0.0;
            for n in [(n / 10).max(4), n] {
                mbs = ours::source(&mut connect().await?, size, n).await?;
            }
            println!("stream {:>8} writes: {mbs:>10.2} MB/s", human(size));
            throughput.push(mbs);
        }
        let mut c = connect().await?;
        let times = ours::round_trips(&mut c, ECHO_SIZE, ECHO_WARM, ECHO_N).await?;
        c.shutdown().await.map_err(io("shutdown"))?;
        let echo = ours::percentiles(times);
        println!(
            "stream echo {ECHO_SIZE} B: median {:.1} us, p99 {:.1} us",
            echo.0, echo.1
        );
        Res::Ok(Ours { throughput, echo })
    })?;
    serving
        .join()
        .map_err(|_| "the per-side server panicked".to_string())??;
    Ok(ours)
}

fn run(rows: &mut Vec<Row>) -> Res<String> {
    let hosts = Hosts::from_env();
    let device = hosts.device();
    let (sip, cip) = hosts.ips();
    println!(
        "byte stream vs rstream, client {} ({cip}) -> server {} ({sip})",
        hosts.client.name, hosts.server.name
    );
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(io("runtime"))?;
    // Both polling modes (the default adaptive one and busy); each row takes the better.
    let mut modes = Vec::new();
    for (name, polling) in [
        ("adaptive", EndpointConfig::default().polling()),
        ("busy", Polling::Busy),
        (
            "reactor",
            Polling::Reactor {
                spin: Duration::ZERO,
            },
        ),
        (
            "reactor, spinning",
            Polling::Reactor {
                spin: Duration::from_millis(1),
            },
        ),
    ] {
        println!("polling {name}:");
        modes.push((name, rt.block_on(ours(sip, cip, polling))?));
        // None of our endpoints alive before the next run: a lingering progress thread
        // takes CPU.
        std::thread::sleep(SETTLE);
    }
    // The shape closest to rstream's, in ROUNDS rounds, each followed by rstream's runs: the
    // rows' baselines are the medians of those, and this mode's values the medians of its
    // rounds (the host's load swings single runs by 20% and more).
    let mut side_rounds = Vec::new();
    let mut base_bw: Vec<Vec<f64>> = SIZES.iter().map(|_| Vec::new()).collect();
    let mut base_rtt = Vec::new();
    let (mut rsocket_median, mut rsocket_p99) = (Vec::new(), Vec::new());
    let (mut control_bw, mut control_rtt) = (Vec::new(), Vec::new());
    let control_size = 4 << 10;
    let control_at = SIZES
        .iter()
        .position(|&s| s == control_size)
        .expect("4 KiB writes are measured");
    for round in 1..=ROUNDS {
        println!("polling {PER_SIDE}, round {round}:");
        side_rounds.push(per_side(sip, cip)?);
        std::thread::sleep(SETTLE);
        for (i, size) in SIZES.into_iter().enumerate() {
            let got = hosts.rstream_bw(size, count(size) as u32, 7571 + i as u16);
            base_bw[i].extend(baseline("rstream", got));
            if size == control_size {
                let again = hosts.rstream_bw(size, count(size) as u32, 7591);
                control_bw.extend(baseline("rstream", again));
            }
        }
        let got = hosts.rstream_rtt(ECHO_SIZE, ECHO_N as u32, 7581);
        base_rtt.extend(baseline("rstream", got));
        let again = hosts.rstream_rtt(ECHO_SIZE, ECHO_N as u32, 7592);
        control_rtt.extend(baseline("rstream", again));
        let timed = hosts.against_rstream_server(ECHO_SIZE, ECHO_N as u32, 7582, |server| {
            rsocket::round_trips(cip, server, ECHO_SIZE, ECHO_N, ours::TIMEOUT)
        });
        let timed = timed.map(ours::percentiles);
        rsocket_median.extend(baseline("rsocket", timed.clone().map(|t| t.0)));
        rsocket_p99.extend(baseline("rsocket", timed.map(|t| t.1)));
        println!(
            "rstream, round {round}: {:?} MB/s, echo {:?} us; rsocket timed: median {:?}, p99 {:?} us",
            base_bw.iter().map(|b| b.last()).collect::<Vec<_>>(),
            base_rtt.last(),
            rsocket_median.last(),
            rsocket_p99.last()
        );
    }
    let side = Ours {
        throughput: (0..SIZES.len())
            .map(|i| median(side_rounds.iter().map(|o| o.throughput[i]).collect()))
            .collect(),
        echo: (
            median(side_rounds.iter().map(|o| o.echo.0).collect()),
            median(side_rounds.iter().map(|o| o.echo.1).collect()),
        ),
    };
    modes.push((PER_SIDE, side));
    let pick = |v: &dyn Fn(&Ours) -> f64, higher: bool| -> (f64, &'static str) {
        let mut best = modes
            .iter()
            .map(|(name, o)| (v(o), *name))
            .collect::<Vec<_>>();
        best.sort_by(|a, b| a.0.total_cmp(&b.0));
        if higher {
            best[best.len() - 1]
        } else {
            best[0]
        }
    };
    let tcp = rt.block_on(tcp_echo(sip, cip))?;
    let controls = [
        Row::control(
            &format!("rstream -S {control_size} throughput"),
            "throughput",
            "MB/s",
            true,
            control_bw,
            base_bw[control_at].clone(),
            format!(
                "rstream -S {control_size} -C {}, its run just before, {ROUNDS_NOTE}",
                count(control_size)
            ),
        ),
        Row::control(
            &format!("rstream -S {ECHO_SIZE} round trip"),
            "round trip median",
            "us",
            false,
            control_rtt,
            base_rtt.clone(),
            format!(
                "rstream -S {ECHO_SIZE} -I {ECHO_N} (2 x usec/xfer, mean), its run just before, \
                 {ROUNDS_NOTE}"
            ),
        ),
    ];
    for (i, size) in SIZES.into_iter().enumerate() {
        let n = count(size);
        let (bw, mode) = pick(&|o| o.throughput[i], true);
        rows.push(Row {
            case: format!("stream {} writes throughput", human(size)),
            metric: "throughput",
            unit: "MB/s",
            ours: bw,
            polling: Some(mode),
            baseline: median_of(std::mem::take(&mut base_bw[i])),
            baseline_name: format!("rstream -S {size} -C {n}, {ROUNDS_NOTE}"),
            higher: true,
            goal: None,
        });
    }
    let rstream_rtt = median_of(base_rtt);
    let name = format!("rstream -S {ECHO_SIZE} -I {ECHO_N} (2 x usec/xfer, mean), {ROUNDS_NOTE}");
    // Each row from the mode best at it, as the throughput rows.
    let (median, median_mode) = pick(&|o| o.echo.0, false);
    let (p99, p99_mode) = pick(&|o| o.echo.1, false);
    // A tail against a mean is no comparison: the like-for-like row is the one against
    // rsocket's timed p99 below.
    let tail_name = format!("{name}; a tail against a mean, see the row vs rsocket");
    for (metric, ours, mode, name) in [
        ("round trip median", median, median_mode, name.clone()),
        ("round trip p99", p99, p99_mode, tail_name),
    ] {
        rows.push(Row {
            case: format!("stream echo {ECHO_SIZE} B"),
            metric,
            unit: "us",
            ours,
            polling: Some(mode),
            baseline: rstream_rtt,
            baseline_name: name,
            higher: false,
            goal: None,
        });
    }
    let name = rsocket::baseline_name(ECHO_SIZE, ECHO_N, ROUNDS_NOTE);
    for (metric, ours, mode, theirs) in [
        (
            "round trip median",
            median,
            median_mode,
            median_of(rsocket_median),
        ),
        ("round trip p99", p99, p99_mode, median_of(rsocket_p99)),
    ] {
        rows.push(Row {
            case: format!("stream echo {ECHO_SIZE} B vs rsocket, timed per round trip"),
            metric,
            unit: "us",
            ours,
            polling: Some(mode),
            baseline: theirs,
            baseline_name: name.clone(),
            higher: false,
            goal: None,
        });
    }
    for (metric, ours, mode, theirs) in [
        ("round trip median", median, median_mode, tcp.0),
        ("round trip p99", p99, p99_mode, tcp.1),
    ] {
        rows.push(Row {
            case: format!("stream echo {ECHO_SIZE} B vs TCP"),
            metric,
            unit: "us",
            ours,
            polling: Some(mode),
            baseline: Some(theirs),
            baseline_name: "tokio TcpStream echo, same addresses".into(),
            higher: false,
            goal: None,
        });
    }
    // What the seed program gets: the default configuration (adaptive polling) on a
    // multi-threaded runtime, against tokio's TCP on the same runtime.
    let (name, default) = modes
        .iter()
        .find(|(name, _)| *name == "adaptive")
        .map(|(name, o)| (*name, o.echo))
        .expect("the default mode ran");
    for (metric, ours, theirs) in [
        ("round trip median", default.0, tcp.0),
        ("round trip p99", default.1, tcp.1),
    ] {
        rows.push(Row {
            case: format!("stream echo {ECHO_SIZE} B, default config, vs TCP"),
            metric,
            unit: "us",
            ours,
            polling: Some(name),
            baseline: Some(theirs),
            baseline_name: "tokio TcpStream echo, same addresses, same multi-threaded runtime"
                .into(),
            higher: false,
            goal: None,
        });
    }
    concurrency_rows(rows, &rt, &hosts)?;
    // The controls: rstream's second runs against its first ones.
    rows.extend(controls);
    Ok(device)
}

/// Connections at once in the concurrency rows, and round trips each.
const CONNS: usize = 8;
const CONCURRENT_N: u64 = 1000;

/// The concurrency rows (see the module docs): `CONNS` connections at once against one, and
/// against rstream with `CONNS` transfers in flight; the p99 at `CONNS` against its median.
fn concurrency_rows(rows: &mut Vec<Row>, rt: &tokio::runtime::Runtime, hosts: &Hosts) -> Res<()> {
    let (sip, cip) = hosts.ips();
    let (mut one, mut many, mut theirs) = (Vec::new(), Vec::new(), Vec::new());
    for round in 1..=ROUNDS {
        println!("concurrency, round {round}:");
        for (conns, runs) in [(1, &mut one), (CONNS, &mut many)] {
            let run = concurrency::echo(sip, cip, conns, ECHO_SIZE, ECHO_WARM, CONCURRENT_N);
            runs.push(rt.block_on(run)?);
            std::thread::sleep(SETTLE);
        }
        let got = hosts.rstream_in_flight(ECHO_SIZE, CONNS as u32, CONCURRENT_N as u32, 7583);
        theirs.extend(baseline("rstream", got));
        println!(
            "rstream -C {CONNS}, round {round}: {:?} messages/s",
            theirs.last()
        );
    }
    let med = |runs: &[concurrency::Concurrent], f: fn(&concurrency::Concurrent) -> f64| {
        median(runs.iter().map(f).collect())
    };
    let per_sec = |c: &concurrency::Concurrent| c.per_sec;
    let case = format!("stream echo {ECHO_SIZE} B, {CONNS} connections at once");
    let row = |metric, unit, ours, baseline, name: String, higher, goal| Row {
        case: case.clone(),
        metric,
        unit,
        ours,
        polling: Some("adaptive"),
        baseline,
        baseline_name: format!("{name}, median of 3 rounds"),
        higher,
        goal: Some(goal),
    };
    let many_per_sec = med(&many, per_sec);
    rows.push(row(
        "messages/s",
        "msg/s",
        many_per_sec,
        Some(med(&one, per_sec)),
        "ours on 1 connection, default config".into(),
        true,
        1.0,
    ));
    rows.push(row(
        "messages/s",
        "msg/s",
        many_per_sec,
        median_of(theirs),
        format!("rstream -S {ECHO_SIZE} -C {CONNS} -I {CONCURRENT_N} ({CONNS} in flight)"),
        true,
        1.0,
    ));
    rows.push(row(
        "round trip p99",
        "us",
        med(&many, |c| c.p99),
        Some(med(&many, |c| c.median)),
        format!("our median at {CONNS} connections"),
        false,
        10.0,
    ));
    Ok(())
}

fn main() -> ExitCode {
    report::main("stream", "STREAM_BENCH_JSON", run)
}
