//! Binding and invalidating memory windows on a QP's send queue: type 1 binds
//! ([`Qp::bind_mw`], `ibv_bind_mw`), and the owned requests for type 2 binds, local
//! invalidation and SEND_WITH_INV ([`SendRequest::bind_mw`], [`SendRequest::local_inv`],
//! [`SendRequest::send_with_inv`]). Each request holds the window and the regions it binds or
//! releases until its completion is reclaimed.
use std::ops::RangeBounds;
use std::sync::Arc;

use verbs_sys as sys;

use super::request::Owner;
use super::small::Small;
use super::{invalid, SendFlags, SendRequest, WrOp};
use crate::mr::{slice, AccessFlags, MemoryRegion, RegisteredBuf, RemoteSlice};
use crate::mw::{Mw, MwType};
use crate::qp::{Qp, QpType};
use crate::{Error, Result};

/// What a type 2 bind request needs at post time (its handles also sit in the request's
/// owners, so they live until the completion).
pub(crate) struct BindMw {
    mw: Mw,
    region: Arc<MemoryRegion>,
    access: AccessFlags,
}

impl BindMw {
    /// Fills the bind fields of `wr` for the bind `granted` describes.
    pub(crate) fn fill(&self, granted: &RemoteSlice, wr: &mut sys::ibv_send_wr) {
        wr.bind_mw_tso_union.bind_mw = sys::bind_mw_t {
            mw: self.mw.as_raw(),
            rkey: granted.rkey,
            bind_info: sys::ibv_mw_bind_info {
                mr: self.region.as_raw(),
                addr: granted.addr,
                length: u64::from(granted.len),
                mw_access_flags: self.access.bits(),
            },
        };
    }

    /// After the request was posted: the window is known by the new key, keeps the new
    /// region, and the request keeps the one it replaces until its completion.
    pub(crate) fn posted(&self, granted: &RemoteSlice, owners: &mut Small<Owner>) {
        let mut bound = self.mw.lock();
        self.mw.set_rkey_locked(granted.rkey);
        if let Some(old) = bound.replace(self.region.clone()) {
            owners.push(Owner::new(old));
        }
    }

    /// Checks the bind against the QP it is posted on.
    pub(crate) fn check_qp(&self, qp: &Qp) -> Result<()> {
        if self.mw.pd_raw() != qp.inner._pd.raw.as_ptr() {
            return Err(Error::InvalidBind {
                rkey: self.mw.rkey(),
                reason: "a type 2 window is bound on a QP of its own protection domain".into(),
            });
        }
        Ok(())
    }
}

impl SendRequest {
    /// Binds the type 2 window `mw` to `range` of `region` with `access` (remote rights), to
    /// be posted on a QP of the window's PD: once its completion arrives, the QP's peer may
    /// access exactly those bytes with the returned request's [`WrOp::BindMw`] descriptor
    /// (also [`SendRequest::op`]), and nothing else. The region needs
    /// [`AccessFlags::MW_BIND`] (and `LOCAL_WRITE` for remote write rights).
    pub fn bind_mw(
        mw: &Mw,
        region: Arc<MemoryRegion>,
        range: impl RangeBounds<usize>,
        access: AccessFlags,
    ) -> Result<Self> {
        let (start, len) = slice::check_range(range, region.len())?;
        mw.check_bind(MwType::Type2, &region, len, access)?;
        let granted = RemoteSlice {
            addr: region.addr() + start as u64,
            len,
            rkey: sys::ibv_inc_rkey(mw.rkey()),
        };
        let mut r = SendRequest::new(WrOp::BindMw(granted));
        r.owners.push(Owner::new(mw.clone()));
        r.owners.push(Owner::new(region.clone()));
        r.bind = Some(Box::new(BindMw {
            mw: mw.clone(),
            region,
            access,
        }));
        Ok(r)
    }

    /// Invalidates the type 2 window `mw` (its current rkey): once the completion arrives,
    /// no peer reaches its memory any more. The region it was bound to is released with the
    /// completion.
    pub fn local_inv(mw: &Mw) -> Self {
        let mut bound = mw.lock();
        let mut r = SendRequest::new(WrOp::LocalInv(mw.rkey_locked()));
        if let Some(region) = bound.take() {
            r.owners.push(Owner::new(region));
        }
        r.owners.push(Owner::new(mw.clone()));
        r
    }

