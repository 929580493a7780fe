//! Event channels and typed CM events, each acknowledged exactly once when dropped.
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::ptr::NonNull;
use std::sync::Arc;
use std::time::{Duration, Instant};

use verbs_sys as sys;

/// Wakes a thread blocked in [`EventChannel::get_event_unless`]; once woken, stays woken.
pub use sys::fd::Wakeup;

use crate::id::{CmId, CmIdInner};
use crate::{Error, Result};

/// A CM event channel (`struct rdma_event_channel`): the file descriptor on which the events
/// of the ids created on it arrive. Its descriptor is non-blocking, so
/// [`get_event`](Self::get_event) never waits past its timeout, and it can sit in a reactor.
/// Cheap to clone; destroyed when the last handle and the last id on it are gone.
#[derive(Clone)]
pub struct EventChannel {
    pub(crate) inner: Arc<ChannelInner>,
}

pub(crate) struct ChannelInner {
    raw: NonNull<sys::rdma_event_channel>,
    /// Held while librdmacm may write fields of ids on this channel (reading an event, and
    /// the calls on an id that update its addresses) and while those fields are copied into
    /// the ids' snapshots, so the copies never race librdmacm's writes.
    pub(crate) fields: parking_lot::Mutex<()>,
}

// SAFETY: an event channel is a file descriptor with no thread affinity; librdmacm calls on it
// are thread-safe (reads race harmlessly thanks to O_NONBLOCK).
unsafe impl Send for ChannelInner {}
// SAFETY: as above.
unsafe impl Sync for ChannelInner {}

impl Drop for ChannelInner {
    fn drop(&mut self) {
        // SAFETY: created by rdma_create_event_channel; every id on it and every event read
        // from it holds an Arc of this inner, so none is left.
        unsafe { sys::rdma_destroy_event_channel(self.raw.as_ptr()) };
    }
}

impl std::fmt::Debug for EventChannel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventChannel")
            .field("fd", &self.as_raw_fd())
            .finish()
    }
}

impl AsRawFd for EventChannel {
    fn as_raw_fd(&self) -> RawFd {
        // SAFETY: live channel; fd is a plain field.
        unsafe { (*self.inner.raw.as_ptr()).fd }
    }
}

impl EventChannel {
    /// Creates a channel with a non-blocking descriptor.
    #[doc(alias = "rdma_create_event_channel")]
    pub fn new() -> Result<Self> {
        // SAFETY: no arguments; returns NULL + errno on failure.
        let raw = unsafe { sys::rdma_create_event_channel() };
        let raw = sys::errno::check_ptr(raw).map_err(Error::CreateChannel)?;
        let ch = EventChannel {
            inner: Arc::new(ChannelInner {
                raw,
                fields: parking_lot::Mutex::new(()),
            }),
        };
        sys::fd::set_nonblocking(ch.as_raw_fd()).map_err(Error::CreateChannel)?;
        Ok(ch)
    }

    /// The raw channel, valid while this handle lives.
    pub fn as_raw(&self) -> *mut sys::rdma_event_channel {
        self.inner.raw.as_ptr()
    }

    /// Waits up to `timeout` for the next event. `Ok(None)` means the time passed without one
    /// (also when another thread took the event that woke this one).
    #[doc(alias = "rdma_get_cm_event")]
    pub fn get_event(&self, timeout: Duration) -> Result<Option<CmEvent>> {
        self.next_event(Some(timeout), None)
    }

    /// Waits for the next event until `stop` is woken, up to `timeout` (`None`: no bound but
    /// `stop`). `Ok(None)` means it was woken, or the time passed, without an event. For a
    /// thread that serves the channel until told to stop, without waking to look meanwhile.
    #[doc(alias = "rdma_get_cm_event")]
    pub fn get_event_unless(
        &self,
        stop: &Wakeup,
        timeout: Option<Duration>,
    ) -> Result<Option<CmEvent>> {
        self.next_event(timeout, Some(stop))
    }

