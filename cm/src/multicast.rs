//! Multicast over rdma_cm (`rdma_join_multicast`): a UD endpoint joins a group, its QP is
//! attached to the group's GID, and the group is the destination of sends; leaving detaches
//! and leaves, in that order, on drop or explicitly.
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use verbs::{Gid, QpCap};
use verbs_sys as sys;

use crate::addr::to_storage;
use crate::connector::{status_error, unexpected};
use crate::ud::ud_param;
use crate::{CmId, Error, EventKind, PortSpace, Result, UdEndpoint, UdPeer};

impl UdEndpoint {
    /// A UD endpoint on the device of local address `ip` (bound, not connected): the usual
    /// start for multicast. An address no RDMA device serves is [`Error::NotRdmaAddress`].
    #[doc(alias = "rdma_bind_addr")]
    pub fn bind(ip: IpAddr, cap: QpCap, cq_entries: u32) -> Result<UdEndpoint> {
        let id = CmId::with_own_channel(PortSpace::Udp)?;
        id.bind_addr(SocketAddr::new(ip, 0))
            .map_err(|e| crate::addr::diagnose_local(ip, e))?;
        UdEndpoint::new(id, cap, cq_entries)
    }

    /// Joins multicast group `group` (e.g. `239.1.2.3`), waiting up to `timeout` for the
    /// fabric's answer, and attaches this endpoint's QP to it: datagrams sent to the group
    /// arrive here from then on. The membership's [`peer`](Membership::peer) is the group as
    /// a send destination.
    #[doc(alias = "rdma_join_multicast")]
    pub fn join_multicast(&self, group: IpAddr, timeout: Duration) -> Result<Membership<'_>> {
        let mut ss = to_storage(SocketAddr::new(group, 0));
        // SAFETY: live, bound id; the address is copied during the call; no context pointer.
        let r = unsafe {
            sys::rdma_join_multicast(
                self.id().as_raw(),
                (&mut ss as *mut libc::sockaddr_storage).cast(),
                std::ptr::null_mut(),
            )
        };
        sys::errno::check_neg(r).map_err(|source| Error::Multicast {
            op: "rdma_join_multicast",
            group,
            source,
        })?;
        // From here the id is a member: leave on every error path.
        let leave = |e: Error| {
            let _ = leave_group(self.id(), group);
            e
        };
        let ev = self
            .id()
            .wait_event(timeout, "multicast join")
            .map_err(leave)?;
        match ev.kind() {
            Ok(EventKind::MulticastJoin) => {}
            Ok(EventKind::MulticastError) => {
                return Err(leave(Error::Multicast {
                    op: "joining (MULTICAST_ERROR event)",
                    group,
                    source: status_error(ev.status()),
                }))
            }
            _ => return Err(leave(unexpected(&ev, "multicast join"))),
        }
        let p = ud_param(&ev).map_err(leave)?;
        drop(ev);
        let mgid = p.ah_attr.grh.map_or(Gid::ZERO, |g| g.dgid);
        let mlid = p.ah_attr.dlid;
        self.qp()
            .attach_mcast(mgid, mlid)
            .map_err(|e| leave(e.into()))?;
        let peer = UdPeer::new(self.pd(), &p).map_err(|e| {
            let _ = self.qp().detach_mcast(mgid, mlid);
            leave(e)
        })?;
        Ok(Membership {
            ep: self,
            group,
            mgid,
            mlid,
            peer,
            left: false,
        })
    }
}

fn leave_group(id: &CmId, group: IpAddr) -> Result<()> {
    let mut ss = to_storage(SocketAddr::new(group, 0));
    // SAFETY: live id; the address is copied during the call.
    let r = unsafe {
        sys::rdma_leave_multicast(id.as_raw(), (&mut ss as *mut libc::sockaddr_storage).cast())
    };
    sys::errno::check_neg(r).map_err(|source| Error::Multicast {
        op: "rdma_leave_multicast",
        group,
        source,
    })?;
    Ok(())
}

/// A UD endpoint's membership in a multicast group. Dropping it leaves the group (errors
/// ignored); [`leave`](Self::leave) reports them.
#[derive(Debug)]
pub struct Membership<'ep> {
    ep: &'ep UdEndpoint,
    group: IpAddr,
    mgid: Gid,
    mlid: u16,
    peer: UdPeer,
    left: bool,
}

impl Membership<'_> {
    /// The group as a destination: address handle, QP number `0xffffff`, the group's Q_Key.
    pub fn peer(&self) -> &UdPeer {
        &self.peer
    }
    /// The group's multicast GID.
    pub fn mgid(&self) -> Gid {
        self.mgid
    }
    /// The group's address.
    pub fn group(&self) -> IpAddr {
        self.group
    }
    /// Detaches the QP and leaves the group.
    #[doc(alias = "rdma_leave_multicast")]
    pub fn leave(mut self) -> Result<()> {
        self.left = true;
        let detached = self.ep.qp().detach_mcast(self.mgid, self.mlid);
        let left = leave_group(self.ep.id(), self.group);
        detached?;
        left
    }
}

impl Drop for Membership<'_> {
    fn drop(&mut self) {
        if !self.left {
            let _ = self.ep.qp().detach_mcast(self.mgid, self.mlid);
            let _ = leave_group(self.ep.id(), self.group);
        }
    }
}
