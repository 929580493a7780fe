//! Owned work requests ([`SendRequest`], [`RecvRequest`]), the buffers they hand back
//! ([`Reclaimed`]) and failed posts ([`PostError`]).
use std::any::Any;
use std::fmt;
use std::ops::RangeBounds;
use std::sync::Arc;

use super::inline_any::InlineAny;
use super::small::Small;
use super::{BindMw, SendFlags, WrOp};
use crate::ah::Ah;
use crate::mr::{LocalSlice, MemoryRegion, RegisteredBuf, RegisteredBufMut, RemoteSlice};
use crate::{Error, Result};

/// A buffer owned by a request until its completion is reclaimed. The library's own region
/// types and other small handles (up to 64 bytes, such as a pool's buffers) are stored in place,
/// so posting them allocates nothing; larger buffer types are boxed.
pub(crate) enum Owner {
    Region(MemoryRegion),
    Shared(Arc<MemoryRegion>),
    /// A small buffer of another type, in place.
    Inline(InlineAny),
    /// Any other buffer, with its type's name (for the error of a take of the wrong type).
    Other(Box<dyn Any + Send>, &'static str),
}

/// `v` as a `B`, when `T` is `B` (decided at compile time; no allocation, no unsafe).
fn cast<T: 'static, B: 'static>(v: T) -> Option<B> {
    let mut slot = Some(v);
    (&mut slot as &mut dyn Any)
        .downcast_mut::<Option<B>>()
        .and_then(Option::take)
}

impl Owner {
    pub(crate) fn new<B: Send + 'static>(buf: B) -> Owner {
        let mut slot = Some(buf);
        let any = &mut slot as &mut dyn Any;
        if let Some(r) = any
            .downcast_mut::<Option<MemoryRegion>>()
            .and_then(Option::take)
        {
            return Owner::Region(r);
        }
        if let Some(a) = any
            .downcast_mut::<Option<Arc<MemoryRegion>>>()
            .and_then(Option::take)
        {
            return Owner::Shared(a);
        }
        match slot.map(InlineAny::new) {
            Some(Ok(inline)) => Owner::Inline(inline),
            Some(Err(b)) => Owner::Other(Box::new(b), std::any::type_name::<B>()),
            None => unreachable!("only a region is taken out of the slot"),
        }
    }
    fn is<B: 'static>(&self) -> bool {
        match self {
            Owner::Region(r) => (r as &dyn Any).is::<B>(),
            Owner::Shared(a) => (a as &dyn Any).is::<B>(),
            Owner::Inline(v) => v.is::<B>(),
            Owner::Other(b, _) => (**b).is::<B>(),
        }
    }
    pub(crate) fn type_name(&self) -> &'static str {
        match self {
            Owner::Region(_) => std::any::type_name::<MemoryRegion>(),
            Owner::Shared(_) => std::any::type_name::<Arc<MemoryRegion>>(),
            Owner::Inline(v) => v.type_name(),
            Owner::Other(_, name) => name,
        }
    }
    fn downcast<B: 'static>(self) -> Option<B> {
        match self {
            Owner::Region(r) => cast(r),
            Owner::Shared(a) => cast(a),
            Owner::Inline(v) => v.take::<B>().ok(),
            Owner::Other(b, _) => b.downcast::<B>().ok().map(|b| *b),
        }
    }
    fn into_any(self) -> Box<dyn Any + Send> {
        match self {
            Owner::Region(r) => Box::new(r),
            Owner::Shared(a) => Box::new(a),
            Owner::Inline(v) => v.into_box(),
            Owner::Other(b, _) => b,
        }
    }
}

/// An owned send request: its memory is moved in and comes back through [`Qp::reclaim`](crate::Qp::reclaim).
pub struct SendRequest {
    pub(crate) op: WrOp,
    pub(crate) sges: Small<LocalSlice>,
    pub(crate) owners: Small<Owner>,
    pub(crate) tag: u64,
    pub(crate) inline: Option<Box<[u8]>>,
    pub(crate) flags: SendFlags,
    pub(crate) ud: Option<(Ah, u32, u32)>,
    /// The window, region and rights of a type 2 bind.
    pub(crate) bind: Option<Box<BindMw>>,
}

