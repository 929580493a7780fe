//! [`Connection`]: an established connection (CM id, QP, CQ, PD, the peer's private data), with
//! disconnect handling and an orderly teardown.
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use verbs::{CompletionBuf, Cq, Pd, Qp};

use crate::{CmId, Error, EventKind, PeerParam, Result};

/// How long dropping a connection waits for its outstanding work to be flushed.
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(2);

/// An established connection. Its CM id has an event channel of its own, so its events never
/// wait behind another connection's.
///
/// Dropping it disconnects (if still connected), moves the QP to the error state, waits up to
/// [`DRAIN_TIMEOUT`] for the flushed work requests to complete (returning their buffers), and
/// then releases the QP, CQ, PD and CM id in that order.
pub struct Connection {
    // Field order is drop order: the QP before its CQ and PD; the id last.
    qp: Qp,
    cq: Cq,
    pd: Pd,
    id: CmId,
    peer_private_data: Vec<u8>,
    peer_param: PeerParam,
    /// A `Disconnected` (or device removal) event was seen.
    disconnected: AtomicBool,
    /// We moved the QP to Err and called rdma_disconnect.
    shut_down: AtomicBool,
    /// Taken apart by `into_parts`: the new owner tears down.
    detached: bool,
}

/// The pieces of a [`Connection`] taken apart with [`Connection::into_parts`]: their owner
/// disconnects, flushes and drains.
#[derive(Debug, Clone)]
pub struct ConnectionParts {
    /// The CM id (its events: disconnects).
    pub id: CmId,
    /// The QP (RTS).
    pub qp: Qp,
    /// The CQ of both queues (maybe shared with other connections).
    pub cq: Cq,
    /// The PD.
    pub pd: Pd,
    /// The peer's private data.
    pub private_data: Vec<u8>,
    /// The peer's connection parameters.
    pub peer_param: PeerParam,
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection")
            .field("id", &self.id)
            .field("qp", &self.qp)
            .field(
                "private_data",
                &crate::PrivateData::new(self.peer_private_data.clone()),
            )
            .field("disconnected", &self.disconnected.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl Connection {
    pub(crate) fn new(
        id: CmId,
        pd: Pd,
        cq: Cq,
        qp: Qp,
        peer_private_data: Vec<u8>,
        peer_param: PeerParam,
    ) -> Self {
        Connection {
            qp,
            cq,
            pd,
            id,
            peer_private_data,
            peer_param,
            disconnected: AtomicBool::new(false),
            shut_down: AtomicBool::new(false),
            detached: false,
        }
    }

    /// Takes the connection apart without tearing it down, for a caller that manages many
    /// connections on shared resources (one CQ, an SRQ) and drains them itself: this type's
    /// drop would poll the CQ and discard other connections' completions.
    pub fn into_parts(mut self) -> ConnectionParts {
        self.detached = true;
        ConnectionParts {
            id: self.id.clone(),
            qp: self.qp.clone(),
            cq: self.cq.clone(),
            pd: self.pd.clone(),
            private_data: std::mem::take(&mut self.peer_private_data),
            peer_param: self.peer_param,
        }
    }

    /// The QP (RC, ready to send).
    pub fn qp(&self) -> &Qp {
        &self.qp
    }
    /// The CQ of both queues.
    pub fn cq(&self) -> &Cq {
        &self.cq
    }
    /// The PD, to register memory for this connection.
    pub fn pd(&self) -> &Pd {
        &self.pd
    }
    /// The CM id.
    pub fn id(&self) -> &CmId {
        &self.id
    }
    /// The private data the peer sent (connect request or accept), padded by the transport
    /// (see [`CmEvent::private_data`](crate::CmEvent::private_data)).
    pub fn private_data(&self) -> &[u8] {
        &self.peer_private_data
    }
    /// The peer's connection parameters.
    pub fn peer_param(&self) -> PeerParam {
        self.peer_param
    }
    /// Local address.
    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.id.local_addr()
    }
    /// The peer's address.
    pub fn peer_addr(&self) -> Option<SocketAddr> {
        self.id.peer_addr()
    }
    /// Whether a disconnect has been seen (by [`poll_event`](Self::poll_event) or a wait).
    pub fn is_disconnected(&self) -> bool {
        self.disconnected.load(Ordering::Acquire)
    }

    /// Waits up to `timeout` for the connection's next CM event and returns its kind
    /// (`Disconnected` when the peer went away). `Ok(None)`: nothing happened.
    ///
    /// When the peer disconnects, this side's QP is moved to Err at once (outstanding work
    /// completes with flush errors) and the disconnect is answered, so the peer's
    /// `rdma_disconnect` completes without waiting for CM timeouts.
    pub fn poll_event(&self, timeout: Duration) -> Result<Option<EventKind>> {
        let Some(ev) = self.id.get_event(timeout)? else {
            return Ok(None);
        };
        let kind = ev.kind().ok();
        drop(ev);
        if matches!(
            kind,
            Some(EventKind::Disconnected | EventKind::DeviceRemoval)
        ) {
            self.disconnected.store(true, Ordering::Release);
            self.shut_down()?;
        }
        Ok(kind)
    }

    /// Waits up to `timeout` for the connection to be disconnected (by either side).
    pub fn wait_disconnect(&self, timeout: Duration) -> Result<()> {
        let deadline = Instant::now() + timeout;
        while !self.is_disconnected() {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(Error::Timeout {
                    op: "disconnect",
                    after: timeout,
                });
            }
            self.poll_event(left)?;
        }
        Ok(())
    }

