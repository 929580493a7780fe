//! The other end of the crate's two-host tests, run on the peer host by `tests/it`.
//!
//! `cm-test-peer server --addr IP:PORT [--count N] [--reject] [--disconnect-first]`: accepts
//! `N` connections (0: until killed), each in its own thread. It answers a connect request
//! with private data made of the 16-byte wire form of a 4 KiB region the client may RDMA READ
//! and WRITE, followed by the client's own private data; then it echoes every message it
//! receives until the client disconnects (or, with `--disconnect-first`, disconnects itself
//! after the first echo). With `--reject` it rejects each request with `"go away"`.
//!
//! `cm-test-peer client --addr IP:PORT --src IP [--hold]`: connects, has one message echoed,
//! then disconnects, or with `--hold` waits to be killed.
//!
//! Prints one line per event the tests look for (`accepted`, `echoed`, `disconnected`,
//! `served N`) and exits non-zero on any error.
use std::net::{IpAddr, SocketAddr};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use cm::{ConnOptions, Connection, Connector, Listener};
use verbs::{AccessFlags, CompletionBuf, MemoryRegion, RecvRequest, SendRequest, WcOpcode};

const TIMEOUT: Duration = Duration::from_secs(20);
const MSG: usize = 256;
const RECVS: usize = 4;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

struct Args {
    role: String,
    addr: SocketAddr,
    src: Option<IpAddr>,
    count: usize,
    reject: bool,
    disconnect_first: bool,
    hold: bool,
}

fn parse() -> Result<Args, BoxError> {
    let mut it = std::env::args().skip(1);
    let role = it
        .next()
        .ok_or("usage: cm-test-peer server|client --addr IP:PORT ...")?;
    let mut a = Args {
        role,
        addr: "0.0.0.0:0".parse()?,
        src: None,
        count: 1,
        reject: false,
        disconnect_first: false,
        hold: false,
    };
    while let Some(flag) = it.next() {
        match flag.as_str() {
            "--addr" => a.addr = it.next().ok_or("--addr needs a value")?.parse()?,
            "--src" => a.src = Some(it.next().ok_or("--src needs a value")?.parse()?),
            "--count" => a.count = it.next().ok_or("--count needs a value")?.parse()?,
            "--reject" => a.reject = true,
            "--disconnect-first" => a.disconnect_first = true,
            "--hold" => a.hold = true,
            other => return Err(format!("unknown argument {other}").into()),
        }
    }
    Ok(a)
}

fn main() -> ExitCode {
    let result = parse().and_then(|a| match a.role.as_str() {
        "server" => server(&a),
        "client" => client(&a),
        other => Err(format!("unknown role {other}").into()),
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("cm-test-peer: {e}");
            ExitCode::FAILURE
        }
    }
}

fn server(a: &Args) -> Result<(), BoxError> {
    let listener = Listener::bind(a.addr, ConnOptions::new())?;
    eprintln!("listening on {:?}", listener.local_addr());
    let mut handles = Vec::new();
    let mut n = 0;
    while a.count == 0 || n < a.count {
        let req = match listener.get_request(Duration::from_secs(1)) {
            Ok(r) => r,
            Err(e) if e.is_timeout() => continue,
            Err(e) => return Err(e.into()),
        };
        n += 1;
        if a.reject {
            req.reject(b"go away")?;
            println!("rejected");
            continue;
        }
        let disconnect_first = a.disconnect_first;
        handles.push(std::thread::spawn(move || -> Result<(), BoxError> {
            let target = req.pd().reg_mr(
                4096,
                AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ | AccessFlags::REMOTE_WRITE,
            )?;
            for _ in 0..RECVS {
                let mr = req.pd().reg_mr(MSG, AccessFlags::LOCAL_WRITE)?;
                req.qp()
                    .post_recv(RecvRequest::new(mr, ..)?)
                    .map_err(|e| e.error)?;
            }
            let theirs = req.private_data();
            let mut reply = target.remote(..)?.to_bytes().to_vec();
            reply.extend_from_slice(&theirs[..theirs.len().min(56)]);
            let conn = req.accept(&reply, TIMEOUT)?;
            println!("accepted");
            echo(&conn, disconnect_first)?;
            drop(target);
            Ok(())
        }));
    }
    let mut failed = None;
    for h in handles {
        match h.join() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => failed = Some(e),
            Err(_) => failed = Some("a connection thread panicked".into()),
        }
    }
    if let Some(e) = failed {
        return Err(e);
    }
    println!("served {n}");
    Ok(())
}

