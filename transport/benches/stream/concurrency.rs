//! The echo at several connections at once, as a server of many clients sees it: endpoints of
//! the default configuration on one multi-threaded runtime, a task per connection on each
//! side, one 64 B message in flight per connection. Messages per second and the round trips'
//! median and p99, for 1 connection and for 8; rstream's latency test with 8 transfers in
//! flight (`-C 8`) is the baseline of the latter.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::Barrier;
use transport::stream::{Stream, StreamListener};
use transport::Endpoint;

use crate::ours::{self, Res};

/// One run: messages (round trips) per second over every connection, and the median and
/// p99 of the round trips in microseconds.
#[derive(Debug, Clone, Copy)]
pub struct Concurrent {
    pub per_sec: f64,
    pub median: f64,
    pub p99: f64,
}

/// `conns` connections between default endpoints on `sip` (server) and `cip` (client), each
/// echoing `warm` round trips of `size` bytes, then, all at once, `count` measured ones.
pub async fn echo(
    sip: IpAddr,
    cip: IpAddr,
    conns: usize,
    size: usize,
    warm: u64,
    count: u64,
) -> Res<Concurrent> {
    let endpoint = |ip| Endpoint::new(ip).map_err(|e| format!("endpoint on {ip}: {e}"));
    let (server, client) = (endpoint(sip)?, endpoint(cip)?);
    let listener = StreamListener::bind_on(&server, 0).map_err(|e| format!("listen: {e}"))?;
    let addr = listener.local_addr().map_err(|e| format!("address: {e}"))?;
    let serving = tokio::spawn(async move {
        while let Ok((s, _)) = listener.accept().await {
            tokio::spawn(ours::echo(s));
        }
    });
    let mut streams = Vec::with_capacity(conns);
    for _ in 0..conns {
        let s = Stream::connect_on(&client, addr)
            .await
            .map_err(|e| format!("connect: {e}"))?;
        streams.push(s);
    }
    let all = Arc::new(Barrier::new(conns));
    let tasks: Vec<_> = streams
        .into_iter()
        .map(|mut s| {
            let all = all.clone();
            tokio::spawn(async move {
                ours::round_trips(&mut s, size, warm, 0).await?;
                all.wait().await;
                let started = Instant::now();
                let times = ours::round_trips(&mut s, size, 0, count).await?;
                let ended = Instant::now();
                s.shutdown().await.map_err(|e| format!("shutdown: {e}"))?;
                Res::Ok((started, ended, times))
            })
        })
        .collect();
    let mut times: Vec<Duration> = Vec::new();
    let (mut first, mut last) = (None::<Instant>, None::<Instant>);
    for t in tasks {
        let (started, ended, mut t) = t.await.map_err(|e| e.to_string())??;
        first = Some(first.map_or(started, |f| f.min(started)));
        last = Some(last.map_or(ended, |l| l.max(ended)));
        times.append(&mut t);
    }
    serving.abort();
    let wall = last.zip(first).map(|(l, f)| l - f).unwrap_or_default();
    let total = times.len() as f64;
    let (median, p99) = ours::percentiles(times);
    let run = Concurrent {
        per_sec: total / wall.as_secs_f64(),
        median,
        p99,
    };
    println!(
        "stream echo {size} B on {conns} connections at once: {:.0} messages/s, median {:.1} us, p99 {:.1} us",
        run.per_sec, run.median, run.p99
    );
    Ok(run)
}
