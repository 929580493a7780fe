//! [`Conn`]: a reliable connection to a peer: messages (copied or zero-copy), RPC calls and
//! answers, one-sided reads and writes of exposed regions, graceful close.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::engine::{ConnShared, ConnState, Engine};
use crate::message::{Message, Request};
use crate::proto::{CallId, Class};
use crate::receive::PendingCall;
use crate::send_core::{Eager, EagerSend};
use crate::{Error, Result};

/// The lock of a connection's state, held.
pub(crate) type StateGuard<'a> = parking_lot::MutexGuard<'a, ConnState>;

/// Default bound of blocking calls that take no timeout (`send`, `respond`).
pub const DEFAULT_OP_TIMEOUT: Duration = Duration::from_secs(30);

/// A connection. Send and receive from any thread (`&Conn` is enough); every blocking call has
/// a bound. Dropping it closes the connection gracefully in the background (what was sent is
/// still delivered).
#[derive(Debug)]
pub struct Conn {
    pub(crate) inner: Arc<ConnShared>,
    pub(crate) engine: Arc<Engine>,
}

impl Clone for Conn {
    /// Another handle to the same connection (the connection closes when the last is dropped).
    fn clone(&self) -> Self {
        self.inner
            .handles
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Conn {
            inner: self.inner.clone(),
            engine: self.engine.clone(),
        }
    }
}

impl Conn {
    /// The endpoint the connection belongs to.
    pub fn endpoint(&self) -> crate::Endpoint {
        crate::Endpoint {
            engine: self.engine.clone(),
        }
    }

    /// The local address.
    pub fn local_addr(&self) -> Result<SocketAddr> {
        self.inner.local_addr.ok_or(Error::NoAddress {
            what: "the local end",
        })
    }

    /// The peer's address.
    pub fn peer_addr(&self) -> Result<SocketAddr> {
        self.inner
            .peer_addr
            .ok_or(Error::NoAddress { what: "the peer" })
    }

    /// Receives the next message, waiting up to `timeout`. After the peer closed and every
    /// message was received: [`Error::Closed`] with no cause (end of stream).
    pub fn recv(&self, timeout: Duration) -> Result<Message> {
        self.wait("recv", timeout, |_, st| self.take_message(st))
    }

    /// Receives a message if one is there: [`Error::WouldBlock`] if not.
    pub fn try_recv(&self) -> Result<Message> {
        self.inner.shared.progress();
        let taken = self.take_message(&mut self.inner.state.lock());
        taken.unwrap_or(Err(Error::WouldBlock))
    }

    /// Calls the peer: sends `request` and waits up to `timeout` for its response. Many calls
    /// may be outstanding at once (from several threads); each gets its own response. A call
    /// that times out is forgotten: a late response is dropped.
    pub fn call(&self, request: &[u8], timeout: Duration) -> Result<Message> {
        let deadline = Instant::now() + timeout;
        let id = self
            .send_class(Class::Request { deadline }, request, timeout)?
            .expect("a request has a call id");
        // A little past the call's deadline: the protocol fails the call at the deadline.
        let wait_deadline = deadline + Duration::from_millis(50);
        let mut call = PendingCall {
            conn: self,
            id,
            taken: false,
        };
        let result = self.wait_until("call", timeout, Some(wait_deadline), |_, st| {
            self.take_response(st, id)
        });
        call.taken = result.is_ok();
        result
    }

    /// Receives the next RPC request, waiting up to `timeout`; answer it with
    /// [`Request::respond`].
    pub fn recv_request(&self, timeout: Duration) -> Result<Request> {
        self.wait("recv_request", timeout, |_, st| self.take_request(st))
    }

    /// Serves requests with `handler` on this thread until the connection ends (returns
    /// `Ok` after a graceful close) or an error. Each response is a new `Vec`; see
    /// [`serve_with`](Self::serve_with) for a server that allocates nothing per request.
    pub fn serve(&self, mut handler: impl FnMut(&Message) -> Vec<u8>) -> Result<()> {
        self.serve_with(|request, response| *response = handler(request))
    }

