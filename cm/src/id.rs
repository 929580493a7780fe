//! [`CmId`]: a communication identifier (`struct rdma_cm_id`), like a socket for RDMA.
use std::mem::ManuallyDrop;
use std::net::SocketAddr;
use std::ptr::NonNull;
use std::sync::{Arc, Weak};
use std::time::Duration;

use parking_lot::Mutex;
use verbs::{AccessFlags, Context, Pd, Qp, QpAttr, QpInitAttr, QpState};
use verbs_sys as sys;

use crate::addr::{from_storage, to_storage};
use crate::event::{CmEvent, EventChannel};
use crate::param::{check_private_data, ConnParam, PrivateDataOp};
use crate::qp_attr::qp_attr_from_raw;
use crate::{Error, Result};

/// The port space of an id (`enum rdma_port_space`): which service it offers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PortSpace {
    /// Reliable connected (RC QPs), like TCP (`RDMA_PS_TCP`).
    Tcp,
    /// Unreliable datagram (UD QPs), like UDP (`RDMA_PS_UDP`).
    Udp,
}

impl From<PortSpace> for sys::rdma_port_space::Type {
    fn from(ps: PortSpace) -> Self {
        match ps {
            PortSpace::Tcp => sys::rdma_port_space::RDMA_PS_TCP,
            PortSpace::Udp => sys::rdma_port_space::RDMA_PS_UDP,
        }
    }
}

/// A communication identifier. Cheap to clone; destroyed (`rdma_destroy_id`) when the last
/// handle, the last event naming it, and the last verbs object made on its
/// [`context`](Self::context) are gone.
///
/// The QP of a connection is an ordinary verbs [`Qp`] that this crate moves through its states
/// with the attributes the CM computes (`rdma_init_qp_attr`); librdmacm never owns it
/// (`id->qp` stays NULL), so verbs alone decides when it is destroyed.
#[derive(Clone)]
pub struct CmId {
    pub(crate) inner: Arc<CmIdInner>,
}

pub(crate) struct CmIdInner {
    raw: NonNull<sys::rdma_cm_id>,
    ps: PortSpace,
    /// The channel its events go to; replaced by `migrate`. Kept alive here because librdmacm
    /// requires the channel to outlive the id.
    channel: Mutex<EventChannel>,
    /// `Weak::into_raw` of this inner, stored in `id->context` so an event can find the id's
    /// owner without any registry; released after a successful `rdma_destroy_id` (never if
    /// it fails, since the id then lives on).
    self_weak: *const CmIdInner,
    /// Copies of the fields librdmacm rewrites (addresses, device, port), taken under the
    /// channel's field lock; the getters read these, never the raw id.
    snapshot: Mutex<IdSnapshot>,
}

/// The fields of an `rdma_cm_id` that librdmacm changes while the id is in use.
#[derive(Debug, Clone, Copy, Default)]
struct IdSnapshot {
    local: Option<SocketAddr>,
    peer: Option<SocketAddr>,
    port_num: u8,
    /// `id->verbs`, as an address (the context stays open while the id lives).
    verbs: usize,
}

// SAFETY: librdmacm ids have no thread affinity and its calls are thread-safe; our own state
// (the channel) is behind a mutex. `self_weak` is only turned back into a Weak in Drop.
unsafe impl Send for CmIdInner {}
// SAFETY: as above.
unsafe impl Sync for CmIdInner {}

impl Drop for CmIdInner {
    fn drop(&mut self) {
        // SAFETY: our id, destroyed once. Every event naming it holds an Arc of this inner and
        // acknowledges before releasing it, so rdma_destroy_id does not wait on our own events.
        // Objects on its device context also hold this inner (see `context`), so they are gone.
        let r = unsafe { sys::rdma_destroy_id(self.raw.as_ptr()) };
        if r != 0 {
            // librdmacm keeps an id it failed to destroy, so an event naming it may still be
            // read and `lookup` may still follow id->context: leave that Weak (and so the
            // allocation it points into) alive; it upgrades to nothing from now on.
            return;
        }
        // SAFETY: the Weak leaked into id->context at creation; the id is gone, so nothing
        // reads that pointer any more.
        drop(unsafe { Weak::from_raw(self.self_weak) });
    }
}

