//! One connection inside the engine: its queue pair, its protocol state, and the driver that
//! carries out the protocol's actions (posting sends and READs, delivering messages, waking
//! waiters).

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::Arc;
use std::task::Waker;
use std::time::Instant;

use memory::Buffer;
use parking_lot::{Condvar, Mutex};
use verbs::{Qp, RemoteSlice, SendRequest};

use super::Shared;
use crate::proto::{
    self, Action, Body, CallError, ConnError, Delivery, PeerGone, ReadId, RemoteChunk, HEADER_LEN,
};

/// What a posted send-queue request was, in post order (every request is signaled, so each
/// send completion finishes exactly the oldest one).
#[derive(Debug)]
pub(crate) enum SqOp {
    /// A protocol frame.
    Frame,
    /// A rendezvous READ.
    Read(ReadId),
    /// A one-sided operation of the user, finished into `ConnState::one_sided_done`.
    OneSided(u64),
}

/// A finished one-sided operation: the buffer (READ destination or WRITE source) or why it
/// failed.
pub(crate) type OneSidedResult = Result<Buffer, String>;

/// Mutable state of a connection, behind its mutex.
#[derive(Debug)]
pub(crate) struct ConnState {
    /// The protocol; `None` on the active side until the peer's accept data arrived.
    pub proto: Option<proto::Connection<Buffer>>,
    /// Frames that arrived before the protocol existed, replayed in order.
    pub early: Vec<(Buffer, usize)>,
    pub sq_ops: VecDeque<SqOp>,
    /// Messages delivered and not yet taken.
    pub inbox: VecDeque<Delivery<Buffer>>,
    /// RPC requests delivered and not yet taken.
    pub requests: VecDeque<Delivery<Buffer>>,
    /// Finished calls not yet picked up by their caller.
    pub calls: HashMap<u64, Result<Delivery<Buffer>, CallError>>,
    /// READs the pool had no buffer for yet.
    pub deferred_reads: VecDeque<(ReadId, RemoteChunk, u32)>,
    /// Set once the protocol ended: `Some(None)` graceful end of stream, else the failure.
    pub end: Option<Option<ConnError>>,
    /// Teardown began (QP to error, disconnect sent).
    pub teardown: bool,
    /// One-sided operations in flight, and finished ones by id.
    pub one_sided_in_flight: u32,
    pub one_sided_done: HashMap<u64, OneSidedResult>,
    pub next_one_sided: u64,
    /// Async tasks to wake on any change.
    pub wakers: Vec<Waker>,
    /// Async receivers of messages, woken only when a message is delivered or the connection
    /// ends (a send completion does not wake them).
    pub recv_wakers: Vec<Waker>,
    /// Async callers by call id, woken when their call finishes or the connection ends.
    pub call_wakers: HashMap<u64, Waker>,
}

impl ConnState {
    pub(crate) fn new(proto: Option<proto::Connection<Buffer>>) -> Self {
        ConnState {
            proto,
            early: Vec::new(),
            sq_ops: VecDeque::with_capacity(128),
            inbox: VecDeque::with_capacity(64),
            requests: VecDeque::new(),
            calls: HashMap::with_capacity(64),
            deferred_reads: VecDeque::new(),
            end: None,
            teardown: false,
            one_sided_in_flight: 0,
            one_sided_done: HashMap::new(),
            next_one_sided: 1,
            wakers: Vec::new(),
            recv_wakers: Vec::new(),
            call_wakers: HashMap::new(),
        }
    }

    /// The error every operation gets once the connection ended, if it has.
    pub(crate) fn ended(&self) -> Option<crate::Error> {
        self.end.as_ref().map(|cause| crate::Error::Closed {
            cause: cause.clone(),
        })
    }
}

/// A connection as the engine knows it; user handles hold an `Arc` of it.
#[derive(Debug)]
pub(crate) struct ConnShared {
    pub shared: Arc<Shared>,
    pub qp: Qp,
    pub id: cm::CmId,
    pub local_addr: Option<SocketAddr>,
    pub peer_addr: Option<SocketAddr>,
    pub state: Mutex<ConnState>,
    pub cond: Condvar,
    /// User handles (`Conn`s) alive; the last one closes the connection.
    pub handles: std::sync::atomic::AtomicUsize,
}

