//! What a QP is created with: queue sizes ([`QpCap`]) and [`QpInitAttr`]; and
//! [`QpEndpoint`], what two ends exchange to connect.
use verbs_sys as sys;

use super::QpType;
use crate::context::Gid;
use crate::cq::{AsCq, Cq};
use crate::srq::Srq;

/// Queue sizes of a QP (`struct ibv_qp_cap`). After creation, [`Qp::cap`](crate::Qp::cap) gives the sizes the
/// device actually granted (at least those asked for).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpCap {
    /// Send queue depth.
    pub max_send_wr: u32,
    /// Receive queue depth (ignored with an SRQ).
    pub max_recv_wr: u32,
    /// SGEs per send request.
    pub max_send_sge: u32,
    /// SGEs per receive request.
    pub max_recv_sge: u32,
    /// Largest inline send, bytes.
    pub max_inline_data: u32,
}

impl Default for QpCap {
    fn default() -> Self {
        QpCap {
            max_send_wr: 16,
            max_recv_wr: 16,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        }
    }
}

impl From<sys::ibv_qp_cap> for QpCap {
    /// The sizes a creating call wrote back (e.g. `rdma_create_qp`'s `init_attr.cap`).
    fn from(c: sys::ibv_qp_cap) -> Self {
        QpCap {
            max_send_wr: c.max_send_wr,
            max_recv_wr: c.max_recv_wr,
            max_send_sge: c.max_send_sge,
            max_recv_sge: c.max_recv_sge,
            max_inline_data: c.max_inline_data,
        }
    }
}

/// What [`Pd::create_qp`](crate::Pd::create_qp) creates (`struct ibv_qp_init_attr`).
#[derive(Debug, Clone)]
pub struct QpInitAttr<'a> {
    pub(crate) qp_type: QpType,
    pub(crate) send_cq: &'a Cq,
    pub(crate) recv_cq: &'a Cq,
    pub(crate) srq: Option<&'a Srq>,
    pub(crate) cap: QpCap,
    pub(crate) sq_sig_all: bool,
}

impl<'a> QpInitAttr<'a> {
    /// A QP of `qp_type` completing sends on `send_cq` and receives on `recv_cq` (may be the
    /// same CQ), with [`QpCap::default`] queue sizes. Either CQ may be a plain [`Cq`] or an
    /// extended [`CqEx`](crate::CqEx).
    pub fn new<S: AsCq + ?Sized, R: AsCq + ?Sized>(
        qp_type: QpType,
        send_cq: &'a S,
        recv_cq: &'a R,
    ) -> Self {
        QpInitAttr {
            qp_type,
            send_cq: send_cq.as_cq(),
            recv_cq: recv_cq.as_cq(),
            srq: None,
            cap: QpCap::default(),
            sq_sig_all: false,
        }
    }
    /// Receives come from this shared receive queue.
    pub fn srq(mut self, srq: &'a Srq) -> Self {
        self.srq = Some(srq);
        self
    }
    /// All queue sizes at once.
    pub fn cap(mut self, cap: QpCap) -> Self {
        self.cap = cap;
        self
    }
    /// Send queue depth.
    pub fn max_send_wr(mut self, n: u32) -> Self {
        self.cap.max_send_wr = n;
        self
    }
    /// Receive queue depth.
    pub fn max_recv_wr(mut self, n: u32) -> Self {
        self.cap.max_recv_wr = n;
        self
    }
    /// SGEs per send.
    pub fn max_send_sge(mut self, n: u32) -> Self {
        self.cap.max_send_sge = n;
        self
    }
    /// SGEs per receive.
    pub fn max_recv_sge(mut self, n: u32) -> Self {
        self.cap.max_recv_sge = n;
        self
    }
    /// Largest inline send.
    pub fn max_inline_data(mut self, n: u32) -> Self {
        self.cap.max_inline_data = n;
        self
    }
    /// Signal every send request, whatever its flags.
    pub fn sq_sig_all(mut self, all: bool) -> Self {
        self.sq_sig_all = all;
        self
    }
    /// The QP type.
    pub fn qp_type(&self) -> QpType {
        self.qp_type
    }
    /// The queue sizes asked for.
    pub fn get_cap(&self) -> QpCap {
        self.cap
    }
    /// The C struct (for creating the QP elsewhere, e.g. `rdma_create_qp`; then wrap it with
    /// [`Qp::from_raw`](crate::Qp::from_raw)). Its pointers are valid while the CQs (and SRQ) live.
    pub fn to_raw(&self) -> sys::ibv_qp_init_attr {
        // SAFETY: all-zero is a valid ibv_qp_init_attr (null pointers, zero sizes).
        let mut raw: sys::ibv_qp_init_attr = unsafe { std::mem::zeroed() };
        raw.send_cq = self.send_cq.as_raw();
        raw.recv_cq = self.recv_cq.as_raw();
        raw.srq = self.srq.map_or(std::ptr::null_mut(), Srq::as_raw);
        raw.qp_type = self.qp_type.into();
        raw.sq_sig_all = i32::from(self.sq_sig_all);
        let srq = self.srq.is_some();
        raw.cap = sys::ibv_qp_cap {
            max_send_wr: self.cap.max_send_wr,
            max_recv_wr: if srq { 0 } else { self.cap.max_recv_wr },
            max_send_sge: self.cap.max_send_sge,
            max_recv_sge: if srq { 0 } else { self.cap.max_recv_sge },
            max_inline_data: self.cap.max_inline_data,
        };
        raw
    }
}

/// The identity of one end of a connection, exchanged out of band before RTR.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct QpEndpoint {
    /// QP number.
    pub qp_num: u32,
    /// First packet sequence number it will send.
    pub psn: u32,
    /// LID (InfiniBand; 0 on RoCE).
    pub lid: u16,
    /// GID (RoCE; zero on InfiniBand without GRH).
    pub gid: Gid,
}

#[cfg(all(test, feature = "serde"))]
mod serde_tests {
    use super::*;
    use crate::RemoteSlice;

    #[test]
    fn exchanged_values_round_trip_through_json() {
        let ep = QpEndpoint {
            qp_num: 0x11,
            psn: 0xabcdef,
            lid: 0,
            gid: Gid([0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 77, 0, 1]),
        };
        let json = serde_json::to_string(&ep).unwrap();
        assert_eq!(serde_json::from_str::<QpEndpoint>(&json).unwrap(), ep);
        let rs = RemoteSlice {
            addr: 0x7f00_0000_1000,
            len: 4096,
            rkey: 0x1234,
        };
        let json = serde_json::to_string(&rs).unwrap();
        assert!(json.contains("\"rkey\":4660"), "{json}");
        assert_eq!(serde_json::from_str::<RemoteSlice>(&json).unwrap(), rs);
        // A truncated GID is refused, not zero-filled.
        assert!(serde_json::from_str::<Gid>("[1,2,3]").is_err());
    }
}
