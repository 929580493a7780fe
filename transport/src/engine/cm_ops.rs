//! Connects and accepts in progress, without a thread of their own: their ids live on the
//! endpoint's CM channel from the start, the CM thread feeds each event to the operation of
//! its id (`cm`'s step-wise machines), and the progress thread's tick looks at their clocks.
//! A finished connect wakes its caller; a finished accept joins its listener's backlog.
//!
//! Lock order: the operations' map, then an operation's state, then the engine's own locks.

use std::collections::VecDeque;
use std::sync::{Arc, Weak};
use std::task::{Context, Poll, Waker};
use std::time::Instant;

use parking_lot::Mutex;
use rustc_hash::FxHashMap;

use super::{ConnShared, QueueSlot, Shared};
use crate::proto::{self, ConnectInfo, HandshakeError};
use crate::{Error, Result};

/// The endpoint's CM side: the channel every CM id of the endpoint reports to (connects and
/// accepts in progress, listeners, established connections), the operations in progress on
/// it, and the wakeup that stops the thread serving it.
#[derive(Debug)]
pub(crate) struct CmWatcher {
    pub channel: cm::EventChannel,
    ops: Mutex<CmOps>,
    stop: cm::Wakeup,
}

impl CmWatcher {
    pub(super) fn new() -> Result<Self> {
        Ok(CmWatcher {
            channel: cm::EventChannel::new()?,
            ops: Mutex::new(CmOps::default()),
            stop: cm::Wakeup::new().map_err(cm::Error::CreateChannel)?,
        })
    }

    /// The next event on the channel, waiting until one comes; `None` when
    /// [`stop`](Self::stop) woke the wait.
    pub(super) fn next_event(&self) -> cm::Result<Option<cm::CmEvent>> {
        self.channel.get_event_unless(&self.stop, None)
    }

    /// Ends the wait of [`next_event`](Self::next_event), now or the next one.
    pub(super) fn stop(&self) {
        self.stop.wake();
    }
}

/// The operations in progress, by the address of their current id (compared, never
/// followed): an id's events go to its operation.
#[derive(Debug, Default)]
struct CmOps {
    by_id: FxHashMap<usize, CmOp>,
}

#[derive(Debug)]
enum CmOp {
    Connect(Arc<ConnectOp>),
    Listen(Arc<Backlog>),
    Accept(Box<AcceptOp>),
}

fn key(id: &cm::CmId) -> usize {
    id.as_raw() as usize
}

/// A connect in progress, shared by the map and the caller waiting for it.
#[derive(Debug)]
pub(crate) struct ConnectOp {
    state: Mutex<ConnectState>,
}

#[derive(Debug)]
struct ConnectState {
    stage: Stage,
    waker: Option<Waker>,
}

#[derive(Debug)]
enum Stage {
    Resolving {
        connector: cm::Connector,
        resolving: cm::Resolving,
        /// The connection's place on the queues its QP goes on (taken when the route is
        /// resolved).
        slot: Option<QueueSlot>,
    },
    /// The connect request is out; the connection is registered (the peer may send as soon
    /// as it accepted).
    Connecting {
        connecting: cm::Connecting,
        conn: Arc<ConnShared>,
    },
    Done(Result<Arc<ConnShared>>),
    /// The caller took the outcome, or gave up.
    Taken,
}

impl Stage {
    /// The key of the id whose events it waits for.
    fn key(&self) -> Option<usize> {
        match self {
            Stage::Resolving { resolving, .. } => Some(key(resolving.id())),
            Stage::Connecting { connecting, .. } => Some(key(connecting.id())),
            _ => None,
        }
    }
}

impl ConnectOp {
    /// The outcome once there is one (taken then), else registers the task's waker.
    pub(crate) fn poll(&self, cx: &Context<'_>) -> Poll<Result<Arc<ConnShared>>> {
        let mut st = self.state.lock();
        if matches!(st.stage, Stage::Done(_)) {
            if let Stage::Done(r) = std::mem::replace(&mut st.stage, Stage::Taken) {
                return Poll::Ready(r);
            }
        }
        if matches!(st.stage, Stage::Taken) {
            return Poll::Ready(Err(Error::PolledAfterEnd { what: "a connect" }));
        }
        match &st.waker {
            Some(w) if w.will_wake(cx.waker()) => {}
            _ => st.waker = Some(cx.waker().clone()),
        }
        Poll::Pending
    }
}

