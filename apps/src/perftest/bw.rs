//! The bandwidth tests, as perftest runs them: the client keeps up to `-t` requests in flight
//! per QP, signalling one in `-Q` (`run_iter_bw`); for SEND the server counts receives
//! (`run_iter_bw_server`); for WRITE and READ the server only waits for the report exchange.
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;
use verbs::{AccessFlags, MemoryRegion, RecvRequest, SendRequest, WrOp};

use super::endpoint::{remote_slice, Poller};
use super::exchange::BwReport;
use super::options::{Output, Params};
use super::report::{self, BwStats};
use super::{Error, TestRun, Verb};

/// Memory for posted receives (send-bw server) or READ destinations, per QP.
const BUF_BUDGET: u64 = 128 << 20;

/// Runs every size; returns the JSON results.
pub fn run(p: &Params, s: &mut TestRun) -> Result<Vec<Value>, Error> {
    let quiet = p.args.output.is_some();
    let verb = p.test.verb();
    let server = p.is_server();
    let gbits = p.args.report_gbits;
    // -b: both sides post and measure; each prints the sum of both sides' results.
    let duplex = p.args.bidirectional;
    if server && verb != Verb::Send && !duplex {
        // perftest's server of WRITE/READ only waits for the client's end and its report.
        let mine = s.mine[0];
        s.comm.hand_shake(&mine)?;
        s.comm.bw_reports(&BwReport::default())?;
        return Ok(Vec::new());
    }
    if !quiet {
        println!("{}", report::RESULT_LINE);
        println!("{}", report::bw_header(gbits));
    }
    let mut poller = Poller::new(64, p.args.events, p.timeout());
    let mut results = Vec::new();
    let mut last = BwStats::compute(0, &[], &[], 1, gbits);
    // send-bw server (and both sides with -b): receive buffers, posted before each size's
    // synchronising handshake.
    let receives = verb == Verb::Send && (server || duplex);
    let nrecv = (p.rx_depth as u64).min((BUF_BUDGET / p.max_size).max(4)) as usize;
    let mut recv_bufs = Vec::new();
    if receives {
        for _ in 0..nrecv * s.ep.qps.len() {
            recv_bufs.push(
                s.ep.pd
                    .reg_mr(p.max_size as usize, AccessFlags::LOCAL_WRITE)
                    .map_err(|e| Error::Verbs("register receive buffers (lower -r or -s)", e))?,
            );
        }
    }
    for &size in &p.sizes {
        let mine = s.mine[0];
        if receives {
            for qp in 0..s.ep.qps.len() {
                for _ in 0..nrecv {
                    post_recv(s, qp, &mut recv_bufs)?;
                }
            }
        }
        if verb == Verb::Send || duplex {
            s.comm.hand_shake(&mine)?;
        }
        let (posted, completed) = if server && !duplex {
            serve_sends(p, s, &mut poller, &mut recv_bufs)?
        } else {
            let recv = (duplex && verb == Verb::Send).then_some(&mut recv_bufs);
            client(p, s, &mut poller, size, recv)?
        };
        let cq_mod = if server && !duplex {
            1
        } else {
            p.cq_mod as usize
        };
        let mut st = BwStats::compute(size, &posted, &completed, cq_mod, gbits);
        if duplex {
            // perftest: WRITE and READ synchronise after each size of a sweep before the
            // reports; SEND after the reports (below).
            if verb != Verb::Send && p.args.all {
                s.comm.hand_shake(&mine)?;
            }
            let theirs = s.comm.bw_reports(&BwReport {
                size: st.size,
                iters: st.iters,
                bw_peak: st.peak,
                bw_avg: st.avg,
                msg_rate: st.msg_rate,
            })?;
            if theirs.size != st.size {
                return Err(Error::Peer(format!(
                    "the peer measured {} B messages, we {} B: do both sides use the same -s / -a?",
                    theirs.size, st.size
                )));
            }
            st.peak += theirs.bw_peak;
            st.avg += theirs.bw_avg;
            st.msg_rate += theirs.msg_rate;
        }
        match p.args.output {
            Some(Output::Bandwidth) => println!("{:.6}", st.avg),
            Some(Output::MessageRate) => println!("{:.6}", st.msg_rate),
            Some(Output::Latency) => println!("{:.6}", 1e6 / (st.msg_rate * 1e6).max(1e-9)),
            None => println!("{}", st.line()),
        }
        results.push(st.json());
        last = st;
        // perftest synchronises after each size of a sweep only.
        if verb == Verb::Send && p.args.all {
            s.comm.hand_shake(&mine)?;
        }
    }
    if receives {
        // Receives still posted are flushed when the QPs go; nothing else to hand back.
        drop(recv_bufs);
    }
    if verb != Verb::Send && !duplex {
        let mine = s.mine[0];
        s.comm.hand_shake(&mine)?;
        s.comm.bw_reports(&BwReport {
            size: last.size,
            iters: last.iters,
            bw_peak: last.peak,
            bw_avg: last.avg,
            msg_rate: last.msg_rate,
        })?;
    }
    Ok(results)
}

