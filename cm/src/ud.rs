//! Unreliable datagrams over rdma_cm (`RDMA_PS_UDP`): [`UdConnector`] resolves a server and
//! gets its QP number, Q_Key and an address handle from the `Established` event;
//! [`UdListener`] answers such requests with its own UD QP.
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use verbs::{Ah, AhAttr, Cq, Pd, Qp, QpAttr, QpCap, QpInitAttr, QpState, QpType, UdDest};

use crate::connector::{resolve_in_attempts, unexpected};
use crate::param::{check_private_data, PrivateDataOp};
use crate::{CmEvent, CmId, ConnParam, Error, EventKind, PortSpace, Result};

/// What a UD event says about the remote end (`struct rdma_ud_param`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdParam {
    /// The address vector to reach it.
    pub ah_attr: AhAttr,
    /// Its QP number (`0xffffff` for a multicast group).
    pub qp_num: u32,
    /// Its Q_Key.
    pub qkey: u32,
}

/// A remote UD QP: address handle, QP number and Q_Key; [`dest`](Self::dest) is what a
/// UD send takes.
#[derive(Debug, Clone)]
pub struct UdPeer {
    /// Address handle to its port.
    pub ah: Ah,
    /// Its QP number.
    pub qp_num: u32,
    /// Its Q_Key.
    pub qkey: u32,
}

impl UdPeer {
    /// Creates the address handle on `pd` from what an event reported.
    pub fn new(pd: &Pd, p: &UdParam) -> Result<UdPeer> {
        Ok(UdPeer {
            ah: pd.create_ah(&p.ah_attr)?,
            qp_num: p.qp_num,
            qkey: p.qkey,
        })
    }
    /// The destination of a send to it (for `SendRequest::ud` take the fields).
    pub fn dest(&self) -> UdDest<'_> {
        UdDest {
            ah: &self.ah,
            remote_qpn: self.qp_num,
            remote_qkey: self.qkey,
        }
    }
}

/// A UD QP on a CM id's device, in RTS: the id, its PD, its CQ (sends and receives) and the
/// QP. Receives start with the 40-byte GRH ([`verbs::GRH_LEN`]).
#[derive(Debug)]
pub struct UdEndpoint {
    qp: Qp,
    cq: Cq,
    pd: Pd,
    qkey: u32,
    id: CmId,
}

impl UdEndpoint {
    /// Creates PD, CQ (`cq_entries`) and a UD QP (`cap`) on `id`'s device and moves the QP
    /// to RTS with the Q_Key, port and P_Key the CM computes (`rdma_init_qp_attr`).
    #[doc(alias = "rdma_init_qp_attr")]
    pub fn new(id: CmId, cap: QpCap, cq_entries: u32) -> Result<UdEndpoint> {
        let ctx = id.context()?;
        let pd = ctx.alloc_pd()?;
        let cq = ctx.create_cq(cq_entries, Some(ctx.create_comp_channel()?))?;
        let qp = pd.create_qp(&QpInitAttr::new(QpType::Ud, &cq, &cq).cap(cap))?;
        let init = id.init_qp_attr(QpState::Init)?;
        let qkey = init.as_raw().qkey;
        qp.modify(&init)?;
        // For UD the CM's attributes are those of Init whatever state is asked for: RTR and
        // RTS take only what the transition table allows (as librdmacm's own UD setup).
        qp.modify(&QpAttr::new().qp_state(QpState::Rtr))?;
        qp.modify(&QpAttr::new().qp_state(QpState::Rts).sq_psn(0))?;
        Ok(UdEndpoint {
            qp,
            cq,
            pd,
            qkey,
            id,
        })
    }
    /// The UD QP (RTS).
    pub fn qp(&self) -> &Qp {
        &self.qp
    }
    /// Its CQ (with a completion channel: `wait_and_poll` works).
    pub fn cq(&self) -> &Cq {
        &self.cq
    }
    /// Its PD.
    pub fn pd(&self) -> &Pd {
        &self.pd
    }
    /// The CM id.
    pub fn id(&self) -> &CmId {
        &self.id
    }
    /// The QP's Q_Key (peers send with it).
    pub fn qkey(&self) -> u32 {
        self.qkey
    }
}

/// Default QP sizes of UD endpoints: 64 sends, 64 receives, one SGE each.
fn default_cap() -> QpCap {
    QpCap {
        max_send_wr: 64,
        max_recv_wr: 64,
        ..QpCap::default()
    }
}

/// The client side of UD over rdma_cm: resolve, then a service ID request (SIDR) whose
/// answer names the server's QP.
///
/// ```no_run
/// use std::time::Duration;
/// use cm::UdConnector;
/// use verbs::{AccessFlags, SendRequest};
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let (ep, server) = UdConnector::new("192.168.77.1:7471".parse()?)
///     .timeout(Duration::from_secs(5))
///     .connect()?;
/// let mut msg = ep.pd().reg_mr(64, AccessFlags::LOCAL_WRITE)?;
/// msg.as_mut_slice()[..5].copy_from_slice(b"hello");
/// let req = SendRequest::send(msg, 0..5)?.ud(&server.ah, server.qp_num, server.qkey);
/// ep.qp().post_send(req)?;
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct UdConnector {
    dst: SocketAddr,
    src: Option<SocketAddr>,
    timeout: Duration,
    private_data: Vec<u8>,
    cap: QpCap,
    cq_entries: u32,
}

