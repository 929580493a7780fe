//! [`Receives`]: the receives a SEND test keeps posted on each QP, all into one registered
//! buffer whose contents nobody reads (perftest's receive buffers are never checked either).
use verbs::LocalSlice;

use super::endpoint::Endpoint;
use super::Error;

/// Receives kept posted on each QP of an endpoint, up to `depth` per QP.
#[derive(Debug)]
pub struct Receives {
    sge: [LocalSlice; 1],
    depth: usize,
    /// Posted and not yet completed, per QP.
    posted: Vec<usize>,
    /// How many each QP should have posted: as many as its run will still consume, at most
    /// `depth` (see [`repost`](Self::repost)).
    wanted: Vec<usize>,
}

impl Receives {
    /// Registers a receive buffer of `len` bytes on `ep`, to keep up to `depth` receives
    /// posted on each of its QPs (none posted yet: see [`refill`](Self::refill)).
    pub fn new(ep: &mut Endpoint, len: u64, depth: usize) -> Result<Receives, Error> {
        Ok(Receives {
            sge: [ep.add_sink(len, "register the receive buffer (lower -s?)")?],
            depth,
            posted: vec![0; ep.qps.len()],
            wanted: vec![depth; ep.qps.len()],
        })
    }

    /// Posts on `qp` what it lacks of `depth`.
    pub fn refill(&mut self, ep: &Endpoint, qp: usize) -> Result<(), Error> {
        self.post(ep, qp, self.depth - self.posted[qp])
    }

    /// A receive of `qp` completed.
    pub fn consumed(&mut self, qp: usize) {
        self.posted[qp] = self.posted[qp].saturating_sub(1);
    }

    /// A receive of `qp` completed, and `left` more are still to come on it: only receives
    /// the run will consume are kept posted. [`repost`](Self::repost) posts what it lacks.
    pub fn on_recv(&mut self, qp: usize, left: usize) {
        self.consumed(qp);
        self.wanted[qp] = left.min(self.depth);
    }

    /// Posts on every QP the receives it lacks, in chains: called once per batch of
    /// completions, so a batch's receives go back in a few posts rather than one each.
    pub fn repost(&mut self, ep: &Endpoint) -> Result<(), Error> {
        for qp in 0..self.posted.len() {
            if self.posted[qp] < self.wanted[qp] {
                self.post(ep, qp, self.wanted[qp] - self.posted[qp])?;
            }
        }
        Ok(())
    }

    fn post(&mut self, ep: &Endpoint, qp: usize, n: usize) -> Result<(), Error> {
        ep.post_recvs(qp, &self.sge, n)?;
        self.posted[qp] += n;
        Ok(())
    }
}
