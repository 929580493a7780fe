//! The measured program of `cargo xtask bench cost`: one side of a transport or byte-stream
//! exchange of `N` operations, run under callgrind (or strace) in the guest while the other
//! side runs natively; the xtask takes the difference of the counts at two values of `N`.
//!
//! ```text
//! cost ROLE SIZE N LOCAL_IP PEER_IP PORT [busy|adaptive|event|reactor]
//! ```
//!
//! Roles (the first of each pair listens on `LOCAL_IP:PORT`, the second connects to
//! `PEER_IP:PORT`, retrying until the listener is up):
//! - `recv` / `send`: `N` messages of `SIZE` bytes one way (`Conn::send`, `Conn::recv`); the
//!   receiver then answers one byte, so the sender ends only once everything arrived.
//! - `recv` / `send-buf`: as `recv` / `send`, each message a buffer of the pool sent without a
//!   copy (`Conn::alloc`, `Conn::send_buf`; not written, as the bytes are the application's):
//!   one frame up to the eager limit, one rendezvous chunk read with one READ above it.
//! - `serve` / `call`: `N` RPC calls of `SIZE` bytes, [`CALLS_OUTSTANDING`] in flight
//!   (`Conn::call_async`, made by as many callers, each calling in turn), echoed by
//!   `Conn::serve_with`.
//! - `stream-server` / `stream-client`: as rdma-core's `rstream -C N -S SIZE`: the client writes
//!   `N` transfers of `SIZE` bytes and the server reads them (each read exactly `SIZE`
//!   bytes), then the server writes `N` back and the client reads them.
//!
//! Polling (last argument, `reactor` by default): `reactor` is `Polling::Reactor` with no spin,
//! driven by a thread of this program that waits for the endpoint's progress fd and calls
//! `progress_ready`, so no thread spins on an empty queue. The work of an exchange runs in
//! [`measured_work`] and the reactor in [`measured_reactor`], neither inlined and with no
//! closures of their own (a closure's name would match too): the xtask counts instructions
//! inside those two only (`--toggle-collect=cost::measured_work`,
//! `--toggle-collect=cost::measured_reactor`). That leaves out the endpoint's progress thread,
//! which under reactor polling only runs its timers, at their deadlines and at least every
//! 100 ms whatever the traffic: under callgrind's slowdown their count follows the run's
//! length, not `N`.
#![forbid(unsafe_code)]

use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::stream::{FuturesUnordered, StreamExt};
use transport::stream::{Stream, StreamListener};
use transport::{Conn, Endpoint, EndpointConfig, Polling, ProtocolConfig};

/// RPC calls in flight at once.
const CALLS_OUTSTANDING: usize = 32;
/// Bound of every wait.
const TIMEOUT: Duration = Duration::from_secs(120);

type Res<T> = Result<T, String>;

struct Args {
    role: String,
    size: usize,
    n: u64,
    local: IpAddr,
    peer: IpAddr,
    port: u16,
    polling: Polling,
}

fn parse(args: &[String]) -> Res<Args> {
    let usage = "usage: cost ROLE SIZE N LOCAL_IP PEER_IP PORT [busy|adaptive|event|reactor]";
    if args.len() < 6 {
        return Err(usage.into());
    }
    let num = |i: usize| -> Res<u64> {
        args[i]
            .parse()
            .map_err(|_| format!("{:?} is not a number; {usage}", args[i]))
    };
    let ip = |i: usize| -> Res<IpAddr> {
        args[i]
            .parse()
            .map_err(|_| format!("{:?} is not an IP address; {usage}", args[i]))
    };
    let polling = match args.get(6).map_or("reactor", String::as_str) {
        "busy" => Polling::Busy,
        "adaptive" => EndpointConfig::default().polling(),
        "event" => Polling::Event,
        "reactor" => Polling::Reactor {
            spin: Duration::ZERO,
        },
        other => return Err(format!("unknown polling {other:?}; {usage}")),
    };
    Ok(Args {
        role: args[0].clone(),
        size: num(1)? as usize,
        n: num(2)?,
        local: ip(3)?,
        peer: ip(4)?,
        port: u16::try_from(num(5)?).map_err(|_| format!("bad port; {usage}"))?,
        polling,
    })
}

