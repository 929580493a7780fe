//! Device benchmark of the transport against C baselines measured in the same run: message
//! rate, RPC round trip and large-message throughput against perftest, messages of 64 B to
//! 1 MiB against rdma-core's `rstream` (rsocket), each row the median of three rounds (ours
//! and the baseline in turn within each), plus the eager/rendezvous crossover. The small
//! cases and the rstream rows take the better of busy and adaptive polling in each round.
//! Its rows are reports without goals (`goal: null`): timing under emulation varies more than
//! the differences it would decide; decisions about speed go through `cargo xtask bench cost`.
//!
//! Run on two devices (`cargo xtask bench transport`, or by hand in the two-hosts guest:
//! `cargo bench -p rdma-transport --bench transport --no-run`, then `EXE --bench` with
//! `ulimit -l unlimited`). The server is on the peer's device and address
//! (`RDMA_TEST_PEER_*`), the client on this host's (`RDMA_TEST_*`): ours as two endpoints in
//! this process, the baselines as bounded child processes. Prints a table and writes JSON to
//! `TRANSPORT_BENCH_JSON`, else `<target dir>/bench/transport.raw.json`. Exits non-zero if a
//! measurement of ours failed; a failed baseline gets a null baseline and ratio (why on stderr).
//!
//! Units: MB/s are 10^6 bytes per second (perftest's MiB/s are converted); round trips are in
//! microseconds. rstream reports a mean per transfer, so its round trip is a mean; ours is the
//! median. One more row compares our 64 B median with rsocket's: every round trip of
//! rstream's latency test timed by an rsocket client of the bench against an `rstream` server
//! (`stream/rsocket.rs`).
//!
//! Two control rows measure the noise floor of the ratios in the same run: `ib_send_lat` and
//! rstream's 64 B latency test each run a second time right after the first in every round,
//! and the second runs are compared with the first as ours are with them (no goal).

#[path = "transport/baseline.rs"]
mod baseline;
#[path = "transport/ours.rs"]
mod ours;
#[path = "transport/report.rs"]
mod report;
#[path = "stream/rsocket.rs"]
mod rsocket;

use std::net::IpAddr;
use std::process::ExitCode;
use std::thread;
use std::time::Duration;

use transport::Polling;

use baseline::Hosts;
use ours::{Pair, Res};
use report::{baseline, human, median, median_of, Row};

/// Messages and round trips of the small cases.
const RATE_N: u64 = 4000;
const RPC_N: u64 = 1000;
const LARGE: usize = 4 << 20;
const LARGE_N: u64 = 12;
const SIZES: [usize; 4] = [64, 4 << 10, 64 << 10, 1 << 20];
// The 64 B rows (and their control) are the first of each list.
const _: () = assert!(SIZES[0] == 64);
/// Longer than an endpoint's linger after its last handle, so its threads are gone.
const SETTLE: Duration = Duration::from_millis(2500);
/// Rounds of the compared rows (ours, then the baseline, in each).
const ROUNDS: usize = 3;
const CROSSOVER: [usize; 6] = [2 << 10, 4 << 10, 8 << 10, 16 << 10, 32 << 10, 64 << 10];

/// Messages per transfer so that each streaming run moves about `bytes` (at least `min`).
fn count(bytes: usize, len: usize, min: u64) -> u64 {
    ((bytes / len) as u64).max(min)
}

fn mode_name(p: Polling) -> &'static str {
    match p {
        Polling::Busy => "busy",
        Polling::Event => "event",
        Polling::Adaptive { .. } => "adaptive",
        Polling::Reactor { .. } => "reactor",
        _ => "other",
    }
}

