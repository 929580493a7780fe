//! The C baselines (perftest and rdma-core's `rstream`), run as bounded child processes between
//! the same two devices, and the parsing of their result lines.

use std::io::Read;
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

/// The two ends: the server on the peer's device, the client on this host's.
pub struct Hosts {
    pub server: testkit::TestDevice,
    pub client: testkit::TestDevice,
}

impl Hosts {
    /// The devices the xtask gives the bench: the peer's serves, this host's is the client.
    pub fn from_env() -> Hosts {
        Hosts {
            server: testkit::peer().device,
            client: testkit::device(),
        }
    }

    /// `client,server`, as the comparison JSON names the device.
    pub fn device(&self) -> String {
        format!("{},{}", self.client.name, self.server.name)
    }

    /// The server's and the client's addresses.
    pub fn ips(&self) -> (std::net::IpAddr, std::net::IpAddr) {
        (self.server.addr.into(), self.client.addr.into())
    }
}

/// A child killed and reaped on drop; its output is read by threads so it never blocks on a
/// full pipe.
struct Bounded {
    child: Child,
    what: String,
    out: Option<thread::JoinHandle<String>>,
    err: Option<thread::JoinHandle<String>>,
}

fn reader(mut r: impl Read + Send + 'static) -> thread::JoinHandle<String> {
    thread::spawn(move || {
        let mut s = String::new();
        let _ = r.read_to_string(&mut s);
        s
    })
}

impl Bounded {
    fn spawn(program: &str, args: &[String]) -> Result<Bounded, String> {
        let what = format!("{program} {}", args.join(" "));
        let mut child = Command::new(program)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot start `{what}`: {e} (is it installed?)"))?;
        let out = child.stdout.take().map(reader);
        let err = child.stderr.take().map(reader);
        Ok(Bounded {
            child,
            what,
            out,
            err,
        })
    }

    /// Waits until `deadline` for a successful exit; returns stdout, or why not.
    fn finish(mut self, deadline: Instant) -> Result<String, String> {
        let status = loop {
            match self.child.try_wait() {
                Ok(Some(status)) => break status,
                Ok(None) if Instant::now() >= deadline => {
                    let _ = self.child.kill();
                    let _ = self.child.wait();
                    return Err(format!("`{}` timed out and was killed", self.what));
                }
                Ok(None) => thread::sleep(Duration::from_millis(20)),
                Err(e) => return Err(format!("`{}`: wait: {e}", self.what)),
            }
        };
        let out = self.out.take().map(|h| h.join().unwrap_or_default());
        let err = self.err.take().map(|h| h.join().unwrap_or_default());
        let (out, err) = (out.unwrap_or_default(), err.unwrap_or_default());
        if status.success() {
            Ok(out)
        } else {
            Err(format!(
                "`{}` failed ({status}): {}{}",
                self.what,
                out.lines().last().unwrap_or(""),
                err.trim()
            ))
        }
    }
}