/// perftest's queue depths (as the transport bench configures its endpoints), `polling`, and
/// handshakes long enough for a side slowed down by callgrind.
fn config(polling: Polling) -> EndpointConfig {
    EndpointConfig::default()
        .with_polling(polling)
        .with_pool_bytes(96 << 20)
        .with_max_connections(2)
        .with_connect_timeout(Duration::from_secs(60))
        .with_proto(
            ProtocolConfig::default()
                .with_window(512)
                .with_sq_depth(128),
        )
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    // `cargo bench` runs every bench target with `--bench`: nothing to do without a role.
    if args.is_empty() || args[0] == "--bench" {
        eprintln!("cost: run by `cargo xtask bench cost` (see the file's docs)");
        return ExitCode::SUCCESS;
    }
    match parse(&args).and_then(|a| run(&a)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("cost: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(a: &Args) -> Res<()> {
    let ep =
        Endpoint::with_config(a.local, config(a.polling)).map_err(|e| format!("endpoint: {e}"))?;
    let stop = Arc::new(AtomicBool::new(false));
    let driver = matches!(a.polling, Polling::Reactor { .. }).then(|| {
        let (ep, stop) = (ep.clone(), stop.clone());
        std::thread::spawn(move || measured_reactor(&ep, &stop))
    });
    let result = exchange(a, &ep);
    stop.store(true, Ordering::Relaxed);
    if let Some(d) = driver {
        let _ = d.join();
    }
    result
}

/// Drives a reactor-polled endpoint until `stop` (counted; no closures within, whose names
/// would match the toggle too).
#[inline(never)]
fn measured_reactor(ep: &Endpoint, stop: &AtomicBool) {
    ep.progress_ready();
    while !stop.load(Ordering::Relaxed) {
        match verbs_sys::fd::wait_readable(ep.progress_fd(), Some(Duration::from_millis(50))) {
            Ok(true) => {
                ep.progress_ready();
            }
            Ok(false) => {}
            Err(e) => {
                eprintln!("cost: waiting for the progress fd: {e}");
                return;
            }
        }
    }
}

/// Connects to the peer's listener, retrying while it is not up yet (under callgrind a
/// listener takes tens of seconds to start).
fn connect(ep: &Endpoint, to: SocketAddr) -> Res<Conn> {
    let end = Instant::now() + TIMEOUT;
    loop {
        match ep.connect_timeout(to, Duration::from_secs(60)) {
            Ok(c) => return Ok(c),
            Err(e) if Instant::now() >= end => return Err(format!("connect {to}: {e}")),
            Err(_) => std::thread::sleep(Duration::from_millis(200)),
        }
    }
}

fn exchange(a: &Args, ep: &Endpoint) -> Res<()> {
    let to = SocketAddr::new(a.peer, a.port);
    let e = |what: &'static str| move |e: transport::Error| format!("{what}: {e}");
    match a.role.as_str() {
        "recv" | "serve" => {
            let listener = ep.listen(a.port).map_err(e("listen"))?;
            // A slowed listener may see a request its peer already gave up on: take the next.
            let end = Instant::now() + TIMEOUT;
            let conn = loop {
                match listener.accept_timeout(end.saturating_duration_since(Instant::now())) {
                    Ok(c) => break c,
                    Err(err) if Instant::now() >= end => return Err(format!("accept: {err}")),
                    Err(_) => {}
                }
            };
            measured_work(a, Side::Conn(&conn))?;
            let _ = conn.close(Duration::from_secs(10));
            Ok(())
        }
        "send" | "send-buf" | "call" => {
            let conn = connect(ep, to)?;
            measured_work(a, Side::Conn(&conn))?;
            let _ = conn.close(Duration::from_secs(10));
            Ok(())
        }
        "stream-server" => {
            let listener = StreamListener::bind_on(ep, a.port).map_err(|e| format!("bind: {e}"))?;
            let end = Instant::now() + TIMEOUT;
            let mut s = loop {
                match listener.accept_blocking(end.saturating_duration_since(Instant::now())) {
                    Ok((s, _)) => break s,
                    Err(err) if Instant::now() >= end => return Err(format!("accept: {err}")),
                    Err(_) => {}
                }
            };
            measured_work(a, Side::Stream(&mut s))
        }
        "stream-client" => {
            let mut s = Stream::from_conn(connect(ep, to)?);
            measured_work(a, Side::Stream(&mut s))
        }
        other => Err(format!("unknown role {other:?}")),
    }
}

enum Side<'a> {
    Conn(&'a Conn),
    Stream(&'a mut Stream),
}

/// The counted part: the exchange on a connection that is set up. A call of its own (not a
/// tail call, so callgrind sees it return), with no closures in it.
#[inline(never)]
fn measured_work(a: &Args, side: Side<'_>) -> Res<()> {
    let r = ops(a, side);
    std::hint::black_box(&r);
    r
}

/// The operations of `a.role`.
fn ops(a: &Args, side: Side<'_>) -> Res<()> {
    let (size, n) = (a.size, a.n);
    let e = |what: &'static str| move |e: transport::Error| format!("{what}: {e}");
    let io = |what: &'static str| move |e: std::io::Error| format!("{what}: {e}");
    match (a.role.as_str(), side) {
        ("recv", Side::Conn(c)) => {
            for i in 0..n {
                let m = c.recv(TIMEOUT).map_err(e("recv"))?;
                if m.len() != size {
                    return Err(format!("message {i}: {} bytes, not {size}", m.len()));
                }
            }
            c.send(b"!").map_err(e("answer"))
        }
        ("send", Side::Conn(c)) => {
            let data = vec![0x5a; size];
            for _ in 0..n {
                c.send_timeout(&data, TIMEOUT).map_err(e("send"))?;
            }
            c.recv(TIMEOUT)
                .map(drop)
                .map_err(e("the receiver's answer"))
        }
        ("send-buf", Side::Conn(c)) => {
            for _ in 0..n {
                let buf = c.alloc(size).map_err(e("alloc"))?;
                c.send_buf(buf).map_err(e("send_buf"))?;
            }
            c.recv(TIMEOUT)
                .map(drop)
                .map_err(e("the receiver's answer"))
        }
        ("serve", Side::Conn(c)) => c
            .serve_with(|m, out| out.extend_from_slice(&m.bytes()))
            .map_err(e("serve")),
        ("call", Side::Conn(c)) => {
            let request = vec![0x33; size];
            // A fixed set of callers, each making its share of the calls one after another:
            // the calls' futures live inside their caller's, made once, so no call costs a
            // task of the executor's (an allocation, and the future moved into it).
            let caller = |first: u64| {
                let request = &request;
                async move {
                    for _ in (first..n).step_by(CALLS_OUTSTANDING) {
                        let r = c.call_async(request, TIMEOUT).await.map_err(e("call"))?;
                        if r.len() != size {
                            return Err(format!("response of {} bytes, not {size}", r.len()));
                        }
                    }
                    Ok(())
                }
            };
            let mut callers: FuturesUnordered<_> =
                (0..CALLS_OUTSTANDING as u64).map(caller).collect();
            futures::executor::block_on(async {
                while let Some(r) = callers.next().await {
                    r?;
                }
                Ok(())
            })
        }
        ("stream-client", Side::Stream(s)) => {
            let mut buf = vec![0x5a; size];
            for _ in 0..n {
                s.write_all(&buf).map_err(io("write"))?;
            }
            for _ in 0..n {
                s.read_exact(&mut buf).map_err(io("read"))?;
            }
            s.shutdown_blocking().map_err(io("shutdown"))
        }
        ("stream-server", Side::Stream(s)) => {
            let mut buf = vec![0u8; size];
            for _ in 0..n {
                s.read_exact(&mut buf).map_err(io("read"))?;
            }
            for _ in 0..n {
                s.write_all(&buf).map_err(io("write"))?;
            }
            // The client's end of stream: all it wrote was read and it read all of ours.
            let mut rest = [0u8; 1];
            match s.read(&mut rest).map_err(io("read the end"))? {
                0 => Ok(()),
                _ => Err("more bytes than written".into()),
            }
        }
        (role, _) => Err(format!("role {role:?} on the wrong kind of connection")),
    }
}
