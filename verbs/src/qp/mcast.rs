//! Attaching a UD QP to a multicast group (`ibv_attach_mcast` / `ibv_detach_mcast`).
use verbs_sys as sys;

use super::{Qp, QpType};
use crate::context::Gid;
use crate::{Error, Result};

impl Qp {
    /// Makes this UD QP receive the datagrams sent to multicast group `mgid` (`mlid` on
    /// InfiniBand, 0 on RoCE). Detach before the QP goes: a QP with groups attached cannot be
    /// destroyed (its buffers are then leaked).
    #[doc(alias = "ibv_attach_mcast")]
    pub fn attach_mcast(&self, mgid: Gid, mlid: u16) -> Result<()> {
        if self.qp_type() != QpType::Ud {
            return Err(Error::InvalidWorkRequest {
                qp_num: self.qp_num(),
                reason: "only UD QPs join multicast groups".into(),
            });
        }
        let gid = mgid.to_sys();
        // SAFETY: live QP; the GID is read during the call.
        let r = unsafe { sys::ibv_attach_mcast(self.as_raw(), &gid, mlid) };
        sys::errno::check_ret(r).map_err(|source| Error::Mcast {
            qp_num: self.qp_num(),
            op: "ibv_attach_mcast",
            source,
        })
    }

    /// Stops receiving group `mgid`'s datagrams.
    #[doc(alias = "ibv_detach_mcast")]
    pub fn detach_mcast(&self, mgid: Gid, mlid: u16) -> Result<()> {
        let gid = mgid.to_sys();
        // SAFETY: live QP; the GID is read during the call.
        let r = unsafe { sys::ibv_detach_mcast(self.as_raw(), &gid, mlid) };
        sys::errno::check_ret(r).map_err(|source| Error::Mcast {
            qp_num: self.qp_num(),
            op: "ibv_detach_mcast",
            source,
        })
    }
}
