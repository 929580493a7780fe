//! The endpoint's statistics: the counters of connections that went, kept when they go, and
//! the live ones' summed on demand ([`Shared::stats`]).

use parking_lot::Mutex;

use super::Shared;
use crate::proto::{Ends, Stats};

/// An endpoint's statistics (`Endpoint::stats`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct EndpointStats {
    /// Connections open now (established, not ended).
    pub connections: usize,
    /// Connections established since the endpoint started (open now or ended).
    pub opened: u64,
    /// How the connections that ended did.
    pub ends: Ends,
    /// The counters of every connection established, open now or ended, summed.
    pub totals: Stats,
    /// Pairs of a completion queue and a shared receive queue the endpoint made so far (one
    /// per `EndpointConfig::connections_per_queue` connections, made as connections come).
    pub queues: usize,
    /// Entries of the completion queues of those pairs, as the device made them.
    pub completion_entries: usize,
    /// Bytes the endpoint registered for receive buffers, of every pair of queues (the
    /// receives posted and the messages the application holds). The data pool's figures are
    /// `Endpoint::pool`'s.
    pub receive_bytes_registered: usize,
    /// Times the progress thread ran the timers (keepalives, call deadlines, teardown): an
    /// idle endpoint runs them when one falls due, at least once a second, more often only
    /// while something is in progress.
    pub timer_runs: u64,
}

/// What the connections that went left behind.
#[derive(Debug, Default)]
pub(crate) struct Totals {
    ends: Ends,
    ended: Stats,
}

pub(crate) type TotalsLock = Mutex<Totals>;

impl Shared {
    /// Keeps the counters of the connections of `qp_nums`, about to be removed. Takes the
    /// totals before each connection's state, as [`stats`](Self::stats) does.
    pub(super) fn keep_totals(&self, qp_nums: &[u32]) {
        let mut totals = self.totals.lock();
        for &qpn in qp_nums {
            let Some(conn) = self.conns.get(qpn) else {
                continue;
            };
            let mut st = conn.state.lock();
            if st.counted {
                continue;
            }
            st.counted = true;
            if let Some(stats) = st.proto.as_ref().map(|p| p.stats()) {
                conn.trace.removed(&stats);
                totals.ended += stats;
                totals.ends.count(st.end.as_ref().and_then(|e| e.as_ref()));
            }
        }
    }

    /// The endpoint's statistics: the kept totals and the live connections' counters, read
    /// under the totals' lock, so that no connection counts twice or not at all.
    pub(crate) fn stats(&self) -> EndpointStats {
        let conns = self.conns.all();
        let totals = self.totals.lock();
        let mut s = EndpointStats {
            connections: 0,
            opened: 0,
            ends: totals.ends,
            totals: totals.ended,
            queues: self.res.queues().count(),
            completion_entries: self.res.queues().map(|q| q.cq.cqe() as usize).sum(),
            receive_bytes_registered: self.res.recv_pool.stats().bytes_registered,
            timer_runs: self.timer_runs.load(std::sync::atomic::Ordering::Relaxed),
        };
        for conn in conns {
            let st = conn.state.lock();
            let Some(p) = st.proto.as_ref().filter(|_| !st.counted) else {
                continue;
            };
            s.totals += p.stats();
            match &st.end {
                // Ended, not yet torn down and removed.
                Some(end) => s.ends.count(end.as_ref()),
                None => s.connections += 1,
            }
        }
        s.opened = s.ends.total() + s.connections as u64;
        s
    }
}
