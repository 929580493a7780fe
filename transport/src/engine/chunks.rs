//! The chunks of an announced rendezvous message ([`Chunks`]), added one at a time by the
//! one rendezvous send ([`Conn::send_large`](crate::Conn)), and the rest of a message whose
//! sender stopped waiting (a blocking send past its timeout, an async send's future
//! dropped): kept in the connection's state and finished by the engine as credit, room and
//! pool buffers allow ([`ConnShared::finish_later`]), so the peer gets the whole message and
//! no thread waits for it.

use std::borrow::Cow;
use std::fmt;

use super::{send_error, ConnShared, ConnState};
use crate::proto::{MsgId, RemoteChunk, SendError, SendErrorKind};
use crate::{ConfigError, Error, Result};

/// The chunks of an announced rendezvous message, added one at a time: the caller takes a
/// pool buffer for the next one ([`buffer_needed`](Self::buffer_needed)), waiting as it
/// waits; [`fill`](Self::fill) copies the chunk into it; [`attempt`](Self::attempt) adds it
/// once the message has room. A chunk copied but not yet added stays for the next attempt.
pub(crate) struct Chunks<'d> {
    msg: MsgId,
    /// The bytes still to add, from message byte `base`: the sender's, or a copy of them
    /// once the engine finishes the message ([`into_owned`](Self::into_owned)).
    data: Cow<'d, [u8]>,
    base: usize,
    /// Bytes of `data` added so far.
    added: usize,
    chunk: usize,
    /// The next chunk, copied, waiting for room.
    copied: Option<(RemoteChunk, memory::Buffer)>,
}

impl fmt::Debug for Chunks<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Chunks")
            .field("msg", &self.msg)
            .field("next", &(self.base + self.added))
            .field("left", &(self.data.len() - self.added))
            .field("copied", &self.copied.is_some())
            .finish()
    }
}

impl<'d> Chunks<'d> {
    /// Message `msg`, whose bytes are `data`, in chunks of `chunk` bytes.
    pub(crate) fn new(msg: MsgId, data: &'d [u8], chunk: usize) -> Self {
        Chunks {
            msg,
            data: Cow::Borrowed(data),
            base: 0,
            added: 0,
            chunk,
            copied: None,
        }
    }

    /// The length of the pool buffer the next chunk needs; `None` when one is copied
    /// already or every chunk is added.
    pub(crate) fn buffer_needed(&self) -> Option<usize> {
        let left = self.data.len() - self.added;
        (self.copied.is_none() && left > 0).then(|| left.min(self.chunk))
    }

    /// Copies the next chunk into `buf` (of [`buffer_needed`](Self::buffer_needed) bytes).
    pub(crate) fn fill(&mut self, mut buf: memory::Buffer) -> Result<()> {
        let part = &self.data[self.added..self.added + buf.len()];
        buf.copy_from_slice(part);
        self.copied = Some((remote_chunk(&buf)?, buf));
        Ok(())
    }

    /// Whether every chunk is added.
    pub(crate) fn done(&self) -> bool {
        self.added == self.data.len()
    }

    /// The chunks not yet added, with their bytes copied: what the engine finishes once the
    /// sender stopped waiting. A chunk copied already is kept as it is.
    pub(crate) fn into_owned(self) -> Chunks<'static> {
        Chunks {
            msg: self.msg,
            data: Cow::Owned(self.data[self.added..].to_vec()),
            base: self.base + self.added,
            added: 0,
            chunk: self.chunk,
            copied: self.copied,
        }
    }

    /// One attempt under `st` to add the copied chunk: added, the error, or `None` (wait
    /// for progress).
    pub(crate) fn attempt(&mut self, conn: &ConnShared, st: &mut ConnState) -> Option<Result<()>> {
        if let Some(e) = st.ended() {
            return Some(Err(e));
        }
        let p = st.proto.as_mut()?;
        if !p.can_add_chunk(self.msg) {
            return None;
        }
        let (remote, buf) = self.copied.take().expect("filled before each attempt");
        let (len, offset) = (buf.len(), (self.base + self.added) as u64);
        match p.add_chunk(self.msg, offset, remote, buf) {
            Ok(()) => {
                conn.drive(st);
                self.added += len;
                Some(Ok(()))
            }
            Err(SendError {
                kind: SendErrorKind::WouldBlock,
                payload,
            }) => {
                self.copied = Some((remote, payload));
                None
            }
            Err(SendError { kind, .. }) => Some(Err(send_error(kind, st))),
        }
    }
}

/// The descriptor a peer reads a rendezvous chunk by: the whole of `buf`.
pub(crate) fn remote_chunk(buf: &memory::Buffer) -> Result<RemoteChunk> {
    let remote = buf.remote().ok_or(Error::Config(ConfigError::PoolAccess {
        access: "without REMOTE_READ".into(),
    }))?;
    Ok(RemoteChunk {
        addr: remote.addr,
        rkey: remote.rkey,
        len: buf.len() as u32,
    })
}

/// How far the engine got with the rest of a message.
enum Advanced {
    /// Every chunk added, or the message can no longer go (the connection ended).
    Finished,
    /// Waits for this connection's progress (room for the next chunk).
    Progress,
    /// Waits for a pool buffer: retried at the next tick.
    Pool,
}

impl ConnShared {
    /// Hands the rest of a rendezvous message to the engine (its sender stopped waiting):
    /// its chunks are added as room and pool buffers allow, from the connection's progress
    /// and the progress thread's ticks. Nothing is kept once the connection ended (the peer
    /// can no longer get the message).
    pub(crate) fn finish_later(&self, chunks: Chunks<'_>) {
        if chunks.done() {
            return;
        }
        let mut st = self.state.lock();
        if st.end.is_some() {
            return;
        }
        st.rests.push_back(chunks.into_owned());
        self.finish_rests(&mut st);
    }

    /// Adds what it can of the rests of rendezvous messages the engine finishes, in the order
    /// they were handed over; returns whether one waits for a pool buffer (the caller's tick
    /// comes again soon). Run before every drive of the connection that has any.
    pub(crate) fn finish_rests(&self, st: &mut ConnState) -> bool {
        // Taken out while they advance: adding a chunk drives the connection, which would
        // come back here.
        let mut rests = std::mem::take(&mut st.rests);
        let mut pool = false;
        rests.retain_mut(|rest| match self.advance(st, rest) {
            Advanced::Finished => false,
            Advanced::Progress => true,
            Advanced::Pool => {
                pool = true;
                true
            }
        });
        if st.end.is_none() {
            st.rests = rests;
        }
        pool
    }

    /// Adds chunks of `rest` while the message has room and the pool buffers.
    fn advance(&self, st: &mut ConnState, rest: &mut Chunks<'static>) -> Advanced {
        loop {
            if rest.done() {
                return Advanced::Finished;
            }
            if let Some(len) = rest.buffer_needed() {
                let filled = match self.shared.res.pool.try_alloc(len) {
                    Ok(buf) => rest.fill(buf),
                    Err(memory::Error::Exhausted { .. }) => return Advanced::Pool,
                    Err(e) => Err(Error::Memory(e)),
                };
                if filled.is_err() {
                    // A buffer the peer cannot read: the message cannot go.
                    return Advanced::Finished;
                }
            }
            match rest.attempt(self, st) {
                Some(Ok(())) => {}
                Some(Err(_)) => return Advanced::Finished,
                None => return Advanced::Progress,
            }
        }
    }
}
