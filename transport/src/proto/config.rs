//! Per-connection protocol limits and the connect private data exchanged by the CM.

use std::time::{Duration, Instant};

use super::error::{ConfigError, HandshakeError};
use super::frame::{CONTROL_BODY_MAX, HEADER_LEN};

/// Send-queue slots kept for control frames: data frames and READs need more than this free.
pub const SQ_CONTROL_RESERVE: u32 = 2;
/// Protocol bound: rendezvous messages a sender may have unfinished at once per connection.
pub const MAX_LARGE_MESSAGES: usize = 64;
/// Protocol bound: rendezvous chunks announced and not yet acknowledged per connection.
pub const MAX_OUTSTANDING_CHUNKS: usize = 256;

/// Limits of one connection (re-exported as `transport::ProtocolConfig`).
///
/// Start from [`Config::default`] and change what you need with the `with_*` setters; the
/// getter of the same name without `with_` reads a value back. Values are checked by
/// [`Config::validate`], which the connection runs (and so does an endpoint when it is built),
/// not by the setters.
///
/// ```
/// use std::time::Duration;
/// use transport::ProtocolConfig;
///
/// let config = ProtocolConfig::default()
///     .with_window(128)
///     .with_keepalive_timeout(Duration::from_secs(30));
/// assert_eq!(config.window(), 128);
/// assert!(config.validate().is_ok());
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Config {
    pub(crate) window: u32,
    pub(crate) reserved_credits: u32,
    pub(crate) sq_depth: u32,
    pub(crate) frame_size: u32,
    pub(crate) rndv_chunk_size: u32,
    pub(crate) max_chunks_in_flight: u32,
    pub(crate) max_reads_in_flight: u32,
    pub(crate) max_message: u64,
    pub(crate) keepalive_interval: Duration,
    pub(crate) keepalive_timeout: Duration,
    /// Whether this side's device sends and receives immediate data (iWARP's do not): set by
    /// the endpoint from its device, not by a setter. Without it neither side sends compact
    /// frames ([`ConnectInfo::FLAG_NO_IMMEDIATE`]).
    pub(crate) immediate_data: bool,
    /// The longest rendezvous chunk this side reads (into one buffer): set by the endpoint
    /// from its pool's largest buffer, not by a setter. A longer chunk from the peer fails
    /// the connection ([`ProtocolError::ChunkTooLarge`](super::ProtocolError::ChunkTooLarge)).
    pub(crate) max_read_chunk: u32,
    /// Where the keepalive timers' grid starts (see [`Connection::poll_timeout`]): set by
    /// the endpoint to one instant for all its connections, so their timers fall due
    /// together; `None`: the connection's own start.
    ///
    /// [`Connection::poll_timeout`]: super::Connection::poll_timeout
    pub(crate) timer_epoch: Option<Instant>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            window: 32,
            reserved_credits: 2,
            sq_depth: 64,
            frame_size: 4096 + HEADER_LEN as u32,
            rndv_chunk_size: 64 << 10,
            max_chunks_in_flight: 16,
            max_reads_in_flight: 4,
            max_message: 1 << 30,
            keepalive_interval: Duration::from_secs(1),
            keepalive_timeout: Duration::from_secs(10),
            immediate_data: true,
            max_read_chunk: u32::MAX,
            timer_epoch: None,
        }
    }
}

impl Config {
    /// Sets the receives granted to the peer (credits), i.e. the frames it may have
    /// unreleased at once; default 32 frames.
    ///
    /// With a shared receive queue, the driver keeps at least the sum of its connections'
    /// windows posted, so a frame sent within credit always finds a receive.
    pub fn with_window(mut self, frames: u32) -> Self {
        self.window = frames;
        self
    }

    /// The credits granted to the peer (see [`with_window`](Self::with_window)).
    pub fn window(&self) -> u32 {
        self.window
    }

    /// Sets the credits kept for control frames (CREDIT, RNDV_ACK, CLOSE, PING, PONG), at
    /// least 1; default 2 frames.
    pub fn with_reserved_credits(mut self, frames: u32) -> Self {
        self.reserved_credits = frames;
        self
    }

    /// The credits kept for control frames (see
    /// [`with_reserved_credits`](Self::with_reserved_credits)).
    pub fn reserved_credits(&self) -> u32 {
        self.reserved_credits
    }

