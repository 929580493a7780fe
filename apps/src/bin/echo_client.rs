//! `echo-client ADDR:PORT [--src IP] [--size BYTES] [--count N] [--concurrency N]
//! [--polling MODE] [--busy-read US] [--ack-timeout MS] [--stats SECS]`: N
//! connections at once, each writing COUNT messages of SIZE bytes and reading each echo back;
//! verifies every byte, prints round-trip percentiles and throughput, exits non-zero on any
//! mismatch or error.
#![forbid(unsafe_code)]

use std::net::{IpAddr, SocketAddr};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use apps::echo::{endpoint, first_mismatch, payload, EndpointArgs, Summary};
use apps::live_stats::endpoint_summary;
use apps::report::error_chain;
use clap::Parser;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use transport::stream::Stream;
use transport::Endpoint;

/// Echo client over the transport's byte stream.
#[derive(Parser, Debug)]
#[command(name = "echo-client")]
struct Args {
    /// The server's address and port.
    addr: SocketAddr,
    /// Local address of the RDMA device to connect from (default: the route to ADDR).
    #[arg(long)]
    src: Option<IpAddr>,
    /// Bytes per message.
    #[arg(long, default_value_t = 64)]
    size: usize,
    /// Messages per connection.
    #[arg(long, default_value_t = 1000)]
    count: u64,
    /// Connections at once.
    #[arg(long, default_value_t = 1)]
    concurrency: u32,
    /// Seconds one round trip may take.
    #[arg(long, default_value_t = 10)]
    timeout: u64,
    #[command(flatten)]
    endpoint: EndpointArgs,
}

/// One connection's run: its round-trip times.
async fn run(
    ep: Endpoint,
    id: u32,
    args: &Args,
) -> Result<Vec<Duration>, Box<dyn std::error::Error + Send + Sync>> {
    let mut stream = Stream::connect_on(&ep, args.addr).await?;
    let limit = Duration::from_secs(args.timeout);
    let mut back = vec![0u8; args.size];
    let mut times = Vec::with_capacity(args.count as usize);
    for seq in 0..args.count {
        let data = payload(id, seq, args.size);
        let start = Instant::now();
        let trip = async {
            stream.write_all(&data).await?;
            stream.read_exact(&mut back).await
        };
        tokio::time::timeout(limit, trip)
            .await
            .map_err(|_| format!("connection {id}: message {seq} not echoed within {limit:?}"))??;
        times.push(start.elapsed());
        if let Some(at) = first_mismatch(&back, &data) {
            return Err(format!("connection {id}: message {seq}: byte {at} differs").into());
        }
    }
    stream.shutdown().await?;
    let mut rest = Vec::new();
    tokio::time::timeout(limit, stream.read_to_end(&mut rest)).await??;
    if !rest.is_empty() {
        return Err(format!("connection {id}: {} bytes after the last echo", rest.len()).into());
    }
    Ok(times)
}

#[tokio::main]
async fn main() -> ExitCode {
    apps::init_tracing();
    let args = Box::leak(Box::new(Args::parse()));
    let src = match args.src {
        Some(s) => s,
        None => match std::net::UdpSocket::bind("0.0.0.0:0")
            .and_then(|s| s.connect(args.addr).and(s.local_addr()))
        {
            Ok(a) => a.ip(),
            Err(e) => {
                eprintln!("echo-client: no route to {}: {e}; give --src", args.addr);
                return ExitCode::FAILURE;
            }
        },
    };
    let ep = match endpoint(src, &args.endpoint) {
        Ok(ep) => ep,
        Err(e) => {
            eprintln!("echo-client: {}", error_chain(&e));
            return ExitCode::FAILURE;
        }
    };
    let started = Instant::now();
    let tasks: Vec<_> = (0..args.concurrency)
        .map(|id| tokio::spawn(run(ep.clone(), id, args)))
        .collect();
    let mut times = Vec::new();
    let mut failed = false;
    for t in tasks {
        match t.await {
            Ok(Ok(t)) => times.extend(t),
            Ok(Err(e)) => {
                eprintln!("echo-client: {}", error_chain(e.as_ref()));
                failed = true;
            }
            Err(e) => {
                eprintln!("echo-client: task failed: {e}");
                failed = true;
            }
        }
    }
    let elapsed = started.elapsed();
    if args.endpoint.stats.is_some() {
        println!("stats at the end: {}", endpoint_summary(&ep.stats()));
    }
    if let Some(s) = Summary::of(times) {
        let bytes = s.count as f64 * args.size as f64 * 2.0;
        println!(
            "{} round trips of {} bytes on {} connections: min {:.1} us, p50 {:.1} us, p99 {:.1} us, p99.9 {:.1} us, max {:.1} us",
            s.count,
            args.size,
            args.concurrency,
            micros(s.min),
            micros(s.p50),
            micros(s.p99),
            micros(s.p999),
            micros(s.max)
        );
        println!(
            "throughput: {:.0} messages/s, {:.2} MB/s (both directions) in {:.2} s",
            s.count as f64 / elapsed.as_secs_f64(),
            bytes / elapsed.as_secs_f64() / 1e6,
            elapsed.as_secs_f64()
        );
    }
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}
