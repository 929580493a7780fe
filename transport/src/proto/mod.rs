//! The transport's protocol core: per-connection state without I/O.
//!
//! A [`Connection`] is driven by events (a user request, a received frame, a completion, a
//! timer) and produces [`Action`]s (post this SEND, post this READ, deliver this message,
//! release this buffer) that a driver carries out on a queue pair. It never reads the clock
//! (time is passed in), never blocks and allocates nothing on the small-message path. The
//! wire format and the rules are in `transport/PROTOCOL.md`.
//!
//! # Buffers
//! The driver's buffer type implements [`Payload`]. A payload given to [`Connection::send`]
//! starts with [`HEADER_LEN`] bytes of room for the header: the driver allocates
//! `HEADER_LEN + message length`, writes the message at offset 16, and `Payload::len` is the
//! whole frame. When the connection emits `Action::Send { header, body: Body::Payload(b) }`,
//! the driver copies `header` into `b[..16]` and posts `b[..b.len()]` as one SEND.
//!
//! A driver that cannot lend the received bytes while moving the receive buffer passes a copy
//! of the frame's first [`MAX_HEAD`] bytes and its length to [`Connection::on_receive_head`]:
//! that is all the connection reads of a frame.
//!
//! # Compact DATA frames
//! A plain message's frame may go without its header: when [`Connection::compact_imm`] gives
//! immediate data for the `header` of an `Action::Send`, the driver may post `b[16..]` as a
//! SEND with that immediate data instead. A SEND received with immediate data goes to
//! [`Connection::on_receive_compact`]; its message is delivered as [`Parts::Bare`], from
//! the buffer's offset 0 (PROTOCOL.md, "Compact DATA frames").
//!
//! # Driver loop
//! After every call into the connection, drain [`Connection::poll_action`] until it returns
//! `None`; call [`Connection::on_timeout`] no later than [`Connection::poll_timeout`].
//!
//! # Example
//! Two connections joined by hand: one message from `a` to `b`.
//! ```
//! use std::time::Instant;
//! use transport::proto::{Action, Body, Class, Config, Connection, Parts, HEADER_LEN};
//!
//! let config = Config::default();
//! let now = Instant::now();
//! // each side is created from the peer's connect data (exchanged through the CM)
//! let mut a: Connection<Vec<u8>> = Connection::new(&config, &config.connect_info(), now)?;
//! let mut b: Connection<Vec<u8>> = Connection::new(&config, &config.connect_info(), now)?;
//!
//! let mut payload = vec![0u8; HEADER_LEN]; // header room
//! payload.extend_from_slice(b"hello");
//! a.send(Class::Message, payload).map_err(|e| e.kind)?;
//!
//! // a's driver posts the SEND; b's receive completes with those bytes
//! let Some(Action::Send { header, body: Body::Payload(mut frame), .. }) = a.poll_action() else {
//!     unreachable!()
//! };
//! frame[..HEADER_LEN].copy_from_slice(&header);
//! b.on_receive(&frame.clone(), frame, now)?;
//! a.on_send_complete(1);
//!
//! let Some(Action::Deliver(message)) = b.poll_action() else { unreachable!() };
//! let Parts::Eager(buf) = &message.parts else { unreachable!() };
//! assert_eq!(&buf[HEADER_LEN..], b"hello");
//! drop(message);
//! b.on_release(); // the receive buffer is free: the credit goes back to `a`
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod config;
mod conn;
mod credit;
mod error;
mod frame;
mod rndv;
mod rpc;
#[cfg(test)]
mod tests;

use std::sync::Arc;
use std::time::Instant;

