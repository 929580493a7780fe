//! Errors of the protocol core: configuration, connect data, malformed frames, refused sends,
//! failed calls and failed connections.

use std::time::Duration;

/// A [`Config`](super::Config) value the protocol cannot work with.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// A field is outside its allowed range.
    #[error(
        "config field `{field}` is {value}, but it must be {requirement}; change it and retry"
    )]
    OutOfRange {
        /// The field's name.
        field: &'static str,
        /// Its value, printed.
        value: String,
        /// What it must be.
        requirement: &'static str,
    },
}

/// The peer's connect private data cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum HandshakeError {
    /// Fewer bytes than a [`ConnectInfo`](super::ConnectInfo) needs.
    #[error("connect data is {len} bytes, a ConnectInfo needs {need}: the peer does not speak this protocol")]
    Truncated {
        /// Bytes received.
        len: usize,
        /// Bytes needed.
        need: usize,
    },
    /// The magic is not `RDRS`.
    #[error("connect data starts with magic {found:#010x}, not {expected:#010x} (\"RDRS\"): the peer is not an rdma-rs transport")]
    BadMagic {
        /// The magic received.
        found: u32,
        /// Ours.
        expected: u32,
    },
    /// The peer speaks another protocol version.
    #[error("peer speaks transport protocol version {theirs}, we speak version {ours}: run the same protocol version on both ends")]
    VersionMismatch {
        /// Our version.
        ours: u16,
        /// The peer's version.
        theirs: u16,
    },
    /// A field of the peer's connect data is unusable.
    #[error("peer's connect data field `{field}` is {value}, but it must be {requirement}: fix the peer's configuration")]
    Invalid {
        /// The field.
        field: &'static str,
        /// Its value.
        value: u64,
        /// What it must be.
        requirement: &'static str,
    },
}

/// The peer broke the protocol; the connection fails with this error.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ProtocolError {
    /// Fewer than 16 bytes, or a body of the wrong size for its kind.
    #[error("malformed {what}: {len} bytes where {expected} are required; the peer sends a corrupt or foreign frame")]
    BadLength {
        /// Which frame or part.
        what: &'static str,
        /// Bytes received.
        len: usize,
        /// Bytes required, as text.
        expected: &'static str,
    },
    /// The kind byte names no frame kind.
    #[error("unknown frame kind {0}; the peer speaks another protocol version or sends garbage")]
    UnknownKind(u8),
    /// Flag bits that are undefined or not allowed on this frame kind.
    #[error("frame kind {kind} carries flags {flags:#04x}, which are not allowed on it")]
    BadFlags {
        /// Frame kind byte.
        kind: u8,
        /// Flags byte.
        flags: u8,
    },
    /// The reserved header field is not zero.
    #[error("reserved header field is {0:#06x}, must be zero")]
    ReservedNonZero(u16),
    /// A request or response (REQUEST or RESPONSE set) with call id 0, which is no call's.
    #[error("frame kind {0} is a request or response with call id 0, which no call has")]
    ZeroCallId(u8),
    /// A field that must be zero for this frame kind is not.
    #[error("frame kind {kind} carries a non-zero {field}, which must be zero")]
    NonZeroField {
        /// Frame kind byte.
        kind: u8,
        /// The field.
        field: &'static str,
    },
    /// The peer sent a frame beyond the credit it was granted (it would have hit a missing
    /// receive).
    #[error(
        "peer sent frame {seq} but was granted only up to {limit} (exclusive): it ignores credits"
    )]
    CreditExceeded {
        /// The frame's sequence number.
        seq: u32,
        /// Our limit.
        limit: u32,
    },
    /// The peer's advertised credit limit went backwards or beyond what it may grant.
    #[error("peer advertised credit limit {limit} after {previous} (we have sent {sent}, window {window}): the limit must never move backwards or past sent + window")]
    BadCreditLimit {
        /// New limit.
        limit: u32,
        /// Previous limit.
        previous: u32,
        /// Frames we have sent.
        sent: u32,
        /// The peer's window.
        window: u32,
    },
    /// A data frame longer than our eager limit (cannot happen with a correct peer).
    #[error("DATA frame of {len} bytes exceeds the {limit}-byte frame size we announced")]
    FrameTooLarge {
        /// Frame length.
        len: usize,
        /// Our frame size.
        limit: usize,
    },
    /// A rendezvous message larger than our maximum.
    #[error(
        "peer announced a {len}-byte message, our maximum is {max}: raise max_message or send less"
    )]
    MessageTooLarge {
        /// Announced length.
        len: u64,
        /// Our maximum.
        max: u64,
    },
    /// A rendezvous chunk for a message we do not know.
    #[error("RNDV_CHUNK for message {0}, which was never started (no RNDV_START) or is complete")]
    UnknownMessage(u64),
    /// A rendezvous chunk out of order, empty or past the message's end.
    #[error("RNDV_CHUNK of message {msg} at offset {offset} length {len} is out of order or past the total length {total} (expected offset {expected})")]
    BadChunk {
        /// Message id.
        msg: u64,
        /// Chunk offset.
        offset: u64,
        /// Chunk length.
        len: u32,
        /// Message total length.
        total: u64,
        /// The offset expected next.
        expected: u64,
    },
    /// A rendezvous chunk longer than the largest buffer this side reads into.
    #[error("RNDV_CHUNK of message {msg} is {len} bytes, longer than the largest buffer this endpoint reads a chunk into ({max} bytes); give both ends' pools the same largest class, or send the message from smaller buffers")]
    ChunkTooLarge {
        /// Message id.
        msg: u64,
        /// Chunk length.
        len: u32,
        /// The longest chunk this side reads.
        max: u32,
    },
    /// An RNDV_ACK for a chunk we did not send.
    #[error("RNDV_ACK for message {msg} offset {offset}, which is not an outstanding chunk")]
    UnknownAck {
        /// Message id.
        msg: u64,
        /// Offset.
        offset: u64,
    },
    /// A batch body (DATA with BATCH) that is empty or whose entry runs past its end.
    #[error("DATA batch entry at body offset {at} needs {len} bytes, but the {body}-byte body ends first (or is empty); the peer sends a corrupt frame")]
    BadBatch {
        /// Offset of the bad entry in the body.
        at: usize,
        /// Bytes it claims (its length, or the length field itself).
        len: usize,
        /// Body length.
        body: usize,
    },
    /// The peer exceeded a protocol-wide bound (concurrent large messages, chunks in flight).
    #[error("peer exceeded the protocol bound on {what} ({limit})")]
    TooMany {
        /// What was exceeded.
        what: &'static str,
        /// The bound.
        limit: usize,
    },
    /// RNDV_START for a message id that is already in progress.
    #[error("RNDV_START for message {0}, which is already in progress")]
    DuplicateMessage(u64),
    /// A message frame after the peer's CLOSE.
    #[error("peer sent frame kind {0} after its CLOSE")]
    AfterClose(u8),
    /// A compact DATA frame from a peer whose window is too large for the immediate data to
    /// carry its credit limit.
    #[error("peer sent a compact DATA frame, but its window {window} is 2^24 or more: such a peer must send full headers")]
    CompactNotAllowed {
        /// The peer's window.
        window: u32,
    },
    /// A compact DATA frame on a connection where one side's device has no immediate data
    /// (the handshake's NO_IMMEDIATE flag): such frames are not sent either way.
    #[error("peer sent a compact DATA frame, but a device of this connection has no immediate data (NO_IMMEDIATE at connect): frames must keep their headers")]
    CompactWithoutImmediate,
}