impl ConnShared {
    /// Carries out every action the protocol has queued, then wakes whoever waits on the
    /// connection. Call with the state locked, after every call into the protocol.
    pub(crate) fn drive(&self, st: &mut ConnState) {
        self.retry_deferred_reads(st);
        let mut delivered = false;
        while let Some(action) = st.proto.as_mut().and_then(|p| p.poll_action()) {
            match action {
                Action::Send { header, body } => self.post_frame(st, header, body),
                Action::Read { id, remote, len } => self.post_read(st, id, remote, len),
                Action::Release(buf) => drop(buf),
                Action::Deliver(d) => match d.class {
                    proto::Received::Message => {
                        st.inbox.push_back(d);
                        delivered = true;
                    }
                    proto::Received::Request { call } => {
                        if self.shared.cfg.serve_requests {
                            st.requests.push_back(d);
                        } else {
                            drop(d);
                            self.release_one(st);
                            if let Some(p) = st.proto.as_mut() {
                                let _ = p.reject_call(call);
                            }
                        }
                    }
                },
                Action::CallDone { id, result } => {
                    st.calls.insert(id.0, result);
                    if let Some(w) = st.call_wakers.remove(&id.0) {
                        w.wake();
                    }
                }
                Action::Closed { error } => {
                    if error.is_some() && std::env::var_os("TRANSPORT_DEBUG").is_some() {
                        eprintln!(
                            "transport: qp {} ended: {error:?}; srq in flight {}, deficit {:?}, recv pool {:?}; sq_ops {}, inbox {}, deferred reads {}, in flight {:?}\n{:?}",
                            self.qp.qp_num(),
                            self.shared.srq.in_flight(),
                            self.shared.srq_deficit,
                            self.shared.recv_pool.stats(),
                            st.sq_ops.len(),
                            st.inbox.len(),
                            st.deferred_reads.len(),
                            self.qp.in_flight(),
                            st.proto
                        );
                    }
                    st.end = Some(error);
                }
            }
        }
        if delivered {
            for w in st.recv_wakers.drain(..) {
                w.wake();
            }
        }
        self.wake(st);
    }

    /// Wakes blocked threads and async tasks waiting on this connection (receivers only when
    /// it ended: a delivery wakes them in [`drive`](Self::drive)).
    pub(crate) fn wake(&self, st: &mut ConnState) {
        self.cond.notify_all();
        for w in st.wakers.drain(..) {
            w.wake();
        }
        if st.end.is_some() {
            for w in st.recv_wakers.drain(..) {
                w.wake();
            }
            for (_, w) in st.call_wakers.drain() {
                w.wake();
            }
        }
    }

    /// Reports one received message released (its buffer dropped already).
    pub(crate) fn release_one(&self, st: &mut ConnState) {
        if let Some(p) = st.proto.as_mut() {
            p.on_release();
        }
    }

    fn fail(&self, st: &mut ConnState, why: PeerGone) {
        if let Some(p) = st.proto.as_mut() {
            p.on_peer_gone(why);
        } else if st.end.is_none() {
            st.end = Some(Some(ConnError::PeerGone(why)));
        }
    }

    fn post_frame(&self, st: &mut ConnState, header: [u8; HEADER_LEN], body: Body<Buffer>) {
        let request = match body {
            Body::Payload(mut buf) => {
                buf[..HEADER_LEN].copy_from_slice(&header);
                let len = buf.len();
                SendRequest::send(buf, 0..len)
            }
            Body::Control(bytes, n) => match self.shared.pool.try_alloc(HEADER_LEN + n) {
                Ok(mut buf) => {
                    buf[..HEADER_LEN].copy_from_slice(&header);
                    buf[HEADER_LEN..].copy_from_slice(&bytes[..n]);
                    let len = buf.len();
                    SendRequest::send(buf, 0..len)
                }
                // The pool is exhausted: control frames are small enough to go inline.
                Err(_) => {
                    let mut frame = [0u8; HEADER_LEN + proto::CONTROL_BODY_MAX];
                    frame[..HEADER_LEN].copy_from_slice(&header);
                    frame[HEADER_LEN..HEADER_LEN + n].copy_from_slice(&bytes[..n]);
                    SendRequest::inline(verbs::WrOp::Send, &frame[..HEADER_LEN + n])
                }
            },
        };
        self.post(st, request, SqOp::Frame);
    }

