//! The latency tests, as perftest runs them: SEND ping-pong (`run_iter_lat_send`; the client
//! sends first), RDMA WRITE ping-pong polling the last byte of the message
//! (`run_iter_lat_write`; the server writes first), and READ / atomics issued by the client
//! alone (`run_iter_lat`) while the server waits.
//!
//! Each posts as perftest does: one borrowed work request on memory registered for the run
//! (see [`Endpoint::add_source`]), checked once before the loop ([`Endpoint::prepare_send`]),
//! so an iteration allocates nothing and builds no request; it notes the clock as is and
//! turns the notes into times after the loop.
use std::time::{Duration, Instant};

use serde_json::Value;
use verbs::{LocalSlice, PreparedSend, SendFlags, SendWr, WrOp};

use super::endpoint::{part, remote_slice, send_wr_id, Done, Endpoint, Poller};
use super::options::{AtomicType, Output, Params};
use super::receives::Receives;
use super::report::{self, prefaulted, LatDuration, LatStats};
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
    // What our requests send (SEND, WRITE) or what the NIC writes (READ, atomics).
    let what = "register the local buffer (lower -s?)";
    let local = match p.test {
        Test::SendLat => s.ep.add_source(p.max_size, |_| 0x5a, what)?,
        // Byte i is i mod 256: each write sends the message that ends in its count.
        Test::WriteLat => s.ep.add_source(p.max_size + 256, |i| i as u8, what)?,
        _ => s.ep.add_sink(p.max_size, what)?,
    };
    let mut receives = None;
    if p.test == Test::SendLat {
        let depth = LAT_RECVS.min(p.rx_depth as usize).max(1);
        let mut r = Receives::new(&mut s.ep, p.max_size, depth)?;
        // Posted before the first synchronising handshake: the client sends right after it.
        r.refill(&s.ep, 0)?;
        receives = Some(r);
    }
    for &size in &p.sizes {
        let rtt_factor = match p.test {
            Test::SendLat | Test::WriteLat => 2.0,
            _ => 1.0,
        };
        let (posted, elapsed) = match (p.test, receives.as_mut()) {
            (Test::SendLat, Some(r)) => {
                let mine = s.mine[0];
                s.comm.hand_shake(&mine)?;
                send_lat(p, s, &mut poller, local, r, size)?
            }
            (Test::WriteLat, _) => write_lat(p, s, &mut poller, local, size)?,
            _ => one_sided(p, s, &mut poller, local, size)?,
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

/// A ping-pong's send or write: signaled, and inline when the QP takes `size` bytes so.
fn ping_flags(ep: &Endpoint, size: u64) -> SendFlags {
    if size <= u64::from(ep.max_inline) {
        SendFlags::SIGNALED | SendFlags::INLINE
    } else {
        SendFlags::SIGNALED
    }
}

/// send-lat: one SEND ping-pong per iteration, sent from `local` (inline when the QP takes
/// it).
fn send_lat(
    p: &Params,
    s: &mut TestRun,
    poller: &mut Poller,
    local: LocalSlice,
    recvs: &mut Receives,
    size: u64,
) -> Result<(Vec<Duration>, Duration), Error> {
    let iters = p.iters as usize;
    let client = !p.is_server();
    let flags = ping_flags(&s.ep, size);
    let send_sge = [part(local, 0, size)?];
    let wr = SendWr {
        wr_id: send_wr_id(0, 1),
        op: WrOp::Send,
        sges: &send_sge,
        flags,
        ud: None,
    };
    let mut ping = s.ep.prepare_send(0, &wr)?;
    let mut posted = prefaulted(iters, Instant::now());
    let (mut scnt, mut rcnt) = (0usize, 0usize);
    let mut send_pending = false;
    let mut done = Vec::new();
    let t0 = Instant::now();
    while scnt < iters || rcnt < iters {
        if rcnt < iters && !(scnt < 1 && client) {
            // Wait for the peer's message (noting our send's completion if it comes first).
            let start = rcnt;
            while rcnt == start {
                poller.wait(&s.ep, &mut done)?;
                count_lat(&mut done, &mut rcnt, recvs, &mut send_pending);
            }
        }
        if scnt < iters {
            while send_pending {
                poller.wait(&s.ep, &mut done)?;
                count_lat(&mut done, &mut rcnt, recvs, &mut send_pending);
            }
            posted.push(Instant::now());
            post(&mut ping)?;
            send_pending = true;
            scnt += 1;
        }
        // Replace the receive consumed after answering it, off the path from the peer's
        // message to ours: the peer's next message cannot come before it has ours, and the
        // others stay posted meanwhile.
        recvs.refill(&s.ep, 0)?;
    }
    while send_pending {
        poller.wait(&s.ep, &mut done)?;
        count_lat(&mut done, &mut rcnt, recvs, &mut send_pending);
    }
    Ok((since(t0, &posted), t0.elapsed()))
}

/// Posts a prepared request of the loop.
fn post(wr: &mut PreparedSend<'_>) -> Result<(), Error> {
    wr.post().map_err(|e| Error::Verbs("post requests", e))
}

/// The clock notes of a loop as times since `t0`.
fn since(t0: Instant, notes: &[Instant]) -> Vec<Duration> {
    notes.iter().map(|t| t.duration_since(t0)).collect()
}

/// Counts send-lat's completions: receives (one fewer posted), and the send's.
fn count_lat(
    done: &mut Vec<Done>,
    rcnt: &mut usize,
    recvs: &mut Receives,
    send_pending: &mut bool,
) {
    for d in done.drain(..) {
        if d.recv {
            *rcnt += 1;
            recvs.consumed(0);
        } else {
            *send_pending = false;
        }
    }
}

/// write-lat: an RDMA WRITE ping-pong from `local` into the peer's target; each side
/// polls the last byte of its own target for the peer's next write.
fn write_lat(
    p: &Params,
    s: &mut TestRun,
    poller: &mut Poller,
    local: LocalSlice,
    size: u64,
) -> Result<(Vec<Duration>, Duration), Error> {
    let iters = p.iters as usize;
    let server = p.is_server();
    let last = size as usize - 1;
    let remote = remote_slice(&s.remote[0], size);
    let flags = ping_flags(&s.ep, size);
    // The message whose last byte is count c starts at (c - last) mod 256 (byte i of `local`
    // is i mod 256): one request per start, prepared before the loop.
    let sges = (0..256u64)
        .map(|start| part(local, start, size).map(|sge| [sge]))
        .collect::<Result<Vec<_>, _>>()?;
    let mut writes = sges
        .iter()
        .map(|sge| {
            s.ep.prepare_send(
                0,
                &SendWr {
                    wr_id: send_wr_id(0, 1),
                    op: WrOp::RdmaWrite(remote),
                    sges: sge,
                    flags,
                    ud: None,
                },
            )
        })
        .collect::<Result<Vec<_>, _>>()?;
    let mut posted = prefaulted(iters, Instant::now());
    let (mut scnt, mut rcnt, mut ccnt) = (0usize, 0usize, 0usize);
    let mut done = Vec::new();
    let timeout = p.timeout();
    let t0 = Instant::now();
    while scnt < iters || ccnt < iters || rcnt < iters {
        if rcnt < iters && !(scnt < 1 && server) {
            rcnt += 1;
            let want = rcnt as u8;
            let mut b = [0u8];
            let mut since = None;
            let mut spins = 0u32;
            loop {
                s.ep.target
                    .read(last, &mut b)
                    .map_err(|e| Error::Verbs("read the receive buffer", e))?;
                if b[0] == want {
                    break;
                }
                spins = spins.wrapping_add(1);
                if spins % 4096 == 0 && since.get_or_insert_with(Instant::now).elapsed() > timeout {
                    return Err(Error::Peer(format!(
                        "no write from the peer for {} s: it stopped, or runs a different \
                         test or -s",
                        timeout.as_secs()
                    )));
                }
                // No `spin_loop` hint, as perftest's loop has none: under emulation a PAUSE
                // leaves the translated code on every turn (write-lat at 64 B took 0.1-0.3 us
                // longer with it).
            }
        }
        if scnt < iters {
            scnt += 1;
            posted.push(Instant::now());
            post(&mut writes[(scnt + 256 - last % 256) % 256])?;
        }
        while ccnt < scnt {
            poller.wait(&s.ep, &mut done)?;
            ccnt += done.drain(..).map(|d| d.finished).sum::<usize>();
        }
    }
    Ok((since(t0, &posted), t0.elapsed()))
}

/// READ or atomics: the client alone, one request at a time, into `local`.
fn one_sided(
    p: &Params,
    s: &mut TestRun,
    poller: &mut Poller,
    local: LocalSlice,
    size: u64,
) -> Result<(Vec<Duration>, Duration), Error> {
    let remote = remote_slice(&s.remote[0], size.max(8));
    let (op, len) = match (p.test, p.args.atomic_type) {
        (Test::AtomicLat, AtomicType::FetchAndAdd) => (WrOp::AtomicFetchAdd { remote, add: 1 }, 8),
        (Test::AtomicLat, AtomicType::CmpAndSwap) => (
            WrOp::AtomicCmpSwap {
                remote,
                compare: 0,
                swap: 0,
            },
            8,
        ),
        _ => (WrOp::RdmaRead(remote), size),
    };
    let sge = [part(local, 0, len)?];
    let wr = SendWr {
        wr_id: send_wr_id(0, 1),
        op,
        sges: &sge,
        flags: SendFlags::SIGNALED,
        ud: None,
    };
    let mut request = s.ep.prepare_send(0, &wr)?;
    let until = p.duration.map(|d| Instant::now() + Duration::from_secs(d));
    let iters = if until.is_some() {
        usize::MAX
    } else {
        p.iters as usize
    };
    let mut posted = prefaulted(p.iters as usize, Instant::now());
    let mut done = Vec::new();
    let t0 = Instant::now();
    let mut n = 0usize;
    while n < iters && until.map_or(true, |u| Instant::now() < u) {
        if until.is_none() {
            posted.push(Instant::now());
        }
        post(&mut request)?;
        let mut finished = 0;
        while finished == 0 {
            poller.wait(&s.ep, &mut done)?;
            finished += done.drain(..).map(|d| d.finished).sum::<usize>();
        }
        n += 1;
    }
    if until.is_some() {
        // Duration mode keeps no per-iteration times: report the count.
        return Ok((vec![Duration::ZERO; n], t0.elapsed()));
    }
    Ok((since(t0, &posted), t0.elapsed()))
}