/// A request accepted and waiting for the connection to be established.
#[derive(Debug)]
struct AcceptOp {
    accepting: cm::Accepting,
    conn: Arc<ConnShared>,
    peer: ConnectInfo,
    backlog: Weak<Backlog>,
}

/// A listener's listening id and the connections accepted for it, waiting for callers.
#[derive(Debug)]
pub(crate) struct Backlog {
    pub(crate) listener: cm::Listener,
    queue: Mutex<Queue>,
}

#[derive(Debug, Default)]
struct Queue {
    accepted: VecDeque<Result<Arc<ConnShared>>>,
    wakers: Vec<Waker>,
}

impl Backlog {
    /// The next accepted connection (taken), else registers the task's waker.
    pub(crate) fn poll(&self, cx: &Context<'_>) -> Poll<Result<Arc<ConnShared>>> {
        let mut q = self.queue.lock();
        match q.accepted.pop_front() {
            Some(r) => Poll::Ready(r),
            None => {
                super::push_waker(&mut q.wakers, cx.waker());
                Poll::Pending
            }
        }
    }

    fn push(&self, r: Result<Arc<ConnShared>>) {
        let mut wakers = {
            let mut q = self.queue.lock();
            q.accepted.push_back(r);
            std::mem::take(&mut q.wakers)
        };
        super::wake_tasks(&mut wakers);
    }
}

impl Drop for Backlog {
    /// Connections accepted and never taken close.
    fn drop(&mut self) {
        for conn in self.queue.get_mut().accepted.drain(..).flatten() {
            conn.release_handle();
        }
    }
}

/// Where an accept's outcome goes: its listener's backlog, or (the listener is gone) a
/// connection closes.
fn deliver(backlog: &Weak<Backlog>, r: Result<Arc<ConnShared>>) {
    match backlog.upgrade() {
        Some(b) => b.push(r),
        None => {
            if let Ok(conn) = r {
                conn.release_handle();
            }
        }
    }
}

impl Shared {
    /// Starts connecting with `connector` (its ids on the CM channel).
    pub(crate) fn start_connect(
        &self,
        connector: cm::Connector,
        slot: QueueSlot,
    ) -> Result<Arc<ConnectOp>> {
        // Under the map's lock, so the first event finds the operation.
        let mut ops = self.cm.ops.lock();
        let resolving = connector.resolving(&self.cm.channel)?;
        let k = key(resolving.id());
        let op = Arc::new(ConnectOp {
            state: Mutex::new(ConnectState {
                stage: Stage::Resolving {
                    connector,
                    resolving,
                    slot: Some(slot),
                },
                waker: None,
            }),
        });
        ops.by_id.insert(k, CmOp::Connect(op.clone()));
        // Its deadline is a tick's to look at: the progress thread of an endpoint with
        // nothing else to do may be asleep for an empty endpoint's tick.
        self.tick_soon();
        Ok(op)
    }

    /// The caller of a connect gave up: an attempt in progress is abandoned (its id
    /// destroyed, so the peer is refused), a connection already made closes.
    pub(crate) fn cancel_connect(&self, op: &ConnectOp) {
        let stage = {
            let mut ops = self.cm.ops.lock();
            let mut st = op.state.lock();
            let stage = std::mem::replace(&mut st.stage, Stage::Taken);
            if let Some(k) = stage.key() {
                ops.by_id.remove(&k);
            }
            stage
        };
        match stage {
            Stage::Connecting { conn, .. } => self.unregister(&conn),
            Stage::Done(Ok(conn)) => conn.release_handle(),
            _ => {}
        }
    }