    /// SEND of `range` of `buf` that also invalidates the peer's window or region `rkey`;
    /// the peer's receive completion carries it (`invalidated_rkey`).
    pub fn send_with_inv<B: RegisteredBuf>(
        buf: B,
        range: impl RangeBounds<usize>,
        rkey: u32,
    ) -> Result<Self> {
        SendRequest::new(WrOp::SendWithInv(rkey)).sge(buf, range)
    }
}

impl Qp {
    /// Binds the type 1 window `mw` to `range` of `region` with `access` (remote rights)
    /// through this QP's send queue (`ibv_bind_mw`; any RC or UC QP of the window's PD).
    /// Returns the request's id and the descriptor peers use once its completion arrived;
    /// the previous binding (if any) ends with the same completion. Reclaim the completion
    /// like any other: it hands back the regions the request held. Should it complete with
    /// an error, the device keeps the previous key: [`Mw::restore_rkey`].
    #[doc(alias = "ibv_bind_mw")]
    pub fn bind_mw(
        &self,
        mw: &Mw,
        region: &Arc<MemoryRegion>,
        range: impl RangeBounds<usize>,
        access: AccessFlags,
    ) -> Result<(u64, RemoteSlice)> {
        let (start, len) = slice::check_range(range, region.len())?;
        mw.check_bind(MwType::Type1, region, len, access)?;
        if len == 0 {
            return Err(Error::InvalidBind {
                rkey: mw.rkey(),
                reason: "a bind of zero bytes grants nothing: use Qp::unbind_mw".into(),
            });
        }
        let addr = region.addr() + start as u64;
        self.post_type1(mw, region, addr, len, access)
    }

    /// Unbinds the type 1 window `mw` (a bind of zero bytes): once the completion arrives,
    /// no peer reaches memory through it. `None` when it is bound to nothing.
    pub fn unbind_mw(&self, mw: &Mw) -> Result<Option<u64>> {
        let Some(region) = mw.bound_region() else {
            return Ok(None);
        };
        if mw.mw_type() != MwType::Type1 {
            return Err(Error::InvalidBind {
                rkey: mw.rkey(),
                reason: "a type 2 window is revoked by posting SendRequest::local_inv".into(),
            });
        }
        // The region is named even for zero bytes: some providers read its lkey.
        let (id, _) = self.post_type1(mw, &region, region.addr(), 0, AccessFlags::empty())?;
        Ok(Some(id))
    }

    fn post_type1(
        &self,
        mw: &Mw,
        region: &Arc<MemoryRegion>,
        addr: u64,
        len: u32,
        access: AccessFlags,
    ) -> Result<(u64, RemoteSlice)> {
        if !matches!(self.qp_type(), QpType::Rc | QpType::Uc) {
            return Err(invalid(
                self.qp_num(),
                "memory windows are bound on RC or UC QPs".into(),
            ));
        }
        if mw.pd_raw() != self.inner._pd.raw.as_ptr() {
            return Err(invalid(
                self.qp_num(),
                "the window belongs to another protection domain".into(),
            ));
        }
        self.check_send(&WrOp::Send, &[], SendFlags::SIGNALED, false)?;
        let mut sq = self.lock_send_room(1)?;
        let id = sq.next_id(false);
        let mut bound = mw.lock();
        let mut bind = sys::ibv_mw_bind {
            wr_id: id,
            send_flags: SendFlags::SIGNALED.bits(),
            bind_info: sys::ibv_mw_bind_info {
                mr: region.as_raw(),
                addr,
                length: u64::from(len),
                mw_access_flags: access.bits(),
            },
        };
        // SAFETY: live QP, window and region (held by the caller's handles, then by the
        // in-flight entry); the window's rkey is written by the provider under our lock.
        let r = unsafe { sys::ibv_bind_mw(self.as_raw(), mw.as_raw(), &mut bind) };
        sys::errno::check_ret(r).map_err(|source| {
            let e = if source.raw_os_error() == Some(libc::ENOMEM) {
                self.queue_full("send", self.cap().max_send_wr)
            } else {
                Error::PostSend {
                    qp_num: self.qp_num(),
                    source,
                }
            };
            crate::trace::refused(&e, true);
            e
        })?;
        let rkey = mw.rkey_locked();
        let mut owners = Small::default();
        owners.push(Owner::new(mw.clone()));
        if let Some(old) = std::mem::replace(&mut *bound, (len > 0).then(|| region.clone())) {
            owners.push(Owner::new(old));
        }
        sq.insert(id, 0, owners, None, false);
        Ok((id, RemoteSlice { addr, len, rkey }))
    }
}