impl std::fmt::Debug for CmId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CmId")
            .field("port_space", &self.inner.ps)
            .field("local", &self.local_addr())
            .field("peer", &self.peer_addr())
            .finish()
    }
}

impl CmIdInner {
    /// Copies the fields librdmacm may have changed into the snapshot.
    ///
    /// Call only with the field lock of the id's channel held (see `ChannelInner::fields`), so
    /// librdmacm is not writing them meanwhile.
    pub(crate) fn refresh_snapshot(&self) {
        let raw = self.raw.as_ptr();
        // SAFETY: live id; librdmacm writes these fields only in calls made under the channel's
        // field lock (ours, and rdma_get_cm_event), which the caller holds. The union's storage
        // member covers the whole address.
        let snapshot = unsafe {
            IdSnapshot {
                local: from_storage(&(*raw).route.addr.src_addr_union.src_storage),
                peer: from_storage(&(*raw).route.addr.dst_addr_union.dst_storage),
                port_num: (*raw).port_num,
                verbs: (*raw).verbs as usize,
            }
        };
        let unset = |a: &SocketAddr| !a.ip().is_unspecified() || a.port() != 0;
        *self.snapshot.lock() = IdSnapshot {
            local: snapshot.local.filter(unset),
            peer: snapshot.peer.filter(unset),
            ..snapshot
        };
    }

    /// The live owner of `raw`, found through `id->context`.
    ///
    /// # Safety
    ///
    /// `raw` must be a live id created through this crate (an unacknowledged event naming it
    /// keeps it alive).
    pub(crate) unsafe fn lookup(raw: NonNull<sys::rdma_cm_id>) -> Option<CmId> {
        // SAFETY: live id (caller); context is a plain field.
        let ctx = unsafe { (*raw.as_ptr()).context } as *const CmIdInner;
        if ctx.is_null() {
            return None;
        }
        // SAFETY: `ctx` came from Weak::into_raw and that Weak is only released after the id
        // is destroyed; ManuallyDrop keeps its count untouched.
        let weak = ManuallyDrop::new(unsafe { Weak::from_raw(ctx) });
        weak.upgrade().map(|inner| CmId { inner })
    }
}

impl CmId {
    /// Creates an id whose events arrive on `channel`.
    #[doc(alias = "rdma_create_id")]
    pub fn new(channel: &EventChannel, port_space: PortSpace) -> Result<CmId> {
        let mut raw = std::ptr::null_mut();
        // SAFETY: live channel, valid out-pointer; context is set right below.
        let r = unsafe {
            sys::rdma_create_id(
                channel.as_raw(),
                &mut raw,
                std::ptr::null_mut(),
                port_space.into(),
            )
        };
        sys::errno::check_neg(r).map_err(|source| Error::CreateId { port_space, source })?;
        let raw = NonNull::new(raw).ok_or_else(|| Error::CreateId {
            port_space,
            source: std::io::Error::other("rdma_create_id gave NULL"),
        })?;
        // SAFETY: a fresh id owned by nobody else, on `channel`.
        Ok(unsafe { Self::wrap(raw, port_space, channel.clone()) })
    }

    /// Creates an id with a channel of its own (see [`channel`](Self::channel)).
    pub fn with_own_channel(port_space: PortSpace) -> Result<CmId> {
        Self::new(&EventChannel::new()?, port_space)
    }