    /// Listens on `addr` with `opts` (its id on the CM channel).
    pub(crate) fn listen(
        &self,
        addr: std::net::SocketAddr,
        opts: cm::ConnOptions,
    ) -> Result<Arc<Backlog>> {
        let mut ops = self.cm.ops.lock();
        let listener = cm::Listener::bind_on(&self.cm.channel, addr, opts)?;
        let backlog = Arc::new(Backlog {
            listener,
            queue: Mutex::new(Queue::default()),
        });
        ops.by_id
            .insert(key(backlog.listener.id()), CmOp::Listen(backlog.clone()));
        Ok(backlog)
    }

    /// The listener is dropped: no more requests for it (its id goes with the last handle).
    pub(crate) fn unlisten(&self, backlog: &Backlog) {
        let removed = self.cm.ops.lock().by_id.remove(&key(backlog.listener.id()));
        drop(removed);
    }

    /// Lets go of every operation (the endpoint stops): their connections hold the shared
    /// state.
    pub(crate) fn clear_cm_ops(&self) {
        let ops = std::mem::take(&mut self.cm.ops.lock().by_id);
        drop(ops);
    }

    /// A CM event: to the operation of its id, else (a disconnect) to its connection.
    pub(super) fn on_cm_event(self: &Arc<Self>, ev: cm::CmEvent) {
        let mut ops = self.cm.ops.lock();
        if ev.is(cm::EventKind::ConnectRequest) {
            let backlog = ev.listen_id().and_then(|l| match ops.by_id.get(&key(l)) {
                Some(CmOp::Listen(b)) => Some(b.clone()),
                _ => None,
            });
            // A request for no listener of ours: its id goes with the event (refused).
            if let Some(b) = backlog {
                self.on_request(&mut ops, &b, ev);
            }
            return;
        }
        let Some(k) = ev.id().map(key) else { return };
        match ops.by_id.get(&k) {
            Some(CmOp::Connect(op)) => {
                let op = op.clone();
                self.step_connect(&mut ops, &op, Some(&ev), Instant::now());
            }
            Some(CmOp::Accept(_)) => self.step_accept(&mut ops, k, Some(&ev), Instant::now()),
            Some(CmOp::Listen(b)) => {
                let b = b.clone();
                self.on_request(&mut ops, &b, ev);
            }
            None => {
                drop(ops);
                self.on_conn_cm_event(&ev);
            }
        }
    }

    /// Looks at the clocks of the operations in progress (from the tick); returns whether a
    /// connect or accept is still in progress (its deadline comes from a tick).
    pub(super) fn cm_timers(self: &Arc<Self>, now: Instant) -> bool {
        let mut ops = self.cm.ops.lock();
        if ops.by_id.is_empty() {
            return false;
        }
        let keys: Vec<usize> = ops
            .by_id
            .iter()
            .filter(|(_, op)| !matches!(op, CmOp::Listen(_)))
            .map(|(k, _)| *k)
            .collect();
        for k in keys {
            match ops.by_id.get(&k) {
                Some(CmOp::Connect(op)) => {
                    let op = op.clone();
                    self.step_connect(&mut ops, &op, None, now);
                }
                Some(CmOp::Accept(_)) => self.step_accept(&mut ops, k, None, now),
                _ => {}
            }
        }
        ops.by_id.values().any(|op| !matches!(op, CmOp::Listen(_)))
    }