/// Why a connection ended abnormally (carried by `Action::Closed` and failed calls).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConnError {
    /// The peer broke the protocol.
    #[error("protocol error from peer, connection closed: {0}; check that both ends run the same transport version")]
    Protocol(ProtocolError),
    /// Nothing was received within the keepalive timeout.
    #[error("peer dead: nothing received for {silent_for:?} (keepalive timeout); check the peer process and the link, then reconnect")]
    PeerDead {
        /// How long the peer was silent.
        silent_for: Duration,
    },
    /// The driver reported the peer gone (disconnect, queue pair error).
    #[error("peer gone: {0}; reconnect to continue")]
    PeerGone(PeerGone),
    /// This side aborted the connection ([`Connection::abort`](super::Connection::abort)):
    /// what was not yet delivered either way was dropped.
    #[error("connection aborted by this side (a stream dropped with linger zero): what was not yet delivered was dropped")]
    Aborted,
}

/// Why the driver says the peer is gone.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PeerGone {
    /// The connection manager reported a disconnect.
    #[error("disconnected")]
    Disconnected,
    /// The queue pair went to the error state (a work request failed).
    #[error("queue pair error")]
    QueuePairError,
}

/// Why a user request was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SendErrorKind {
    /// No room now (send queue of the connection full, too many large messages or chunks in
    /// flight); retry after the connection made progress.
    #[error(
        "would block: the connection's queue is full; retry after progress (completions, credits)"
    )]
    WouldBlock,
    /// The connection is closing, closed or failed.
    #[error("connection closed: no more sends are accepted")]
    Closed,
    /// The message is longer than allowed on this path.
    #[error("message of {len} bytes exceeds {limit}: {hint}")]
    TooLarge {
        /// Message length.
        len: u64,
        /// The limit.
        limit: u64,
        /// What to do.
        hint: &'static str,
    },
    /// The payload buffer lacks the 16 bytes of header room at its start.
    #[error("payload buffer is {len} bytes; it must start with {need} bytes of header room")]
    NoHeaderRoom {
        /// Buffer length.
        len: usize,
        /// Header room needed.
        need: usize,
    },
    /// `add_chunk` for a message that is not being sent.
    #[error("no large message {0} is being sent: use the id send_large returned")]
    UnknownMessage(u64),
    /// `add_chunk` with a chunk that does not continue the message.
    #[error("chunk at offset {offset} length {len} does not continue the message (next offset {expected}, total {total}): add non-empty chunks in order")]
    BadChunk {
        /// Offset given.
        offset: u64,
        /// Length given.
        len: u32,
        /// Next offset expected.
        expected: u64,
        /// Total length.
        total: u64,
    },
}

/// A refused send: the reason and the payload handed back.
#[derive(Debug, thiserror::Error)]
#[error("{kind}")]
pub struct SendError<B> {
    /// Why.
    pub kind: SendErrorKind,
    /// The payload, unchanged.
    pub payload: B,
}

/// Why an RPC call failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CallError {
    /// No response before the call's deadline.
    #[error("call timed out: no response before its deadline; retry or raise the timeout")]
    TimedOut,
    /// The server has no handler for requests.
    #[error("the server has no request handler: register one on the server")]
    NoHandler,
    /// The connection closed before a response arrived.
    #[error("connection closed before the response arrived")]
    Closed,
    /// The connection failed.
    #[error("connection failed: {0}")]
    Failed(ConnError),
}

// By hand, not `#[from]`: the message shows the inner error, so it is no `source()` as well.
impl From<ProtocolError> for ConnError {
    fn from(e: ProtocolError) -> Self {
        ConnError::Protocol(e)
    }
}

impl From<ConnError> for CallError {
    fn from(e: ConnError) -> Self {
        CallError::Failed(e)
    }
}