    /// Takes ownership of the new id of a connect request.
    ///
    /// # Safety
    ///
    /// `raw` must be the id of an unacknowledged connect-request event read from `channel`,
    /// not yet owned by anyone.
    pub(crate) unsafe fn adopt(raw: NonNull<sys::rdma_cm_id>, channel: EventChannel) -> CmId {
        // SAFETY: live id; its port space is a plain field.
        let ps = match unsafe { (*raw.as_ptr()).ps } {
            sys::rdma_port_space::RDMA_PS_UDP => PortSpace::Udp,
            _ => PortSpace::Tcp,
        };
        // SAFETY: forwarded from the caller.
        unsafe { Self::wrap(raw, ps, channel) }
    }

    /// # Safety
    ///
    /// `raw` must be a live id owned by nobody else, whose events go to `channel`.
    unsafe fn wrap(raw: NonNull<sys::rdma_cm_id>, ps: PortSpace, channel: EventChannel) -> CmId {
        let inner = Arc::new_cyclic(|weak| {
            let self_weak = weak.clone().into_raw();
            // SAFETY: live id we own; nobody reads `context` before this returns (no operation
            // has been started on the id, or, for a connect request, its only event is still
            // being built on this thread).
            unsafe { (*raw.as_ptr()).context = self_weak as *mut std::ffi::c_void };
            CmIdInner {
                raw,
                ps,
                channel: Mutex::new(channel),
                self_weak,
                snapshot: Mutex::new(IdSnapshot::default()),
            }
        });
        // A connect request's new id already has addresses and a device. For it the caller
        // (reading the event) holds the field lock; a fresh id has nothing to race with.
        inner.refresh_snapshot();
        CmId { inner }
    }

    /// Runs `call` (a librdmacm call that may rewrite the id's fields) under the field lock of
    /// the id's channel, then refreshes the snapshot.
    fn updating_fields<T>(&self, call: impl FnOnce() -> T) -> T {
        let channel = self.inner.channel.lock();
        let _fields = channel.inner.fields.lock();
        let out = call();
        self.inner.refresh_snapshot();
        out
    }

    /// The raw id, valid while this handle lives.
    pub fn as_raw(&self) -> *mut sys::rdma_cm_id {
        self.inner.raw.as_ptr()
    }
    /// The port space.
    pub fn port_space(&self) -> PortSpace {
        self.inner.ps
    }
    /// The channel this id's events arrive on.
    pub fn channel(&self) -> EventChannel {
        self.inner.channel.lock().clone()
    }

    /// Waits up to `timeout` for the next event on this id's channel (meant for ids with a
    /// channel of their own). `Ok(None)`: no event in time.
    pub fn get_event(&self, timeout: Duration) -> Result<Option<CmEvent>> {
        self.channel().get_event(timeout)
    }

    /// Like [`get_event`](Self::get_event), but running out of time is
    /// [`Error::Timeout`] naming `op`.
    pub fn wait_event(&self, timeout: Duration, op: &'static str) -> Result<CmEvent> {
        self.get_event(timeout)?
            .ok_or(Error::Timeout { op, after: timeout })
    }

    /// Binds to a local address (port 0: any free port). Bind to the address of an RDMA
    /// netdev so the id gets that device; on hosts with several devices this is how to pick.
    #[doc(alias = "rdma_bind_addr")]
    pub fn bind_addr(&self, addr: SocketAddr) -> Result<()> {
        let mut ss = to_storage(addr);
        // SAFETY: live id; the address is a valid sockaddr for the duration of the call.
        let r = self.updating_fields(|| unsafe {
            sys::rdma_bind_addr(
                self.as_raw(),
                (&mut ss as *mut libc::sockaddr_storage).cast(),
            )
        });
        sys::errno::check_neg(r).map_err(|source| Error::Bind { addr, source })?;
        Ok(())
    }