pub use config::{
    Config, ConnectInfo, Refusal, MAX_LARGE_MESSAGES, MAX_OUTSTANDING_CHUNKS, SQ_CONTROL_RESERVE,
};
pub use conn::{Connection, Ends, FrameAtOnce, LargeSend, Stats};
pub use error::{
    CallError, ConfigError, ConnError, HandshakeError, PeerGone, ProtocolError, SendError,
    SendErrorKind,
};
pub use frame::{
    compact_imm, decode, decode_compact, decode_head, encode_body, BatchEntries, FrameBody, Header,
    Kind, RemoteChunk, BATCH_ENTRY_HEADER, COMPACT_LIMIT_BITS, CONTROL_BODY_MAX, FLAG_BATCH,
    FLAG_NO_HANDLER, FLAG_REQUEST, FLAG_RESPONSE, HEADER_LEN, MAX_HEAD,
};
pub use rpc::CallId;

/// A buffer the driver hands to or gets from the connection (a pool buffer; `Vec<u8>` in
/// tests).
pub trait Payload {
    /// Length in bytes: for a payload given to `send`, the whole frame (header room included).
    fn len(&self) -> usize;
    /// The bytes (for a received frame, the frame itself: batches are split from them).
    fn bytes(&self) -> &[u8];
    /// Bytes the buffer can still take beyond its length (see [`append`](Self::append)); 0
    /// for a buffer that cannot grow (the default).
    fn spare(&self) -> usize {
        0
    }
    /// Whether `len() == 0`.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Appends as much of `bytes` as fits without growing past `max_len` (nor past what the
    /// buffer can hold); returns how many bytes it took. Used to coalesce byte-stream writes
    /// ([`Connection::append`]); a buffer that cannot grow takes nothing (the default).
    fn append(&mut self, bytes: &[u8], max_len: usize) -> usize {
        let _ = (bytes, max_len);
        0
    }
    /// Appends one entry of a batch frame, `data` after its length ([`BATCH_ENTRY_HEADER`]
    /// bytes, little-endian), whole or not at all (within `max_len`, as
    /// [`append`](Self::append)); returns whether it did. The default appends the two
    /// parts; a buffer may write both at once.
    fn append_entry(&mut self, data: &[u8], max_len: usize) -> bool {
        let need = BATCH_ENTRY_HEADER + data.len();
        if need > self.spare() || self.len() + need > max_len {
            return false;
        }
        self.append(&(data.len() as u32).to_le_bytes(), max_len);
        self.append(data, max_len);
        true
    }
}

impl Payload for Vec<u8> {
    fn len(&self) -> usize {
        Vec::len(self)
    }
    fn bytes(&self) -> &[u8] {
        self
    }
    fn spare(&self) -> usize {
        usize::MAX - Vec::len(self)
    }
    fn append(&mut self, bytes: &[u8], max_len: usize) -> usize {
        let n = bytes.len().min(max_len.saturating_sub(Vec::len(self)));
        self.extend_from_slice(&bytes[..n]);
        n
    }
}

/// Id of a rendezvous message, allocated per connection, never reused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct MsgId(pub u64);

/// Id of an RDMA READ the connection asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ReadId(pub u64);

/// What a message sent is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    /// A plain message.
    Message,
    /// An RPC request; the call fails with [`CallError::TimedOut`] at `deadline`.
    Request {
        /// When the call times out.
        deadline: Instant,
    },
    /// The response to a request received.
    Response {
        /// The request's id, as delivered.
        call: CallId,
    },
}

/// What a message delivered is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Received {
    /// A plain message.
    Message,
    /// An RPC request; answer with `Class::Response { call }` or [`Connection::reject_call`].
    Request {
        /// The caller's id.
        call: CallId,
    },
}

/// A READ destination buffer holding `len` bytes of a message from its offset 0.
#[derive(Debug)]
pub struct Chunk<B> {
    /// The buffer.
    pub buf: B,
    /// Bytes of the message it holds.
    pub len: u32,
}

