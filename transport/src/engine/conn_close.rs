//! How a connection's life ends from this side: its linger, its last user handle going (a
//! graceful close, or an abort when its linger is zero), a graceful close begun, an abort.

use std::sync::atomic::Ordering;
use std::time::Duration;

use super::conn::ConnShared;
use crate::proto::ConnError;

/// [`ConnShared::linger`] stored when none is set.
pub(super) const NO_LINGER: u64 = u64::MAX;

impl ConnShared {
    /// The linger set for the byte stream (`None`: none, the endpoint's applies): zero
    /// aborts the connection when its last handle goes; more bounds a shutdown's wait.
    pub(crate) fn linger(&self) -> Option<Duration> {
        match self.linger.load(Ordering::Relaxed) {
            NO_LINGER => None,
            nanos => Some(Duration::from_nanos(nanos)),
        }
    }

    /// Sets [`linger`](Self::linger) (a longer one than `u64` nanoseconds is cut to that).
    pub(crate) fn set_linger(&self, linger: Option<Duration>) {
        let nanos = linger.map_or(NO_LINGER, |t| {
            u64::try_from(t.as_nanos()).map_or(NO_LINGER - 1, |n| n.min(NO_LINGER - 1))
        });
        self.linger.store(nanos, Ordering::Relaxed);
    }

    /// Whether the last handle's going aborts the connection: a zero linger.
    pub(crate) fn aborts_when_released(&self) -> bool {
        self.linger() == Some(Duration::ZERO)
    }

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
        if self.aborts_when_released() {
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
