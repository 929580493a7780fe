//! [`SendQueue`]: what a connection's send queue holds, as the engine tracks it: the requests
//! posted and not known complete, in post order, which of them are signaled, and whether a
//! keepalive probe is among them. No I/O: the driver posts and polls, this keeps the books
//! (tested on the host).

use std::collections::VecDeque;

use crate::proto::ReadId;

/// What a posted send-queue request was, in post order. Frames are signaled one in
/// [`signal_every`]; READs, keepalive probes and one-sided operations always. A completion
/// finishes its request and every unsignaled frame before it (the send queue completes in
/// order, except an iWARP READ: see [`SendQueue::finish_through`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SqOp {
    /// A protocol frame.
    Frame,
    /// A rendezvous READ.
    Read(ReadId),
    /// A keepalive probe: a zero-length RDMA WRITE the peer's device acknowledges (on
    /// InfiniBand and RoCE).
    Probe,
    /// A one-sided operation of the user, finished into `ConnState::one_sided`.
    OneSided(u64),
    /// The WRITE of a one-sided write whose completion (on iWARP: sent, not yet placed) is
    /// kept until the zero-length READ behind it, posted as its `OneSided`, completes.
    FencedWrite(u64),
}

/// At most this many frames are posted per signaled one: the device writes one completion
/// for that many sends, which is what a message rate pays for.
const SIGNAL_EVERY_MAX: u32 = 16;

/// Frames per signaled frame for a send queue of `sq_depth`: at most a quarter of it, so
/// the slots the protocol may fill with data always hold a signaled request that frees them.
pub(crate) fn signal_every(sq_depth: u32) -> u32 {
    (sq_depth / 4).clamp(1, SIGNAL_EVERY_MAX)
}

/// The requests of a connection's send queue that may still complete.
#[derive(Debug)]
pub(crate) struct SendQueue {
    /// Requests posted and not known complete, oldest first, with their `wr_id`s.
    ops: VecDeque<(u64, SqOp)>,
    /// Requests posted unsignaled since the last signaled one (the tail of `ops`).
    unsignaled: u32,
    /// A keepalive probe is in flight (in the send-queue slot kept for it).
    probe_in_flight: bool,
}

impl Default for SendQueue {
    fn default() -> Self {
        SendQueue::new(0)
    }
}

impl SendQueue {
    /// The books of a send queue of `depth` requests: room for as many as the queue holds,
    /// so recording a post never allocates, and no more (a connection of a large endpoint
    /// keeps no room it cannot use).
    pub(crate) fn new(depth: u32) -> Self {
        SendQueue {
            ops: VecDeque::with_capacity(depth as usize),
            unsignaled: 0,
            probe_in_flight: false,
        }
    }

    /// Whether the next request, `op`, is to be signaled: one frame in `every`, and every
    /// other request; everything once `closing` (teardown waits for the CLOSE to complete).
    pub(crate) fn must_signal(&self, op: &SqOp, every: u32, closing: bool) -> bool {
        !matches!(op, SqOp::Frame) || self.unsignaled + 1 >= every || closing
    }

    /// Records request `wr_id` as posted.
    pub(crate) fn posted(&mut self, wr_id: u64, op: SqOp, signaled: bool) {
        self.ops.push_back((wr_id, op));
        self.unsignaled = if signaled { 0 } else { self.unsignaled + 1 };
        if matches!(op, SqOp::Probe) {
            self.probe_in_flight = true;
        }
    }

    /// The oldest request a completion for `wr_id` finishes, taken off the queue: call until
    /// `None` (the requests up to `wr_id`, in order; none for a stale completion, whose
    /// request is not ours). The poll of every send completion runs this: the oldest request
    /// is read once, and the counts are written only when they change.
    ///
    /// A frame is finished by any later completion; every other request (always signaled)
    /// only by its own. The difference matters on iWARP, where the device completes a READ
    /// when its response arrives, after the requests posted behind it: its sink is not
    /// written yet when they complete.
    #[inline]
    pub(crate) fn finish_through(&mut self, wr_id: u64) -> Option<(u64, SqOp)> {
        let &(id, op) = self.ops.front()?;
        if id > wr_id {
            return None;
        }
        if id != wr_id && op != SqOp::Frame {
            return self.finish_behind(wr_id);
        }
        self.ops.pop_front();
        self.finished(id, op)
    }

    /// [`finish_through`](Self::finish_through) when the oldest request waits for its own
    /// completion: the oldest request behind it that `wr_id` finishes.
    #[cold]
    fn finish_behind(&mut self, wr_id: u64) -> Option<(u64, SqOp)> {
        let i = self
            .ops
            .iter()
            .position(|&(id, op)| id >= wr_id || op == SqOp::Frame)?;
        let (id, op) = self.ops[i];
        if id > wr_id {
            return None;
        }
        self.ops.remove(i);
        self.finished(id, op)
    }

    /// The books after request `id` left the queue.
    #[inline]
    fn finished(&mut self, id: u64, op: SqOp) -> Option<(u64, SqOp)> {
        let left = self.ops.len() as u32;
        if self.unsignaled > left {
            self.unsignaled = left;
        }
        if op == SqOp::Probe {
            self.probe_in_flight = false;
        }
        Some((id, op))
    }

    /// Whether nothing posted can still complete.
    pub(crate) fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    /// Requests posted and not known complete (for debug events).
    #[cfg(any(test, feature = "tracing"))]
    pub(crate) fn len(&self) -> usize {
        self.ops.len()
    }