/// The buffers of a delivered message.
#[derive(Debug)]
pub enum Parts<B> {
    /// An eager message: the receive buffer itself; the message is
    /// `buf[HEADER_LEN..HEADER_LEN + len]`. It holds a receive credit: when the user drops it,
    /// call [`Connection::on_release`].
    Eager(B),
    /// An eager message that came in a compact DATA frame (no header in the buffer): the
    /// message is `buf[..len]`. It holds a receive credit as [`Parts::Eager`] does.
    Bare(B),
    /// A rendezvous message: the READ destinations in order. They hold no credit.
    Chunks(Vec<Chunk<B>>),
    /// One message of a batch frame: the receive buffer, shared by the batch's messages; the
    /// message is `frame.bytes()[offset..offset + len]`. The last of them to go gives the
    /// receive credit back (see [`Delivery::release`]).
    Part {
        /// The batch frame's receive buffer.
        frame: Arc<B>,
        /// Where the message starts in it.
        offset: usize,
    },
}

/// A complete message.
#[derive(Debug)]
pub struct Delivery<B> {
    /// Plain message or request.
    pub class: Received,
    /// Message length in bytes.
    pub len: u64,
    /// Where the bytes are.
    pub parts: Parts<B>,
}

impl<B> Delivery<B> {
    /// Whether dropping this message must be reported with [`Connection::on_release`]: an
    /// eager message's does. A part of a batch's may (the last one of its frame does): use
    /// [`release`](Self::release) for it.
    pub fn holds_credit(&self) -> bool {
        matches!(self.parts, Parts::Eager(_) | Parts::Bare(_))
    }

    /// Drops the message; returns whether that must be reported with
    /// [`Connection::on_release`] (it gave a receive buffer back: an eager message, or the
    /// last part of a batch frame).
    pub fn release(self) -> bool {
        match self.parts {
            Parts::Eager(_) | Parts::Bare(_) => true,
            Parts::Chunks(_) => false,
            Parts::Part { frame, .. } => Arc::into_inner(frame).is_some(),
        }
    }
}

/// What a SEND carries after the header.
#[derive(Debug)]
pub enum Body<B> {
    /// A DATA frame's payload buffer, header room first: write the header into its first 16
    /// bytes and post its `len()` bytes.
    Payload(B),
    /// A small body (`.1` bytes of `.0`) to post after the header, inline or from a small buffer.
    Control([u8; CONTROL_BODY_MAX], usize),
}

/// An output of the connection, for the driver to carry out in order.
#[derive(Debug)]
pub enum Action<B> {
    /// Post one SEND: `header` then `body`.
    Send {
        /// The encoded frame header.
        header: [u8; HEADER_LEN],
        /// What follows it.
        body: Body<B>,
        /// Signal it: the connection waits for this frame's completion (reported with
        /// [`Connection::on_send_complete`]) before it sends the stream bytes it holds back
        /// (see [`Connection::send_mergeable`]). A driver may signal other frames too.
        signal: bool,
    },
    /// Allocate a `len`-byte destination and post an RDMA READ of `remote` into it; report it
    /// with [`Connection::on_read_complete`].
    Read {
        /// The READ's id.
        id: ReadId,
        /// Where to read.
        remote: RemoteChunk,
        /// Bytes to read.
        len: u32,
    },
    /// Ask the peer's device for an acknowledgement that needs no credit and no receive (a
    /// zero-length RDMA WRITE: no key is checked for zero bytes); report its success with
    /// [`Connection::on_peer_acknowledged`]. Emitted once per keepalive interval without a
    /// frame from the peer, beside the PING (which needs a credit the held-back peer may never
    /// return). At most one is in flight: the driver keeps a send-queue slot for it.
    Probe,
    /// A buffer the connection no longer needs (an acknowledged chunk, or any held buffer
    /// after the connection failed).
    Release(B),
    /// A complete message, in send order.
    Deliver(Delivery<B>),
    /// An RPC call finished.
    CallDone {
        /// The call.
        id: CallId,
        /// The response, or why there is none.
        result: Result<Delivery<B>, CallError>,
    },
    /// The connection ended: `None` after a graceful close (end of stream), else the failure.
    /// Emitted once; nothing is sent afterwards.
    Closed {
        /// Why, if not graceful.
        error: Option<ConnError>,
    },
}