    /// Feeds a connect an event (or the clock): the next rdma_cm call, or its outcome.
    fn step_connect(
        self: &Arc<Self>,
        ops: &mut CmOps,
        op: &Arc<ConnectOp>,
        ev: Option<&cm::CmEvent>,
        now: Instant,
    ) {
        let mut st = op.state.lock();
        let old = st.stage.key();
        let next: Option<Stage> = match &mut st.stage {
            Stage::Resolving {
                connector,
                resolving,
                slot,
            } => {
                let r = match ev {
                    Some(ev) => resolving.on_event(ev),
                    None => resolving.on_timer(now),
                };
                match r {
                    Ok(cm::Step::Waiting) => None,
                    Ok(cm::Step::Done(_)) => {
                        let slot = slot.take().expect("a route resolves once");
                        Some(match self.send_connect(connector, resolving, slot) {
                            Ok((connecting, conn)) => Stage::Connecting { connecting, conn },
                            Err(e) => Stage::Done(Err(e)),
                        })
                    }
                    Err(e) => Some(Stage::Done(Err(e.into()))),
                }
            }
            Stage::Connecting { connecting, conn } => {
                let r = match ev {
                    Some(ev) => connecting.on_event(ev),
                    None => connecting.on_timer(now),
                };
                match r {
                    Ok(cm::Step::Waiting) => None,
                    Ok(cm::Step::Done(c)) => Some(Stage::Done(self.connected(conn, c))),
                    Err(e) => {
                        self.unregister(conn);
                        Some(Stage::Done(Err(handshake_rejection(e))))
                    }
                }
            }
            Stage::Done(_) | Stage::Taken => None,
        };
        if let Some(next) = next {
            st.stage = next;
        }
        let new = st.stage.key();
        if new != old {
            if let Some(k) = old {
                ops.by_id.remove(&k);
            }
            if let Some(k) = new {
                ops.by_id.insert(k, CmOp::Connect(op.clone()));
            }
        }
        if matches!(st.stage, Stage::Done(_)) {
            if let Some(w) = st.waker.take() {
                w.wake();
            }
        }
    }

    /// Route resolved: the QP, the connection's record, and the connect request.
    fn send_connect(
        self: &Arc<Self>,
        connector: &cm::Connector,
        resolving: &cm::Resolving,
        slot: QueueSlot,
    ) -> Result<(cm::Connecting, Arc<ConnShared>)> {
        let pending = connector.pending(resolving)?;
        // Register before connecting: the peer may send as soon as it accepted.
        let conn = self.register(pending.qp().clone(), pending.id().clone(), None, slot);
        match pending.start_connect() {
            Ok(c) => Ok((c, conn)),
            Err(e) => {
                self.unregister(&conn);
                Err(e.into())
            }
        }
    }

    /// The peer accepted: its connect data starts the protocol.
    fn connected(&self, conn: &Arc<ConnShared>, c: cm::Connection) -> Result<Arc<ConnShared>> {
        let parts = c.into_parts();
        let peer = match ConnectInfo::decode(&parts.private_data) {
            Ok(p) => p,
            Err(e) => {
                self.unregister(conn);
                let _ = parts.qp.to_error();
                let _ = parts.id.disconnect();
                return Err(Error::Handshake(e));
            }
        };
        if let Err(e) = self.establish(conn, &peer) {
            self.unregister(conn);
            return Err(e);
        }
        Ok(conn.clone())
    }

    /// A connect request on a listener: the admission hook runs in `request_from_on`; a full
    /// endpoint or a peer of another version is refused before a connection is made for it. A
    /// request that fails before its connection is established (the peer gave up, its
    /// resources could not be made) is the peer's end alone: it is refused, and the
    /// listener's callers never see it; only the loss of the device reaches them.
    fn on_request(self: &Arc<Self>, ops: &mut CmOps, backlog: &Arc<Backlog>, ev: cm::CmEvent) {
        let info = self.cfg.proto.connect_info();
        let ours = info.encode();
        // The request's QP goes on the queues of the place it takes; a full endpoint takes
        // none, and refuses it once it was admitted (as it refuses one whose queues could
        // not be made).
        let slot = self.check_room().and_then(|()| self.res.take_slot());
        let queues = match &slot {
            Ok(slot) => slot.queues(),
            Err(_) => self.res.first_queues(),
        };
        let req = match backlog
            .listener
            .request_from_on(ev, &queues.cq, Some(&queues.srq))
        {
            Ok(Some(req)) => req,
            Ok(None) => return,
            Err(e @ cm::Error::Disconnected) => return backlog.push(Err(e.into())),
            Err(_) => return,
        };
        let slot = match slot {
            Ok(slot) => slot,
            Err(Error::TooManyConnections { .. }) => {
                let _ = req.reject(&self.full_refusal(&info));
                return;
            }
            Err(_) => {
                let _ = req.reject(&ours);
                return;
            }
        };
        let Ok(peer) = ConnectInfo::decode(req.private_data()) else {
            let _ = req.reject(&ours);
            return;
        };
        let Ok(proto) = proto::Connection::new(&self.cfg.proto, &peer, Instant::now()) else {
            let _ = req.reject(&ours);
            return;
        };
        let conn = self.register(req.qp().clone(), req.id().clone(), Some(proto), slot);
        // A request gets the connect timeout to finish its handshake: under packet loss the
        // CM's retransmissions take seconds.
        match req.start_accept(&ours, self.cfg.connect_timeout) {
            Ok(accepting) => {
                let k = key(accepting.id());
                let op = AcceptOp {
                    accepting,
                    conn,
                    peer,
                    backlog: Arc::downgrade(backlog),
                };
                ops.by_id.insert(k, CmOp::Accept(Box::new(op)));
                self.tick_soon();
            }
            Err(_) => self.unregister(&conn),
        }
    }