    /// Sets the send-queue slots of the connection's queue pair (SENDs and READs in flight);
    /// default 64 slots.
    pub fn with_sq_depth(mut self, slots: u32) -> Self {
        self.sq_depth = slots;
        self
    }

    /// The send-queue slots of the queue pair (see [`with_sq_depth`](Self::with_sq_depth)).
    pub fn sq_depth(&self) -> u32 {
        self.sq_depth
    }

    /// Sets the size of each receive buffer, header included; default 4112 bytes (4096 of
    /// message, see [`eager_limit`](Self::eager_limit)).
    pub fn with_frame_size(mut self, bytes: u32) -> Self {
        self.frame_size = bytes;
        self
    }

    /// The size of each receive buffer in bytes (see [`with_frame_size`](Self::with_frame_size)).
    pub fn frame_size(&self) -> u32 {
        self.frame_size
    }

    /// Sets the size of each rendezvous chunk the driver copies and announces, and so of
    /// each RDMA READ; default 64 KiB, in bytes.
    ///
    /// Keep it small against the device's window of unacknowledged packets (rxe sends
    /// nothing past 128, about 128 KiB): a READ larger than that holds back every frame
    /// posted after it until its response is nearly complete, and under packet loss each
    /// lost response packet has the whole rest of a large READ sent again, which can keep a
    /// connection silent past its keepalive timeout. The price on a clean link is throughput:
    /// larger chunks move a large message faster (the figures of both are in the
    /// repository's `docs/benchmarks.md`); raise it (with `max_chunks_in_flight` 4) where the
    /// link does not drop packets.
    pub fn with_rndv_chunk_size(mut self, bytes: u32) -> Self {
        self.rndv_chunk_size = bytes;
        self
    }

    /// The size of each rendezvous chunk in bytes (see
    /// [`with_rndv_chunk_size`](Self::with_rndv_chunk_size)).
    pub fn rndv_chunk_size(&self) -> u32 {
        self.rndv_chunk_size
    }

    /// Sets the chunks of one message announced and not yet acknowledged; default 16 chunks.
    pub fn with_max_chunks_in_flight(mut self, chunks: u32) -> Self {
        self.max_chunks_in_flight = chunks;
        self
    }

    /// The chunks of one message in flight (see
    /// [`with_max_chunks_in_flight`](Self::with_max_chunks_in_flight)).
    pub fn max_chunks_in_flight(&self) -> u32 {
        self.max_chunks_in_flight
    }

    /// Sets the RDMA READs in flight per connection; default 4 READs.
    ///
    /// With `rndv_chunk_size`, what a lost packet can cost: the device sends again
    /// everything after it (4 x 64 KiB by default).
    pub fn with_max_reads_in_flight(mut self, reads: u32) -> Self {
        self.max_reads_in_flight = reads;
        self
    }

    /// The RDMA READs in flight per connection (see
    /// [`with_max_reads_in_flight`](Self::with_max_reads_in_flight)).
    pub fn max_reads_in_flight(&self) -> u32 {
        self.max_reads_in_flight
    }

    /// Sets the largest message accepted or sent; default 1 GiB, in bytes.
    pub fn with_max_message(mut self, bytes: u64) -> Self {
        self.max_message = bytes;
        self
    }

    /// The largest message accepted or sent, in bytes (see
    /// [`with_max_message`](Self::with_max_message)).
    pub fn max_message(&self) -> u64 {
        self.max_message
    }

    /// Sets how long without receiving anything before a PING is sent; default 1 s.
    pub fn with_keepalive_interval(mut self, interval: Duration) -> Self {
        self.keepalive_interval = interval;
        self
    }

    /// The silence before a PING (see [`with_keepalive_interval`](Self::with_keepalive_interval)).
    pub fn keepalive_interval(&self) -> Duration {
        self.keepalive_interval
    }

    /// Sets how long without a sign of life before the peer is dead; default 10 s.
    ///
    /// A sign of life is a frame from the peer, or an acknowledgement from its device of a
    /// frame or keepalive probe of ours. So a peer whose frames are held back (behind a long
    /// READ in its send queue, or by retransmissions) is alive while its device answers; a
    /// dead host, a dead link or a killed process (its queue pair gone) is detected. Like
    /// TCP's keepalive, it does not detect a process that is hung while its device still
    /// answers: use call timeouts for that.
    pub fn with_keepalive_timeout(mut self, timeout: Duration) -> Self {
        self.keepalive_timeout = timeout;
        self
    }