fn post_recv(s: &TestRun, qp: usize, bufs: &mut Vec<MemoryRegion>) -> Result<(), Error> {
    let Some(b) = bufs.pop() else {
        return Ok(());
    };
    let req = RecvRequest::new(b, ..).map_err(|e| Error::Verbs("build a receive", e))?;
    s.ep.qps[qp]
        .post_recv(req)
        .map(|_| ())
        .map_err(|e| Error::Verbs("post a receive", e.error))
}

/// send-bw server: counts `-n` receives per QP; times from the first to each.
fn serve_sends(
    p: &Params,
    s: &mut TestRun,
    poller: &mut Poller,
    bufs: &mut Vec<MemoryRegion>,
) -> Result<(Vec<Duration>, Vec<Duration>), Error> {
    let total = p.iters as usize * s.ep.qps.len();
    let mut completed = Vec::with_capacity(total);
    let mut done = Vec::new();
    let mut t0 = None;
    let mut left = vec![p.iters as usize; s.ep.qps.len()];
    while completed.len() < total {
        poller.wait(&s.ep, &mut done)?;
        let now = Instant::now();
        let t0 = *t0.get_or_insert(now);
        for mut d in done.drain(..) {
            if !d.recv {
                continue;
            }
            completed.push(now - t0);
            left[d.qp] = left[d.qp].saturating_sub(1);
            for r in &mut d.bufs {
                if let Ok(b) = r.take::<MemoryRegion>() {
                    bufs.push(b);
                }
            }
            // Keep the queue full only with receives this run will consume.
            let posted = s.ep.qps[d.qp].in_flight().1;
            if posted < left[d.qp] {
                post_recv(s, d.qp, bufs)?;
            }
        }
    }
    Ok((vec![Duration::ZERO; total], completed))
}

