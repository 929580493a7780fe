//! Opening a device: [`Context`], device and port queries, the GID table.
mod attr;
mod borrowed;
mod caps;
mod counters;
mod event;
mod gid;
mod port;
mod values;

use std::ffi::c_int;
use std::mem::MaybeUninit;
use std::net::IpAddr;
use std::ptr::NonNull;
use std::sync::Arc;

use verbs_sys as sys;

pub use attr::{AtomicCap, DeviceAttr, DeviceAttrEx, LinkLayer, Mtu, PortAttr, PortState};
pub use caps::{Capabilities, Capability};
pub use counters::{Counter, CounterGroup, CounterIter, PortCounters};
pub use event::{AsyncEvent, AsyncEventKind, AsyncEventReceiver, AsyncEvents, EventElement};
pub use gid::{select_roce_v2, Gid, GidEntry, GidType};
pub use port::{PhysState, PortSpeed, PortWidth};

use crate::device::DeviceList;
use crate::{Error, Result};

/// An open RDMA device (`struct ibv_context`). Cheap to clone; the device is closed when the
/// last handle and the last object created from it are gone.
#[derive(Clone)]
pub struct Context {
    pub(crate) inner: Arc<ContextInner>,
}

pub(crate) struct ContextInner {
    pub(crate) raw: NonNull<sys::ibv_context>,
    name: String,
    /// How the context is released when the last handle goes.
    release: Release,
    /// [`Context::capabilities`], once queried.
    capabilities: std::sync::OnceLock<Capabilities>,
}

// SAFETY: libibverbs contexts may be used from any thread; the verbs are thread-safe and the
// handle has no thread affinity.
unsafe impl Send for ContextInner {}
// SAFETY: as above; every call through a shared context is internally synchronised by libibverbs.
unsafe impl Sync for ContextInner {}

/// What happens to the `ibv_context` when the last verbs handle of it goes.
pub(crate) enum Release {
    /// Closed here (`ibv_close_device`).
    Close,
    /// Opened and closed by someone else; the optional owner is whatever keeps it open (for
    /// librdmacm, a CM id on the device), held until the last verbs object is gone.
    Borrowed {
        /// Held, never read: its drop is what may let the owner close the context.
        _keep_alive: Option<Arc<dyn std::any::Any + Send + Sync>>,
    },
}

impl ContextInner {
    /// [`Context::name`].
    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// [`Context::transport`].
    pub(crate) fn transport(&self) -> crate::Transport {
        // SAFETY: an open context points at its device, which lives as long as the context;
        // transport_type is a plain field of it.
        let raw = unsafe { (*(*self.raw.as_ptr()).device).transport_type };
        crate::Transport::from(raw)
    }
}

impl Drop for ContextInner {
    fn drop(&mut self) {
        match &self.release {
            // SAFETY: opened by ibv_open_device (or handed over to be closed here); every
            // child holds an Arc of this inner, so none is alive any more.
            Release::Close => unsafe {
                sys::ibv_close_device(self.raw.as_ptr());
            },
            // Someone else closes it; dropping the owner handle (after this) may let them.
            Release::Borrowed { .. } => {}
        }
    }
}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context")
            .field("name", &self.inner.name)
            .finish()
    }
}

impl Context {
    /// Opens the device called `name` (e.g. `rxe0`).
    #[doc(alias = "ibv_open_device")]
    pub fn open(name: &str) -> Result<Self> {
        let list = DeviceList::get()?;
        let dev = list.find(name)?;
        Self::open_dev(dev, name)
    }

    /// Opens the first device of the list.
    #[doc(alias = "ibv_open_device")]
    pub fn open_first() -> Result<Self> {
        let list = DeviceList::get()?;
        let dev = list.iter().next().ok_or_else(|| Error::NoSuchDevice {
            name: "(any)".into(),
            found: String::new(),
        })?;
        Self::open_dev(dev, &DeviceList::name_of(dev))
    }

    pub(crate) fn open_dev(dev: NonNull<sys::ibv_device>, name: &str) -> Result<Self> {
        // SAFETY: `dev` comes from a device list that is still alive.
        let raw = unsafe { sys::ibv_open_device(dev.as_ptr()) };
        let raw = sys::errno::check_ptr(raw).map_err(|source| Error::OpenDevice {
            device: name.to_owned(),
            source,
        })?;
        // SAFETY: `raw` was just opened and is closed only by this handle.
        unsafe { Self::wrap(raw, Release::Close) }
    }