impl fmt::Debug for SendRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SendRequest")
            .field("op", &self.op)
            .field("sges", &self.sges.as_slice())
            .field("inline", &self.inline.as_ref().map(|d| d.len()))
            .field("flags", &self.flags)
            .finish_non_exhaustive()
    }
}

fn not_for(op: &WrOp, what: &str) -> Error {
    Error::InvalidWorkRequest {
        qp_num: 0,
        reason: format!("{op:?}: {what}"),
    }
}

impl SendRequest {
    /// A request with no memory yet (a zero-length SEND is valid); signaled.
    pub fn new(op: WrOp) -> Self {
        SendRequest {
            op,
            sges: Small::Empty,
            owners: Small::Empty,
            tag: 0,
            inline: None,
            flags: SendFlags::SIGNALED,
            ud: None,
            bind: None,
        }
    }

    /// SEND of `range` of `buf`.
    pub fn send<B: RegisteredBuf>(buf: B, range: impl RangeBounds<usize>) -> Result<Self> {
        Self::new(WrOp::Send).sge(buf, range)
    }

    /// RDMA WRITE of `range` of `buf` to `remote`.
    pub fn rdma_write<B: RegisteredBuf>(
        buf: B,
        range: impl RangeBounds<usize>,
        remote: RemoteSlice,
    ) -> Result<Self> {
        Self::new(WrOp::RdmaWrite(remote)).sge(buf, range)
    }

    /// RDMA READ of `remote` into `range` of `buf`.
    pub fn rdma_read<B: RegisteredBufMut>(
        buf: B,
        range: impl RangeBounds<usize>,
        remote: RemoteSlice,
    ) -> Result<Self> {
        Self::new(WrOp::RdmaRead(remote)).sge_mut(buf, range)
    }

    /// Compare-and-swap at `remote`; the old value lands in `buf[offset..offset + 8]`.
    pub fn compare_and_swap<B: RegisteredBufMut>(
        buf: B,
        offset: usize,
        remote: RemoteSlice,
        compare: u64,
        swap: u64,
    ) -> Result<Self> {
        Self::new(WrOp::AtomicCmpSwap {
            remote,
            compare,
            swap,
        })
        .sge_mut(buf, offset..offset.saturating_add(8))
    }

    /// Fetch-and-add at `remote`; the old value lands in `buf[offset..offset + 8]`.
    pub fn fetch_and_add<B: RegisteredBufMut>(
        buf: B,
        offset: usize,
        remote: RemoteSlice,
        add: u64,
    ) -> Result<Self> {
        Self::new(WrOp::AtomicFetchAdd { remote, add })
            .sge_mut(buf, offset..offset.saturating_add(8))
    }

    /// A SEND or RDMA WRITE (with or without immediate) of `data` copied into the request at
    /// post time (inline): no registered memory involved. Must fit the QP's `max_inline_data`.
    pub fn inline(op: WrOp, data: &[u8]) -> Result<Self> {
        if op.writes_local() {
            return Err(not_for(&op, "inline data is only for SEND and RDMA WRITE"));
        }
        let mut r = Self::new(op);
        r.inline = Some(data.into());
        r.flags |= SendFlags::INLINE;
        Ok(r)
    }

    /// Adds `range` of `buf` as the next gather entry (the NIC reads it). Not for READ or
    /// atomics, whose local memory is written: use [`sge_mut`](Self::sge_mut).
    pub fn sge<B: RegisteredBuf>(mut self, buf: B, range: impl RangeBounds<usize>) -> Result<Self> {
        if self.op.writes_local() {
            return Err(not_for(&self.op, "writes local memory: use sge_mut"));
        }
        self.push(buf, range)?;
        Ok(self)
    }

    /// Adds `range` of `buf` as the next scatter/gather entry; the NIC may write it.
    pub fn sge_mut<B: RegisteredBufMut>(
        mut self,
        buf: B,
        range: impl RangeBounds<usize>,
    ) -> Result<Self> {
        self.push(buf, range)?;
        Ok(self)
    }

