//! The bandwidth tests, as perftest runs them: the client keeps up to `-t` requests in flight
//! per QP, signalling one in `-Q` (`run_iter_bw`); for SEND the server counts receives
//! (`run_iter_bw_server`); for WRITE and READ the server only waits for the report exchange.
//! Requests are posted borrowed, as perftest posts them (see
//! [`Endpoint::add_source`](super::endpoint::Endpoint::add_source)); without post lists
//! (`-l`), each QP's two requests (signaled or not) are checked once before the loop
//! ([`Endpoint::prepare_send`](super::endpoint::Endpoint::prepare_send)).
use std::time::{Duration, Instant};

use serde_json::Value;
use verbs::{LocalSlice, SendFlags, SendWr, WrOp};

use super::endpoint::{part, remote_slice, send_wr_id, Poller};
use super::exchange::BwReport;
use super::options::{Output, Params};
use super::receives::Receives;
use super::report::{self, prefaulted, BwStats};
use super::{Error, TestRun, Verb};

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
    let mut last = BwStats::compute(0, &[], &[], 1, false, gbits);
    // What SENDs and WRITEs send, or where READs land (every request of every QP: nobody
    // looks at the contents, as in perftest).
    let what = "register the local buffer (lower -s?)";
    let local = if verb == Verb::Read {
        s.ep.add_sink(p.max_size, what)?
    } else {
        s.ep.add_source(p.max_size, |_| 0x5a, what)?
    };
    // send-bw server (and both sides with -b): `-r` receives per QP into one buffer, topped
    // up before each size's synchronising handshake.
    let receives = verb == Verb::Send && (server || duplex);
    let mut recvs = if receives {
        Some(Receives::new(&mut s.ep, p.max_size, p.rx_depth as usize)?)
    } else {
        None
    };
    for &size in &p.sizes {
        let mine = s.mine[0];
        // Each size's receives are counted anew (perftest zeroes its credit words).
        s.ep.reset_credits();
        if let Some(r) = &mut recvs {
            for qp in 0..s.ep.qps.len() {
                r.refill(&s.ep, qp)?;
            }
        }
        if verb == Verb::Send || duplex {
            s.comm.hand_shake(&mine)?;
        }
        let (posted, completed) = match &mut recvs {
            Some(r) if server && !duplex => serve_sends(p, s, &mut poller, r)?,
            r => client(p, s, &mut poller, local, size, r.as_mut())?,
        };
        let cq_mod = if server && !duplex {
            1
        } else {
            p.cq_mod as usize
        };
        let mut st = BwStats::compute(size, &posted, &completed, cq_mod, p.peak, gbits);
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

/// send-bw server: counts `-n` receives per QP; times from the first to each.
fn serve_sends(
    p: &Params,
    s: &mut TestRun,
    poller: &mut Poller,
    recvs: &mut Receives,
) -> Result<(Vec<Duration>, Vec<Duration>), Error> {
    let total = p.iters as usize * s.ep.qps.len();
    let mut completed = prefaulted(total, Duration::ZERO);
    let mut done = Vec::new();
    let mut t0 = None;
    let mut left = vec![p.iters as usize; s.ep.qps.len()];
    let mut credits = Credits::new(p, s.ep.qps.len());
    // Without the peak, the figures read only the time of the last receive.
    let mut received = 0;
    let mut at = Duration::ZERO;
    while received < total {
        poller.wait(&s.ep, &mut done)?;
        let now = Instant::now();
        at = now - *t0.get_or_insert(now);
        for d in done.drain(..) {
            if !d.recv {
                continue;
            }
            if p.peak {
                completed.push(at);
            }
            received += 1;
            left[d.qp] = left[d.qp].saturating_sub(1);
            recvs.on_recv(d.qp, left[d.qp]);
            credits.on_recv(d.qp);
        }
        recvs.repost(&s.ep)?;
        credits.grant(s)?;
    }
    if !p.peak {
        completed.resize(received, at);
    }
    Ok((vec![Duration::ZERO; total], completed))
}

/// The receive credits a send-bw receiver on iWARP grants its sender (perftest's
/// `send_rcredit`): every third of the receive queue, the count of receives taken on a QP,
/// written into the sender's credit word once those receives are posted again. The sender
/// keeps `scnt + post_list - credit` below its receive depth, so it never sends into an
/// empty receive queue: iWARP has no RNR retry, and such a SEND ends the connection.
struct Credits {
    on: bool,
    every: u64,
    depth: u64,
    /// Receives taken per QP (this size).
    received: Vec<u64>,
    /// QPs whose count reached a multiple of `every` since the last grant.
    due: Vec<bool>,
}

impl Credits {
    fn new(p: &Params, qps: usize) -> Credits {
        Credits {
            on: p.credits,
            every: p.credit_every(),
            depth: u64::from(p.rx_depth).max(1),
            received: vec![0; qps],
            due: vec![false; qps],
        }
    }

    fn on_recv(&mut self, qp: usize) {
        if self.on {
            self.received[qp] += 1;
            if (self.received[qp] % self.depth) % self.every == 0 {
                self.due[qp] = true;
            }
        }
    }

    /// Grants what is due (after the receives were posted again).
    fn grant(&mut self, s: &TestRun) -> Result<(), Error> {
        for qp in 0..self.due.len() {
            if std::mem::take(&mut self.due[qp]) {
                s.ep.grant_credit(qp, &s.remote[qp], self.received[qp])?;
            }
        }
        Ok(())
    }
}

/// One more look for a receive credit that has not come (since `waiting`, set now if unset):
/// an error once the peer has granted none for the run's timeout.
fn await_credit(p: &Params, waiting: &mut Option<Instant>) -> Result<(), Error> {
    if waiting.get_or_insert_with(Instant::now).elapsed() >= p.timeout() {
        return Err(Error::Peer(format!(
            "no receive credit from the peer for {} s: it stopped (did it exit?)",
            p.timeout().as_secs()
        )));
    }
    Ok(())
}

/// Whether the sender of QP `qp` may post `n` more requests: without credits always; with
/// them while `sent + n - credit` stays below the receive depth (perftest's `swindow`).
fn credit_allows(p: &Params, s: &TestRun, qp: usize, sent: usize, n: usize) -> bool {
    !p.credits || (sent + n) as u64 - s.ep.credit(qp).min((sent + n) as u64) < u64::from(p.rx_depth)
}

/// Whether a QP's next request, with `ahead` more before it in the list being built, fills
/// its send queue or is its last: such a request is signaled, since a completion must come
/// for every request.
fn fills_or_ends(
    outstanding: usize,
    sent: usize,
    ahead: usize,
    depth: usize,
    per_qp: usize,
) -> bool {
    outstanding + ahead + 1 >= depth || sent + ahead + 1 >= per_qp
}

/// The sending side of send/write/read bandwidth, from (or, for READ, into) `local`; with
/// `recv` (send-bw -b) it also takes the peer's `-n` messages per QP, keeping receives
/// posted.
fn client(
    p: &Params,
    s: &mut TestRun,
    poller: &mut Poller,
    local: LocalSlice,
    size: u64,
    mut recv: Option<&mut Receives>,
) -> Result<(Vec<Duration>, Vec<Duration>), Error> {
    let verb = p.test.verb();
    let nqp = s.ep.qps.len();
    let depth = p.tx_depth as usize;
    let mut flags = SendFlags::empty();
    if verb != Verb::Read && size <= u64::from(s.ep.max_inline) {
        flags |= SendFlags::INLINE;
    }
    let sge = [part(local, 0, size)?];
    let ops: Vec<WrOp> = s
        .remote
        .iter()
        .map(|d| {
            let remote = remote_slice(d, size);
            match verb {
                Verb::Read => WrOp::RdmaRead(remote),
                Verb::Send => WrOp::Send,
                _ => WrOp::RdmaWrite(remote),
            }
        })
        .collect();
    let until = p.duration.map(|d| Instant::now() + Duration::from_secs(d));
    let iters = p.iters as usize;
    let total = if until.is_some() {
        usize::MAX
    } else {
        iters * nqp
    };
    let mut posted_at = prefaulted(iters * nqp, Duration::ZERO);
    let mut completed_at = prefaulted(iters * nqp, Duration::ZERO);
    // Each QP sends its own `-n` (the peer posted that many receives per QP).
    let per_qp = if until.is_some() { usize::MAX } else { iters };
    let mut sent = vec![0usize; nqp];
    let mut outstanding = vec![0usize; nqp];
    let mut since_signal = vec![0usize; nqp];
    let mut done = Vec::new();
    let mut batch: Vec<SendWr<'_>> = Vec::with_capacity(p.post_list as usize);
    // Each QP's request, unsignaled and signaled, for posts of one request. Without
    // moderation (every READ on iWARP) both are signaled: an unsignaled READ is refused there.
    let unsignaled = if p.cq_mod == 1 {
        flags | SendFlags::SIGNALED
    } else {
        flags
    };
    let mut single = ops
        .iter()
        .enumerate()
        .map(|(qp, &op)| {
            let wr = |flags| SendWr {
                wr_id: send_wr_id(qp, 0),
                op,
                sges: &sge,
                flags,
                ud: None,
            };
            Ok([
                s.ep.prepare_send(qp, &wr(unsignaled))?,
                s.ep.prepare_send(qp, &wr(flags | SendFlags::SIGNALED))?,
            ])
        })
        .collect::<Result<Vec<_>, Error>>()?;
    let mut posted = 0usize;
    let mut finished = 0usize;
    let mut stop = false;
    let mut recv_left = vec![if recv.is_some() { iters } else { 0 }; nqp];
    let mut receiving = recv.is_some();
    // The receive credits this side grants (send-bw -b on iWARP), and since when it has
    // waited for the peer's.
    let mut credits = Credits::new(p, nqp);
    let mut credit_wait: Option<Instant> = None;
    let t0 = Instant::now();
    while finished < posted || (!stop && posted < total) || receiving {
        let mut progress = false;
        // Whether a QP with room in its send queue waits for a receive credit.
        let mut short_of_credit = false;
        // Post on every QP up to its depth, in lists of -l, before polling (as perftest:
        // a poll per post would cost a poll per message).
        for qp in 0..nqp {
            if p.post_list == 1 {
                // One request per post: the prepared requests, with no list to build.
                let [unsignaled, signaled] = &mut single[qp];
                while !stop && sent[qp] < per_qp && outstanding[qp] < depth {
                    // The verdict that stops the posts is the one kept: a credit that comes
                    // after it must not turn the wait below into a blocking one.
                    if !credit_allows(p, s, qp, sent[qp], 1) {
                        short_of_credit = true;
                        break;
                    }
                    since_signal[qp] += 1;
                    let full = fills_or_ends(outstanding[qp], sent[qp], 0, depth, per_qp);
                    let at = if p.peak { t0.elapsed() } else { Duration::ZERO };
                    let result = if since_signal[qp] >= p.cq_mod as usize || full {
                        let id = send_wr_id(qp, since_signal[qp]);
                        since_signal[qp] = 0;
                        signaled.set_wr_id(id).and_then(|()| signaled.post())
                    } else {
                        unsignaled.post()
                    };
                    result.map_err(|e| Error::Verbs("post requests", e))?;
                    if p.peak {
                        posted_at.push(at);
                    }
                    outstanding[qp] += 1;
                    sent[qp] += 1;
                    posted += 1;
                    progress = true;
                }
                continue;
            }
            loop {
                batch.clear();
                if !credit_allows(p, s, qp, sent[qp], p.post_list as usize) {
                    short_of_credit |= !stop && sent[qp] < per_qp && outstanding[qp] < depth;
                    break;
                }
                while !stop
                    && sent[qp] + batch.len() < per_qp
                    && outstanding[qp] + batch.len() < depth
                {
                    since_signal[qp] += 1;
                    let full = fills_or_ends(outstanding[qp], sent[qp], batch.len(), depth, per_qp);
                    let list_end = p.post_list > 1 && batch.len() as u32 + 1 == p.post_list;
                    let signal = since_signal[qp] >= p.cq_mod as usize || full || list_end;
                    let mut wr = SendWr {
                        wr_id: send_wr_id(qp, 0),
                        op: ops[qp],
                        sges: &sge,
                        flags,
                        ud: None,
                    };
                    if signal {
                        wr.wr_id = send_wr_id(qp, since_signal[qp]);
                        wr.flags |= SendFlags::SIGNALED;
                        since_signal[qp] = 0;
                    }
                    batch.push(wr);
                    if batch.len() as u32 == p.post_list {
                        break;
                    }
                }
                if batch.is_empty() {
                    break;
                }
                // Without the peak (-N), only the run's start and end are timed, as perftest
                // does: no clock read per post.
                let now = if p.peak { t0.elapsed() } else { Duration::ZERO };
                let n = batch.len();
                if let [one] = batch.as_slice() {
                    let signaled = one.flags.contains(SendFlags::SIGNALED);
                    let prepared = &mut single[qp][usize::from(signaled)];
                    prepared
                        .set_wr_id(one.wr_id)
                        .and_then(|()| prepared.post())
                        .map_err(|e| Error::Verbs("post requests", e))?;
                } else {
                    s.ep.post_send(qp, &batch)?;
                }
                if p.peak {
                    posted_at.extend(std::iter::repeat(now).take(n));
                }
                outstanding[qp] += n;
                sent[qp] += n;
                posted += n;
                progress = true;
            }
        }
        if progress {
            credit_wait = None;
        }
        if !stop && until.is_some_and(|u| Instant::now() >= u) {
            stop = true;
            // End each QP's run with a signaled request, so its unsignaled tail completes.
            for qp in 0..nqp {
                if since_signal[qp] > 0 {
                    let wr = SendWr {
                        wr_id: send_wr_id(qp, since_signal[qp] + 1),
                        op: ops[qp],
                        sges: &sge,
                        flags: flags | SendFlags::SIGNALED,
                        ud: None,
                    };
                    s.ep.post_send(qp, &[wr])?;
                    if p.peak {
                        posted_at.push(t0.elapsed());
                    }
                    outstanding[qp] += 1;
                    posted += 1;
                    since_signal[qp] = 0;
                }
            }
        }
        // With receive credits, a sender that posted nothing may wait for a credit, which
        // comes as the peer's WRITE without a completion here, while what it has in flight
        // may all be unsignaled: it polls without blocking and looks at its credit words
        // again, as perftest does (a blocking wait would wait for a completion that never
        // comes).
        let may_await_credit = short_of_credit && !progress;
        if finished < posted || receiving {
            if progress || may_await_credit {
                poller.poll_now(&s.ep, &mut done)?;
            } else {
                poller.wait(&s.ep, &mut done)?;
            }
            if done.is_empty() {
                if may_await_credit {
                    await_credit(p, &mut credit_wait)?;
                }
                continue;
            }
            let now = if p.peak { t0.elapsed() } else { Duration::ZERO };
            for d in done.drain(..) {
                if d.recv {
                    recv_left[d.qp] = recv_left[d.qp].saturating_sub(1);
                    if let Some(r) = recv.as_deref_mut() {
                        r.on_recv(d.qp, recv_left[d.qp]);
                    }
                    credits.on_recv(d.qp);
                    receiving = recv_left.iter().any(|&l| l > 0);
                    continue;
                }
                outstanding[d.qp] = outstanding[d.qp].saturating_sub(d.finished);
                finished += d.finished;
                completed_at.extend(std::iter::repeat(now).take(d.finished));
            }
            if let Some(r) = recv.as_deref_mut() {
                r.repost(&s.ep)?;
                credits.grant(s)?;
            }
        } else if short_of_credit {
            // Nothing in flight, yet nothing posted: the sender waits for receive credits.
            await_credit(p, &mut credit_wait)?;
        }
    }
    if !p.peak {
        // Without the peak, the figures read only the run's start (0) and its end, when its
        // last completion is taken; the posts were not timed one by one.
        posted_at.resize(posted, Duration::ZERO);
        if let Some(last) = completed_at.last_mut() {
            *last = t0.elapsed();
        }
    }
    Ok((posted_at, completed_at))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn credits(depth: u64, every: u64, qps: usize) -> Credits {
        Credits {
            on: true,
            every,
            depth,
            received: vec![0; qps],
            due: vec![false; qps],
        }
    }

    #[test]
    fn a_credit_is_due_every_third_of_the_receive_queue_per_qp() {
        // perftest: credit_cnt = rx_depth / 3, due when (rcnt % rx_depth) % credit_cnt == 0.
        let mut c = credits(9, 3, 2);
        let mut due_at = Vec::new();
        for n in 1..=12 {
            c.on_recv(0);
            if std::mem::take(&mut c.due[0]) {
                due_at.push(n);
            }
        }
        assert_eq!(due_at, [3, 6, 9, 12]);
        assert_eq!(c.received, [12, 0], "counted per QP");
        assert!(!c.due[1]);
        // Without credits nothing is counted.
        let mut off = credits(9, 3, 1);
        off.on = false;
        off.on_recv(0);
        assert_eq!(off.received, [0]);
    }
}
