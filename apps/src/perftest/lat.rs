//! The latency tests, as perftest runs them: SEND ping-pong (`run_iter_lat_send`; the client
//! sends first), RDMA WRITE ping-pong polling the last byte of the message
//! (`run_iter_lat_write`; the server writes first), and READ / atomics issued by the client
//! alone (`run_iter_lat`) while the server waits.
use std::time::{Duration, Instant};

use serde_json::Value;
use verbs::{AccessFlags, MemoryRegion, RecvRequest, SendRequest, WrOp};

use super::endpoint::{remote_slice, Done, Poller};
use super::options::{AtomicType, Output, Params};
use super::report::{self, LatDuration, LatStats};
use super::{Error, Test, TestRun};

/// Receive buffers kept posted by `send-lat` (a ping-pong has one message in flight).
const LAT_RECVS: usize = 4;

/// Runs every size; returns the JSON results (empty on a server of READ/atomics, which
/// measures nothing).
pub fn run(p: &Params, s: &mut TestRun) -> Result<Vec<Value>, Error> {
    let quiet = p.args.output.is_some();
    let passive = p.is_server() && matches!(p.test, Test::ReadLat | Test::AtomicLat);
    if passive {
        return Ok(Vec::new());
    }
    if !quiet {
        println!("{}", report::RESULT_LINE);
        println!(
            "{}",
            if p.duration.is_some() {
                report::LAT_DUR_HEADER
            } else {
                report::LAT_HEADER
            }
        );
    }
    let mut poller = Poller::new(16, p.args.events, p.timeout());
    let mut results = Vec::new();
    let mut recv_bufs = Vec::new();
    if p.test == Test::SendLat {
        let n = LAT_RECVS.min(p.rx_depth as usize).max(1);
        for _ in 0..n {
            recv_bufs.push(
                s.ep.pd
                    .reg_mr(p.max_size as usize, AccessFlags::LOCAL_WRITE)
                    .map_err(|e| Error::Verbs("register receive buffers", e))?,
            );
        }
        // Posted before the first synchronising handshake: the client sends right after it.
        post_recvs(s, &mut recv_bufs)?;
    }
    for &size in &p.sizes {
        let rtt_factor = match p.test {
            Test::SendLat | Test::WriteLat => 2.0,
            _ => 1.0,
        };
        let (posted, elapsed) = match p.test {
            Test::SendLat => {
                let mine = s.mine[0];
                s.comm.hand_shake(&mine)?;
                send_lat(p, s, &mut poller, &mut recv_bufs, size)?
            }
            Test::WriteLat => write_lat(p, s, &mut poller, size)?,
            _ => one_sided(p, s, &mut poller, size)?,
        };
        if let Some(d) = p.duration {
            let n = posted.len() as u64;
            let secs = elapsed.as_secs_f64().max(1e-9);
            let r = LatDuration {
                size,
                iters: n,
                avg: secs * 1e6 / n.max(1) as f64 / rtt_factor,
                tps: n as f64 / secs,
            };
            debug_assert!(d > 0);
            if quiet {
                println!("{:.6}", r.avg);
            } else {
                println!("{}", r.line());
            }
            results.push(r.json());
        } else {
            let st = LatStats::from_posts(size, &posted, rtt_factor).ok_or_else(|| {
                Error::Usage("too few iterations for statistics: use -n 5 or more".into())
            })?;
            match p.args.output {
                Some(Output::Latency) => println!("{:.6}", st.avg),
                Some(_) => println!("{:.6}", st.avg),
                None => println!("{}", st.line()),
            }
            results.push(st.json());
        }
    }
    Ok(results)
}

fn post_recvs(s: &TestRun, bufs: &mut Vec<MemoryRegion>) -> Result<(), Error> {
    while let Some(b) = bufs.pop() {
        let req = RecvRequest::new(b, ..).map_err(|e| Error::Verbs("build a receive", e))?;
        if let Err(e) = s.ep.qps[0].post_recv(req) {
            return Err(Error::Verbs("post a receive", e.error));
        }
    }
    Ok(())
}