fn run(rows: &mut Vec<Row>) -> Res<String> {
    let hosts = Hosts::from_env();
    let device = hosts.device();
    let (sip, cip) = hosts.ips();
    println!(
        "transport vs C baselines, client {} -> server {}; window {}, send queue {} (perftest's depths)",
        hosts.client.name,
        hosts.server.name,
        ours::WINDOW,
        ours::SQ_DEPTH
    );

    // The compared rows in ROUNDS rounds, ours and the baseline in turn within each, so both
    // see the same phases of a noisy host; each row reports the medians. Both polling modes
    // on the small cases; the faster one (by RPC round trip in the first round) runs the
    // large case.
    let modes = [
        Polling::Busy,
        Polling::Adaptive {
            spin: Duration::from_micros(50),
        },
    ];
    let mut mode = modes[0];
    let (mut rates, mut rtts, mut larges) = (Vec::new(), Vec::new(), Vec::new());
    let (mut base_rates, mut base_rtts, mut base_larges) = (Vec::new(), Vec::new(), Vec::new());
    let mut control_rtts = Vec::new();
    for round in 1..=ROUNDS {
        let mut per_mode = Vec::new();
        for m in modes {
            let pair = Pair::new(sip, cip, ours::config(m, None))?;
            let rate = ours::message_rate(&pair, 64, 500, RATE_N)?;
            let rtt = ours::rpc_rtt(&pair, 64, 100, RPC_N)?;
            println!(
                "round {round}, polling {:<8}: 64 B rate {rate:>10.0} msg/s, RPC round trip median {rtt:>8.1} us",
                mode_name(m)
            );
            per_mode.push((m, rate, rtt));
            drop(pair);
            thread::sleep(SETTLE);
        }
        rates.push(per_mode.iter().map(|m| m.1).fold(0.0, f64::max));
        let (best, _, rtt) = *per_mode
            .iter()
            .min_by(|a, b| a.2.total_cmp(&b.2))
            .expect("two modes");
        rtts.push(rtt);
        if round == 1 {
            mode = best;
            println!("the large case polls {}", mode_name(mode));
        }
        let pair = Pair::new(sip, cip, ours::config(mode, None))?;
        larges.push(ours::throughput(&pair, LARGE, 2, LARGE_N)?);
        drop(pair);
        // The baselines with none of our endpoints alive: a lingering endpoint's progress
        // thread would take CPU from them.
        thread::sleep(SETTLE);
        base_rates.extend(baseline("ib_send_bw", hosts.send_bw_rate(RATE_N as u32)));
        base_rtts.extend(baseline(
            "ib_send_lat",
            hosts.send_lat_rtt(RPC_N as u32, 18516),
        ));
        control_rtts.extend(baseline(
            "ib_send_lat",
            hosts.send_lat_rtt(RPC_N as u32, 18519),
        ));
        base_larges.extend(baseline("ib_read_bw", hosts.read_bw(48)));
        println!(
            "round {round}: rate {:.0} vs {:?}, RPC {:.1} vs {:?} us, 4 MiB {:.1} vs {:?} MB/s",
            rates[rates.len() - 1],
            base_rates.last(),
            rtts[rtts.len() - 1],
            base_rtts.last(),
            larges[larges.len() - 1],
            base_larges.last()
        );
    }

    // The rstream rows in rounds too: per round ours at every size in both polling modes (each
    // row taking the better, as the rate row does: under busy polling small one-way messages
    // travel in batches, under adaptive polling they do not), then rstream's.
    let mut sized: Vec<[Vec<f64>; 4]> = SIZES.iter().map(|_| Default::default()).collect();
    let (mut rsocket_64, mut control_rstream_64) = (Vec::new(), Vec::new());
    for round in 1..=ROUNDS {
        let mut best: Vec<(f64, f64)> = SIZES.iter().map(|_| (0.0, f64::INFINITY)).collect();
        for m in modes {
            let pair = Pair::new(sip, cip, ours::config(m, None))?;
            for (i, size) in SIZES.into_iter().enumerate() {
                let (n, e) = (stream_count(size), echo_count(size));
                let bw = ours::throughput(&pair, size, n / 10 + 1, n)?;
                let rtt = ours::echo_rtt(&pair, size, e / 10 + 1, e)?;
                println!(
                    "round {round}, polling {:<8}, {:>8}: {bw:.2} MB/s, round trip {rtt:.1} us",
                    mode_name(m),
                    human(size)
                );
                best[i] = (best[i].0.max(bw), best[i].1.min(rtt));
            }
            drop(pair);
            thread::sleep(SETTLE);
        }
        for (i, (bw, rtt)) in best.into_iter().enumerate() {
            sized[i][0].push(bw);
            sized[i][1].push(rtt);
        }
        for (i, size) in SIZES.into_iter().enumerate() {
            let port = 7471 + 2 * i as u16;
            let (n, m) = (stream_count(size), echo_count(size));
            sized[i][2].extend(baseline("rstream", hosts.rstream_bw(size, n as u32, port)));
            sized[i][3].extend(baseline(
                "rstream",
                hosts.rstream_rtt(size, m as u32, port + 1),
            ));
            if size == 64 {
                control_rstream_64.extend(baseline(
                    "rstream",
                    hosts.rstream_rtt(size, m as u32, port + 200),
                ));
                let timed = hosts.against_rstream_server(size, m as u32, port + 100, |server| {
                    rsocket::round_trips(cip, server, size, m, Duration::from_secs(60))
                });
                rsocket_64.extend(baseline("rsocket", timed.map(ours::median_us)));
            }
            println!(
                "round {round}, {:>8}: {:.2} vs {:?} MB/s, round trip {:.1} vs {:?} us",
                human(size),
                sized[i][0][sized[i][0].len() - 1],
                sized[i][2].last(),
                sized[i][1][sized[i][1].len() - 1],
                sized[i][3].last()
            );
        }
    }

    let rounds = format!("median of {ROUNDS} rounds, each beside ours");
    let (first_send_lat, first_rstream_64) = (base_rtts.clone(), sized[0][3].clone());
    rows.push(Row {
        case: "64 B message rate, one direction".into(),
        metric: "message rate",
        unit: "messages/s",
        ours: median(rates),
        baseline: median_of(base_rates),
        baseline_name: format!("ib_send_bw -s 64 (MsgRate), {rounds}"),
        higher: true,
        goal: None,
        polling: None,
    });
    rows.push(Row {
        case: "RPC round trip 64 B".into(),
        metric: "round trip median",
        unit: "us",
        ours: median(rtts),
        baseline: median_of(base_rtts),
        baseline_name: format!("ib_send_lat -s 64 (2 x t_typical), {rounds}"),
        higher: false,
        goal: None,
        polling: None,
    });
    rows.push(Row {
        case: "large message 4 MiB throughput".into(),
        metric: "throughput",
        unit: "MB/s",
        ours: median(larges),
        baseline: median_of(base_larges),
        baseline_name: format!("ib_read_bw -s 1048576 (BW average), {rounds}"),
        higher: true,
        goal: None,
        polling: None,
    });
    for (size, [bw, rtt, base_bw, base_rtt]) in SIZES.into_iter().zip(sized) {
        let (n, m) = (stream_count(size), echo_count(size));
        rows.push(Row {
            case: format!("messages {} throughput", human(size)),
            metric: "throughput",
            unit: "MB/s",
            ours: median(bw),
            baseline: median_of(base_bw),
            baseline_name: format!(
                "rstream -S {size} -C {n}, {rounds}; ours the better of busy and adaptive polling"
            ),
            higher: true,
            goal: None,
            polling: None,
        });
        rows.push(Row {
            case: format!("messages {} round trip", human(size)),
            metric: "round trip median",
            unit: "us",
            ours: median(rtt),
            baseline: median_of(base_rtt),
            baseline_name: format!(
                "rstream -S {size} -I {m} (2 x usec/xfer, mean), {rounds}; ours the better of \
                 busy and adaptive polling"
            ),
            higher: false,
            goal: None,
            polling: None,
        });
    }

    rows.push(Row {
        case: "messages 64 B round trip vs rsocket, timed per round trip".into(),
        metric: "round trip median",
        unit: "us",
        ours: rows
            .iter()
            .find(|r| r.case == "messages 64 B round trip")
            .map_or(f64::NAN, |r| r.ours),
        baseline: median_of(rsocket_64),
        baseline_name: rsocket::baseline_name(64, echo_count(64), &rounds),
        higher: false,
        goal: None,
        polling: None,
    });

    // The controls: the same program's second runs against its first ones.
    rows.push(Row::control(
        "ib_send_lat -s 64",
        "round trip median",
        "us",
        false,
        control_rtts,
        first_send_lat,
        format!("ib_send_lat -s 64 (2 x t_typical), its run just before, {rounds}"),
    ));
    rows.push(Row::control(
        "rstream -S 64 round trip",
        "round trip median",
        "us",
        false,
        control_rstream_64,
        first_rstream_64,
        format!(
            "rstream -S 64 -I {} (2 x usec/xfer, mean), its run just before, {rounds}",
            echo_count(64)
        ),
    ));

    crossover(sip, cip, mode)?;
    Ok(device)
}

