//! Rendezvous sends of a [`Conn`], for messages longer than the eager limit, as attempts
//! shared by both forms: the announcement ([`announce`]); the one rendezvous send of copied
//! bytes ([`Conn::send_large`]), chunk by chunk, whose rest the engine finishes once its
//! sender stopped waiting; and a zero-copy buffer queued whole as one chunk ([`one_chunk`]).

use std::future::poll_fn;

use crate::engine::{remote_chunk, send_error, Chunks, ConnShared, ConnState};
use crate::proto::{CallId, Class, LargeSend, SendError, SendErrorKind};
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

/// A rendezvous message of one chunk, the whole of `buf` (a zero-copy buffer), queued whole
/// under `st` (announced and its chunk added) or not at all: `None` waits for progress (the
/// buffer kept for the next attempt), else the call id of a request or the error.
pub(crate) fn one_chunk(
    conn: &ConnShared,
    st: &mut ConnState,
    class: Class,
    buf: &mut Option<memory::Buffer>,
) -> Option<Result<Option<CallId>>> {
    if let Some(e) = st.ended() {
        return Some(Err(e));
    }
    let p = st.proto.as_mut()?;
    if !p.can_take_whole(1) {
        return None;
    }
    let whole = buf.as_ref().expect("kept until queued");
    let remote = match remote_chunk(whole) {
        Ok(r) => r,
        Err(e) => return Some(Err(e)),
    };
    let large = match p.send_large(class, whole.len() as u64) {
        Ok(l) => l,
        Err(SendErrorKind::WouldBlock) => return None,
        Err(kind) => return Some(Err(send_error(kind, st))),
    };
    let whole = buf.take().expect("kept until queued");
    if let Err(SendError { kind, .. }) = p.add_chunk(large.msg, 0, remote, whole) {
        return Some(Err(send_error(kind, st)));
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