/// Hands the receive buffers of finished requests back to `bufs`.
fn take_bufs(done: &mut Done, bufs: &mut Vec<MemoryRegion>) {
    for r in &mut done.bufs {
        while let Ok(b) = r.take::<MemoryRegion>() {
            bufs.push(b);
        }
    }
}

fn send_lat(
    p: &Params,
    s: &mut TestRun,
    poller: &mut Poller,
    recv_bufs: &mut Vec<MemoryRegion>,
    size: u64,
) -> Result<(Vec<Duration>, Duration), Error> {
    let iters = p.iters as usize;
    let client = !p.is_server();
    let inline = size <= u64::from(s.ep.max_inline);
    let data = vec![0x5au8; size as usize];
    let mut send_buf = if inline {
        None
    } else {
        let mut m =
            s.ep.pd
                .reg_mr(size as usize, AccessFlags::LOCAL_WRITE)
                .map_err(|e| Error::Verbs("register the send buffer", e))?;
        m.as_mut_slice().fill(0x5a);
        Some(m)
    };
    let mut posted = Vec::with_capacity(iters);
    let (mut scnt, mut rcnt) = (0usize, 0usize);
    let mut send_pending = false;
    let mut done = Vec::new();
    let t0 = Instant::now();
    while scnt < iters || rcnt < iters {
        if rcnt < iters && !(scnt < 1 && client) {
            // Wait for the peer's message (noting our send's completion if it comes first).
            let mut got = false;
            while !got {
                poller.wait(&s.ep, &mut done)?;
                for mut d in done.drain(..) {
                    if d.recv {
                        got = true;
                        rcnt += 1;
                        take_bufs(&mut d, recv_bufs);
                    } else {
                        send_pending = false;
                        if let Some(b) = d
                            .bufs
                            .iter_mut()
                            .find_map(|r| r.take::<MemoryRegion>().ok())
                        {
                            send_buf = Some(b);
                        }
                    }
                }
                post_recvs(s, recv_bufs)?;
            }
        }
        if scnt < iters {
            while send_pending {
                poller.wait(&s.ep, &mut done)?;
                for mut d in done.drain(..) {
                    if d.recv {
                        rcnt += 1;
                        take_bufs(&mut d, recv_bufs);
                    } else {
                        send_pending = false;
                        if let Some(b) = d
                            .bufs
                            .iter_mut()
                            .find_map(|r| r.take::<MemoryRegion>().ok())
                        {
                            send_buf = Some(b);
                        }
                    }
                }
                post_recvs(s, recv_bufs)?;
            }
            let req = match send_buf.take() {
                Some(b) => SendRequest::send(b, 0..size as usize),
                None => SendRequest::inline(WrOp::Send, &data),
            }
            .map_err(|e| Error::Verbs("build a send", e))?;
            posted.push(t0.elapsed());
            if let Err(e) = s.ep.qps[0].post_send(req) {
                return Err(Error::Verbs("post a send", e.error));
            }
            send_pending = true;
            scnt += 1;
        }
    }
    while send_pending {
        poller.wait(&s.ep, &mut done)?;
        for mut d in done.drain(..) {
            if d.recv {
                take_bufs(&mut d, recv_bufs);
            } else {
                send_pending = false;
            }
        }
        post_recvs(s, recv_bufs)?;
    }
    Ok((posted, t0.elapsed()))
}