    /// Disconnects: moves the QP to Err (outstanding work is flushed), tells the peer, waits
    /// up to `timeout` for the `Disconnected` event and for the flushed work to complete.
    #[doc(alias = "rdma_disconnect")]
    pub fn disconnect(&self, timeout: Duration) -> Result<()> {
        let deadline = Instant::now() + timeout;
        self.shut_down()?;
        self.wait_disconnect(timeout)?;
        self.drain(deadline.saturating_duration_since(Instant::now()))
    }

    /// QP to Err and rdma_disconnect, once.
    fn shut_down(&self) -> Result<()> {
        if self.shut_down.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        let qp_result = self.qp.to_error();
        // After the peer's disconnect the id may already be disconnected: EINVAL then.
        let dis = self.id.disconnect();
        qp_result?;
        match dis {
            Err(Error::Disconnect(e))
                if self.is_disconnected() || e.raw_os_error() == Some(libc::EINVAL) =>
            {
                Ok(())
            }
            other => other,
        }
    }

    /// Polls the CQ until every owned request posted on the QP has completed (successfully or
    /// flushed) and its buffers are reclaimed and dropped, or `timeout` passes. Use after the QP
    /// has gone to Err (disconnect); completions of other QPs sharing the CQ are discarded.
    /// A request whose completion was polled elsewhere without [`Qp::reclaim`] counts as
    /// outstanding until then, so reclaim every completion you poll. Running out of time is
    /// [`Error::DrainTimeout`], which lists the requests still outstanding.
    pub fn drain(&self, timeout: Duration) -> Result<()> {
        let deadline = Instant::now() + timeout;
        let mut buf = CompletionBuf::new(16);
        loop {
            if self.qp.in_flight() == (0, 0) {
                return Ok(());
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                let err = Error::DrainTimeout {
                    after: timeout,
                    outstanding: self.qp.outstanding(),
                };
                crate::trace::gave_up("drain", &err);
                return Err(err);
            }
            let polled = if self.cq.channel_fd().is_some() {
                self.cq
                    .wait_and_poll(&mut buf, Some(left.min(Duration::from_millis(50))))?
            } else {
                self.cq.poll(&mut buf)?
            };
            for wc in polled.iter() {
                drop(self.qp.reclaim(wc));
            }
        }
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        if self.detached {
            return;
        }
        let _ = self.shut_down();
        let _ = self.drain(DRAIN_TIMEOUT);
    }
}