/// The sending side of send/write/read bandwidth; with `recv` (send-bw -b) it also takes
/// the peer's `-n` messages per QP, keeping receives posted from `recv`.
fn client(
    p: &Params,
    s: &mut TestRun,
    poller: &mut Poller,
    size: u64,
    mut recv: Option<&mut Vec<MemoryRegion>>,
) -> Result<(Vec<Duration>, Vec<Duration>), Error> {
    let verb = p.test.verb();
    let nqp = s.ep.qps.len();
    let depth = p.tx_depth as usize;
    let inline = verb != Verb::Read && size <= u64::from(s.ep.max_inline);
    let data = vec![0x5au8; size as usize];
    let src = if inline || verb == Verb::Read {
        None
    } else {
        let mut m =
            s.ep.pd
                .reg_mr(size as usize, AccessFlags::LOCAL_WRITE)
                .map_err(|e| Error::Verbs("register the source buffer", e))?;
        m.as_mut_slice().fill(0x5a);
        Some(Arc::new(m))
    };
    // READ lands in memory the NIC writes: one buffer per request in flight.
    let mut dsts = Vec::new();
    if verb == Verb::Read {
        let n = depth.min((BUF_BUDGET / size).max(1) as usize) * nqp;
        for _ in 0..n {
            dsts.push(
                s.ep.pd
                    .reg_mr(size as usize, AccessFlags::LOCAL_WRITE)
                    .map_err(|e| Error::Verbs("register READ buffers", e))?,
            );
        }
    }
    let remotes: Vec<_> = s.remote.iter().map(|d| remote_slice(d, size)).collect();
    let until = p.duration.map(|d| Instant::now() + Duration::from_secs(d));
    let iters = p.iters as usize;
    let total = if until.is_some() {
        usize::MAX
    } else {
        iters * nqp
    };
    let mut posted_at: Vec<Duration> = Vec::with_capacity(iters * nqp);
    let mut completed_at: Vec<Duration> = Vec::with_capacity(iters * nqp);
    let mut outstanding = vec![0usize; nqp];
    let mut since_signal = vec![0u32; nqp];
    let mut done = Vec::new();
    let mut posted = 0usize;
    let mut finished = 0usize;
    let mut stop = false;
    let mut recv_left = vec![if recv.is_some() { iters } else { 0 }; nqp];
    let mut receiving = recv.is_some();
    let t0 = Instant::now();
    while finished < posted || (!stop && posted < total) || receiving {
        let mut progress = false;
        // Post on every QP up to its depth, in lists of -l.
        for qp in 0..nqp {
            let mut batch = Vec::with_capacity(p.post_list as usize);
            while !stop && posted + batch.len() < total && outstanding[qp] + batch.len() < depth {
                if verb == Verb::Read && dsts.is_empty() {
                    break;
                }
                let req = match verb {
                    Verb::Read => {
                        let b = dsts
                            .pop()
                            .ok_or_else(|| Error::Peer("no READ buffer".into()))?;
                        SendRequest::rdma_read(b, 0..size as usize, remotes[qp])
                    }
                    _ => {
                        let op = if verb == Verb::Send {
                            WrOp::Send
                        } else {
                            WrOp::RdmaWrite(remotes[qp])
                        };
                        match &src {
                            Some(m) => SendRequest::new(op).sge(Arc::clone(m), 0..size as usize),
                            None => SendRequest::inline(op, &data),
                        }
                    }
                }
                .map_err(|e| Error::Verbs("build a request", e))?;
                since_signal[qp] += 1;
                let n_after = posted + batch.len() + 1;
                let full = outstanding[qp] + batch.len() + 1 >= depth
                    || n_after >= total
                    || (verb == Verb::Read && dsts.is_empty());
                let list_end = p.post_list > 1 && batch.len() as u32 + 1 == p.post_list;
                let signal = since_signal[qp] >= p.cq_mod || full || list_end;
                if signal {
                    since_signal[qp] = 0;
                }
                batch.push(req.signaled(signal));
                if batch.len() as u32 == p.post_list {
                    break;
                }
            }
            if batch.is_empty() {
                continue;
            }
            let now = t0.elapsed();
            let n = batch.len();
            if let Err(e) = s.ep.qps[qp].post_send_batch(batch) {
                return Err(Error::Verbs("post requests", e.error));
            }
            posted_at.extend(std::iter::repeat(now).take(n));
            outstanding[qp] += n;
            posted += n;
            progress = true;
        }
        if !stop && until.is_some_and(|u| Instant::now() >= u) {
            stop = true;
            // End each QP's run with a signaled request, so its unsignaled tail completes.
            for qp in 0..nqp {
                if since_signal[qp] > 0 {
                    let op = match verb {
                        Verb::Send => WrOp::Send,
                        _ => WrOp::RdmaWrite(remotes[qp]),
                    };
                    let req = if verb == Verb::Read {
                        match dsts.pop() {
                            Some(b) => SendRequest::rdma_read(b, 0..size as usize, remotes[qp]),
                            None => continue,
                        }
                    } else {
                        match &src {
                            Some(m) => SendRequest::new(op).sge(Arc::clone(m), 0..size as usize),
                            None => SendRequest::inline(op, &data),
                        }
                    }
                    .map_err(|e| Error::Verbs("build a request", e))?;
                    if let Err(e) = s.ep.qps[qp].post_send(req) {
                        return Err(Error::Verbs("post the last request", e.error));
                    }
                    posted_at.push(t0.elapsed());
                    outstanding[qp] += 1;
                    posted += 1;
                    since_signal[qp] = 0;
                }
            }
        }
        if finished < posted || receiving {
            if progress {
                poller.poll_now(&s.ep, &mut done)?;
            } else {
                poller.wait(&s.ep, &mut done)?;
            }
            let now = t0.elapsed();
            for mut d in done.drain(..) {
                if d.recv {
                    recv_left[d.qp] = recv_left[d.qp].saturating_sub(1);
                    if let Some(bufs) = recv.as_deref_mut() {
                        for r in &mut d.bufs {
                            if let Ok(b) = r.take::<MemoryRegion>() {
                                bufs.push(b);
                            }
                        }
                        if s.ep.qps[d.qp].in_flight().1 < recv_left[d.qp] {
                            post_recv(s, d.qp, bufs)?;
                        }
                    }
                    receiving = recv_left.iter().any(|&l| l > 0);
                    continue;
                }
                let n = d.bufs.len().max(1);
                outstanding[d.qp] = outstanding[d.qp].saturating_sub(n);
                finished += n;
                completed_at.extend(std::iter::repeat(now).take(n));
                for mut r in d.bufs {
                    if let Ok(b) = r.take::<MemoryRegion>() {
                        dsts.push(b);
                    }
                }
            }
        }
    }
    Ok((posted_at, completed_at))
}
