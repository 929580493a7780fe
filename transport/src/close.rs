//! Closing a [`Conn`] gracefully, in both forms: the CLOSE queued behind everything sent,
//! then a wait until the peer has everything and closed too (`poll_delivered`, also the byte
//! stream's shutdown without the close).

use std::future::poll_fn;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use crate::engine::{register, register_tick};
use crate::{Conn, Error, Result};

impl Conn {
    /// Closes gracefully and waits until the peer has everything: every message sent so far
    /// received (a rendezvous message read by the peer and acknowledged), then the peer
    /// closed too, and reads end of stream. Once this returns `Ok` the process may exit
    /// without losing anything. Past `timeout`: [`Error::TimedOut`] (the close goes on, and
    /// the connection lingers while the endpoint lives); if the peer went away first or the
    /// connection failed: [`Error::Closed`] with the cause. See
    /// [`EndpointConfig::linger`](crate::EndpointConfig::with_linger) for the bound
    /// [`close_async`](Self::close_async) uses.
    pub fn close(&self, timeout: Duration) -> Result<()> {
        self.inner.begin_close();
        self.wait("close", timeout, |_, st| st.delivery(true))
    }

    /// Closes gracefully (see [`close`](Self::close)) and waits until the peer has
    /// everything and closed too, up to the endpoint's
    /// [`linger`](crate::EndpointConfig::with_linger) (then [`Error::TimedOut`]; the close goes
    /// on). The close is queued at the first poll; dropping the future only stops the wait.
    pub async fn close_async(&self) -> Result<()> {
        self.inner.begin_close();
        let linger = self.inner.shared.cfg.linger;
        let deadline = Instant::now() + linger;
        poll_fn(|cx| self.poll_delivered(cx, true, "close", deadline, linger)).await
    }

    /// Waits, up to `deadline`, until everything sent so far has reached the peer (see
    /// [`close`](Self::close)): with `closing`, also until the connection ended gracefully
    /// (a close); without, the connection stays open (a byte stream's shutdown). Past it:
    /// [`Error::TimedOut`] with `op` and `linger`.
    pub(crate) fn poll_delivered(
        &self,
        cx: &mut Context<'_>,
        closing: bool,
        op: &'static str,
        deadline: Instant,
        linger: Duration,
    ) -> Poll<Result<()>> {
        let mut st = self.inner.state.lock();
        if let Some(r) = st.delivery(closing) {
            return Poll::Ready(r);
        }
        if Instant::now() >= deadline {
            return Poll::Ready(Err(Error::TimedOut { op, after: linger }));
        }
        // A close's CLOSE is signaled: its completion acknowledges what went before it.
        if !closing {
            self.inner.request_acknowledgement(&mut st);
        }
        register(&self.inner.shared, &mut st, cx);
        // Woken at the deadline at the latest: each tick wakes it.
        register_tick(&self.inner.shared, cx);
        Poll::Pending
    }
}
