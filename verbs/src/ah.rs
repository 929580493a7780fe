//! Address handles (`ibv_create_ah`): the destination of UD sends.
use std::ptr::NonNull;
use std::sync::Arc;

use verbs_sys as sys;

use crate::context::Gid;
use crate::cq::{WcFlags, WorkCompletion};
use crate::pd::{Pd, PdInner};
use crate::qp::{AhAttr, GlobalRoute};
use crate::{Error, Result};

/// An address handle. Cheap to clone; a UD send request keeps a clone until its completion.
#[derive(Clone)]
pub struct Ah {
    inner: Arc<AhInner>,
}

struct AhInner {
    raw: NonNull<sys::ibv_ah>,
    attr: AhAttr,
    _pd: Arc<PdInner>,
}

// SAFETY: an AH handle has no thread affinity and is immutable after creation.
unsafe impl Send for AhInner {}
// SAFETY: as above.
unsafe impl Sync for AhInner {}

impl Drop for AhInner {
    fn drop(&mut self) {
        // SAFETY: created by ibv_create_ah; requests using it hold a clone until completion.
        unsafe { sys::ibv_destroy_ah(self.raw.as_ptr()) };
    }
}

impl std::fmt::Debug for Ah {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ah")
            .field("attr", &self.inner.attr)
            .finish()
    }
}

impl Pd {
    /// Creates an address handle for `attr` (on RoCE it needs a GRH).
    #[doc(alias = "ibv_create_ah")]
    pub fn create_ah(&self, attr: &AhAttr) -> Result<Ah> {
        if let Some(grh) = &attr.grh {
            self.context()
                .check_sgid_index(0, attr.port_num, grh.sgid_index)?;
        }
        let mut raw_attr = attr.to_sys();
        // SAFETY: live PD; complete attribute struct.
        let raw = unsafe { sys::ibv_create_ah(self.as_raw(), &mut raw_attr) };
        let raw = sys::errno::check_ptr(raw).map_err(Error::CreateAh)?;
        Ok(Ah {
            inner: Arc::new(AhInner {
                raw,
                attr: *attr,
                _pd: self.inner.clone(),
            }),
        })
    }
}

impl Ah {
    /// The device context the address handle was created on.
    pub(crate) fn context_raw(&self) -> *mut sys::ibv_context {
        self.inner._pd.ctx.raw.as_ptr()
    }

    /// The raw `ibv_ah`, valid while this handle lives.
    pub fn as_raw(&self) -> *mut sys::ibv_ah {
        self.inner.raw.as_ptr()
    }
    /// The attributes it was created with.
    pub fn attr(&self) -> &AhAttr {
        &self.inner.attr
    }
}

impl From<&sys::ibv_ah_attr> for AhAttr {
    /// An address vector reported by a library (e.g. librdmacm's UD events, or
    /// `ibv_init_ah_from_wc`).
    fn from(a: &sys::ibv_ah_attr) -> Self {
        AhAttr {
            dlid: a.dlid,
            sl: a.sl,
            src_path_bits: a.src_path_bits,
            static_rate: a.static_rate,
            port_num: a.port_num,
            grh: (a.is_global != 0).then(|| GlobalRoute {
                dgid: Gid::from_sys(&a.grh.dgid),
                flow_label: a.grh.flow_label,
                sgid_index: a.grh.sgid_index,
                hop_limit: a.grh.hop_limit,
                traffic_class: a.grh.traffic_class,
            }),
        }
    }
}

/// Bytes of the GRH a UD receive starts with.
pub const GRH_LEN: usize = 40;

impl Pd {
    /// An address handle back to the sender of a UD receive, from its completion and the
    /// first [`GRH_LEN`] bytes of its receive buffer (the GRH; on RoCE it is always there):
    /// how a UD server answers a client it knows only from its datagram (reply to
    /// [`WorkCompletion::src_qp`]). Fewer than 40 bytes is [`Error::CreateAh`] with EINVAL.
    #[doc(alias = "ibv_init_ah_from_wc")]
    #[doc(alias = "ibv_create_ah_from_wc")]
    pub fn create_ah_from_wc(&self, port: u8, wc: &WorkCompletion, grh: &[u8]) -> Result<Ah> {
        if grh.len() < GRH_LEN || !wc.flags().contains(WcFlags::GRH) {
            return Err(Error::CreateAh(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "needs a UD receive completion with a GRH and the 40 GRH bytes of its buffer",
            )));
        }
        // SAFETY: ibv_grh is integers and a byte union; any 40 bytes are a valid value, and
        // read_unaligned copies them out of the (unaligned) buffer.
        let mut raw_grh: sys::ibv_grh =
            unsafe { grh.as_ptr().cast::<sys::ibv_grh>().read_unaligned() };
        // SAFETY: ibv_wc is plain integers and an integer union: a bitwise copy is a valid
        // value (the library takes a mutable pointer).
        let mut raw_wc: sys::ibv_wc = unsafe { std::ptr::read(wc.as_raw()) };
        // SAFETY: all-zero is a valid ibv_ah_attr.
        let mut attr: sys::ibv_ah_attr = unsafe { std::mem::zeroed() };
        // SAFETY: open context of this PD; valid in/out structs (copies, so the library may
        // write them).
        let r = unsafe {
            sys::ibv_init_ah_from_wc(
                self.inner.ctx.raw.as_ptr(),
                port,
                &mut raw_wc,
                &mut raw_grh,
                &mut attr,
            )
        };
        if r != 0 {
            let e = if r == -1 {
                std::io::Error::last_os_error()
            } else {
                std::io::Error::from_raw_os_error(r.abs())
            };
            return Err(Error::CreateAh(e));
        }
        self.create_ah(&AhAttr::from(&attr))
    }
}