    fn next_event(
        &self,
        timeout: Option<Duration>,
        stop: Option<&Wakeup>,
    ) -> Result<Option<CmEvent>> {
        let deadline = timeout.map(|t| Instant::now() + t);
        loop {
            let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
            let ready = match stop {
                None => sys::fd::wait_readable(self.as_raw_fd(), left),
                Some(stop) => sys::fd::wait_readable_or_woken(self.as_raw_fd(), stop, left)
                    .map(|r| r == sys::fd::Ready::Readable),
            };
            if !ready.map_err(Error::GetEvent)? {
                return Ok(None);
            }
            let mut ev = std::ptr::null_mut();
            // librdmacm updates the fields of the ids the event names while reading it; the
            // snapshots of those ids are taken under the same lock, in `from_raw`.
            let fields = self.inner.fields.lock();
            // SAFETY: live channel, valid out-pointer; the descriptor is non-blocking.
            let r = unsafe { sys::rdma_get_cm_event(self.as_raw(), &mut ev) };
            match sys::errno::check_neg(r) {
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(Error::GetEvent(e)),
            }
            let ev = NonNull::new(ev)
                .ok_or_else(|| Error::GetEvent(io::Error::other("rdma_get_cm_event gave NULL")))?;
            // SAFETY: a fresh, unacknowledged event from this channel.
            let ev = unsafe { CmEvent::from_raw(ev, self) };
            drop(fields);
            crate::trace::event(&ev);
            return Ok(Some(ev));
        }
    }
}