    /// Wraps a context opened elsewhere, so verbs objects can be created on it. Its async-event
    /// fd is made non-blocking. For a context another library owns and may close (librdmacm's
    /// `id->verbs`), prefer [`Context::from_borrowed_raw`], which keeps that library's handle
    /// alive.
    ///
    /// # Safety
    /// `raw` must be an open device context. With `close_on_drop`, ownership passes to the
    /// returned handle, which closes it; on an error it is closed already, so do not close it
    /// again. Without, the caller keeps it open for as long as the handle or any object
    /// created from it lives.
    pub unsafe fn from_raw(raw: NonNull<sys::ibv_context>, close_on_drop: bool) -> Result<Self> {
        let release = if close_on_drop {
            Release::Close
        } else {
            Release::Borrowed { _keep_alive: None }
        };
        // SAFETY: forwarded from the caller.
        unsafe { Self::wrap(raw, release) }
    }

    /// # Safety
    /// `raw` is an open device context that `release` describes truthfully.
    pub(crate) unsafe fn wrap(raw: NonNull<sys::ibv_context>, release: Release) -> Result<Self> {
        // SAFETY: open context per the caller; `device` is set by libibverbs.
        let dev = unsafe { (*raw.as_ptr()).device };
        let name = NonNull::new(dev)
            .map(DeviceList::name_of)
            .unwrap_or_default();
        let inner = Arc::new(ContextInner {
            raw,
            name,
            release,
            capabilities: std::sync::OnceLock::new(),
        });
        // Async events are read with a timeout: the fd must not block.
        // SAFETY: async_fd is a plain field of an open context.
        let fd = unsafe { (*raw.as_ptr()).async_fd };
        sys::fd::set_nonblocking(fd).map_err(|source| Error::OpenDevice {
            device: inner.name.clone(),
            source,
        })?;
        crate::trace::device_opened(
            &inner.name,
            matches!(inner.release, Release::Borrowed { .. }),
        );
        Ok(Context { inner })
    }

    /// Device name.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// The raw `ibv_context`, valid while this handle (or any object from it) lives.
    pub fn as_raw(&self) -> *mut sys::ibv_context {
        self.inner.raw.as_ptr()
    }

    /// The transport the device speaks: InfiniBand (and RoCE) or iWARP, which have different
    /// rules (see [`Transport`](crate::Transport)).
    pub fn transport(&self) -> crate::Transport {
        self.inner.transport()
    }

    /// Whether the device is soft-RoCE (rxe, `vendor_id` 0xffffff), whose quirks this crate
    /// works around.
    pub(crate) fn is_rxe(&self) -> bool {
        self.query_device()
            .is_ok_and(|d| d.as_raw().vendor_id == 0xff_ffff)
    }

    /// Device capabilities and limits.
    #[doc(alias = "ibv_query_device")]
    pub fn query_device(&self) -> Result<DeviceAttr> {
        let mut attr = MaybeUninit::<sys::ibv_device_attr>::zeroed();
        // SAFETY: open context, valid out-pointer.
        let r = unsafe { sys::ibv_query_device(self.as_raw(), attr.as_mut_ptr()) };
        sys::errno::check_ret(r).map_err(Error::QueryDevice)?;
        // SAFETY: filled by a successful query (and zeroed before: all-integer struct).
        Ok(DeviceAttr(unsafe { attr.assume_init() }))
    }

    /// Extended device attributes. Devices without the extended query report the basic
    /// attributes and zeros elsewhere.
    #[doc(alias = "ibv_query_device_ex")]
    pub fn query_device_ex(&self) -> Result<DeviceAttrEx> {
        let mut attr = MaybeUninit::<sys::ibv_device_attr_ex>::zeroed();
        // SAFETY: open context; valid out-pointer (zeroed: the fallback path fills only the
        // basic part); a null input asks for the default query.
        let r =
            unsafe { sys::ibv_query_device_ex(self.as_raw(), std::ptr::null(), attr.as_mut_ptr()) };
        sys::errno::check_ret(r).map_err(Error::QueryDevice)?;
        // SAFETY: zeroed then (partly) filled; all-integer struct.
        Ok(DeviceAttrEx(unsafe { attr.assume_init() }))
    }

    /// Attributes of `port` (numbered from 1). A port the device lacks gives
    /// [`Error::QueryPort`] with EINVAL.
    #[doc(alias = "ibv_query_port")]
    pub fn query_port(&self, port: u8) -> Result<PortAttr> {
        let mut attr = MaybeUninit::<sys::ibv_port_attr>::zeroed();
        // SAFETY: open context, valid out-pointer of the size the inline wrapper passes.
        let r = unsafe { sys::___ibv_query_port(self.as_raw(), port, attr.as_mut_ptr()) };
        sys::errno::check_ret(r).map_err(|source| self.port_error(port, source))?;
        // SAFETY: zeroed then filled; all-integer struct.
        Ok(PortAttr(unsafe { attr.assume_init() }))
    }

