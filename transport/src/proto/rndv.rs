//! Rendezvous state: a large message being announced chunk by chunk (sender) and being read
//! chunk by chunk (receiver).

use std::collections::VecDeque;

use super::frame::RemoteChunk;
use super::{Chunk, MsgId, Received};

/// One chunk handed to the connection by `add_chunk`, kept until the peer acknowledges it.
#[derive(Debug)]
pub(crate) struct ChunkOut<B> {
    pub(crate) offset: u64,
    pub(crate) remote: RemoteChunk,
    pub(crate) payload: B,
    pub(crate) sent: bool,
}

/// A large message on the sending side.
#[derive(Debug)]
pub(crate) struct LargeOut<B> {
    pub(crate) id: MsgId,
    pub(crate) total: u64,
    pub(crate) flags: u8,
    pub(crate) call: u64,
    pub(crate) start_sent: bool,
    /// Bytes covered by chunks added.
    pub(crate) added: u64,
    /// Bytes covered by RNDV_CHUNK frames sent.
    pub(crate) sent: u64,
    /// Chunks added and not yet acknowledged, in offset order.
    pub(crate) chunks: VecDeque<ChunkOut<B>>,
}

impl<B> LargeOut<B> {
    pub(crate) fn new(id: MsgId, total: u64, flags: u8, call: u64, max_chunks: usize) -> Self {
        LargeOut {
            id,
            total,
            flags,
            call,
            start_sent: false,
            added: 0,
            sent: 0,
            chunks: VecDeque::with_capacity(max_chunks),
        }
    }

    /// All frames of the message are sent (START and a CHUNK for every byte).
    pub(crate) fn all_sent(&self) -> bool {
        self.start_sent && self.sent == self.total
    }

    /// Everything sent and acknowledged: the message can be forgotten.
    pub(crate) fn finished(&self) -> bool {
        self.all_sent() && self.chunks.is_empty()
    }

    /// The first chunk added but not yet announced.
    pub(crate) fn next_unsent(&mut self) -> Option<&mut ChunkOut<B>> {
        self.chunks.iter_mut().find(|c| !c.sent)
    }

    /// Takes an announced chunk out on its ACK.
    pub(crate) fn ack(&mut self, offset: u64) -> Option<B> {
        let i = self
            .chunks
            .iter()
            .position(|c| c.offset == offset && c.sent)?;
        self.chunks.remove(i).map(|c| c.payload)
    }
}

/// What a large incoming message is, for delivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum InClass {
    /// Delivered to the user.
    Deliver(Received),
    /// Completes (or not, if late) a call.
    Response(super::CallId),
}

/// A large message on the receiving side.
#[derive(Debug)]
pub(crate) struct LargeIn<B> {
    pub(crate) id: MsgId,
    pub(crate) total: u64,
    pub(crate) class: InClass,
    /// Offset the next RNDV_CHUNK must have.
    pub(crate) next_offset: u64,
    /// Bytes read so far.
    pub(crate) got: u64,
    /// Chunks read, in offset order.
    pub(crate) parts: Vec<(u64, Chunk<B>)>,
}

impl<B> LargeIn<B> {
    pub(crate) fn new(id: MsgId, total: u64, class: InClass) -> Self {
        LargeIn {
            id,
            total,
            class,
            next_offset: 0,
            got: 0,
            parts: Vec::new(),
        }
    }

    pub(crate) fn complete(&self) -> bool {
        self.got == self.total
    }

    /// Stores a chunk that was read.
    pub(crate) fn insert(&mut self, offset: u64, chunk: Chunk<B>) {
        self.got += u64::from(chunk.len);
        let at = self.parts.partition_point(|p| p.0 < offset);
        self.parts.insert(at, (offset, chunk));
    }
}