    /// Feeds an accept an event (or the clock). A handshake that fails is the peer's end
    /// alone (see `on_request`): its connection goes.
    fn step_accept(&self, ops: &mut CmOps, k: usize, ev: Option<&cm::CmEvent>, now: Instant) {
        let Some(CmOp::Accept(mut op)) = ops.by_id.remove(&k) else {
            return;
        };
        let r = match ev {
            Some(ev) => op.accepting.on_event(ev),
            None => op.accepting.on_timer(now),
        };
        match r {
            Ok(cm::Step::Waiting) => {
                ops.by_id.insert(k, CmOp::Accept(op));
            }
            Ok(cm::Step::Done(c)) => {
                // The connection's pieces are in its record already.
                drop(c.into_parts());
                match self.establish(&op.conn, &op.peer) {
                    Ok(()) => deliver(&op.backlog, Ok(op.conn.clone())),
                    Err(_) => self.unregister(&op.conn),
                }
            }
            Err(_) => self.unregister(&op.conn),
        }
    }

    /// Makes the engine's record of a connection, known by QP number from now on.
    pub(crate) fn register(
        self: &Arc<Self>,
        qp: verbs::Qp,
        id: cm::CmId,
        proto: Option<proto::Connection<memory::Buffer>>,
        slot: QueueSlot,
    ) -> Arc<ConnShared> {
        let conn = Arc::new(ConnShared::new(self.clone(), qp, id, proto, slot));
        self.add_conn(conn.clone());
        conn
    }

    pub(crate) fn unregister(&self, conn: &ConnShared) {
        self.remove_conns([conn.qp.qp_num()]);
    }

    /// Refuses a new connection when the endpoint serves its maximum already.
    pub(crate) fn check_room(&self) -> Result<()> {
        let max = self.cfg.max_connections;
        if self.conn_count() >= max as usize {
            return Err(Error::TooManyConnections { max });
        }
        Ok(())
    }

    /// A rejection's private data for a request refused because the endpoint is full: our
    /// connect info, then the reason with our maximum.
    pub(crate) fn full_refusal(&self, info: &proto::ConnectInfo) -> [u8; proto::Refusal::LEN] {
        proto::Refusal::Full {
            max: self.cfg.max_connections,
        }
        .encode(info)
    }

    /// The peer's connect data arrived: start the protocol and replay early frames. The id
    /// is on the CM channel already (its disconnects come to the CM thread).
    fn establish(&self, conn: &ConnShared, peer: &ConnectInfo) -> Result<()> {
        let proto = proto::Connection::new(&self.cfg.proto, peer, Instant::now())
            .map_err(|e| Error::Config(e.into()))?;
        let mut st = conn.state.lock();
        conn.set_proto(&mut st, proto);
        conn.replay_early(&mut st);
        conn.drive(&mut st);
        Ok(())
    }
}

/// A rejection carrying the peer's connect data: its version, or the reason after it, tells
/// why.
fn handshake_rejection(e: cm::Error) -> Error {
    if let cm::Error::Rejected { private_data, .. } = &e {
        match ConnectInfo::decode(private_data) {
            Err(h @ HandshakeError::VersionMismatch { .. }) => return Error::Handshake(h),
            Ok(_) => {
                if let Some(proto::Refusal::Full { max }) = proto::Refusal::decode(private_data) {
                    return Error::PeerFull { max };
                }
            }
            Err(_) => {}
        }
    }
    Error::Cm(e)
}