macro_rules! event_kinds {
    ($($(#[$m:meta])* $v:ident = $c:ident,)*) => {
        /// What a CM event reports (`enum rdma_cm_event_type`).
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        #[non_exhaustive]
        pub enum EventKind { $($(#[$m])* $v,)* }

        impl TryFrom<u32> for EventKind {
            type Error = u32;
            fn try_from(v: u32) -> std::result::Result<Self, u32> {
                use sys::rdma_cm_event_type as t;
                match v {
                    $(t::$c => Ok(Self::$v),)*
                    other => Err(other),
                }
            }
        }

        impl From<EventKind> for u32 {
            fn from(k: EventKind) -> u32 {
                use sys::rdma_cm_event_type as t;
                match k { $(EventKind::$v => t::$c,)* }
            }
        }
    };
}

event_kinds! {
    /// `rdma_resolve_addr` finished.
    AddrResolved = RDMA_CM_EVENT_ADDR_RESOLVED,
    /// `rdma_resolve_addr` failed (status: negative errno).
    AddrError = RDMA_CM_EVENT_ADDR_ERROR,
    /// `rdma_resolve_route` finished.
    RouteResolved = RDMA_CM_EVENT_ROUTE_RESOLVED,
    /// `rdma_resolve_route` failed.
    RouteError = RDMA_CM_EVENT_ROUTE_ERROR,
    /// A peer asks to connect (on a listening id; the event carries a new id).
    ConnectRequest = RDMA_CM_EVENT_CONNECT_REQUEST,
    /// The peer accepted; with a caller-managed QP, finish with `rdma_establish`.
    ConnectResponse = RDMA_CM_EVENT_CONNECT_RESPONSE,
    /// Establishing the connection failed.
    ConnectError = RDMA_CM_EVENT_CONNECT_ERROR,
    /// The peer did not answer.
    Unreachable = RDMA_CM_EVENT_UNREACHABLE,
    /// The peer (or its CM: no listener) rejected the connection.
    Rejected = RDMA_CM_EVENT_REJECTED,
    /// The connection is up.
    Established = RDMA_CM_EVENT_ESTABLISHED,
    /// The connection is down (either side disconnected).
    Disconnected = RDMA_CM_EVENT_DISCONNECTED,
    /// The device went away: destroy everything on it.
    DeviceRemoval = RDMA_CM_EVENT_DEVICE_REMOVAL,
    /// A multicast join finished.
    MulticastJoin = RDMA_CM_EVENT_MULTICAST_JOIN,
    /// A multicast group failed.
    MulticastError = RDMA_CM_EVENT_MULTICAST_ERROR,
    /// The local address changed.
    AddrChange = RDMA_CM_EVENT_ADDR_CHANGE,
    /// The QP of a closed connection left time-wait.
    TimewaitExit = RDMA_CM_EVENT_TIMEWAIT_EXIT,
}

/// The connection parameters an event reports (the peer's view).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PeerParam {
    /// Outstanding RDMA READ/atomic requests the peer accepts.
    pub responder_resources: u8,
    /// Outstanding RDMA READ/atomic requests the peer issues.
    pub initiator_depth: u8,
    /// Transport retries.
    pub retry_count: u8,
    /// RNR retries.
    pub rnr_retry_count: u8,
    /// The peer's QP number.
    pub qp_num: u32,
}

/// One CM event (`struct rdma_cm_event`), with its data copied out. Dropping it acknowledges
/// it (`rdma_ack_cm_event`), exactly once. It holds the ids it concerns, so they cannot be
/// destroyed (which would wait for this acknowledgement) while it lives.
pub struct CmEvent {
    raw: NonNull<sys::rdma_cm_event>,
    kind: std::result::Result<EventKind, u32>,
    status: i32,
    id: Option<CmId>,
    listen_id: Option<CmId>,
    private_data: Vec<u8>,
    param: PeerParam,
    ud: Option<crate::UdParam>,
    _channel: Arc<ChannelInner>,
}

// SAFETY: the raw event is only touched by Drop (rdma_ack_cm_event is thread-safe); everything
// else is owned data or thread-safe handles.
unsafe impl Send for CmEvent {}
// SAFETY: shared access only reads the copied-out fields.
unsafe impl Sync for CmEvent {}

impl Drop for CmEvent {
    fn drop(&mut self) {
        // SAFETY: an event from rdma_get_cm_event, acknowledged only here. The ids it names
        // are released after this (fields drop after the body), so none is destroyed first.
        unsafe { sys::rdma_ack_cm_event(self.raw.as_ptr()) };
    }
}

impl std::fmt::Debug for CmEvent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CmEvent")
            .field("kind", &self.kind)
            .field("status", &self.status)
            .field(
                "private_data",
                &crate::PrivateData::new(self.private_data.clone()),
            )
            .finish_non_exhaustive()
    }
}

impl CmEvent {
    /// The error this event means for a connection being set up (either side), or `None` for
    /// an event that does not end the attempt.
    pub(crate) fn connection_failure(&self) -> Option<Error> {
        match self.kind() {
            Ok(EventKind::Rejected) => Some(Error::Rejected {
                status: self.status(),
                private_data: crate::PrivateData::new(self.private_data().to_vec()),
            }),
            Ok(k @ (EventKind::Unreachable | EventKind::ConnectError)) => {
                Some(Error::Unreachable {
                    event: k,
                    status: self.status(),
                })
            }
            Ok(EventKind::Disconnected | EventKind::DeviceRemoval) => Some(Error::Disconnected),
            _ => None,
        }
    }

    /// # Safety
    ///
    /// `raw` must be an unacknowledged event just read from `channel`, with the channel's field
    /// lock held.
    unsafe fn from_raw(raw: NonNull<sys::rdma_cm_event>, channel: &EventChannel) -> CmEvent {
        // SAFETY: a valid event (caller); its fields are plain data until acknowledged.
        let ev = unsafe { &*raw.as_ptr() };
        let kind = EventKind::try_from(ev.event);
        let (id, listen_id) = if kind == Ok(EventKind::ConnectRequest) {
            // SAFETY: a connect request's `id` is a new id librdmacm created for us on this
            // channel, owned by nobody yet; `listen_id` is ours.
            unsafe {
                (
                    NonNull::new(ev.id).map(|id| CmId::adopt(id, channel.clone())),
                    NonNull::new(ev.listen_id).and_then(|l| CmIdInner::lookup(l)),
                )
            }
        } else {
            // SAFETY: ids named by an unacknowledged event cannot be destroyed yet.
            (
                NonNull::new(ev.id).and_then(|i| unsafe { CmIdInner::lookup(i) }),
                None,
            )
        };
        // The caller holds the channel's field lock: librdmacm is done writing these ids.
        for named in id.iter().chain(listen_id.iter()) {
            named.inner.refresh_snapshot();
        }
        let is_ud = id
            .as_ref()
            .is_some_and(|i| i.port_space() == crate::PortSpace::Udp);
        let mut ud_param = None;
        let (data_ptr, data_len, param) = if is_ud {
            // SAFETY: UD events carry the `ud` member of the union.
            let ud = unsafe { &ev.param.ud };
            let p = PeerParam {
                qp_num: ud.qp_num,
                ..PeerParam::default()
            };
            ud_param = Some(crate::UdParam {
                ah_attr: verbs::AhAttr::from(&ud.ah_attr),
                qp_num: ud.qp_num,
                qkey: ud.qkey,
            });
            (ud.private_data, ud.private_data_len, p)
        } else {
            // SAFETY: connected-service events carry the `conn` member.
            let c = unsafe { &ev.param.conn };
            let p = PeerParam {
                responder_resources: c.responder_resources,
                initiator_depth: c.initiator_depth,
                retry_count: c.retry_count,
                rnr_retry_count: c.rnr_retry_count,
                qp_num: c.qp_num,
            };
            (c.private_data, c.private_data_len, p)
        };
        let private_data = if data_ptr.is_null() || data_len == 0 {
            Vec::new()
        } else {
            // SAFETY: librdmacm points at `data_len` bytes inside the event, valid until ack.
            unsafe { std::slice::from_raw_parts(data_ptr.cast::<u8>(), usize::from(data_len)) }
                .to_vec()
        };
        CmEvent {
            raw,
            kind,
            status: ev.status,
            id,
            listen_id,
            private_data,
            param,
            ud: ud_param,
            _channel: channel.inner.clone(),
        }
    }

    /// What happened; `Err(code)` for an event type newer than this crate.
    pub fn kind(&self) -> std::result::Result<EventKind, u32> {
        self.kind
    }
    /// The event's status: 0, a negative errno, or a transport reason (reject reason).
    pub fn status(&self) -> i32 {
        self.status
    }
    /// The id the event concerns (for a connect request: the new id).
    pub fn id(&self) -> Option<&CmId> {
        self.id.as_ref()
    }
    /// The listening id a connect request arrived on.
    pub fn listen_id(&self) -> Option<&CmId> {
        self.listen_id.as_ref()
    }
    /// The peer's private data, copied out of the event. The transport pads it: on InfiniBand
    /// and RoCE a connect request carries 56 bytes and an accept 196, whatever the peer sent,
    /// with zeros after the peer's bytes.
    pub fn private_data(&self) -> &[u8] {
        &self.private_data
    }
    /// The peer's connection parameters.
    pub fn param(&self) -> PeerParam {
        self.param
    }
    /// For an id of the UDP port space: the remote end's address vector, QP number and Q_Key
    /// (meaningful on `Established` after a UD connect and on `MulticastJoin`).
    pub fn ud(&self) -> Option<&crate::UdParam> {
        self.ud.as_ref()
    }
    /// Whether the event is `kind`.
    pub fn is(&self, kind: EventKind) -> bool {
        self.kind == Ok(kind)
    }
    /// The raw event, valid while this value lives.
    pub fn as_raw(&self) -> *mut sys::rdma_cm_event {
        self.raw.as_ptr()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_kinds_round_trip_and_unknown_codes_are_errors() {
        for code in 0..=15u32 {
            let kind = EventKind::try_from(code).expect("known event type");
            assert_eq!(u32::from(kind), code);
        }
        assert_eq!(EventKind::try_from(99), Err(99));
        assert_eq!(
            EventKind::try_from(sys::rdma_cm_event_type::RDMA_CM_EVENT_DISCONNECTED),
            Ok(EventKind::Disconnected)
        );
    }

    #[test]
    fn channel_wait_is_bounded() {
        // Without the RDMA CM in this kernel creating a channel is a typed error; with it, an
        // empty channel returns None after the timeout.
        match EventChannel::new() {
            Err(e) => assert!(matches!(e, Error::CreateChannel(_)), "{e:?}"),
            Ok(ch) => {
                let t = Instant::now();
                assert!(ch.get_event(Duration::from_millis(50)).unwrap().is_none());
                assert!(t.elapsed() >= Duration::from_millis(50));
            }
        }
    }
}
