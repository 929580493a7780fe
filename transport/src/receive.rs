//! What a [`Conn`] receives, as non-blocking attempts over its state shared by the blocking
//! and the async calls: the next message, the next RPC request, a call's response. Each
//! takes what it waits for, or says the connection ended (`Some(Err)`), or that there is
//! nothing yet (`None`); a blocking call waits around it, an async one registers its waker.
//! Each is inlined into its wait: a call of its own would copy the taken message, the size
//! of several words, out through every layer.

use crate::engine::ConnState;
use crate::message::{Message, Request};
use crate::proto::{CallId, Received};
use crate::{Conn, Error, Result};

impl Conn {
    /// Takes the next message. Once the peer closed and every message was taken:
    /// [`Error::Closed`] with no cause.
    #[inline]
    pub(crate) fn take_message(&self, st: &mut ConnState) -> Option<Result<Message>> {
        if let Some(d) = st.user.inbox.pop_front() {
            return Some(Ok(Message::new(self.inner.clone(), d)));
        }
        st.ended().map(Err)
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

/// The end of a connection as an async receive reports it: the peer's close as the end of
/// what comes (`Ok(None)`, as a channel's receiver ends), anything else as the error it is.
pub(crate) fn end_as_none<T>(taken: Result<T>) -> Result<Option<T>> {
    match taken {
        Ok(t) => Ok(Some(t)),
        Err(Error::Closed { cause: None }) => Ok(None),
        Err(e) => Err(e),
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