    /// Starts resolving `dst` to an RDMA address, from `src` if given (which also binds).
    /// Completes with an `AddrResolved` or `AddrError` event; librdmacm gives up after
    /// `timeout`.
    #[doc(alias = "rdma_resolve_addr")]
    pub fn resolve_addr(
        &self,
        src: Option<SocketAddr>,
        dst: SocketAddr,
        timeout: Duration,
    ) -> Result<()> {
        let mut src_ss = src.map(to_storage);
        let mut dst_ss = to_storage(dst);
        let src_ptr = src_ss.as_mut().map_or(std::ptr::null_mut(), |s| {
            (s as *mut libc::sockaddr_storage).cast()
        });
        // SAFETY: live id; the addresses are valid for the call (librdmacm copies them).
        let r = self.updating_fields(|| unsafe {
            sys::rdma_resolve_addr(
                self.as_raw(),
                src_ptr,
                (&mut dst_ss as *mut libc::sockaddr_storage).cast(),
                millis(timeout),
            )
        });
        sys::errno::check_neg(r).map_err(|source| Error::ResolveAddr { dst, source })?;
        Ok(())
    }

    /// Starts resolving a route to the resolved address; completes with a `RouteResolved` or
    /// `RouteError` event. librdmacm gives up after `timeout`.
    #[doc(alias = "rdma_resolve_route")]
    pub fn resolve_route(&self, timeout: Duration) -> Result<()> {
        // SAFETY: live id.
        let r = self
            .updating_fields(|| unsafe { sys::rdma_resolve_route(self.as_raw(), millis(timeout)) });
        sys::errno::check_neg(r).map_err(Error::ResolveRoute)?;
        Ok(())
    }

    /// Sets the local ACK timeout the QP of this id's connection gets
    /// (`rdma_set_option(RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT)`), rounded up to the
    /// encoding's 4.096 µs × 2^n (see [`ack_timeout_exponent`](crate::ack_timeout_exponent)).
    /// Without it the CM derives the timeout from the path's packet lifetime (on RoCE about
    /// half a second to a second). Set it before the QP moves to RTS
    /// ([`ready_qp`](Self::ready_qp)); set before route resolution, it also paces the CM's
    /// own retries on RoCE.
    #[doc(alias = "rdma_set_option")]
    pub fn set_ack_timeout(&self, timeout: Duration) -> Result<()> {
        let mut exponent = crate::ack_timeout_exponent(timeout);
        // SAFETY: live id; the option value is one u8 that lives across the call.
        let r = unsafe {
            sys::rdma_set_option(
                self.as_raw(),
                sys::RDMA_OPTION_ID,
                sys::RDMA_OPTION_ID_ACK_TIMEOUT,
                (&mut exponent as *mut u8).cast(),
                std::mem::size_of::<u8>(),
            )
        };
        sys::errno::check_neg(r).map_err(|source| Error::SetOption {
            option: "ack timeout",
            source,
        })?;
        Ok(())
    }

    /// Listens for connect requests (bind first).
    #[doc(alias = "rdma_listen")]
    pub fn listen(&self, backlog: i32) -> Result<()> {
        // SAFETY: live id.
        let r = self.updating_fields(|| unsafe { sys::rdma_listen(self.as_raw(), backlog) });
        sys::errno::check_neg(r).map_err(Error::Listen)?;
        Ok(())
    }

    /// Sends a connect request for `qp` (in the Init state, see [`create_qp`](Self::create_qp))
    /// with `param`. Private data beyond [`max_private_data`](crate::max_private_data) is
    /// [`Error::PrivateDataTooLong`].
    #[doc(alias = "rdma_connect")]
    pub fn connect(&self, param: &ConnParam, qp: &Qp) -> Result<()> {
        check_private_data(
            self.port_space(),
            PrivateDataOp::Connect,
            param.get_private_data(),
        )?;
        let mut raw = param.to_raw(qp.qp_num());
        // SAFETY: live id; `raw` and the private data it points to live across the call.
        let r = unsafe { sys::rdma_connect(self.as_raw(), &mut raw) };
        let result = sys::errno::check_neg(r)
            .map(drop)
            .map_err(|e| match e.raw_os_error() {
                // iWARP connects over TCP in the call: a port nobody listens on is refused
                // here, where InfiniBand and RoCE refuse it with a REJECTED event. Same error
                // either way.
                Some(libc::ECONNREFUSED) => Error::Rejected {
                    status: -libc::ECONNREFUSED,
                    private_data: crate::PrivateData::default(),
                },
                _ => Error::Connect(e),
            });
        crate::trace::call("connect", self, Some(qp.qp_num()), &result);
        result
    }

