//! How a connection's life ends from this side: its last user handle going (a graceful
//! close, or an abort when its linger is zero), a graceful close begun, an abort.

use super::conn::ConnShared;
use crate::proto::ConnError;

impl ConnShared {
    /// A user handle goes: the last one closes the connection (gracefully: what was sent
    /// is delivered first), or aborts it when its linger is zero.
    pub(crate) fn release_handle(&self) {
        if self
            .handles
            .fetch_sub(1, std::sync::atomic::Ordering::AcqRel)
            != 1
        {
            return;
        }
        if self.linger.load(std::sync::atomic::Ordering::Relaxed) == 0 {
            self.abort();
        } else {
            self.begin_close();
        }
    }

    /// Ends the connection at once (see [`proto::Connection::abort`]): the tick that follows
    /// tears it down, and the peer sees it gone.
    pub(crate) fn abort(&self) {
        let mut st = self.state.lock();
        if let Some(p) = st.proto.as_mut() {
            p.abort();
        } else if st.end.is_none() {
            st.end = Some(Some(ConnError::Aborted));
        }
        self.drive(&mut st);
        drop(st);
        self.shared.tick_soon();
    }

    /// Starts a graceful close: the CLOSE frame queued behind everything sent so far.
    pub(crate) fn begin_close(&self) {
        let mut st = self.state.lock();
        if let Some(p) = st.proto.as_mut() {
            p.close();
        }
        self.drive(&mut st);
    }
}
