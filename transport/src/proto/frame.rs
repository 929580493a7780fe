//! The wire format: the 16-byte frame header and the bodies of each frame kind (PROTOCOL.md).

use super::error::ProtocolError;

/// Bytes of the header that starts every frame.
pub const HEADER_LEN: usize = 16;
/// Largest body of a control frame (RNDV_CHUNK: offset, address, rkey, length).
pub const CONTROL_BODY_MAX: usize = 24;
/// Bytes of a frame needed to decode it: the largest frame other than DATA.
pub const MAX_HEAD: usize = HEADER_LEN + CONTROL_BODY_MAX;

/// Flag: the message is an RPC request; the tag is its call id.
pub const FLAG_REQUEST: u8 = 1 << 0;
/// Flag: the message is an RPC response; the tag is the call id it answers.
pub const FLAG_RESPONSE: u8 = 1 << 1;
/// Flag (with RESPONSE, on an empty DATA frame): the server has no handler.
pub const FLAG_NO_HANDLER: u8 = 1 << 2;
/// Flag (on a plain DATA frame): the body is a batch of messages, each a little-endian `u32`
/// length and that many bytes ([`BatchEntries`]).
pub const FLAG_BATCH: u8 = 1 << 3;
const FLAGS_KNOWN: u8 = FLAG_REQUEST | FLAG_RESPONSE | FLAG_NO_HANDLER | FLAG_BATCH;

/// Bytes before each message of a batch: its length.
pub const BATCH_ENTRY_HEADER: usize = 4;

/// Declares the frame kinds once: the enum, [`Kind::ALL`] and the decoding of header byte 0.
/// Every `match` over a kind is exhaustive, so a new kind is handled wherever kinds are.
macro_rules! frame_kinds {
    ($($(#[$doc:meta])* $name:ident = $value:literal,)*) => {
        /// Frame kinds (header byte 0).
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        #[repr(u8)]
        pub enum Kind {
            $($(#[$doc])* $name = $value,)*
        }

        impl Kind {
            /// Every kind, in wire order.
            pub const ALL: &'static [Kind] = &[$(Kind::$name),*];
        }

        impl TryFrom<u8> for Kind {
            type Error = ProtocolError;
            fn try_from(v: u8) -> Result<Self, ProtocolError> {
                match v {
                    $($value => Ok(Kind::$name),)*
                    other => Err(ProtocolError::UnknownKind(other)),
                }
            }
        }
    };
}

frame_kinds! {
    /// An eager message: the body is the message.
    Data = 1,
    /// Start of a rendezvous message: total length and call id.
    RndvStart = 2,
    /// One readable chunk of a rendezvous message.
    RndvChunk = 3,
    /// The receiver has read a chunk; the sender may release it.
    RndvAck = 4,
    /// Credit update only.
    Credit = 5,
    /// The sender sends no more messages.
    Close = 6,
    /// Keepalive probe.
    Ping = 7,
    /// Keepalive answer.
    Pong = 8,
}

impl Kind {
    /// Data frames need more than the reserved credits; control frames may use the reserve.
    pub fn is_data(self) -> bool {
        matches!(self, Kind::Data | Kind::RndvStart | Kind::RndvChunk)
    }
}

/// A peer buffer readable by RDMA READ, as announced in RNDV_CHUNK.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RemoteChunk {
    /// Remote virtual address.
    pub addr: u64,
    /// Remote key.
    pub rkey: u32,
    /// Length in bytes (non-zero).
    pub len: u32,
}

/// The decoded 16-byte header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// Frame kind.
    pub kind: Kind,
    /// Flag bits.
    pub flags: u8,
    /// The sender's credit limit for us (absolute, wrapping).
    pub credit_limit: u32,
    /// Call id or message id, else 0.
    pub tag: u64,
}

impl Header {
    /// Little-endian encoding.
    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let mut h = [0u8; HEADER_LEN];
        h[0] = self.kind as u8;
        h[1] = self.flags;
        h[4..8].copy_from_slice(&self.credit_limit.to_le_bytes());
        h[8..16].copy_from_slice(&self.tag.to_le_bytes());
        h
    }
}

/// A decoded frame body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameBody {
    /// DATA: the message bytes are `frame[HEADER_LEN..]`, `len` long.
    Data {
        /// Message length.
        len: usize,
    },
    /// RNDV_START.
    RndvStart {
        /// Total message length.
        total: u64,
        /// Call id for REQUEST/RESPONSE, else 0.
        call: u64,
    },
    /// RNDV_CHUNK.
    RndvChunk {
        /// Offset of the chunk in the message.
        offset: u64,
        /// Where to read it.
        remote: RemoteChunk,
    },
    /// RNDV_ACK.
    RndvAck {
        /// Offset of the chunk read.
        offset: u64,
    },
    /// CREDIT, CLOSE, PING, PONG: no body.
    Empty,
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(a)
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[at..at + 4]);
    u32::from_le_bytes(a)
}

