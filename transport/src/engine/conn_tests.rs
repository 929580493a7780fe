//! Host tests of a connection's teardown bounds, with time passed in.

use super::*;
use std::time::Duration;

fn torn_down_at(t0: Instant, op: SqOp, signaled: bool) -> ConnState {
    let mut st = ConnState::new(None, 16);
    st.end = Some(Some(ConnError::PeerGone(PeerGone::Disconnected)));
    st.sq.posted(1, op, signaled);
    st.torn_down(t0);
    st
}

#[test]
fn a_read_that_never_completes_holds_a_torn_down_connection_only_within_the_flush_bound() {
    let t0 = Instant::now();
    let st = torn_down_at(t0, SqOp::Read(proto::ReadId(7)), true);
    assert!(!st.drained(t0));
    assert!(!st.drained(t0 + FLUSH_GRACE));
    assert!(!st.drained(t0 + FLUSH_BOUND - Duration::from_millis(1)));
    assert!(st.drained(t0 + FLUSH_BOUND));
}

#[test]
fn unsignaled_frames_hold_a_torn_down_connection_only_for_the_grace() {
    let t0 = Instant::now();
    let st = torn_down_at(t0, SqOp::Frame, false);
    assert!(!st.drained(t0));
    assert!(st.drained(t0 + FLUSH_GRACE));
}

#[test]
fn an_empty_queue_is_drained_at_once_and_teardown_drops_what_reads_kept() {
    let t0 = Instant::now();
    let mut st = ConnState::new(None, 16);
    st.deferred_reads.push_back((
        proto::ReadId(1),
        proto::RemoteChunk {
            addr: 0,
            len: 8,
            rkey: 1,
        },
        8,
    ));
    st.torn_down(t0);
    assert!(st.drained(t0));
    assert!(st.deferred_reads.is_empty() && st.read_targets.is_empty());
}