    /// Accepts a connect request on this (new) id with `qp`, which must already be ready to
    /// receive (see [`ready_qp`](Self::ready_qp)).
    #[doc(alias = "rdma_accept")]
    pub fn accept(&self, param: &ConnParam, qp: &Qp) -> Result<()> {
        check_private_data(
            self.port_space(),
            PrivateDataOp::Accept,
            param.get_private_data(),
        )?;
        let mut raw = param.to_raw(qp.qp_num());
        // SAFETY: live id; `raw` and the private data live across the call.
        let r = unsafe { sys::rdma_accept(self.as_raw(), &mut raw) };
        let result = sys::errno::check_neg(r).map(drop).map_err(Error::Accept);
        crate::trace::call("accept", self, Some(qp.qp_num()), &result);
        result
    }

    /// Rejects a connect request, with private data for the peer.
    #[doc(alias = "rdma_reject")]
    pub fn reject(&self, private_data: &[u8]) -> Result<()> {
        check_private_data(self.port_space(), PrivateDataOp::Reject, private_data)?;
        let ptr = if private_data.is_empty() {
            std::ptr::null()
        } else {
            private_data.as_ptr().cast()
        };
        // SAFETY: live id; the data lives across the call; length checked to fit (≤ 148).
        let r = unsafe { sys::rdma_reject(self.as_raw(), ptr, private_data.len() as u8) };
        let result = sys::errno::check_neg(r).map(drop).map_err(Error::Reject);
        crate::trace::call("reject", self, None, &result);
        result
    }

    /// Completes an active connection after the `ConnectResponse` event, once the QP is
    /// ready (see [`ready_qp`](Self::ready_qp)).
    #[doc(alias = "rdma_establish")]
    pub fn establish(&self) -> Result<()> {
        // SAFETY: live id.
        let r = unsafe { sys::rdma_establish(self.as_raw()) };
        let result = sys::errno::check_neg(r).map(drop).map_err(Error::Establish);
        crate::trace::call("establish", self, None, &result);
        result
    }

    /// Disconnects; both sides then get a `Disconnected` event. Move the QP to Err first
    /// (librdmacm does not own it), so outstanding work is flushed.
    #[doc(alias = "rdma_disconnect")]
    pub fn disconnect(&self) -> Result<()> {
        // SAFETY: live id.
        let r = unsafe { sys::rdma_disconnect(self.as_raw()) };
        let result = sys::errno::check_neg(r)
            .map(drop)
            .map_err(Error::Disconnect);
        crate::trace::call("disconnect", self, None, &result);
        result
    }

    /// Moves this id's future events to `channel`. Waits until the id's events on its old
    /// channel are acknowledged: do not hold one on this thread.
    #[doc(alias = "rdma_migrate_id")]
    pub fn migrate(&self, channel: &EventChannel) -> Result<()> {
        let mut current = self.inner.channel.lock();
        // SAFETY: live id and channel; the old channel stays alive in `current` until replaced.
        let r = unsafe { sys::rdma_migrate_id(self.as_raw(), channel.as_raw()) };
        sys::errno::check_neg(r).map_err(Error::Migrate)?;
        *current = channel.clone();
        Ok(())
    }