fn exact(
    what: &'static str,
    body_len: usize,
    n: usize,
    expected: &'static str,
) -> Result<(), ProtocolError> {
    if body_len == n {
        Ok(())
    } else {
        Err(ProtocolError::BadLength {
            what,
            len: body_len + HEADER_LEN,
            expected,
        })
    }
}

/// The messages of a batch body (a DATA frame with [`FLAG_BATCH`]): each entry is a
/// little-endian `u32` length and that many bytes; there is at least one, and the last ends
/// where the body ends. Yields `(offset, len)` of each message within the body.
#[derive(Debug, Clone)]
pub struct BatchEntries<'a> {
    body: &'a [u8],
    at: usize,
}

impl<'a> BatchEntries<'a> {
    /// Checks every entry of `body`; the error names the first bad one. Never panics.
    pub fn parse(body: &'a [u8]) -> Result<Self, ProtocolError> {
        if body.is_empty() {
            return Err(ProtocolError::BadBatch {
                at: 0,
                len: 0,
                body: 0,
            });
        }
        let mut at = 0;
        while at < body.len() {
            let Some(head) = body.get(at..at + BATCH_ENTRY_HEADER) else {
                return Err(ProtocolError::BadBatch {
                    at,
                    len: BATCH_ENTRY_HEADER,
                    body: body.len(),
                });
            };
            let len = u32::from_le_bytes([head[0], head[1], head[2], head[3]]) as usize;
            let end = (at + BATCH_ENTRY_HEADER).saturating_add(len);
            if end > body.len() {
                return Err(ProtocolError::BadBatch {
                    at,
                    len,
                    body: body.len(),
                });
            }
            at = end;
        }
        Ok(BatchEntries { body, at: 0 })
    }
}

impl Iterator for BatchEntries<'_> {
    type Item = (usize, usize);

    fn next(&mut self) -> Option<(usize, usize)> {
        let head = self.body.get(self.at..self.at + BATCH_ENTRY_HEADER)?;
        let len = u32::from_le_bytes([head[0], head[1], head[2], head[3]]) as usize;
        let offset = self.at + BATCH_ENTRY_HEADER;
        self.at = offset + len;
        Some((offset, len))
    }
}

/// Bits of a compact DATA frame's immediate data that carry the sender's credit limit (its
/// low bits); the frame kind is in the byte above them.
pub const COMPACT_LIMIT_BITS: u32 = 24;
const COMPACT_LIMIT_MASK: u32 = (1 << COMPACT_LIMIT_BITS) - 1;

/// The immediate data that replaces `header` when its frame goes as a compact DATA frame (a
/// SEND with immediate data carrying only the message; PROTOCOL.md, "Compact DATA frames"):
/// `Some` for the header of a plain message (DATA, no flags, no tag), `None` for any other.
/// The frame kind goes in the top byte, the low 24 bits of the credit limit below it.
pub fn compact_imm(header: &[u8; HEADER_LEN]) -> Option<u32> {
    let plain = header[0] == Kind::Data as u8 && header[1..4] == [0; 3] && header[8..] == [0; 8];
    plain.then(|| {
        let limit = u32::from_le_bytes([header[4], header[5], header[6], header[7]]);
        (u32::from(Kind::Data as u8) << COMPACT_LIMIT_BITS) | (limit & COMPACT_LIMIT_MASK)
    })
}

/// The low 24 bits of the credit limit a compact DATA frame's immediate data carries;
/// an immediate whose kind byte is not DATA's is refused. Never panics.
pub fn decode_compact(imm: u32) -> Result<u32, ProtocolError> {
    let kind = (imm >> COMPACT_LIMIT_BITS) as u8;
    if kind != Kind::Data as u8 {
        return Err(ProtocolError::UnknownKind(kind));
    }
    Ok(imm & COMPACT_LIMIT_MASK)
}

/// Decodes and validates a whole frame (header and body). Never panics.
pub fn decode(frame: &[u8]) -> Result<(Header, FrameBody), ProtocolError> {
    decode_head(&frame[..frame.len().min(MAX_HEAD)], frame.len())
}