    /// Whether requests were posted unsignaled since the last signaled one: they complete
    /// only with a later signaled request.
    pub(crate) fn has_unsignaled(&self) -> bool {
        self.unsignaled > 0
    }

    /// Requests posted unsignaled since the last signaled one (for debug events).
    #[cfg(any(test, feature = "tracing"))]
    pub(crate) fn unsignaled(&self) -> u32 {
        self.unsignaled
    }

    /// Whether only unsignaled frames remain (a torn-down queue's last requests may finish
    /// without a completion).
    pub(crate) fn only_unsignaled_left(&self) -> bool {
        self.ops.len() <= self.unsignaled as usize
    }

    /// Whether a keepalive probe is in flight.
    pub(crate) fn probe_in_flight(&self) -> bool {
        self.probe_in_flight
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Posts `n` frames as the driver does, signaling as `must_signal` says.
    fn post_frames(q: &mut SendQueue, first: u64, n: u64, every: u32) -> Vec<bool> {
        (first..first + n)
            .map(|id| {
                let signaled = q.must_signal(&SqOp::Frame, every, false);
                q.posted(id, SqOp::Frame, signaled);
                signaled
            })
            .collect()
    }

    fn finish_all(q: &mut SendQueue, wr_id: u64) -> Vec<u64> {
        std::iter::from_fn(|| q.finish_through(wr_id))
            .map(|(id, _)| id)
            .collect()
    }

    #[test]
    fn frames_are_signaled_one_in_every_and_other_requests_always() {
        let mut q = SendQueue::default();
        let every = signal_every(64);
        assert_eq!(every, 16);
        let signaled = post_frames(&mut q, 1, 32, every);
        let at: Vec<usize> = (0..32).filter(|&i| signaled[i]).collect();
        assert_eq!(at, vec![15, 31]);
        assert!(q.must_signal(&SqOp::Read(ReadId(1)), every, false));
        assert!(q.must_signal(&SqOp::OneSided(7), every, false));
        assert!(q.must_signal(&SqOp::Frame, every, true), "closing");
    }

    #[test]
    fn a_small_queue_never_leaves_its_slots_without_a_signaled_request() {
        for depth in [1, 2, 4, 7, 16, 64, 1024] {
            let every = signal_every(depth);
            assert!(every >= 1 && every <= (depth / 4).max(1) && every <= SIGNAL_EVERY_MAX);
        }
    }

    #[test]
    fn a_completion_finishes_its_request_and_every_earlier_one_in_order() {
        let mut q = SendQueue::default();
        post_frames(&mut q, 1, 5, 4);
        assert_eq!(q.unsignaled(), 1, "the fourth was signaled, the fifth not");
        assert_eq!(finish_all(&mut q, 4), vec![1, 2, 3, 4]);
        assert_eq!(q.len(), 1);
        assert!(q.only_unsignaled_left());
        assert_eq!(finish_all(&mut q, 5), vec![5]);
        assert!(q.is_empty() && !q.has_unsignaled());
    }

    #[test]
    fn a_read_is_finished_only_by_its_own_completion() {
        // iWARP completes a READ when its response arrives: after the frames posted behind it.
        let mut q = SendQueue::default();
        post_frames(&mut q, 1, 2, 16);
        q.posted(3, SqOp::Read(ReadId(7)), true);
        post_frames(&mut q, 4, 2, 2);
        assert_eq!(finish_all(&mut q, 5), vec![1, 2, 4, 5], "the READ stays");
        assert_eq!(q.len(), 1);
        assert!(!q.only_unsignaled_left());
        assert_eq!(q.finish_through(3), Some((3, SqOp::Read(ReadId(7)))));
        assert!(q.is_empty());
        // A later frame's completion does not finish a probe or a one-sided operation ahead
        // of it either; their own completions do, in any order.
        q.posted(6, SqOp::Probe, true);
        q.posted(7, SqOp::OneSided(1), true);
        q.posted(8, SqOp::Frame, true);
        assert_eq!(finish_all(&mut q, 8), vec![8]);
        assert!(q.probe_in_flight());
        assert_eq!(finish_all(&mut q, 7), vec![7]);
        assert_eq!(finish_all(&mut q, 6), vec![6]);
        assert!(q.is_empty() && !q.probe_in_flight());
    }

    #[test]
    fn a_stale_completion_finishes_nothing() {
        let mut q = SendQueue::default();
        post_frames(&mut q, 10, 3, 16);
        assert_eq!(finish_all(&mut q, 9), Vec::<u64>::new());
        assert_eq!(q.len(), 3);
        assert_eq!(q.unsignaled(), 3);
    }

    #[test]
    fn the_unsignaled_count_never_exceeds_what_is_left() {
        let mut q = SendQueue::default();
        post_frames(&mut q, 1, 3, 16);
        q.posted(4, SqOp::OneSided(1), true);
        post_frames(&mut q, 5, 2, 16);
        assert_eq!(q.unsignaled(), 2);
        assert_eq!(finish_all(&mut q, 4), vec![1, 2, 3, 4]);
        assert_eq!(finish_all(&mut q, 5), vec![5]);
        assert_eq!(q.len(), 1);
        assert_eq!(q.unsignaled(), 1);
    }

    #[test]
    fn a_probe_is_in_flight_until_its_completion() {
        let mut q = SendQueue::default();
        q.posted(1, SqOp::Probe, true);
        assert!(q.probe_in_flight());
        post_frames(&mut q, 2, 1, 16);
        assert_eq!(finish_all(&mut q, 1), vec![1]);
        assert!(!q.probe_in_flight());
        assert!(!q.is_empty());
    }
}