    fn push<B: RegisteredBuf>(&mut self, buf: B, range: impl RangeBounds<usize>) -> Result<()> {
        if self.inline.is_some() {
            return Err(not_for(&self.op, "inline request takes no SGEs"));
        }
        let sge = buf.local().slice(range)?;
        self.sges.push(sge);
        self.owners.push(Owner::new(buf));
        Ok(())
    }

    /// Whether to produce a completion (default: yes). Unsignaled requests are reclaimed with
    /// the next signaled one.
    pub fn signaled(mut self, yes: bool) -> Self {
        self.flags.set(SendFlags::SIGNALED, yes);
        self
    }

    /// Ask the receiver for a solicited event.
    pub fn solicited(mut self, yes: bool) -> Self {
        self.flags.set(SendFlags::SOLICITED, yes);
        self
    }

    /// Fence behind earlier READ/atomics.
    pub fn fence(mut self, yes: bool) -> Self {
        self.flags.set(SendFlags::FENCE, yes);
        self
    }

    /// A value of yours carried with the request and handed back in [`Reclaimed::tag`]
    /// (the `wr_id` is assigned by the library).
    pub fn tag(mut self, tag: u64) -> Self {
        self.tag = tag;
        self
    }

    /// UD destination: address handle (kept alive until completion), QP number, Q_Key.
    pub fn ud(mut self, ah: &Ah, remote_qpn: u32, remote_qkey: u32) -> Self {
        self.ud = Some((ah.clone(), remote_qpn, remote_qkey));
        self
    }

    /// The operation.
    pub fn op(&self) -> WrOp {
        self.op
    }

    /// Takes back the buffers of a request that was not posted.
    pub fn into_buffers(self) -> Reclaimed {
        Reclaimed {
            wr_id: 0,
            tag: self.tag,
            bufs: self.owners,
        }
    }
}

/// An owned receive request.
pub struct RecvRequest {
    pub(crate) sges: Small<LocalSlice>,
    pub(crate) owners: Small<Owner>,
    pub(crate) tag: u64,
}

impl fmt::Debug for RecvRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RecvRequest")
            .field("sges", &self.sges.as_slice())
            .finish_non_exhaustive()
    }
}

impl RecvRequest {
    /// Receive into `range` of `buf`.
    pub fn new<B: RegisteredBufMut>(buf: B, range: impl RangeBounds<usize>) -> Result<Self> {
        Self::empty().sge(buf, range)
    }
    /// A receive with no memory (for zero-length messages or WRITE_WITH_IMM notifications).
    pub fn empty() -> Self {
        RecvRequest {
            sges: Small::Empty,
            owners: Small::Empty,
            tag: 0,
        }
    }
    /// Adds the next scatter entry.
    pub fn sge<B: RegisteredBufMut>(
        mut self,
        buf: B,
        range: impl RangeBounds<usize>,
    ) -> Result<Self> {
        self.sges.push(buf.local().slice(range)?);
        self.owners.push(Owner::new(buf));
        Ok(self)
    }
    /// A value of yours carried with the request and handed back in [`Reclaimed::tag`].
    pub fn tag(mut self, tag: u64) -> Self {
        self.tag = tag;
        self
    }
    /// Takes back the buffers of a request that was not posted.
    pub fn into_buffers(self) -> Reclaimed {
        Reclaimed {
            wr_id: 0,
            tag: self.tag,
            bufs: self.owners,
        }
    }
}

/// Takes the first buffer of type `B` out of `bufs` (in SGE order). Inlined into the
/// reclaim of every completion: a call and return cost more than its body under emulation.
#[inline(always)]
pub(crate) fn take_buffer<B: 'static>(bufs: &mut Small<Owner>) -> Option<B> {
    let i = bufs.as_slice().iter().position(Owner::is::<B>)?;
    bufs.remove(i).downcast::<B>()
}

/// Buffers handed back from a finished (or never posted) request.
pub struct Reclaimed {
    /// The request's id.
    pub wr_id: u64,
    /// The tag given to the request (0 if none).
    pub tag: u64,
    pub(crate) bufs: Small<Owner>,
}