/// Waits (bounded) for the next message to arrive, taking the completions before it.
fn wait_for_receive(conn: &Connection) -> Result<(), BoxError> {
    let deadline = Instant::now() + TIMEOUT;
    let mut wcs = CompletionBuf::new(8);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(format!("no message from the client for {TIMEOUT:?}").into());
        }
        for wc in conn.cq().wait_and_poll(&mut wcs, Some(left))?.iter() {
            let (status, opcode) = (wc.status(), wc.opcode());
            drop(conn.qp().reclaim(wc));
            status?;
            if opcode == Some(WcOpcode::Recv) {
                return Ok(());
            }
        }
    }
}

/// Echoes messages until the peer disconnects (or after the first, with `disconnect_first`).
fn echo(conn: &Connection, disconnect_first: bool) -> Result<(), BoxError> {
    let mut wcs = CompletionBuf::new(8);
    let mut last_progress = Instant::now();
    loop {
        if last_progress.elapsed() > Duration::from_secs(60) {
            return Err("no traffic and no disconnect for 60 s".into());
        }
        let polled = conn
            .cq()
            .wait_and_poll(&mut wcs, Some(Duration::from_millis(100)))?;
        if polled.is_empty() {
            if conn.poll_event(Duration::ZERO)? == Some(cm::EventKind::Disconnected) {
                println!("disconnected");
                return Ok(());
            }
            continue;
        }
        last_progress = Instant::now();
        let mut reposts = Vec::new();
        for wc in polled.iter() {
            let status = wc.status();
            let opcode = wc.opcode();
            let len = wc.byte_len() as usize;
            let mut rec = conn.qp().reclaim(wc);
            let mr = rec.iter_mut().find_map(|r| r.take::<MemoryRegion>().ok());
            if let Err(e) = status {
                if e.status == Some(verbs::WcStatus::WrFlushErr) {
                    conn.wait_disconnect(TIMEOUT)?;
                    println!("disconnected");
                    return Ok(());
                }
                return Err(e.into());
            }
            if opcode == Some(WcOpcode::Recv) {
                let mr = mr.ok_or("receive without its buffer")?;
                let mut out = conn.pd().reg_mr(MSG, AccessFlags::LOCAL_WRITE)?;
                out.as_mut_slice()[..len].copy_from_slice(&mr.as_slice()[..len]);
                conn.qp()
                    .post_send(SendRequest::send(out, 0..len)?.signaled(true))
                    .map_err(|e| e.error)?;
                reposts.push(mr);
                println!("echoed");
                if disconnect_first {
                    // Hang up once the client has the echo: it says so with a message of its
                    // own. The echo's completion would not do: on iWARP a SEND completes
                    // once handed to TCP, and the disconnect may tear the connection down
                    // before the bytes leave.
                    wait_for_receive(conn)?;
                    conn.disconnect(TIMEOUT)?;
                    println!("disconnected");
                    return Ok(());
                }
            }
        }
        for mr in reposts {
            conn.qp()
                .post_recv(RecvRequest::new(mr, ..)?)
                .map_err(|e| e.error)?;
        }
    }
}

fn client(a: &Args) -> Result<(), BoxError> {
    let deadline = Instant::now() + TIMEOUT;
    let conn = loop {
        let mut c = Connector::new(a.addr).timeout(Duration::from_secs(5));
        if let Some(src) = a.src {
            c = c.src(src);
        }
        let pending = c.resolve()?;
        let mr = pending.pd().reg_mr(MSG, AccessFlags::LOCAL_WRITE)?;
        pending
            .qp()
            .post_recv(RecvRequest::new(mr, ..)?)
            .map_err(|e| e.error)?;
        match pending.connect() {
            Ok(c) => break c,
            Err(cm::Error::Rejected { .. }) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(100));
            }
            Err(e) => return Err(e.into()),
        }
    };
    let mut msg = conn.pd().reg_mr(MSG, AccessFlags::LOCAL_WRITE)?;
    msg.as_mut_slice()[..5].copy_from_slice(b"hello");
    conn.qp()
        .post_send(SendRequest::send(msg, 0..5)?.signaled(true))
        .map_err(|e| e.error)?;
    let mut wcs = CompletionBuf::new(4);
    let mut got = false;
    while !got {
        let polled = conn.cq().wait_and_poll(&mut wcs, Some(TIMEOUT))?;
        if polled.is_empty() {
            return Err("no echo".into());
        }
        for wc in polled.iter() {
            wc.status()?;
            got |= wc.opcode() == Some(WcOpcode::Recv);
            drop(conn.qp().reclaim(wc));
        }
    }
    println!("echoed");
    if a.hold {
        loop {
            std::thread::sleep(Duration::from_secs(1));
        }
    }
    conn.disconnect(TIMEOUT)?;
    println!("disconnected");
    Ok(())
}
