//! Connection parameters ([`ConnParam`]) and the private-data limits of each CM message.
use verbs_sys as sys;

use crate::{Error, PortSpace, Result};

/// The CM message that carries private data.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PrivateDataOp {
    /// `rdma_connect` (IB CM REQ, or SIDR REQ for UD).
    Connect,
    /// `rdma_accept` (REP, or SIDR REP for UD).
    Accept,
    /// `rdma_reject` (REJ).
    Reject,
}

/// Most private data `op` carries in port space `ps` on InfiniBand and RoCE (iWARP allows
/// more; these are the binding limits). A connect request loses 36 bytes of the IB CM's REQ
/// (92) and SIDR REQ (216) private data to the rdma_cm's own address header; accepts and
/// rejects carry the full REP (196), SIDR REP (136) and REJ (148) private data.
pub const fn max_private_data(ps: PortSpace, op: PrivateDataOp) -> usize {
    match (ps, op) {
        (PortSpace::Tcp, PrivateDataOp::Connect) => 56,
        (PortSpace::Tcp, PrivateDataOp::Accept) => 196,
        (PortSpace::Udp, PrivateDataOp::Connect) => 180,
        (PortSpace::Udp, PrivateDataOp::Accept) => 136,
        (_, PrivateDataOp::Reject) => 148,
    }
}

/// Checks `data` against the limit of `op` in `ps`.
pub(crate) fn check_private_data(ps: PortSpace, op: PrivateDataOp, data: &[u8]) -> Result<()> {
    let max = max_private_data(ps, op);
    if data.len() > max {
        return Err(Error::PrivateDataTooLong {
            len: data.len(),
            max,
        });
    }
    Ok(())
}

/// `RDMA_MAX_RESP_RES` / `RDMA_MAX_INIT_DEPTH` of `rdma_cma.h`: "as many as the device allows".
const RDMA_MAX_RESP_RES: u8 = 0xff;
const RDMA_MAX_INIT_DEPTH: u8 = 0xff;

/// Largest private data any message carries; longer data is refused when it is set.
const ABSOLUTE_MAX: usize = 196;

/// What `rdma_connect` and `rdma_accept` send (`struct rdma_conn_param`), built with setters
/// named after the C fields. The defaults let librdmacm pick the largest RDMA READ depths the
/// device and the peer allow, with 7 transport and 7 (infinite) RNR retries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnParam {
    private_data: Vec<u8>,
    responder_resources: u8,
    initiator_depth: u8,
    retry_count: u8,
    rnr_retry_count: u8,
}

impl Default for ConnParam {
    fn default() -> Self {
        ConnParam {
            private_data: Vec::new(),
            responder_resources: RDMA_MAX_RESP_RES,
            initiator_depth: RDMA_MAX_INIT_DEPTH,
            retry_count: 7,
            rnr_retry_count: 7,
        }
    }
}

impl ConnParam {
    /// Default parameters, no private data.
    pub fn new() -> Self {
        Self::default()
    }

    /// Private data for the peer. Longer than any CM message carries (196 bytes) is
    /// [`Error::PrivateDataTooLong`] here; the exact limit of the message it ends up in (see
    /// [`max_private_data`]) is checked when it is sent.
    pub fn private_data(mut self, data: &[u8]) -> Result<Self> {
        if data.len() > ABSOLUTE_MAX {
            return Err(Error::PrivateDataTooLong {
                len: data.len(),
                max: ABSOLUTE_MAX,
            });
        }
        self.private_data = data.to_vec();
        Ok(self)
    }
    /// Outstanding RDMA READ/atomic requests this side accepts as target
    /// (`responder_resources`).
    pub fn responder_resources(mut self, n: u8) -> Self {
        self.responder_resources = n;
        self
    }
    /// Outstanding RDMA READ/atomic requests this side issues (`initiator_depth`).
    pub fn initiator_depth(mut self, n: u8) -> Self {
        self.initiator_depth = n;
        self
    }
    /// Transport retries on timeout (`retry_count`, at most 7).
    pub fn retry_count(mut self, n: u8) -> Self {
        self.retry_count = n.min(7);
        self
    }
    /// Retries after receiver-not-ready (`rnr_retry_count`, 7 = forever).
    pub fn rnr_retry_count(mut self, n: u8) -> Self {
        self.rnr_retry_count = n.min(7);
        self
    }
    /// The private data set so far.
    pub fn get_private_data(&self) -> &[u8] {
        &self.private_data
    }

    /// The C struct, pointing into `self` (valid while `self` is borrowed).
    pub(crate) fn to_raw(&self, qp_num: u32) -> sys::rdma_conn_param {
        sys::rdma_conn_param {
            private_data: if self.private_data.is_empty() {
                std::ptr::null()
            } else {
                self.private_data.as_ptr().cast()
            },
            // At most ABSOLUTE_MAX (196) bytes: fits.
            private_data_len: self.private_data.len() as u8,
            responder_resources: self.responder_resources,
            initiator_depth: self.initiator_depth,
            flow_control: 1,
            retry_count: self.retry_count,
            rnr_retry_count: self.rnr_retry_count,
            srq: 0,
            qp_num,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_are_the_ib_cm_sizes() {
        assert_eq!(max_private_data(PortSpace::Tcp, PrivateDataOp::Connect), 56);
        assert_eq!(max_private_data(PortSpace::Tcp, PrivateDataOp::Accept), 196);
        assert_eq!(max_private_data(PortSpace::Tcp, PrivateDataOp::Reject), 148);
        assert_eq!(
            max_private_data(PortSpace::Udp, PrivateDataOp::Connect),
            180
        );
    }

    #[test]
    fn too_long_private_data_is_a_typed_error() {
        let e = ConnParam::new().private_data(&[0; 197]).unwrap_err();
        assert!(matches!(
            e,
            Error::PrivateDataTooLong { len: 197, max: 196 }
        ));
        let ok = ConnParam::new().private_data(&[1; 57]).unwrap();
        let e = check_private_data(
            PortSpace::Tcp,
            PrivateDataOp::Connect,
            ok.get_private_data(),
        )
        .unwrap_err();
        assert!(matches!(e, Error::PrivateDataTooLong { len: 57, max: 56 }));
        assert!(check_private_data(PortSpace::Tcp, PrivateDataOp::Accept, &[1; 57]).is_ok());
    }

    #[test]
    fn raw_param_points_at_the_data() {
        let p = ConnParam::new()
            .private_data(b"hello")
            .unwrap()
            .retry_count(9);
        let raw = p.to_raw(42);
        assert_eq!(raw.private_data_len, 5);
        assert_eq!(raw.qp_num, 42);
        assert_eq!(raw.retry_count, 7);
        assert_eq!(raw.private_data.cast::<u8>(), p.get_private_data().as_ptr());
        let empty = ConnParam::new().to_raw(1);
        assert!(empty.private_data.is_null());
    }
}
