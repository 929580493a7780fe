//! Posting to a connection's send queue: protocol frames (inline when they fit), RDMA READs
//! of rendezvous chunks, keepalive probes, sends that go at once under the caller's lock, and
//! the tracking of what is in flight (which requests are signaled, what each completion
//! finishes).

use std::io::IoSlice;

use memory::Buffer;
use verbs::{RemoteSlice, SendRequest};

use super::conn::{ConnShared, ConnState};
use super::send_queue::{signal_every, SqOp};
use crate::proto::{self, Body, CallId, Class, PeerGone, ReadId, RemoteChunk, HEADER_LEN};

impl ConnShared {
    /// Posts a frame: inline when it fits the QP's inline room (the device copies it while
    /// posting, so a payload's buffer is free again at once and the device reads no
    /// registered memory for it), else from its pool buffer. Signaled if the protocol asks
    /// (`signal`) or the send queue's cadence wants it.
    pub(super) fn post_frame(
        &self,
        st: &mut ConnState,
        header: [u8; HEADER_LEN],
        body: Body<Buffer>,
        signal: bool,
    ) {
        let signaled = signal || self.signal(st, &SqOp::Frame);
        let inline_max = self.inline_room();
        let request = match body {
            Body::Payload(mut buf) => {
                // A plain message goes as a compact frame: without its header, which the
                // immediate data replaces (PROTOCOL.md).
                let compact = st.proto.as_ref().and_then(|p| p.compact_imm(&header));
                let (start, op) = match compact {
                    Some(imm) => (HEADER_LEN, verbs::WrOp::SendWithImm(imm)),
                    None => {
                        buf[..HEADER_LEN].copy_from_slice(&header);
                        (0, verbs::WrOp::Send)
                    }
                };
                let len = buf.len();
                if len - start <= inline_max {
                    self.post_inline(st, &[IoSlice::new(&buf[start..len])], compact, signaled);
                    st.keep_spare_frame(buf);
                    return;
                }
                SendRequest::new(op).sge(buf, start..len)
            }
            Body::Control(bytes, n) => {
                let mut frame = [0u8; HEADER_LEN + proto::CONTROL_BODY_MAX];
                frame[..HEADER_LEN].copy_from_slice(&header);
                frame[HEADER_LEN..HEADER_LEN + n].copy_from_slice(&bytes[..n]);
                let frame = &frame[..HEADER_LEN + n];
                if frame.len() <= inline_max {
                    self.post_inline(st, &[IoSlice::new(frame)], None, signaled);
                    return;
                }
                match self.shared.res.pool.try_alloc(frame.len()) {
                    Ok(mut buf) => {
                        buf.copy_from_slice(frame);
                        let len = buf.len();
                        SendRequest::send(buf, 0..len)
                    }
                    // The pool is exhausted: the request keeps a copy.
                    Err(_) => SendRequest::inline(verbs::WrOp::Send, frame),
                }
            }
        };
        self.post_signaled(st, request, SqOp::Frame, signaled);
    }

    /// Has the device report whether the peer's device acknowledged every frame posted, for
    /// a waiter that needs everything sent to have arrived: frames posted unsignaled since
    /// the last signaled request complete only with a later signaled one, so once every
    /// message went out a probe goes behind them (its completion finishes them too), unless
    /// one is in flight.
    pub(crate) fn request_acknowledgement(&self, st: &mut ConnState) {
        let waits_for_device = st
            .proto
            .as_ref()
            .is_some_and(|p| p.all_sent() && !p.delivered());
        if waits_for_device && st.sq.has_unsignaled() && st.end.is_none() {
            self.post_probe(st);
        }
    }

    /// Posts a keepalive probe, a zero-length RDMA WRITE (no key is checked for zero bytes,
    /// no receive is consumed), unless one is still in flight: its successful completion tells
    /// the protocol the peer's device is alive, except on iWARP, where it completes once sent
    /// (there it only flushes the completions of unsignaled frames; the peer's frames, PONG
    /// among them, are its signs of life).
    pub(super) fn post_probe(&self, st: &mut ConnState) {
        if st.sq.probe_in_flight() {
            return;
        }
        let remote = RemoteSlice {
            addr: 0,
            len: 0,
            rkey: 0,
        };
        self.post(
            st,
            Ok(SendRequest::new(verbs::WrOp::RdmaWrite(remote))),
            SqOp::Probe,
        );
    }

    /// Queues a READ behind any the pool had no buffer for, and posts what it can, in order.
    pub(super) fn post_read(&self, st: &mut ConnState, id: ReadId, remote: RemoteChunk, len: u32) {
        st.deferred_reads.push_back((id, remote, len));
        self.retry_deferred_reads(st);
    }

    pub(super) fn retry_deferred_reads(&self, st: &mut ConnState) {
        let res = &self.shared.res;
        while let Some(&(id, remote, len)) = st.deferred_reads.front() {
            // On iWARP the READ lands in a sink of its own pool, copied into a buffer of the
            // data pool, taken now, once it completed.
            let Ok(dest) = self.shared.read_sink_pool().try_alloc(len as usize) else {
                return;
            };
            if res.read_sinks.is_some() {
                let Ok(target) = res.pool.try_alloc(len as usize) else {
                    return;
                };
                st.read_targets.push((id, target));
            }
            st.deferred_reads.pop_front();
            let remote = RemoteSlice {
                addr: remote.addr,
                len,
                rkey: remote.rkey,
            };
            let request = SendRequest::rdma_read(dest, 0..len as usize, remote);
            self.post(st, request, SqOp::Read(id));
        }
    }