impl Drop for Bounded {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs a server and, once it listens, a client; both bounded by `timeout`. Returns the
/// client's stdout.
fn pair(
    program: &str,
    server: Vec<String>,
    client: Vec<String>,
    timeout: Duration,
) -> Result<String, String> {
    with_server(program, &server, timeout, |deadline| {
        Bounded::spawn(program, &client)?.finish(deadline)
    })
}

/// Runs `program` with `server` as a server and, once it listens, `client` (given the
/// deadline); both bounded by `timeout`. Returns what the client returns.
fn with_server<T>(
    program: &str,
    server: &[String],
    timeout: Duration,
    client: impl FnOnce(Instant) -> Result<T, String>,
) -> Result<T, String> {
    let deadline = Instant::now() + timeout;
    let srv = Bounded::spawn(program, server)?;
    // Neither tool says when it listens; the server is up well within this.
    thread::sleep(Duration::from_millis(1500));
    let out = client(deadline);
    let srv = srv.finish(deadline);
    let out = out?;
    srv.map_err(|e| format!("server: {e}"))?;
    Ok(out)
}

/// The numbers of the result line under perftest's `#bytes` header.
fn perftest_row(out: &str) -> Result<Vec<f64>, String> {
    let mut lines = out.lines();
    lines
        .by_ref()
        .find(|l| l.trim_start().starts_with("#bytes"))
        .ok_or_else(|| format!("no result header in perftest output: {out:?}"))?;
    let row = lines
        .next()
        .ok_or_else(|| "no result line after the header".to_string())?;
    row.split_whitespace()
        .map(|t| t.parse().map_err(|_| format!("result line {row:?}")))
        .collect()
}

fn column(row: &[f64], i: usize) -> Result<f64, String> {
    row.get(i)
        .copied()
        .ok_or_else(|| format!("result line has no column {i}: {row:?}"))
}

impl Hosts {
    fn perftest(
        &self,
        tool: &str,
        args: &[&str],
        port: u16,
        timeout: Duration,
    ) -> Result<Vec<f64>, String> {
        let common = |dev: &testkit::TestDevice| {
            let mut v: Vec<String> = vec![
                "-d".into(),
                dev.name.clone(),
                "-x".into(),
                dev.gid_index.to_string(),
                "-F".into(),
                "-p".into(),
                port.to_string(),
            ];
            v.extend(args.iter().map(|a| a.to_string()));
            v
        };
        let server = common(&self.server);
        let mut client = common(&self.client);
        client.push(self.server.addr.to_string());
        perftest_row(&pair(tool, server, client, timeout)?)
    }

    /// `ib_send_bw -s 64`: messages per second.
    pub fn send_bw_rate(&self, iters: u32) -> Result<f64, String> {
        let n = iters.to_string();
        let row = self.perftest(
            "ib_send_bw",
            &["-s", "64", "-n", &n],
            18515,
            Duration::from_secs(90),
        )?;
        Ok(column(&row, 4)? * 1e6)
    }

    /// `ib_send_lat -s 64` on `port`: round trip in microseconds (2 x t_typical).
    pub fn send_lat_rtt(&self, iters: u32, port: u16) -> Result<f64, String> {
        let n = iters.to_string();
        let row = self.perftest(
            "ib_send_lat",
            &["-s", "64", "-n", &n],
            port,
            Duration::from_secs(90),
        )?;
        Ok(2.0 * column(&row, 4)?)
    }

    /// `ib_read_bw -s 1048576`: BW average in MB/s (perftest reports MiB/s).
    pub fn read_bw(&self, iters: u32) -> Result<f64, String> {
        let n = iters.to_string();
        let row = self.perftest(
            "ib_read_bw",
            &["-s", "1048576", "-n", &n],
            18517,
            Duration::from_secs(120),
        )?;
        Ok(column(&row, 3)? * 1.048_576)
    }

    /// `rstream` with `size`-byte transfers: `count` transfers each way once (throughput) or
    /// one transfer each way `iters` times (latency). Returns usec per transfer.
    fn rstream(&self, size: usize, count: u32, iters: u32, port: u16) -> Result<f64, String> {
        let server = self.rstream_server_args(size, count, iters, port);
        let mut client = vec![
            "-s".to_string(),
            self.server.addr.to_string(),
            "-b".to_string(),
            self.client.addr.to_string(),
        ];
        // The same transfers as the server's (its arguments after its own `-b ADDR`).
        client.extend_from_slice(&server[2..]);
        let out = pair("rstream", server, client, Duration::from_secs(60))?;
        let line = out
            .lines()
            .find(|l| l.starts_with("custom"))
            .ok_or_else(|| format!("no result line in rstream output: {out:?}"))?;
        line.split_whitespace()
            .last()
            .and_then(|t| t.parse().ok())
            .ok_or_else(|| format!("rstream result line {line:?}"))
    }

