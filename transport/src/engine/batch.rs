//! Coalescing on the send side: plain messages into batch frames, byte-stream writes into
//! one message (the rules are the protocol core's, `proto/conn/merge.rs`). A connection
//! with `nodelay` sends each on its own.

use std::sync::atomic::Ordering;

use super::conn::{ConnShared, ConnState};
use crate::proto::{BATCH_ENTRY_HEADER, HEADER_LEN};
use crate::Result;

impl ConnState {
    /// Whether the connection's next small sends wait for a frame's completion (see
    /// [`crate::proto::Connection::waits_for_completion`]).
    pub(crate) fn waits_for_completion(&self) -> bool {
        self.proto
            .as_ref()
            .is_some_and(|p| p.waits_for_completion())
    }
}

impl ConnShared {
    /// Whether sends go on their own at once (no batching, no coalescing of writes).
    pub(crate) fn nodelay(&self) -> bool {
        self.nodelay.load(Ordering::Relaxed)
    }

    /// What a sender does once it queued a send, with the connection's state unlocked:
    /// handles what came back (completions, the peer's credit) itself, so the progress
    /// thread need not run beside it; unless the next sends wait for the frame just sent
    /// (`waits`, from [`ConnState::waits_for_completion`]): polling now would likely find its
    /// completion and end the wait before it began, so it makes sure someone polls soon.
    pub(crate) fn after_send(&self, waits: bool) {
        if waits {
            self.shared.policy.wake_progress();
        } else {
            self.shared.progress();
        }
    }

    /// Whether plain messages travel in batches: not `nodelay`, and a polling mode that
    /// batches them ([`Polling::batches_messages`](crate::Polling)).
    pub(crate) fn batches_messages(&self) -> bool {
        !self.nodelay() && self.shared.cfg.polling.batches_messages()
    }

    /// Queues plain message `data` in a batch if that is how it goes now, on a connection that
    /// [`batches_messages`](Self::batches_messages): added to the batch waiting to go, or,
    /// when a new message would wait (behind an unacknowledged frame), as a new batch that
    /// later messages join. `None`: send it on its own (nothing waits, the message does not
    /// fit a batch, the queue is full or the pool has no buffer now). After `Some(Ok(()))`
    /// the caller goes on as [`after_send`](Self::after_send) says: the batch goes when a
    /// completion is seen.
    pub(crate) fn try_batch(&self, st: &mut ConnState, data: &[u8]) -> Option<Result<()>> {
        if let Some(e) = st.ended() {
            return Some(Err(e));
        }
        let p = st.proto.as_mut()?;
        let limit = p.eager_limit();
        if BATCH_ENTRY_HEADER + data.len() > limit {
            return None;
        }
        if p.append_message(data) {
            return Some(Ok(()));
        }
        if !p.would_hold() || p.queue_full() {
            return None;
        }
        let mut frame = self.shared.res.pool.try_alloc(HEADER_LEN + limit).ok()?;
        let len = HEADER_LEN + BATCH_ENTRY_HEADER + data.len();
        frame.set_len(len).ok()?;
        frame[HEADER_LEN..HEADER_LEN + BATCH_ENTRY_HEADER]
            .copy_from_slice(&(data.len() as u32).to_le_bytes());
        frame[HEADER_LEN + BATCH_ENTRY_HEADER..len].copy_from_slice(data);
        p.send_batch(frame).ok()?;
        self.drive(st);
        Some(Ok(()))
    }
}

impl ConnShared {
    /// Queues a byte stream's end (an empty message, which the peer's reader takes for end of
    /// stream) without waiting, for a write half dropped without a shutdown. False when it
    /// cannot go now (the queue is full, the pool has no buffer): the caller sets
    /// [`ConnState::end_of_stream_due`] and the tick tries again. An ended connection has
    /// nothing to end.
    pub(crate) fn queue_end_of_stream(&self, st: &mut ConnState) -> bool {
        if st.end.is_some() {
            return true;
        }
        match st.proto.as_ref() {
            None => return false,
            Some(p) if p.is_closed() => return true,
            Some(p) if p.queue_full() => return false,
            Some(_) => {}
        }
        let frame = match self.spare_frame(st, HEADER_LEN) {
            Some(frame) => frame,
            None => match self.shared.res.pool.try_alloc(HEADER_LEN) {
                Ok(frame) => frame,
                Err(_) => return false,
            },
        };
        let Some(p) = st.proto.as_mut() else {
            return false;
        };
        match p.send(crate::proto::Class::Message, frame) {
            Ok(_) => {
                self.drive(st);
                true
            }
            Err(e) => e.kind != crate::proto::SendErrorKind::WouldBlock,
        }
    }
}