    /// The silence after which the peer is dead (see
    /// [`with_keepalive_timeout`](Self::with_keepalive_timeout)).
    pub fn keepalive_timeout(&self) -> Duration {
        self.keepalive_timeout
    }
}

fn range(
    ok: bool,
    field: &'static str,
    value: impl ToString,
    requirement: &'static str,
) -> Result<(), ConfigError> {
    if ok {
        Ok(())
    } else {
        Err(ConfigError::OutOfRange {
            field,
            value: value.to_string(),
            requirement,
        })
    }
}

impl Config {
    /// Largest message sent eagerly (in one frame): `frame_size - 16`.
    pub fn eager_limit(&self) -> usize {
        (self.frame_size as usize).saturating_sub(HEADER_LEN)
    }

    /// Checks every field; the error names the field and its allowed range.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let r = self.reserved_credits;
        range(
            (1..=1 << 20).contains(&r),
            "reserved_credits",
            r,
            "between 1 and 2^20",
        )?;
        range(
            self.window >= 2 * r + 2 && self.window <= 1 << 30,
            "window",
            self.window,
            "at least 2 * reserved_credits + 2 and at most 2^30",
        )?;
        range(
            self.sq_depth > SQ_CONTROL_RESERVE && self.sq_depth <= 1 << 20,
            "sq_depth",
            self.sq_depth,
            "at least 3 (two slots are kept for control frames)",
        )?;
        range(
            self.frame_size as usize >= HEADER_LEN + CONTROL_BODY_MAX,
            "frame_size",
            self.frame_size,
            "at least 40 (header and the largest control body)",
        )?;
        range(
            self.rndv_chunk_size >= 1,
            "rndv_chunk_size",
            self.rndv_chunk_size,
            "at least 1",
        )?;
        range(
            self.max_chunks_in_flight >= 1
                && self.max_chunks_in_flight as usize <= MAX_OUTSTANDING_CHUNKS,
            "max_chunks_in_flight",
            self.max_chunks_in_flight,
            "between 1 and 256",
        )?;
        range(
            self.max_reads_in_flight >= 1
                && self.max_reads_in_flight <= self.sq_depth - SQ_CONTROL_RESERVE,
            "max_reads_in_flight",
            self.max_reads_in_flight,
            "at least 1 and at most sq_depth - 2",
        )?;
        range(
            self.max_message >= self.eager_limit() as u64,
            "max_message",
            self.max_message,
            "at least the eager limit (frame_size - 16)",
        )?;
        range(
            !self.keepalive_interval.is_zero(),
            "keepalive_interval",
            format!("{:?}", self.keepalive_interval),
            "greater than zero",
        )?;
        range(
            self.keepalive_timeout > self.keepalive_interval
                && self.keepalive_timeout <= Duration::from_secs(86_400),
            "keepalive_timeout",
            format!("{:?}", self.keepalive_timeout),
            "greater than keepalive_interval and at most one day",
        )?;
        Ok(())
    }

    /// What this side tells the peer at connect.
    pub fn connect_info(&self) -> ConnectInfo {
        ConnectInfo {
            magic: ConnectInfo::MAGIC,
            version: ConnectInfo::VERSION,
            flags: if self.immediate_data {
                0
            } else {
                ConnectInfo::FLAG_NO_IMMEDIATE
            },
            window: self.window,
            frame_size: self.frame_size,
            max_message: self.max_message,
        }
    }
}

/// Connect private data (fits the CM's 56-byte connect and 196-byte accept limits).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectInfo {
    /// `b"RDRS"` read as a little-endian u32.
    pub magic: u32,
    /// Protocol version: [`ConnectInfo::VERSION`].
    pub version: u16,
    /// [`ConnectInfo::FLAG_NO_IMMEDIATE`] or nothing.
    pub flags: u16,
    /// Credits granted to the peer.
    pub window: u32,
    /// Receive buffer size (header included) the peer may fill.
    pub frame_size: u32,
    /// Largest message the sender of this info accepts.
    pub max_message: u64,
}

/// Why a listener refused a connect request, when it says (after its [`ConnectInfo`] in the
/// rejection's private data; see PROTOCOL.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// Its endpoint serves its maximum of connections.
    Full {
        /// The listener's `max_connections`.
        max: u32,
    },
}

