//! The measured side of each case, generic over the byte stream: throughput of one-way writes
//! of a fixed size, and echo round trips, on our stream or on tokio's `TcpStream`.

use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

pub type Res<T> = Result<T, String>;

/// Bound of every transfer of ours.
pub const TIMEOUT: Duration = Duration::from_secs(60);

fn io(what: &'static str) -> impl Fn(std::io::Error) -> String {
    move |e| format!("{what}: {e}")
}

/// Server side of a throughput run: reads `total` bytes, then answers one byte.
pub async fn sink<S: AsyncRead + AsyncWrite + Unpin>(mut s: S, total: u64) -> Res<()> {
    let mut buf = vec![0u8; 1 << 20];
    let mut got = 0u64;
    while got < total {
        let n = s.read(&mut buf).await.map_err(io("sink read"))?;
        if n == 0 {
            return Err(format!("end of stream after {got} of {total} bytes"));
        }
        got += n as u64;
    }
    s.write_all(b"!").await.map_err(io("sink answer"))?;
    Ok(())
}

/// Client side of a throughput run: `count` writes of `size` bytes, then the server's one
/// byte; returns MB/s (10^6 bytes) of the writes.
pub async fn source<S: AsyncRead + AsyncWrite + Unpin>(
    s: &mut S,
    size: usize,
    count: u64,
) -> Res<f64> {
    let data = vec![0x5au8; size];
    let started = Instant::now();
    let run = async {
        for _ in 0..count {
            s.write_all(&data).await.map_err(io("write"))?;
        }
        let mut ack = [0u8; 1];
        s.read_exact(&mut ack).await.map_err(io("read the answer"))
    };
    tokio::time::timeout(TIMEOUT, run)
        .await
        .map_err(|_| format!("{count} writes of {size} B not done within {TIMEOUT:?}"))??;
    Ok((size as u64 * count) as f64 / started.elapsed().as_secs_f64() / 1e6)
}

/// Server side of an echo run: writes back what it reads until end of stream.
pub async fn echo<S: AsyncRead + AsyncWrite + Unpin>(mut s: S) -> Res<()> {
    let mut buf = vec![0u8; 64 << 10];
    loop {
        let n = s.read(&mut buf).await.map_err(io("echo read"))?;
        if n == 0 {
            return Ok(());
        }
        s.write_all(&buf[..n]).await.map_err(io("echo write"))?;
    }
}

/// Client side of an echo run: `warm` unmeasured round trips of `size` bytes, then `count`
/// measured ones (every echo checked); returns their times.
pub async fn round_trips<S: AsyncRead + AsyncWrite + Unpin>(
    s: &mut S,
    size: usize,
    warm: u64,
    count: u64,
) -> Res<Vec<Duration>> {
    let mut times = crate::report::prefaulted(count as usize);
    let mut back = vec![0u8; size];
    for i in 0..warm + count {
        let data = vec![i as u8; size];
        let started = Instant::now();
        let trip = async {
            s.write_all(&data).await.map_err(io("write"))?;
            s.read_exact(&mut back).await.map_err(io("read the echo"))
        };
        tokio::time::timeout(TIMEOUT, trip)
            .await
            .map_err(|_| format!("round trip {i} not done within {TIMEOUT:?}"))??;
        if i >= warm {
            times.push(started.elapsed());
        }
        if back != data {
            return Err(format!("echo {i} differs"));
        }
    }
    Ok(times)
}

/// Median and 99th percentile in microseconds.
pub fn percentiles(mut times: Vec<Duration>) -> (f64, f64) {
    times.sort_unstable();
    let at = |q: f64| times[((times.len() - 1) as f64 * q).round() as usize];
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    (us(at(0.5)), us(at(0.99)))
}
