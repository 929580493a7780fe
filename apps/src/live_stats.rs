//! A live view of an endpoint: its connections' statistics summed
//! ([`transport::Endpoint::stats`]) and what its port's device counters did since the last
//! line ([`verbs::Context::port_counters`]), one line per report (`echo-client --stats`,
//! `echo-server --stats`).

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use transport::{Endpoint, EndpointStats};
use verbs::{Context, PortCounters};

/// Reports on one endpoint.
#[derive(Debug)]
pub struct LiveStats {
    ep: Endpoint,
    /// The endpoint's device and port, when its address maps to one.
    port: Option<(Context, u8)>,
    last: Option<PortCounters>,
    started: Instant,
}

impl LiveStats {
    /// A view of `ep`; the device counters start from now.
    pub fn new(ep: &Endpoint) -> LiveStats {
        let port = verbs::device_for_addr(ep.local_ip())
            .ok()
            .map(|a| (ep.pd().context(), a.gid.port));
        let last = port
            .as_ref()
            .and_then(|(ctx, port)| ctx.port_counters(*port).ok());
        LiveStats {
            ep: ep.clone(),
            port,
            last,
            started: Instant::now(),
        }
    }

    /// One line: the endpoint's statistics, then the device counters that moved since the
    /// last line (or since [`new`](Self::new)).
    pub fn line(&mut self) -> String {
        let mut line = format!(
            "stats {:.1}s: {}",
            self.started.elapsed().as_secs_f64(),
            endpoint_summary(&self.ep.stats())
        );
        if let Some((ctx, port)) = &self.port {
            match ctx.port_counters(*port) {
                Ok(now) => {
                    let _ = write!(line, " | {}/{}:", now.device(), now.port());
                    match &self.last {
                        Some(last) => line += &moved(&now.since(last)),
                        None => line += " (first reading)",
                    }
                    self.last = Some(now);
                }
                Err(e) => {
                    let _ = write!(line, " | device counters: {e}");
                }
            }
        }
        line
    }
}

/// The figures of `s` a reader of a live view wants first.
pub fn endpoint_summary(s: &EndpointStats) -> String {
    let t = &s.totals;
    let rtt = t
        .rtt
        .map_or_else(|| "-".to_owned(), |r| format!("{:.1} us", micros(r)));
    format!(
        "{} conns ({} opened, {} closed, {} failed), out {} msgs {} B, in {} msgs {} B, \
         calls {} ({} timed out), rendezvous {} out {} in, credit stalls {} ({:.1} ms), \
         send-queue stalls {}, keepalive misses {}, rtt {rtt}",
        s.connections,
        s.opened,
        s.ends.closed,
        s.ends.failed(),
        t.messages_sent,
        t.bytes_sent,
        t.messages_received,
        t.bytes_received,
        t.calls,
        t.call_timeouts,
        t.rendezvous_sent,
        t.rendezvous_received,
        t.credit_stalls,
        t.credit_stall_time.as_secs_f64() * 1e3,
        t.send_queue_stalls,
        t.keepalive_misses,
    )
}

/// The counters of a difference that grew, as `name +n`; " no change" if none did.
fn moved(delta: &PortCounters) -> String {
    let mut out = String::new();
    for c in delta.iter().filter(|c| c.value > 0) {
        let _ = write!(out, " {} +{}", c.name, c.value);
    }
    if out.is_empty() {
        out.push_str(" no change");
    }
    out
}

fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// Prints a [`LiveStats`] line of `ep` every `every` on a task of the current tokio
/// runtime, until the returned handle is aborted or the runtime ends; `None` outside a
/// runtime.
pub fn spawn_reporter(ep: &Endpoint, every: Duration) -> Option<tokio::task::JoinHandle<()>> {
    let runtime = tokio::runtime::Handle::try_current().ok()?;
    let mut view = LiveStats::new(ep);
    Some(runtime.spawn(async move {
        let mut tick = tokio::time::interval(every);
        tick.tick().await;
        loop {
            tick.tick().await;
            println!("{}", view.line());
        }
    }))
}
