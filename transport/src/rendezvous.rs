//! Rendezvous sends of a [`Conn`], for messages longer than the eager limit, as attempts
//! shared by both forms: the announcement ([`announce`]); the one rendezvous send of copied
//! bytes ([`Conn::send_large`]), chunk by chunk, whose rest the engine finishes once its
//! sender stopped waiting; and a message queued whole in one step ([`queue_whole`]: a
//! `poll_send` of a few chunks, a zero-copy buffer as one).

use std::future::poll_fn;

use crate::engine::{send_error, Chunks, ConnShared, ConnState};
use crate::proto::{CallId, Class, LargeSend, RemoteChunk, SendError, SendErrorKind};
use crate::{Conn, Result};

/// Announces a rendezvous message of `total` bytes if the protocol takes it now (`None`:
/// wait for progress).
pub(crate) fn announce(
    conn: &ConnShared,
    st: &mut ConnState,
    class: Class,
    total: u64,
) -> Option<Result<LargeSend>> {
    if let Some(e) = st.ended() {
        return Some(Err(e));
    }
    let p = st.proto.as_mut()?;
    match p.send_large(class, total) {
        Ok(l) => {
            conn.drive(st);
            Some(Ok(l))
        }
        Err(SendErrorKind::WouldBlock) => None,
        Err(kind) => Some(Err(send_error(kind, st))),
    }
}

/// A rendezvous message of `total` bytes queued whole under `st`: announced and its `count`
/// chunks (`chunks`: offset, where the peer reads it, its pool buffer; in order, covering
/// the message) added in one step, or nothing. `None` waits for progress, the chunks kept for
/// the next attempt; else the call id of a request, or the error. What `poll_send` does with
/// a message up to `max_whole_send`, and `send_buf` with a zero-copy buffer (one chunk).
pub(crate) fn queue_whole<C>(
    conn: &ConnShared,
    st: &mut ConnState,
    (class, total): (Class, u64),
    count: usize,
    chunks: &mut Option<C>,
) -> Option<Result<Option<CallId>>>
where
    C: IntoIterator<Item = (u64, RemoteChunk, memory::Buffer)>,
{
    if let Some(e) = st.ended() {
        return Some(Err(e));
    }
    let p = st.proto.as_mut()?;
    if !p.can_take_whole(count) {
        return None;
    }
    let large = match p.send_large(class, total) {
        Ok(l) => l,
        Err(SendErrorKind::WouldBlock) => return None,
        Err(kind) => return Some(Err(send_error(kind, st))),
    };
    for (offset, remote, buf) in chunks.take().expect("kept until queued") {
        if let Err(SendError { kind, .. }) = p.add_chunk(large.msg, offset, remote, buf) {
            return Some(Err(send_error(kind, st)));
        }
    }
    conn.drive(st);
    Some(Ok(large.call))
}

impl Conn {
    /// The one rendezvous send, of both forms (a blocking send waits on it through
    /// [`block_on_future`](crate::task::block_on_future)). The first chunk is copied into the
    /// pool before the message is announced, so a sender that stops waiting before then
    /// sent nothing; then the chunks are added one by one as the message has room.
    /// `announced` is set (to the call id of a request) once the message is announced: from
    /// then on it is delivered whole, and a sender that stops waiting (a timeout, a dropped
    /// future) leaves the rest to the engine ([`ConnShared::finish_later`]), not to a thread.
    pub(crate) async fn send_large(
        &self,
        class: Class,
        data: &[u8],
        announced: &mut Option<Option<CallId>>,
    ) -> Result<Option<CallId>> {
        let conn = &*self.inner;
        let chunk = conn.shared.cfg.proto.rndv_chunk_size as usize;
        let first = poll_fn(|cx| self.poll_pool_buffer(cx, chunk.min(data.len()))).await?;
        let total = data.len() as u64;
        let large = self
            .poll_state(|conn, st| announce(conn, st, class, total))
            .await?;
        *announced = Some(large.call);
        let mut rest = Unfinished {
            conn,
            chunks: Some(Chunks::new(large.msg, data, chunk)),
        };
        let chunks = rest.chunks.as_mut().expect("taken only when dropped");
        chunks.fill(first)?;
        loop {
            self.poll_state(|conn, st| chunks.attempt(conn, st)).await?;
            let Some(len) = chunks.buffer_needed() else {
                return Ok(large.call);
            };
            let buf = poll_fn(|cx| self.poll_pool_buffer(cx, len)).await?;
            chunks.fill(buf)?;
        }
    }
}

/// The chunks of a rendezvous message its sender adds: those it did not add when it stopped
/// waiting go to the engine, so the peer gets the whole message.
struct Unfinished<'a, 'd> {
    conn: &'a ConnShared,
    chunks: Option<Chunks<'d>>,
}

impl Drop for Unfinished<'_, '_> {
    fn drop(&mut self) {
        if let Some(chunks) = self.chunks.take() {
            self.conn.finish_later(chunks);
        }
    }
}