    /// Posts a send-queue request built by the caller; a failure fails the connection (the
    /// protocol's accounting keeps the queue from filling, so this is a device error).
    pub(crate) fn post(&self, st: &mut ConnState, request: verbs::Result<SendRequest>, op: SqOp) {
        let signaled = self.signal(st, &op);
        self.post_signaled(st, request, op, signaled);
    }

    /// [`post`](Self::post), signaled as told.
    pub(super) fn post_signaled(
        &self,
        st: &mut ConnState,
        request: verbs::Result<SendRequest>,
        op: SqOp,
        signaled: bool,
    ) {
        let posted = request
            .map_err(drop)
            .and_then(|r| self.qp.post_send(r.signaled(signaled)).map_err(drop));
        self.posted(st, posted.ok(), op, signaled);
    }

    /// Posts the bytes of `frame` inline (copied by the device during the call) as one SEND,
    /// with immediate data `imm` if given (a compact frame), as
    /// [`post_signaled`](Self::post_signaled) posts a request.
    pub(super) fn post_inline(
        &self,
        st: &mut ConnState,
        frame: &[IoSlice<'_>],
        imm: Option<u32>,
        signaled: bool,
    ) {
        let flags = if signaled {
            verbs::SendFlags::SIGNALED
        } else {
            verbs::SendFlags::empty()
        };
        let posted = match imm {
            None => self.qp.post_inline_send(frame, flags),
            Some(imm) => self.qp.post_inline_send_with_imm(frame, imm, flags),
        };
        self.posted(st, posted.ok(), SqOp::Frame, signaled);
    }

    /// Sends eager message `data` of `class` as one frame posted inline at once, when the
    /// protocol takes it straight to the wire ([`proto::Connection::send_at_once`]: nothing
    /// ahead of it) and the frame fits the QP's inline room. The device copies the header and
    /// the message from where they are: no pool buffer, no copy, no queued action. Returns the
    /// call id of a request; `None`: nothing was sent, send it the queued way. Whether the
    /// frame fits is judged inline, in the caller: a send too long for it costs no call.
    #[inline(always)]
    pub(crate) fn send_inline_at_once(
        &self,
        st: &mut ConnState,
        class: Class,
        data: &[u8],
    ) -> Option<Option<CallId>> {
        if !self.fits_at_once(data.len()) {
            return None;
        }
        self.post_at_once(st, data, |p| p.send_at_once(class, data.len()))
    }

    /// [`send_inline_at_once`](Self::send_inline_at_once) for a byte-stream write
    /// ([`proto::Connection::write_at_once`]); true if it went.
    #[inline(always)]
    pub(crate) fn write_inline_at_once(&self, st: &mut ConnState, data: &[u8]) -> bool {
        self.fits_at_once(data.len())
            && self
                .post_at_once(st, data, |p| p.write_at_once(data.len()))
                .is_some()
    }

    /// Whether a frame of `len` bytes after its header may go at once: it fits the inline
    /// room, gathered from two slices (the header, the bytes where they are).
    #[inline(always)]
    fn fits_at_once(&self, len: usize) -> bool {
        HEADER_LEN + len <= self.inline_room() && self.qp.cap().max_send_sge >= 2
    }

    /// Posts `data` (which [`fits_at_once`](Self::fits_at_once)) inline behind the header of
    /// the frame `take` gets from the protocol, if the protocol lets it go at once.
    #[inline(never)]
    fn post_at_once(
        &self,
        st: &mut ConnState,
        data: &[u8],
        take: impl FnOnce(&mut proto::Connection<Buffer>) -> Option<proto::FrameAtOnce>,
    ) -> Option<Option<CallId>> {
        if !st.deferred_reads.is_empty() {
            return None;
        }
        let p = st.proto.as_mut()?;
        let frame = take(p)?;
        let compact = p.compact_imm(&frame.header);
        let signaled = frame.signal || self.signal(st, &SqOp::Frame);
        // A plain message goes without its header (PROTOCOL.md, compact DATA frames): an
        // empty slice gathers nothing.
        let header: &[u8] = if compact.is_some() {
            &[]
        } else {
            &frame.header
        };
        self.post_inline(
            st,
            &[IoSlice::new(header), IoSlice::new(data)],
            compact,
            signaled,
        );
        if st.proto.as_ref().is_some_and(|p| p.has_actions()) {
            // The post failed and failed the connection: carry out what that queued.
            self.drive(st);
        }
        Some(frame.call)
    }

    /// Whether the next request, `op`, is signaled: one frame in [`signal_every`], and every
    /// other request. The CLOSE (and anything after it) is signaled: teardown waits for it
    /// to complete.
    pub(super) fn signal(&self, st: &ConnState, op: &SqOp) -> bool {
        let every = signal_every(self.shared.cfg.proto.sq_depth);
        st.sq
            .must_signal(op, every, st.proto.as_ref().is_some_and(|p| p.close_sent()))
    }

    /// Records a request posted (or fails the connection if the post failed).
    pub(super) fn posted(&self, st: &mut ConnState, wr_id: Option<u64>, op: SqOp, signaled: bool) {
        let Some(wr_id) = wr_id else {
            self.fail(st, PeerGone::QueuePairError);
            return;
        };
        st.sq.posted(wr_id, op, signaled);
    }
}
