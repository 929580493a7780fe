//! Our side of each case: a server endpoint on the peer's address and a client endpoint here,
//! in this process, connected over the two devices.

use std::net::IpAddr;
use std::thread;
use std::time::{Duration, Instant};

use transport::{Conn, Endpoint, EndpointConfig, Polling, ProtocolConfig};

/// Bound of every wait of ours.
const TIMEOUT: Duration = Duration::from_secs(30);

pub type Res<T> = Result<T, String>;

fn err(what: &str) -> impl Fn(transport::Error) -> String + '_ {
    move |e| format!("{what}: {e}")
}

/// Receives each connection grants its peer: perftest's receive depth for `ib_send_bw`
/// (`--rx-depth`, 512 by default), so both sides of a comparison keep as many receives
/// posted. The default window (32) is sized for hundreds of connections per endpoint; with
/// it, a one-way stream sends a credit frame back every 16 messages.
pub const WINDOW: u32 = 512;

/// Send-queue slots per connection: perftest's send depth (`--tx-depth`, 128 by default).
pub const SQ_DEPTH: u32 = 128;

/// An endpoint configuration for the benchmark: `polling`, perftest's queue depths, and
/// frames of `frame_size` bytes (header included) when given.
pub fn config(polling: Polling, frame_size: Option<u32>) -> EndpointConfig {
    let mut proto = ProtocolConfig::default()
        .with_window(WINDOW)
        .with_sq_depth(SQ_DEPTH);
    if let Some(f) = frame_size {
        proto = proto.with_frame_size(f);
    }
    EndpointConfig::default()
        .with_polling(polling)
        .with_pool_bytes(96 << 20)
        .with_max_connections(2)
        .with_proto(proto)
}

/// A server endpoint (listening) and a client endpoint with the same configuration.
pub struct Pair {
    listener: transport::Listener,
    client: Endpoint,
}

impl Pair {
    pub fn new(server_ip: IpAddr, client_ip: IpAddr, cfg: EndpointConfig) -> Res<Pair> {
        let server =
            Endpoint::with_config(server_ip, cfg.clone()).map_err(err("server endpoint"))?;
        let listener = server.listen(0).map_err(err("listen"))?;
        let client = Endpoint::with_config(client_ip, cfg).map_err(err("client endpoint"))?;
        Ok(Pair { listener, client })
    }

    /// A new connection: (server side, client side).
    fn connect(&self) -> Res<(Conn, Conn)> {
        let addr = self
            .listener
            .local_addr()
            .map_err(err("listener address"))?;
        thread::scope(|s| {
            let accept = s.spawn(|| self.listener.accept_timeout(TIMEOUT).map_err(err("accept")));
            let c = self.client.connect(addr).map_err(err("connect"));
            let srv = accept.join().map_err(|_| "accept panicked".to_string())?;
            Ok((srv?, c?))
        })
    }
}

fn close(server: &Conn, client: &Conn) {
    let _ = client.close(Duration::from_secs(5));
    let _ = server.close(Duration::from_secs(5));
}

fn recv_n(conn: &Conn, n: u64, len: usize) -> Res<()> {
    for _ in 0..n {
        let m = conn.recv(TIMEOUT).map_err(err("recv"))?;
        if m.len() != len {
            return Err(format!("received {} bytes, sent {len}", m.len()));
        }
    }
    Ok(())
}

/// Streams `n` messages of `len` bytes one way (after `warm` unmeasured ones); the receiver
/// drops them. Returns the seconds from the first send to the last receive.
fn stream(pair: &Pair, len: usize, warm: u64, n: u64) -> Res<f64> {
    let (server, client) = pair.connect()?;
    let data = vec![0x5a; len];
    let run = |count: u64| -> Res<f64> {
        thread::scope(|s| {
            let start = Instant::now();
            let sender = s.spawn(|| -> Res<()> {
                for _ in 0..count {
                    client.send_timeout(&data, TIMEOUT).map_err(err("send"))?;
                }
                Ok(())
            });
            let got = recv_n(&server, count, len);
            let secs = start.elapsed().as_secs_f64();
            sender.join().map_err(|_| "sender panicked".to_string())??;
            got.map(|()| secs)
        })
    };
    let result = run(warm).and_then(|_| run(n));
    close(&server, &client);
    result
}

/// Messages per second of `len`-byte messages streamed one way.
pub fn message_rate(pair: &Pair, len: usize, warm: u64, n: u64) -> Res<f64> {
    Ok(n as f64 / stream(pair, len, warm, n)?)
}

/// MB/s (10^6 bytes) of `len`-byte messages streamed one way.
pub fn throughput(pair: &Pair, len: usize, warm: u64, n: u64) -> Res<f64> {
    Ok((n as f64 * len as f64) / stream(pair, len, warm, n)? / 1e6)
}

/// The median of `v`, in microseconds.
pub fn median_us(mut v: Vec<Duration>) -> f64 {
    v.sort();
    v[v.len() / 2].as_secs_f64() * 1e6
}

/// Median round trip (us) of `n` sequential `Conn::call`s of `len` bytes, answered by an
/// echoing server.
pub fn rpc_rtt(pair: &Pair, len: usize, warm: u64, n: u64) -> Res<f64> {
    let (server, client) = pair.connect()?;
    let request = vec![0x33; len];
    let result = thread::scope(|s| {
        let srv = s.spawn(|| server.serve_with(|m, out| out.extend_from_slice(&m.bytes())));
        let mut times = crate::report::prefaulted(n as usize);
        let mut outcome = Ok(());
        for i in 0..warm + n {
            let t = Instant::now();
            match client.call(&request, TIMEOUT) {
                Ok(r) if r.len() == len => {}
                Ok(r) => {
                    outcome = Err(format!("response of {} bytes to {len}", r.len()));
                    break;
                }
                Err(e) => {
                    outcome = Err(format!("call: {e}"));
                    break;
                }
            }
            if i >= warm {
                times.push(t.elapsed());
            }
        }
        let _ = client.close(Duration::from_secs(5));
        let _ = srv.join();
        outcome.map(|()| median_us(times))
    });
    let _ = server.close(Duration::from_secs(5));
    result
}

/// Median round trip (us) of `n` `len`-byte messages echoed by the server with `Conn::send`.
pub fn echo_rtt(pair: &Pair, len: usize, warm: u64, n: u64) -> Res<f64> {
    let (server, client) = pair.connect()?;
    let data = vec![0x77; len];
    let total = warm + n;
    let result = thread::scope(|s| {
        let srv = s.spawn(|| -> Res<()> {
            for _ in 0..total {
                let m = server.recv(TIMEOUT).map_err(err("echo recv"))?;
                server
                    .send_timeout(&m.bytes(), TIMEOUT)
                    .map_err(err("echo send"))?;
            }
            Ok(())
        });
        let mut times = crate::report::prefaulted(n as usize);
        let mut outcome = Ok(());
        for i in 0..total {
            let t = Instant::now();
            let r = client
                .send_timeout(&data, TIMEOUT)
                .and_then(|()| client.recv(TIMEOUT));
            match r {
                Ok(m) if m.len() == len => {}
                Ok(m) => {
                    outcome = Err(format!("echo of {} bytes to {len}", m.len()));
                    break;
                }
                Err(e) => {
                    outcome = Err(format!("ping: {e}"));
                    break;
                }
            }
            if i >= warm {
                times.push(t.elapsed());
            }
        }
        if outcome.is_err() {
            close(&server, &client);
        }
        let served = srv.join().map_err(|_| "echo server panicked".to_string())?;
        outcome.and(served).map(|()| median_us(times))
    });
    close(&server, &client);
    result
}