impl Refusal {
    /// The reason's tag for [`Refusal::Full`].
    const FULL: [u8; 4] = *b"FULL";
    /// Encoded length, with the [`ConnectInfo`] before it.
    pub const LEN: usize = ConnectInfo::LEN + 8;

    /// `info` followed by this reason.
    pub fn encode(&self, info: &ConnectInfo) -> [u8; Self::LEN] {
        let mut b = [0u8; Self::LEN];
        let (head, reason) = b.split_at_mut(ConnectInfo::LEN);
        head.copy_from_slice(&info.encode());
        match self {
            Refusal::Full { max } => {
                reason[..4].copy_from_slice(&Self::FULL);
                reason[4..].copy_from_slice(&max.to_le_bytes());
            }
        }
        b
    }

    /// The reason in a rejection's private data, if it gives one.
    pub fn decode(b: &[u8]) -> Option<Refusal> {
        let reason = b.get(ConnectInfo::LEN..Self::LEN)?;
        (reason[..4] == Self::FULL).then(|| Refusal::Full {
            max: u32::from_le_bytes([reason[4], reason[5], reason[6], reason[7]]),
        })
    }
}

impl ConnectInfo {
    /// `b"RDRS"` as a little-endian u32.
    pub const MAGIC: u32 = u32::from_le_bytes(*b"RDRS");
    /// The protocol version this crate speaks.
    pub const VERSION: u16 = 4;
    /// Flag: the sender's device has no immediate data (iWARP): no compact frames either way.
    pub const FLAG_NO_IMMEDIATE: u16 = 1;
    /// Encoded length.
    pub const LEN: usize = 24;

    /// Little-endian encoding, [`ConnectInfo::LEN`] bytes.
    pub fn encode(&self) -> [u8; Self::LEN] {
        let mut b = [0u8; Self::LEN];
        b[0..4].copy_from_slice(&self.magic.to_le_bytes());
        b[4..6].copy_from_slice(&self.version.to_le_bytes());
        b[6..8].copy_from_slice(&self.flags.to_le_bytes());
        b[8..12].copy_from_slice(&self.window.to_le_bytes());
        b[12..16].copy_from_slice(&self.frame_size.to_le_bytes());
        b[16..24].copy_from_slice(&self.max_message.to_le_bytes());
        b
    }

    /// Decodes and checks the peer's private data (trailing bytes, such as the CM's zero
    /// padding, are ignored). A different magic or version is refused.
    pub fn decode(b: &[u8]) -> Result<Self, HandshakeError> {
        if b.len() < 6 {
            return Err(HandshakeError::Truncated {
                len: b.len(),
                need: Self::LEN,
            });
        }
        let magic = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
        if magic != Self::MAGIC {
            return Err(HandshakeError::BadMagic {
                found: magic,
                expected: Self::MAGIC,
            });
        }
        let version = u16::from_le_bytes([b[4], b[5]]);
        if version != Self::VERSION {
            return Err(HandshakeError::VersionMismatch {
                ours: Self::VERSION,
                theirs: version,
            });
        }
        if b.len() < Self::LEN {
            return Err(HandshakeError::Truncated {
                len: b.len(),
                need: Self::LEN,
            });
        }
        let u32_at = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        let mut m = [0u8; 8];
        m.copy_from_slice(&b[16..24]);
        let info = ConnectInfo {
            magic,
            version,
            flags: u16::from_le_bytes([b[6], b[7]]),
            window: u32_at(8),
            frame_size: u32_at(12),
            max_message: u64::from_le_bytes(m),
        };
        let invalid = |field, value: u64, requirement| {
            Err(HandshakeError::Invalid {
                field,
                value,
                requirement,
            })
        };
        if info.flags & !Self::FLAG_NO_IMMEDIATE != 0 {
            return invalid(
                "flags",
                info.flags.into(),
                "NO_IMMEDIATE (bit 0) or none in version 4",
            );
        }
        if info.window < 2 || info.window > 1 << 30 {
            return invalid("window", info.window.into(), "between 2 and 2^30");
        }
        if (info.frame_size as usize) < HEADER_LEN + CONTROL_BODY_MAX {
            return invalid("frame_size", info.frame_size.into(), "at least 40");
        }
        Ok(info)
    }
}

#[cfg(test)]
#[path = "config_tests.rs"]
mod tests;
