//! RPC on a [`Conn`]: calls, incoming requests and their answers, each in both forms (the
//! blocking one waiting around the attempt the async one polls): a call is a request sent
//! (the sends' attempts, [`crate::send_core`]) and its response taken (`take_response`); a
//! request is taken (`take_request`) and answered through one first attempt
//! (`respond_first`), or refused without waiting when dropped (`reject`).

use std::future::poll_fn;
use std::time::{Duration, Instant};

use crate::conn::DEFAULT_OP_TIMEOUT;
use crate::engine::{register, ConnState};
use crate::message::{Message, Request};
use crate::messages::end_as_none;
use crate::proto::{CallId, Class, Received};
use crate::send_core::{Alloc, Eager, EagerSend};
use crate::{Conn, Error, Result};

impl Conn {
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

    /// Calls the peer: sends `request` and waits up to `timeout` for its response (the
    /// protocol's call timer bounds the wait, no executor timer is needed). Dropping the future
    /// forgets the call.
    pub async fn call_async(&self, request: &[u8], timeout: Duration) -> Result<Message> {
        let id = self
            .send_class_async(
                Class::Request {
                    deadline: Instant::now() + timeout,
                },
                request,
            )
            .await?
            .expect("a request has a call id");
        let mut call = PendingCall {
            conn: self,
            id,
            taken: false,
        };
        let result = poll_fn(|cx| {
            self.poll_busy(
                cx,
                |st| self.take_response(st, id),
                // Woken by this call's end only, not by every change of a busy connection.
                |st, cx| {
                    match st.wakers.calls.get_mut(id.get()) {
                        Some(w) if w.will_wake(cx.waker()) => return,
                        Some(w) => *w = cx.waker().clone(),
                        None => st.wakers.calls.push(id.get(), cx.waker().clone()),
                    }
                    self.inner.shared.policy.wake_progress();
                },
            )
        })
        .await;
        call.taken = result.is_ok();
        result
    }

    /// Receives the next RPC request: `Ok(None)` once the peer closed and every request was
    /// taken (cancel safe, like [`recv_async`](Self::recv_async)).
    pub async fn recv_request_async(&self) -> Result<Option<Request>> {
        poll_fn(|cx| {
            self.poll_busy(
                cx,
                |st| self.take_request(st).map(end_as_none),
                |st, cx| register(&self.inner.shared, st, cx),
            )
        })
        .await
    }

    /// Takes the next RPC request, as [`take_message`](Self::take_message) takes a message.
    #[inline]
    pub(crate) fn take_request(&self, st: &mut ConnState) -> Option<Result<Request>> {
        if let Some(d) = st.user.requests.pop_front() {
            let Received::Request { call } = d.class else {
                unreachable!("only requests are queued here")
            };
            return Some(Ok(Request {
                message: Some(Message::new(self.inner.clone(), d)),
                call: Some(call),
                conn: self.clone(),
            }));
        }
        st.ended().map(Err)
    }

    /// Takes the outcome of call `id`: its response, or why it failed.
    #[inline]
    pub(crate) fn take_response(&self, st: &mut ConnState, id: CallId) -> Option<Result<Message>> {
        if let Some(r) = st.user.calls.remove(id.get()) {
            return Some(match r {
                Ok(d) => Ok(Message::new(self.inner.clone(), d)),
                Err(e) => Err(Error::Call(e)),
            });
        }
        st.ended().map(Err)
    }
}

impl Request {
    /// Sends `response` to the caller, waiting for credit without blocking the thread: the
    /// same attempt as [`respond`](Request::respond) (the request's credit travels back with
    /// the response, which goes at once when nothing is ahead of it). Dropping the future
    /// before the response went answers nothing: the call is then answered "no handler",
    /// queued without waiting, and the request's credit comes back on its own.
    pub async fn respond_async(mut self, response: &[u8]) -> Result<()> {
        let Some(call) = self.call else {
            return Ok(());
        };
        let conn = self.conn.clone();
        let request = self.message.take();
        if response.len() > conn.eager_limit() {
            drop(request);
            let class = Class::Response { call };
            let sent = conn.send_class_async(class, response).await;
            if sent.is_ok() {
                self.call = None;
            }
            return sent.map(drop);
        }
        let shared = &*conn.inner;
        let request = request.and_then(Message::into_delivery);
        let first = conn.respond_first(&mut shared.state.lock(), call, response, request.as_ref());
        // The response is copied from `response`: the request's buffer may go now.
        if let Some(d) = request {
            shared.shared.res.release_delivery(d);
        }
        if let Some(mut send) = first {
            let kind = send.kind();
            poll_fn(|cx| {
                let mut st = shared.state.lock();
                let step = send.attempt(shared, &mut st, Alloc::Now);
                conn.poll_step(cx, kind, step, st)
            })
            .await
            .map_err(|e| *e)?;
        }
        self.call = None;
        Ok(())
    }
}

/// A call in progress: forgotten when dropped before its outcome was taken (timed out,
/// failed, or its future dropped), so a late response is dropped. A taken outcome needs
/// nothing more: the call's end removed its waker.
pub(crate) struct PendingCall<'a> {
    pub conn: &'a Conn,
    pub id: CallId,
    pub taken: bool,
}

impl Drop for PendingCall<'_> {
    fn drop(&mut self) {
        if self.taken {
            return;
        }
        let mut st = self.conn.inner.state.lock();
        st.wakers.calls.remove(self.id.get());
        if let Some(p) = st.proto.as_mut() {
            p.cancel_call(self.id);
        }
        st.user.calls.remove(self.id.get());
    }
}