    /// The device context the id is bound to (after binding to an RDMA address, resolving an
    /// address, or on a connect request), as a verbs [`Context`] sharing librdmacm's
    /// `ibv_context`. Verbs objects made on it keep this id alive, because librdmacm closes a
    /// device context when the last id using it is destroyed.
    pub fn context(&self) -> Result<Context> {
        let verbs = self.inner.snapshot.lock().verbs as *mut sys::ibv_context;
        let raw = NonNull::new(verbs).ok_or(Error::NoDevice)?;
        // SAFETY: librdmacm keeps the context open while an id bound to it exists, and the
        // owner handed over is this id's inner, which is destroyed only after the last verbs
        // object on the returned context.
        Ok(unsafe { Context::from_borrowed_raw(raw, self.inner.clone()) }?)
    }

    /// The device port the id is bound to (0 before binding).
    pub fn port_num(&self) -> u8 {
        self.inner.snapshot.lock().port_num
    }

    /// The local address (after bind or resolution).
    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.inner.snapshot.lock().local
    }

    /// The peer's address (after resolution, or on a connect request).
    pub fn peer_addr(&self) -> Option<SocketAddr> {
        self.inner.snapshot.lock().peer
    }

    /// The attributes that move a QP of this id's connection to `state`
    /// (`rdma_init_qp_attr`).
    #[doc(alias = "rdma_init_qp_attr")]
    pub fn init_qp_attr(&self, state: QpState) -> Result<QpAttr> {
        // SAFETY: all-zero is a valid ibv_qp_attr.
        let mut attr: sys::ibv_qp_attr = unsafe { std::mem::zeroed() };
        attr.qp_state = state.into();
        let mut mask = 0;
        // SAFETY: live id; valid out-pointers.
        let r = unsafe { sys::rdma_init_qp_attr(self.as_raw(), &mut attr, &mut mask) };
        sys::errno::check_neg(r).map_err(|source| Error::InitQpAttr { state, source })?;
        qp_attr_from_raw(&attr, mask as u32).map_err(|source| Error::InitQpAttr { state, source })
    }

    /// Creates a QP on `pd` for this id's connection and moves it to Init with the CM's
    /// attributes, letting peers do `access` (e.g. REMOTE_READ | REMOTE_WRITE). Post receives
    /// before connecting or accepting.
    pub fn create_qp(&self, pd: &Pd, init: &QpInitAttr<'_>, access: AccessFlags) -> Result<Qp> {
        let qp = pd.create_qp(init)?;
        let mut attr = self.init_qp_attr(QpState::Init)?;
        if attr.mask().contains(verbs::QpAttrMask::ACCESS_FLAGS) {
            attr = attr.qp_access_flags(access);
        }
        qp.modify(&attr)?;
        Ok(qp)
    }

    /// Moves `qp` (Init) to RTR and RTS with the CM's attributes: on the passive side before
    /// [`accept`](Self::accept), on the active side after the `ConnectResponse` event. On
    /// iWARP nothing: the iWARP CM moves the QP to RTS itself as the connection is made (see
    /// [`established_qp`](Self::established_qp)).
    pub fn ready_qp(&self, qp: &Qp) -> Result<()> {
        if qp.transport() == verbs::Transport::Iwarp {
            return Ok(());
        }
        qp.modify(&self.init_qp_attr(QpState::Rtr)?)?;
        qp.modify(&self.init_qp_attr(QpState::Rts)?)?;
        Ok(())
    }

    /// Once the connection of `qp` is established: on iWARP, where the CM moved the QP to RTS
    /// without this handle, the handle records it (so posting, which checks the state,
    /// works; siw reports no state to a query).
    pub fn established_qp(&self, qp: &Qp) -> Result<()> {
        if qp.transport() == verbs::Transport::Iwarp {
            qp.established_by_cm()?;
        }
        Ok(())
    }
}

/// A timeout in whole milliseconds for librdmacm (at least 1, at most i32::MAX).
fn millis(t: Duration) -> i32 {
    i32::try_from(t.as_millis()).unwrap_or(i32::MAX).max(1)
}