    /// An `rstream` server's arguments on the server's address: `count` transfers of `size`
    /// bytes each way, `iters` times, on `port`.
    fn rstream_server_args(&self, size: usize, count: u32, iters: u32, port: u16) -> Vec<String> {
        [
            "-b",
            &self.server.addr.to_string(),
            "-S",
            &size.to_string(),
            "-C",
            &count.to_string(),
            "-I",
            &iters.to_string(),
            "-p",
            &port.to_string(),
        ]
        .map(String::from)
        .into()
    }

    /// rstream throughput in MB/s (10^6 bytes): `size` / usec per transfer.
    pub fn rstream_bw(&self, size: usize, count: u32, port: u16) -> Result<f64, String> {
        Ok(size as f64 / self.rstream(size, count, 1, port)?)
    }

    /// rstream round trip in microseconds (its usec/xfer is half a round trip, averaged).
    pub fn rstream_rtt(&self, size: usize, iters: u32, port: u16) -> Result<f64, String> {
        Ok(2.0 * self.rstream(size, 1, iters, port)?)
    }

    /// Messages per second of rstream's latency test with `in_flight` transfers of `size`
    /// bytes each way per iteration (`-C in_flight -I iters`): each iteration's transfers go
    /// out before their echoes are read, as many clients' messages would.
    #[allow(dead_code)] // the stream bench's
    pub fn rstream_in_flight(
        &self,
        size: usize,
        in_flight: u32,
        iters: u32,
        port: u16,
    ) -> Result<f64, String> {
        // Its usec/xfer is the time per transfer one way: a message and its echo take two.
        Ok(1e6 / (2.0 * self.rstream(size, in_flight, iters, port)?))
    }

    /// Connections per second of rdma-core's `cmtime -c n` (a client connecting `n` RC
    /// connections at once to a `cmtime` server, which serves until it is killed): `n` over
    /// the client's time to resolve the addresses and routes, create the QPs and connect, the
    /// sum of its steps' totals.
    #[allow(dead_code)] // the scale bench's
    pub fn cmtime_connects_per_s(&self, n: usize, port: u16) -> Result<f64, String> {
        let (sip, cip) = self.ips();
        let (n, port) = (n.to_string(), port.to_string());
        let server = vec![
            "-b".into(),
            sip.to_string(),
            "-c".into(),
            n.clone(),
            "-p".into(),
            port.clone(),
        ];
        let client = vec![
            "-s".into(),
            sip.to_string(),
            "-b".into(),
            cip.to_string(),
            "-c".into(),
            n.clone(),
            "-p".into(),
            port,
        ];
        // The server serves until it is stopped: killed once the client is done.
        let deadline = Instant::now() + Duration::from_secs(1200);
        let srv = Bounded::spawn("cmtime", &server)?;
        thread::sleep(Duration::from_millis(1500));
        let out = Bounded::spawn("cmtime", &client)?.finish(deadline);
        drop(srv);
        let out = out?;
        let steps = ["resolve addr", "resolve route", "create qp", "connect"];
        let mut total_ms = 0.0;
        for step in steps {
            let ms = out
                .lines()
                .filter_map(|l| l.split_once(':'))
                .find(|(name, _)| name.trim() == step)
                .and_then(|(_, v)| v.split_whitespace().next()?.parse::<f64>().ok())
                .ok_or_else(|| format!("cmtime: no {step:?} step in its output:\n{out}"))?;
            total_ms += ms;
        }
        let n: f64 = n.parse().unwrap_or(f64::NAN);
        Ok(n / (total_ms / 1000.0))
    }

    /// An `rstream` server for the latency test of `iters` round trips of `size` bytes on
    /// `port`, and `client` run against it (given the server's address) once it listens.
    pub fn against_rstream_server<T>(
        &self,
        size: usize,
        iters: u32,
        port: u16,
        client: impl FnOnce(std::net::SocketAddr) -> Result<T, String>,
    ) -> Result<T, String> {
        let args = self.rstream_server_args(size, 1, iters, port);
        with_server("rstream", &args, Duration::from_secs(60), |_| {
            client(std::net::SocketAddr::new(self.server.addr.into(), port))
        })
    }
}