/// Decodes a frame of `len` bytes from its head: its first `min(len, MAX_HEAD)` bytes (all a
/// frame other than DATA has; a DATA frame's body is not needed to decode it). Never panics.
pub fn decode_head(frame: &[u8], len: usize) -> Result<(Header, FrameBody), ProtocolError> {
    if frame.len() != len.min(MAX_HEAD) {
        return Err(ProtocolError::BadLength {
            what: "frame head",
            len: frame.len(),
            expected: "the frame's first min(length, 40) bytes",
        });
    }
    if len < HEADER_LEN {
        return Err(ProtocolError::BadLength {
            what: "frame header",
            len,
            expected: "at least 16",
        });
    }
    let kind = Kind::try_from(frame[0])?;
    let flags = frame[1];
    let reserved = u16::from_le_bytes([frame[2], frame[3]]);
    if reserved != 0 {
        return Err(ProtocolError::ReservedNonZero(reserved));
    }
    let header = Header {
        kind,
        flags,
        credit_limit: u32_at(frame, 4),
        tag: u64_at(frame, 8),
    };
    let rpc = flags & (FLAG_REQUEST | FLAG_RESPONSE);
    let bad_flags = flags & !FLAGS_KNOWN != 0
        || rpc == FLAG_REQUEST | FLAG_RESPONSE
        || (flags & FLAG_NO_HANDLER != 0 && (kind != Kind::Data || rpc != FLAG_RESPONSE))
        || (rpc != 0 && !matches!(kind, Kind::Data | Kind::RndvStart))
        || (flags & FLAG_BATCH != 0 && (kind != Kind::Data || flags != FLAG_BATCH));
    if bad_flags {
        return Err(ProtocolError::BadFlags {
            kind: kind as u8,
            flags,
        });
    }
    let body = &frame[HEADER_LEN..];
    let body_len = len - HEADER_LEN;
    let body = match kind {
        Kind::Data => {
            if rpc == 0 && header.tag != 0 {
                return Err(ProtocolError::NonZeroField {
                    kind: kind as u8,
                    field: "tag",
                });
            }
            if flags & FLAG_NO_HANDLER != 0 {
                exact("NO_HANDLER response", body_len, 0, "exactly 16")?;
            }
            FrameBody::Data { len: body_len }
        }
        Kind::RndvStart => {
            exact("RNDV_START", body_len, 16, "exactly 32")?;
            let call = u64_at(body, 8);
            if rpc == 0 && call != 0 {
                return Err(ProtocolError::NonZeroField {
                    kind: kind as u8,
                    field: "call id",
                });
            }
            FrameBody::RndvStart {
                total: u64_at(body, 0),
                call,
            }
        }
        Kind::RndvChunk => {
            exact("RNDV_CHUNK", body_len, 24, "exactly 40")?;
            FrameBody::RndvChunk {
                offset: u64_at(body, 0),
                remote: RemoteChunk {
                    addr: u64_at(body, 8),
                    rkey: u32_at(body, 16),
                    len: u32_at(body, 20),
                },
            }
        }
        Kind::RndvAck => {
            exact("RNDV_ACK", body_len, 8, "exactly 24")?;
            FrameBody::RndvAck {
                offset: u64_at(body, 0),
            }
        }
        Kind::Credit | Kind::Close | Kind::Ping | Kind::Pong => {
            exact("control frame", body_len, 0, "exactly 16")?;
            if header.tag != 0 {
                return Err(ProtocolError::NonZeroField {
                    kind: kind as u8,
                    field: "tag",
                });
            }
            FrameBody::Empty
        }
    };
    Ok((header, body))
}

/// Encodes a control body (everything but DATA) into the fixed-size array `Action::Send`
/// carries; returns the array and the body length.
pub fn encode_body(body: &FrameBody) -> ([u8; CONTROL_BODY_MAX], usize) {
    let mut b = [0u8; CONTROL_BODY_MAX];
    let len = match *body {
        FrameBody::Data { .. } | FrameBody::Empty => 0,
        FrameBody::RndvStart { total, call } => {
            b[0..8].copy_from_slice(&total.to_le_bytes());
            b[8..16].copy_from_slice(&call.to_le_bytes());
            16
        }
        FrameBody::RndvChunk { offset, remote } => {
            b[0..8].copy_from_slice(&offset.to_le_bytes());
            b[8..16].copy_from_slice(&remote.addr.to_le_bytes());
            b[16..20].copy_from_slice(&remote.rkey.to_le_bytes());
            b[20..24].copy_from_slice(&remote.len.to_le_bytes());
            24
        }
        FrameBody::RndvAck { offset } => {
            b[0..8].copy_from_slice(&offset.to_le_bytes());
            8
        }
    };
    (b, len)
}

#[cfg(test)]
#[path = "frame_tests.rs"]
mod tests;