fn write_lat(
    p: &Params,
    s: &mut TestRun,
    poller: &mut Poller,
    size: u64,
) -> Result<(Vec<Duration>, Duration), Error> {
    let iters = p.iters as usize;
    let server = p.is_server();
    let last = size as usize - 1;
    let remote = remote_slice(&s.remote[0], size);
    let inline = size <= u64::from(s.ep.max_inline);
    let mut data = vec![0u8; size as usize];
    let mut src = if inline {
        None
    } else {
        Some(
            s.ep.pd
                .reg_mr(size as usize, AccessFlags::LOCAL_WRITE)
                .map_err(|e| Error::Verbs("register the write buffer", e))?,
        )
    };
    let mut posted = Vec::with_capacity(iters);
    let (mut scnt, mut rcnt, mut ccnt) = (0usize, 0usize, 0usize);
    let mut done = Vec::new();
    let timeout = p.timeout();
    let t0 = Instant::now();
    while scnt < iters || ccnt < iters || rcnt < iters {
        if rcnt < iters && !(scnt < 1 && server) {
            rcnt += 1;
            let want = rcnt as u8;
            let mut b = [0u8];
            let since = Instant::now();
            let mut spins = 0u32;
            loop {
                s.ep.target
                    .read(last, &mut b)
                    .map_err(|e| Error::Verbs("read the receive buffer", e))?;
                if b[0] == want {
                    break;
                }
                spins = spins.wrapping_add(1);
                if spins % 4096 == 0 && since.elapsed() > timeout {
                    return Err(Error::Peer(format!(
                        "no write from the peer for {} s: it stopped, or runs a different \
                         test or -s",
                        timeout.as_secs()
                    )));
                }
                std::hint::spin_loop();
            }
        }
        if scnt < iters {
            scnt += 1;
            let req = match src.take() {
                Some(mut m) => {
                    m.write(last, &[scnt as u8])
                        .map_err(|e| Error::Verbs("fill the write buffer", e))?;
                    SendRequest::rdma_write(m, 0..size as usize, remote)
                }
                None => {
                    data[last] = scnt as u8;
                    SendRequest::inline(WrOp::RdmaWrite(remote), &data)
                }
            }
            .map_err(|e| Error::Verbs("build an RDMA write", e))?;
            posted.push(t0.elapsed());
            if let Err(e) = s.ep.qps[0].post_send(req) {
                return Err(Error::Verbs("post an RDMA write", e.error));
            }
        }
        if ccnt < iters {
            while ccnt < scnt {
                poller.wait(&s.ep, &mut done)?;
                for mut d in done.drain(..) {
                    ccnt += d.bufs.len().max(1);
                    if let Some(b) = d
                        .bufs
                        .iter_mut()
                        .find_map(|r| r.take::<MemoryRegion>().ok())
                    {
                        src = Some(b);
                    }
                }
            }
        }
    }
    Ok((posted, t0.elapsed()))
}

/// READ or atomics: the client alone, one request at a time.
fn one_sided(
    p: &Params,
    s: &mut TestRun,
    poller: &mut Poller,
    size: u64,
) -> Result<(Vec<Duration>, Duration), Error> {
    let remote = remote_slice(&s.remote[0], size.max(8));
    let mut buf = Some(
        s.ep.pd
            .reg_mr(size.max(8) as usize, AccessFlags::LOCAL_WRITE)
            .map_err(|e| Error::Verbs("register the local buffer", e))?,
    );
    let until = p.duration.map(|d| Instant::now() + Duration::from_secs(d));
    let iters = if until.is_some() {
        usize::MAX
    } else {
        p.iters as usize
    };
    let mut posted = Vec::with_capacity(p.iters as usize);
    let mut done = Vec::new();
    let t0 = Instant::now();
    let mut n = 0usize;
    while n < iters && until.map_or(true, |u| Instant::now() < u) {
        let b = buf
            .take()
            .ok_or_else(|| Error::Peer("local buffer lost".into()))?;
        let req = match (p.test, p.args.atomic_type) {
            (Test::AtomicLat, AtomicType::FetchAndAdd) => {
                SendRequest::fetch_and_add(b, 0, remote, 1)
            }
            (Test::AtomicLat, AtomicType::CmpAndSwap) => {
                SendRequest::compare_and_swap(b, 0, remote, 0, 0)
            }
            _ => SendRequest::rdma_read(b, 0..size as usize, remote),
        }
        .map_err(|e| Error::Verbs("build the request", e))?;
        if until.is_none() {
            posted.push(t0.elapsed());
        }
        if let Err(e) = s.ep.qps[0].post_send(req) {
            return Err(Error::Verbs("post the request", e.error));
        }
        while buf.is_none() {
            poller.wait(&s.ep, &mut done)?;
            for mut d in done.drain(..) {
                if let Some(b) = d
                    .bufs
                    .iter_mut()
                    .find_map(|r| r.take::<MemoryRegion>().ok())
                {
                    buf = Some(b);
                }
            }
        }
        n += 1;
    }
    if until.is_some() {
        // Duration mode keeps no per-iteration times: report the count.
        posted = vec![Duration::ZERO; n];
    }
    Ok((posted, t0.elapsed()))
}