impl fmt::Debug for Reclaimed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Reclaimed")
            .field("wr_id", &format_args!("{:#x}", self.wr_id))
            .field("tag", &self.tag)
            .field("bufs", &self.bufs.len())
            .finish()
    }
}

impl Reclaimed {
    /// Number of buffers (one per SGE; a window bind or invalidation holds the window and
    /// the regions it binds or releases).
    pub fn len(&self) -> usize {
        self.bufs.len()
    }
    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.bufs.len() == 0
    }
    /// Takes the first buffer of type `B` (in SGE order). No buffer of that type (another
    /// type was posted, or it was taken already) is [`Error::WrongBufferType`], naming the
    /// type asked for and the types the request holds.
    pub fn take<B: 'static>(&mut self) -> Result<B> {
        take_buffer::<B>(&mut self.bufs).ok_or_else(|| Error::WrongBufferType {
            wr_id: self.wr_id,
            expected: std::any::type_name::<B>(),
            held: self.type_names(),
        })
    }
    /// The type names of the buffers still held, in SGE order.
    pub fn type_names(&self) -> Vec<&'static str> {
        self.bufs.as_slice().iter().map(Owner::type_name).collect()
    }
    /// All buffers, type-erased, in SGE order.
    pub fn into_inner(self) -> Vec<Box<dyn Any + Send>> {
        self.bufs
            .into_vec()
            .into_iter()
            .map(Owner::into_any)
            .collect()
    }
}

/// A failed post: the error and the requests that were not posted (their buffers are yours
/// again). `posted` lists the ids of requests before the failing one that were posted. When
/// the provider fails without naming a refused request, every request may have been queued:
/// all count as posted (their buffers come back through `reclaim` or `take_in_flight`) and
/// `unposted` holds no buffers.
pub struct PostError<T> {
    /// Why.
    pub error: Error,
    /// What was not posted.
    pub unposted: T,
    /// Ids of the requests (of a batch) posted before the failure.
    pub posted: Vec<u64>,
}

impl<T> fmt::Debug for PostError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PostError")
            .field("error", &self.error)
            .field("posted", &self.posted)
            .finish_non_exhaustive()
    }
}

impl<T> fmt::Display for PostError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.error, f)
    }
}

// The message is the error's own, so the source is the error's source, not the error again.
impl<T> std::error::Error for PostError<T> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        std::error::Error::source(&self.error)
    }
}

impl<T> From<PostError<T>> for Error {
    fn from(e: PostError<T>) -> Error {
        e.error
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reclaimed_buffers_come_back_by_type_in_sge_order() {
        let mut bufs = Small::default();
        bufs.push(Owner::new(7u64));
        bufs.push(Owner::new(String::from("b")));
        bufs.push(Owner::new(9u64));
        let mut r = Reclaimed {
            wr_id: 1,
            tag: 2,
            bufs,
        };
        assert_eq!(r.len(), 3);
        assert_eq!(r.type_names(), ["u64", "alloc::string::String", "u64"]);
        match r.take::<u32>() {
            Err(Error::WrongBufferType {
                wr_id: 1,
                expected: "u32",
                held,
            }) => assert_eq!(held, ["u64", "alloc::string::String", "u64"]),
            other => panic!("expected WrongBufferType, got {other:?}"),
        }
        // A failed take keeps every buffer.
        assert_eq!(r.len(), 3);
        assert_eq!(r.take::<u64>().unwrap(), 7);
        assert_eq!(r.take::<String>().unwrap(), "b");
        let msg = r.take::<String>().unwrap_err().to_string();
        assert!(
            msg.contains("alloc::string::String") && msg.contains("holds [u64]"),
            "{msg}"
        );
        let rest = r.into_inner();
        assert_eq!(rest.len(), 1);
        assert_eq!(rest[0].downcast_ref::<u64>(), Some(&9));
    }

    #[test]
    fn cast_only_between_equal_types() {
        assert_eq!(cast::<u64, u64>(5), Some(5));
        assert_eq!(cast::<u64, u32>(5), None);
        assert!(matches!(Owner::new(1u8), Owner::Inline(ref v) if v.type_name() == "u8"));
        assert!(matches!(Owner::new([0u8; 100]), Owner::Other(_, _)));
    }
}