    /// [`serve`](Self::serve), with `handler` writing each response into a buffer this call
    /// keeps (empty at each request, its capacity kept from the last): in steady state a
    /// server allocates nothing per request.
    ///
    /// ```no_run
    /// # fn demo(conn: &transport::Conn) -> transport::Result<()> {
    /// // An echo server.
    /// conn.serve_with(|request, response| response.extend_from_slice(&request.bytes()))
    /// # }
    /// ```
    pub fn serve_with(&self, mut handler: impl FnMut(&Message, &mut Vec<u8>)) -> Result<()> {
        let mut response = Vec::new();
        loop {
            match self.recv_request(Duration::from_millis(200)) {
                Ok(req) => {
                    response.clear();
                    handler(req.message(), &mut response);
                    req.respond(&response)?;
                }
                Err(Error::TimedOut { .. }) => continue,
                Err(Error::Closed { cause: None }) => return Ok(()),
                Err(e) => return Err(e),
            }
        }
    }

    /// Answers call `call` with `response`, releasing `request` (the call's message): the
    /// blocking form of the one respond ([`respond_first`](Self::respond_first)), waiting
    /// around its send when it cannot go at once. The request's buffer goes back to the pool
    /// once the response is on its way.
    pub(crate) fn respond(
        &self,
        call: CallId,
        response: &[u8],
        request: Option<Message>,
    ) -> Result<()> {
        if response.len() > self.eager_limit() {
            drop(request);
            let class = Class::Response { call };
            return self
                .send_class(class, response, DEFAULT_OP_TIMEOUT)
                .map(drop);
        }
        let conn = &*self.inner;
        let request = request.and_then(Message::into_delivery);
        let mut st = conn.state.lock();
        let sent = match self.respond_first(&mut st, call, response, request.as_ref()) {
            None => {
                drop(st);
                Ok(None)
            }
            Some(send) => self.send_eager(send, Some(DEFAULT_OP_TIMEOUT), st),
        };
        if let Some(d) = request {
            conn.shared.res.release_delivery(d);
        }
        sent.map(drop)
    }

    /// The start of an eager response, of both forms: the request's credit (if it holds
    /// one) released, to travel back in the response's header (or on its own when due, if
    /// the response waits), and the post at once tried (on a connection that has not ended,
    /// so a response on an ended one never reports `Ok`). `None`: the response went. Else the
    /// send to go on with, as any other: it waits for room behind what is queued.
    pub(crate) fn respond_first<'r>(
        &self,
        st: &mut ConnState,
        call: CallId,
        response: &'r [u8],
        request: Option<&crate::proto::Delivery<memory::Buffer>>,
    ) -> Option<EagerSend<'r>> {
        let conn = &*self.inner;
        let class = Class::Response { call };
        let release_due = request.is_some_and(|d| d.holds_credit());
        if release_due {
            conn.release_one(st);
        }
        // Most responses go at once (nothing of the exchange is ahead of them): tried before
        // a send is built, whose first attempt would find the response's kind back in
        // memory and match it again.
        if st.end.is_none() && conn.send_inline_at_once(st, class, response).is_some() {
            return None;
        }
        let mut send = EagerSend::new(Eager::Message(class), response);
        send.release_due = release_due;
        Some(send)
    }

    /// Answers call `call` "no handler" without waiting: the answer is queued behind what
    /// the connection has to send (the protocol takes it whatever the queue holds), so a
    /// `Request` dropped unanswered, from async code too, never blocks. Nothing to answer
    /// once the connection ended: the caller learns of the end instead.
    pub(crate) fn reject(&self, call: CallId) {
        let conn = &*self.inner;
        let mut st = conn.state.lock();
        if st.end.is_some() {
            return;
        }
        if let Some(p) = st.proto.as_mut() {
            if p.reject_call(call).is_ok() {
                conn.drive(&mut st);
            }
        }
    }

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

    /// Whether the connection ended (closed by either side, or failed).
    pub fn is_closed(&self) -> bool {
        self.inner.state.lock().end.is_some()
    }

    /// Protocol counters of the connection.
    pub fn stats(&self) -> Option<crate::proto::Stats> {
        self.inner.state.lock().proto.as_ref().map(|p| p.stats())
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        self.inner.release_handle();
    }
}
