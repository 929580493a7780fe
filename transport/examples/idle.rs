//! What an idle service costs: `idle LOCAL_IP PEER_IP [CONNS] [SECONDS]` connects CONNS
//! connections (default 64) from an endpoint on LOCAL_IP to one listening on PEER_IP (both in
//! this process), leaves them idle for SECONDS (default 10), and prints how often each of the
//! endpoints' threads woke up meanwhile (context switches per second, from `/proc`) and the
//! CPU time they took.
//!
//! In the two-hosts guest: `cargo xtask guest --two-hosts -- target/debug/examples/idle
//! 10.77.0.1 10.77.0.2 64 10`.

use std::time::{Duration, Instant};

use transport::{Endpoint, EndpointConfig, ProtocolConfig};

/// Each thread of this process named `transport-*`: (thread id, name, context switches,
/// CPU ticks).
fn threads() -> Vec<(String, String, u64, u64)> {
    let mut out = Vec::new();
    for task in std::fs::read_dir("/proc/self/task").expect("/proc/self/task") {
        let dir = task.expect("a task").path();
        let read = |f: &str| std::fs::read_to_string(dir.join(f)).unwrap_or_default();
        let name = read("comm").trim().to_string();
        if !name.starts_with("transport-") {
            continue;
        }
        let switches = read("status")
            .lines()
            .filter(|l| l.contains("ctxt_switches:"))
            .filter_map(|l| l.split_whitespace().last()?.parse::<u64>().ok())
            .sum();
        // utime and stime: fields 14 and 15 of stat, counted after the name's parenthesis.
        let stat = read("stat");
        let after = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
        let fields: Vec<&str> = after.split_whitespace().collect();
        let ticks = [11, 12]
            .iter()
            .filter_map(|&i| fields.get(i)?.parse::<u64>().ok())
            .sum();
        let id = dir.file_name().unwrap().to_string_lossy().into_owned();
        out.push((id, name, switches, ticks));
    }
    out
}

fn main() -> transport::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let usage = "usage: idle LOCAL_IP PEER_IP [CONNS] [SECONDS]";
    let (Some(local), Some(peer)) = (args.first(), args.get(1)) else {
        eprintln!("{usage}");
        std::process::exit(2);
    };
    let ip = |s: &str| {
        s.parse()
            .unwrap_or_else(|_| panic!("{s:?} is no IP address; {usage}"))
    };
    let conns: u32 = args.get(2).map_or(64, |s| s.parse().expect(usage));
    let seconds: u64 = args.get(3).map_or(10, |s| s.parse().expect(usage));
    let cfg = EndpointConfig::default()
        .with_pool_bytes(64 << 20)
        .with_max_connections(conns.max(1))
        .with_proto(ProtocolConfig::default().with_window(8).with_sq_depth(16));
    let server = Endpoint::with_config(ip(peer), cfg.clone())?;
    let listener = server.listen(0)?;
    let addr = listener.local_addr()?;
    let client = Endpoint::with_config(ip(local), cfg)?;
    let accepting = std::thread::spawn(move || {
        (0..conns)
            .map(|_| listener.accept_timeout(Duration::from_secs(60)))
            .collect::<transport::Result<Vec<_>>>()
    });
    let ours = (0..conns)
        .map(|_| client.connect(addr))
        .collect::<transport::Result<Vec<_>>>()?;
    let theirs = accepting.join().expect("the accepting thread")?;
    // Settled: the handshakes' last events are handled.
    std::thread::sleep(Duration::from_secs(1));
    let before = threads();
    let start = Instant::now();
    std::thread::sleep(Duration::from_secs(seconds));
    let after = threads();
    let secs = start.elapsed().as_secs_f64();
    println!("{conns} idle connections, {secs:.1} s:");
    for (id, name, switches, ticks) in &after {
        let Some((_, _, s0, t0)) = before.iter().find(|b| &b.0 == id) else {
            continue;
        };
        println!(
            "  {name:<20} {:>8.1} wakeups/s {:>6} CPU ticks",
            (switches - s0) as f64 / secs,
            ticks - t0
        );
    }
    drop((ours, theirs));
    Ok(())
}