impl UdConnector {
    /// Resolves `dst`, a [`UdListener`]'s address.
    #[doc(alias = "RDMA_PS_UDP")]
    pub fn new(dst: SocketAddr) -> Self {
        UdConnector {
            dst,
            src: None,
            timeout: crate::DEFAULT_CONNECT_TIMEOUT,
            private_data: Vec::new(),
            cap: default_cap(),
            cq_entries: 128,
        }
    }
    /// Source address (picks the local device).
    pub fn src(mut self, ip: IpAddr) -> Self {
        self.src = Some(SocketAddr::new(ip, 0));
        self
    }
    /// Total time for resolution and the server's answer.
    pub fn timeout(mut self, total: Duration) -> Self {
        self.timeout = total;
        self
    }
    /// Private data for the request ([`Error::PrivateDataTooLong`] past the UD limit).
    pub fn private_data(mut self, data: &[u8]) -> Result<Self> {
        check_private_data(PortSpace::Udp, PrivateDataOp::Connect, data)?;
        self.private_data = data.to_vec();
        Ok(self)
    }
    /// QP sizes.
    pub fn cap(mut self, cap: QpCap) -> Self {
        self.cap = cap;
        self
    }

    /// Resolves the server, creates the local endpoint and asks the server for its QP: the
    /// endpoint and the server as a [`UdPeer`], or a typed error (unreachable: nobody
    /// listens; timed out) within the total timeout.
    #[doc(alias = "rdma_connect")]
    pub fn connect(&self) -> Result<(UdEndpoint, UdPeer)> {
        let deadline = Instant::now() + self.timeout;
        let left = || deadline.saturating_duration_since(Instant::now());
        let id = resolve_in_attempts(PortSpace::Udp, self.src, self.dst, deadline)?;
        let ep = UdEndpoint::new(id.clone(), self.cap, self.cq_entries)?;
        id.connect(&ConnParam::new().private_data(&self.private_data)?, &ep.qp)?;
        loop {
            let ev = id.get_event(left())?.ok_or(Error::Timeout {
                op: "UD connect",
                after: self.timeout,
            })?;
            match ev.kind() {
                Ok(EventKind::Established) => {
                    let p = ud_param(&ev)?;
                    let peer = UdPeer::new(&ep.pd, &p)?;
                    return Ok((ep, peer));
                }
                _ => match ev.connection_failure() {
                    Some(e) => return Err(e),
                    None => continue,
                },
            }
        }
    }
}

pub(crate) fn ud_param(ev: &CmEvent) -> Result<UdParam> {
    ev.ud()
        .copied()
        .ok_or_else(|| unexpected(ev, "the UD parameters of a UDP port-space event"))
}

/// The server side of UD over rdma_cm: binds, listens, and answers each request with a UD
/// endpoint of its own. Clients are then known from their datagrams: answer one with
/// `Pd::create_ah_from_wc` and the completion's `src_qp`.
#[derive(Debug)]
pub struct UdListener {
    id: CmId,
    cap: QpCap,
}

impl UdListener {
    /// Binds to `addr` (port 0: any) and listens. An address no RDMA device serves is
    /// [`Error::NotRdmaAddress`], which lists those that are.
    #[doc(alias = "rdma_listen")]
    pub fn bind(addr: SocketAddr) -> Result<UdListener> {
        let id = CmId::with_own_channel(PortSpace::Udp)?;
        id.bind_addr(addr)
            .map_err(|e| crate::addr::diagnose_local(addr.ip(), e))?;
        id.listen(crate::DEFAULT_BACKLOG)?;
        Ok(UdListener {
            id,
            cap: default_cap(),
        })
    }
    /// The bound address.
    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.id.local_addr()
    }
    /// Waits up to `timeout` for a request and accepts it with a new endpoint, on which
    /// `before_accept` may post receives first (a client may send as soon as it has the
    /// answer). Returns the endpoint and the request's private data.
    #[doc(alias = "rdma_accept")]
    pub fn accept(
        &self,
        timeout: Duration,
        before_accept: impl FnOnce(&UdEndpoint) -> Result<()>,
    ) -> Result<(UdEndpoint, Vec<u8>)> {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let ev = self.id.get_event(left)?.ok_or(Error::Timeout {
                op: "UD request",
                after: timeout,
            })?;
            if !ev.is(EventKind::ConnectRequest) {
                continue;
            }
            let id = ev
                .id()
                .cloned()
                .ok_or_else(|| unexpected(&ev, "a new id"))?;
            let data = ev.private_data().to_vec();
            let ep = UdEndpoint::new(id, self.cap, 128)?;
            before_accept(&ep)?;
            ep.id.accept(&ConnParam::new(), &ep.qp)?;
            drop(ev);
            return Ok((ep, data));
        }
    }
}