    /// Queues a READ behind any the pool had no buffer for, and posts what it can, in order.
    fn post_read(&self, st: &mut ConnState, id: ReadId, remote: RemoteChunk, len: u32) {
        st.deferred_reads.push_back((id, remote, len));
        self.retry_deferred_reads(st);
    }

    fn retry_deferred_reads(&self, st: &mut ConnState) {
        while let Some(&(id, remote, len)) = st.deferred_reads.front() {
            let Ok(dest) = self.shared.pool.try_alloc(len as usize) else {
                return;
            };
            st.deferred_reads.pop_front();
            let remote = RemoteSlice {
                addr: remote.addr,
                len,
                rkey: remote.rkey,
            };
            let request = SendRequest::rdma_read(dest, 0..len as usize, remote);
            self.post(st, request, SqOp::Read(id));
        }
    }

    /// Posts a send-queue request built by the caller; a failure fails the connection (the
    /// protocol's accounting keeps the queue from filling, so this is a device error).
    pub(crate) fn post(&self, st: &mut ConnState, request: verbs::Result<SendRequest>, op: SqOp) {
        let posted = request
            .map_err(|e| e.to_string())
            .and_then(|r| self.qp.post_send(r).map_err(|e| e.error.to_string()));
        match posted {
            Ok(_) => st.sq_ops.push_back(op),
            Err(_why) => self.fail(st, PeerGone::QueuePairError),
        }
    }

    /// A send-queue completion of this connection, with the buffers it hands back.
    pub(crate) fn on_send_completion(
        &self,
        st: &mut ConnState,
        status: Result<(), verbs::WcError>,
        mut buffers: impl Iterator<Item = verbs::Reclaimed>,
    ) {
        let Some(op) = st.sq_ops.pop_front() else {
            return;
        };
        let buf = buffers.next().and_then(|mut r| r.take::<Buffer>().ok());
        match (op, status) {
            (SqOp::Frame, Ok(())) => {
                drop(buf);
                if let Some(p) = st.proto.as_mut() {
                    p.on_send_complete(1);
                }
            }
            (SqOp::Read(id), Ok(())) => {
                if let (Some(p), Some(buf)) = (st.proto.as_mut(), buf) {
                    p.on_read_complete(id, buf, Instant::now());
                }
            }
            (SqOp::OneSided(op), status) => {
                st.one_sided_in_flight -= 1;
                let failed = status.is_err();
                let result = match (status, buf) {
                    (Ok(()), Some(buf)) => Ok(buf),
                    (Ok(()), None) => Err("the operation's buffer did not come back".into()),
                    (Err(e), _) => Err(e.to_string()),
                };
                st.one_sided_done.insert(op, result);
                if failed {
                    // RC moves the QP to error on any failed request: the connection is gone.
                    self.fail(st, PeerGone::QueuePairError);
                }
            }
            (_, Err(_)) => self.fail(st, PeerGone::QueuePairError),
        }
        self.drive(st);
    }

    /// A frame received for this connection (`len` bytes in `buf`). Only its head (header
    /// and control body) is copied for the protocol; a DATA frame's message stays in `buf`,
    /// which is delivered without a copy.
    pub(crate) fn on_frame(&self, st: &mut ConnState, buf: Buffer, len: usize) {
        let Some(proto) = st.proto.as_mut() else {
            st.early.push((buf, len));
            return;
        };
        let mut head = [0u8; proto::MAX_HEAD];
        let n = len.min(proto::MAX_HEAD).min(buf.len());
        head[..n].copy_from_slice(&buf[..n]);
        let _ = proto.on_receive_head(&head[..n], len, buf, Instant::now());
        self.drive(st);
    }

    /// Replays frames that arrived before the protocol was set up.
    pub(crate) fn replay_early(&self, st: &mut ConnState) {
        for (buf, len) in std::mem::take(&mut st.early) {
            self.on_frame(st, buf, len);
        }
    }
}