    /// The error for a failed `ibv_query_port`: [`Error::NoSuchPort`] when the device has no
    /// such port.
    fn port_error(&self, port: u8, source: std::io::Error) -> Error {
        match self.query_device() {
            Ok(dev) if port == 0 || port > dev.phys_port_cnt() => Error::NoSuchPort {
                device: self.name().to_owned(),
                port,
                ports: dev.phys_port_cnt(),
            },
            _ => Error::QueryPort { port, source },
        }
    }

    /// Checks that `index` is a valid entry of `port`'s GID table, for a QP or address handle
    /// to use as source GID (`ibv_modify_qp` and `ibv_create_ah` answer a bad one with a bare
    /// EINVAL).
    pub(crate) fn check_sgid_index(&self, qp_num: u32, port: u8, index: u8) -> Result<()> {
        let len = self.query_port(port)?.gid_tbl_len();
        let problem = if u32::from(index) >= len {
            format!(
                "is past the end of the table of {len} entries (0..={})",
                len.saturating_sub(1)
            )
        } else if let Err(e) = self.query_gid(port, index) {
            match e {
                Error::QueryGid { source, .. } => format!("is an empty entry ({source})"),
                other => return Err(other),
            }
        } else {
            return Ok(());
        };
        Err(Error::InvalidGidIndex {
            qp_num,
            port,
            index,
            problem,
        })
    }

    /// One GID table entry with its type. An index past the table gives EINVAL, an empty
    /// entry ENODATA (both as [`Error::QueryGid`]).
    #[doc(alias = "ibv_query_gid_ex")]
    pub fn query_gid(&self, port: u8, index: u8) -> Result<GidEntry> {
        let mut e = MaybeUninit::<sys::ibv_gid_entry>::zeroed();
        // SAFETY: open context, valid out-pointer.
        let r = unsafe {
            sys::ibv_query_gid_ex(
                self.as_raw(),
                u32::from(port),
                u32::from(index),
                e.as_mut_ptr(),
                0,
            )
        };
        sys::errno::check_ret(r).map_err(|source| Error::QueryGid {
            port,
            index: u32::from(index),
            source,
        })?;
        // SAFETY: zeroed then filled; plain data.
        let entry = unsafe { e.assume_init() };
        // The index is the u8 asked for, so the entry converts.
        GidEntry::from_sys(&entry).ok_or(Error::QueryGid {
            port,
            index: u32::from(index),
            source: std::io::Error::from_raw_os_error(libc::EINVAL),
        })
    }

    /// All valid GID entries of all ports, with their types (entries past index 255, which no
    /// queue pair or address handle can use as source GID, are left out).
    #[doc(alias = "ibv_query_gid_table")]
    pub fn gid_table(&self) -> Result<Vec<GidEntry>> {
        let dev = self.query_device()?;
        let mut max = 0usize;
        for port in 1..=dev.phys_port_cnt() {
            max += self.query_port(port)?.gid_tbl_len() as usize;
        }
        let mut entries: Vec<sys::ibv_gid_entry> = Vec::with_capacity(max.max(1));
        // SAFETY: `entries` has room for `max` entries; the call writes at most that many.
        let n =
            unsafe { sys::ibv_query_gid_table(self.as_raw(), entries.as_mut_ptr(), max.max(1), 0) };
        let n = sys::errno::check_neg(n).map_err(|source| Error::QueryGid {
            port: 0,
            index: u32::MAX,
            source,
        })?;
        // SAFETY: the call initialised the first `n` (≤ capacity) entries.
        unsafe { entries.set_len(n as usize) };
        Ok(entries.iter().filter_map(GidEntry::from_sys).collect())
    }

    /// The RoCE v2 GID of `port` for `addr` (IPv4-mapped for an IPv4 address): the GID to use
    /// for traffic routed by that address.
    pub fn roce_v2_gid(&self, port: u8, addr: IpAddr) -> Result<GidEntry> {
        select_roce_v2(&self.gid_table()?, port, addr).ok_or(Error::NoGidForAddr { port, addr })
    }

    /// The async-event file descriptor (non-blocking), for a reactor.
    pub fn async_fd(&self) -> c_int {
        // SAFETY: plain field of an open context.
        unsafe { (*self.as_raw()).async_fd }
    }
}
