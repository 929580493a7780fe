//! Received messages ([`Message`]), incoming RPC requests ([`Request`]) and send buffers
//! ([`MessageBuf`]): pool buffers lent to the application, returned (with their receive
//! credit) when dropped.

use std::borrow::Cow;
use std::fmt;
use std::sync::Arc;

use memory::Buffer;

use crate::engine::ConnShared;
use crate::proto::{CallId, Delivery, Parts, HEADER_LEN};

/// A message received on a connection. Its bytes stay in the pool buffers they arrived in (no
/// copy); dropping it gives them back, and with them the credit that lets the peer send the
/// next message, so drop messages promptly.
pub struct Message {
    conn: Arc<ConnShared>,
    delivery: Option<Delivery<Buffer>>,
}

impl Message {
    pub(crate) fn new(conn: Arc<ConnShared>, delivery: Delivery<Buffer>) -> Self {
        Message {
            conn,
            delivery: Some(delivery),
        }
    }

    /// The delivery, for a caller that releases its credit itself ([`ConnShared::release_one`]):
    /// the message no longer does when dropped.
    pub(crate) fn into_delivery(mut self) -> Option<Delivery<Buffer>> {
        self.delivery.take()
    }

    fn delivery(&self) -> &Delivery<Buffer> {
        self.delivery.as_ref().expect("present until drop")
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.delivery().len as usize
    }

    /// Whether the message is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The bytes in order, as one or more slices (a message sent by rendezvous arrives in
    /// chunks).
    pub fn chunks(&self) -> impl Iterator<Item = &[u8]> {
        let chunks = match &self.delivery().parts {
            Parts::Chunks(c) => Some(c.iter().map(|c| &c.buf[..c.len as usize])),
            Parts::Eager(_) | Parts::Bare(_) | Parts::Part { .. } => None,
        };
        self.in_one_buffer()
            .into_iter()
            .chain(chunks.into_iter().flatten())
    }

    /// The bytes, when they lie in one receive buffer (an eager message, or one of a batch).
    fn in_one_buffer(&self) -> Option<&[u8]> {
        let d = self.delivery();
        match &d.parts {
            Parts::Eager(buf) => Some(&buf[HEADER_LEN..HEADER_LEN + d.len as usize]),
            Parts::Bare(buf) => Some(&buf[..d.len as usize]),
            Parts::Part { frame, offset } => Some(&frame[*offset..offset + d.len as usize]),
            Parts::Chunks(_) => None,
        }
    }

    /// The bytes as one slice: borrowed when the message is in one piece, else copied.
    pub fn bytes(&self) -> Cow<'_, [u8]> {
        // The common case first, without the iterator of `chunks`: a message in one piece.
        if let Some(one) = self.in_one_buffer() {
            return Cow::Borrowed(one);
        }
        let mut chunks = self.chunks();
        match (chunks.next(), chunks.next()) {
            (None, _) => Cow::Borrowed(&[]),
            (Some(one), None) => Cow::Borrowed(one),
            _ => Cow::Owned(self.to_vec()),
        }
    }

    /// The bytes, copied into a vector.
    pub fn to_vec(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(self.len());
        for c in self.chunks() {
            v.extend_from_slice(c);
        }
        v
    }

    /// Copies the message into the start of `dst`; returns the bytes copied (at most
    /// `dst.len()`).
    pub fn copy_to(&self, dst: &mut [u8]) -> usize {
        let mut at = 0;
        for c in self.chunks() {
            let n = c.len().min(dst.len() - at);
            dst[at..at + n].copy_from_slice(&c[..n]);
            at += n;
            if at == dst.len() {
                break;
            }
        }
        at
    }
}

impl fmt::Debug for Message {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Message").field("len", &self.len()).finish()
    }
}

impl Drop for Message {
    fn drop(&mut self) {
        let Some(d) = self.delivery.take() else {
            return;
        };
        if self.conn.shared.res.release_delivery(d) {
            let mut st = self.conn.state.lock();
            self.conn.release_one(&mut st);
            self.conn.drive_if_release_due(&mut st);
        }
    }
}

/// An RPC request received: answer it with [`respond`](Self::respond) (from any thread).
/// Dropping it unanswered answers "no handler", so the caller never waits in vain.
pub struct Request {
    pub(crate) message: Option<Message>,
    /// The call, until it is answered.
    pub(crate) call: Option<CallId>,
    pub(crate) conn: crate::Conn,
}

impl Request {
    /// The request's bytes.
    pub fn message(&self) -> &Message {
        self.message.as_ref().expect("present until answered")
    }

    /// Sends `response` to the caller, blocking up to the endpoint's operation timeout for
    /// credit. The request's buffers are released (and its credit goes back with the
    /// response).
    pub fn respond(mut self, response: &[u8]) -> crate::Result<()> {
        let request = self.message.take();
        match self.call.take() {
            Some(call) => self.conn.respond(call, response, request),
            None => Ok(()),
        }
    }
}

impl fmt::Debug for Request {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Request")
            .field("call", &self.call)
            .field("len", &self.message.as_ref().map(Message::len))
            .finish()
    }
}

impl Drop for Request {
    fn drop(&mut self) {
        drop(self.message.take());
        if let Some(call) = self.call.take() {
            self.conn.reject(call);
        }
    }
}

/// A pool buffer to send without a copy ([`Conn::send_buf`](crate::Conn::send_buf)): fill it
/// through `Deref<Target = [u8]>`. Up to the eager limit it has room for the frame header
/// before the bytes you see, and goes in one frame; a longer one (up to
/// [`Conn::max_buf`](crate::Conn::max_buf)) goes by rendezvous as one chunk, which the
/// peer reads with one RDMA READ straight from it.
pub struct MessageBuf {
    pub(crate) buf: Buffer,
    /// Where the message starts in `buf`: after the header's room ([`HEADER_LEN`]) for an
    /// eager message, at 0 for a rendezvous one.
    pub(crate) start: usize,
}

impl MessageBuf {
    /// Whether the buffer goes by rendezvous (it has no header room).
    pub(crate) fn is_rendezvous(&self) -> bool {
        self.start == 0
    }
}

impl std::ops::Deref for MessageBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.buf[self.start..]
    }
}

impl std::ops::DerefMut for MessageBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        &mut self.buf[self.start..]
    }
}

impl fmt::Debug for MessageBuf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MessageBuf")
            .field("len", &(self.buf.len() - self.start))
            .field("rendezvous", &self.is_rendezvous())
            .finish()
    }
}