/// Throughput at 2..64 KiB with the default frames (4 KiB eager limit) and with frames large
/// enough to send every size eagerly.
fn crossover(sip: IpAddr, cip: IpAddr, mode: Polling) -> Res<()> {
    let big = *CROSSOVER.last().expect("sizes") as u32 + 16;
    let default = Pair::new(sip, cip, ours::config(mode, None))?;
    let mut def = Vec::new();
    for size in CROSSOVER {
        let n = count(3 << 20, size, 32);
        def.push(ours::throughput(&default, size, n / 10, n)?);
    }
    drop(default);
    thread::sleep(SETTLE);
    let raised = Pair::new(sip, cip, ours::config(mode, Some(big)))?;
    println!(
        "\neager/rendezvous crossover, MB/s (default eager limit 4 KiB vs {} KiB):",
        (big - 16) >> 10
    );
    println!(
        "{:>8} {:>12} {:>12} {:>8}",
        "size", "4 KiB", "raised", "raised/4K"
    );
    for (size, d) in CROSSOVER.into_iter().zip(def) {
        let n = count(3 << 20, size, 32);
        let r = ours::throughput(&raised, size, n / 10, n)?;
        println!("{:>8} {d:>12.2} {r:>12.2} {:>8.2}", human(size), r / d);
    }
    Ok(())
}

/// Messages of a streaming run: about 8 MiB, at least 16, at most 4000.
fn stream_count(size: usize) -> u64 {
    count(8 << 20, size, 16).min(4000)
}

/// Round trips of an echo run: about 4 MiB each way, at least 8, at most 1000.
fn echo_count(size: usize) -> u64 {
    count(4 << 20, size, 8).min(1000)
}

fn main() -> ExitCode {
    report::main("transport", "TRANSPORT_BENCH_JSON", run)
}
