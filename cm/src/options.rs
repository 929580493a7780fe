//! [`ConnOptions`]: the verbs resources (PD, CQ, QP) each connection gets, and its parameters.
use std::time::Duration;

use verbs::{AccessFlags, Cq, Pd, Qp, QpCap, QpInitAttr, QpType, Srq};

use crate::{Admission, AdmitHook, CmId, ConnParam, Error, IncomingRequest, Result};

/// How [`Listener`](crate::Listener) and [`Connector`](crate::Connector) set up a connection:
/// the connection parameters sent to the peer and the verbs resources created for it.
///
/// By default every connection gets its own PD and CQ (with a completion channel, so waits
/// sleep instead of spinning) on the device context of its CM id, an RC QP with
/// [`QpCap::default`] queue sizes, and lets the peer RDMA READ and WRITE its memory.
#[derive(Debug, Clone)]
pub struct ConnOptions {
    pub(crate) param: ConnParam,
    pub(crate) cap: QpCap,
    pub(crate) cq_entries: u32,
    pub(crate) cq_channel: bool,
    pub(crate) access: AccessFlags,
    pub(crate) pd: Option<Pd>,
    pub(crate) cq: Option<Cq>,
    pub(crate) srq: Option<Srq>,
    pub(crate) admit: Option<AdmitHook>,
    pub(crate) ack_timeout: Option<Duration>,
}

impl Default for ConnOptions {
    fn default() -> Self {
        ConnOptions {
            param: ConnParam::default(),
            cap: QpCap::default(),
            cq_entries: 64,
            cq_channel: true,
            access: AccessFlags::REMOTE_READ | AccessFlags::REMOTE_WRITE,
            pd: None,
            cq: None,
            srq: None,
            admit: None,
            ack_timeout: None,
        }
    }
}

impl ConnOptions {
    /// The defaults.
    pub fn new() -> Self {
        Self::default()
    }
    /// Connection parameters (and private data) sent to the peer.
    pub fn param(mut self, param: ConnParam) -> Self {
        self.param = param;
        self
    }
    /// Private data sent to the peer (see [`ConnParam::private_data`]).
    pub fn private_data(mut self, data: &[u8]) -> Result<Self> {
        self.param = self.param.private_data(data)?;
        Ok(self)
    }
    /// A listener's admission hook: it sees each connect request's peer address and private
    /// data before anything is created for it, and accepts it or rejects it (with private
    /// data for the peer); a rejected request costs no verbs resources and the listener goes
    /// on waiting. Connectors ignore it.
    pub fn admit(
        mut self,
        f: impl Fn(&IncomingRequest<'_>) -> Admission + Send + Sync + 'static,
    ) -> Self {
        self.admit = Some(AdmitHook::new(f));
        self
    }
    /// The admission hook as a shareable value (see [`admit`](Self::admit)).
    pub fn admit_hook(mut self, hook: Option<AdmitHook>) -> Self {
        self.admit = hook;
        self
    }
    /// The local ACK timeout of every connection's QP: how long it waits for the peer's
    /// acknowledgement before sending again, rounded up to 4.096 µs × 2^n (see
    /// [`CmId::set_ack_timeout`]). Without it the CM derives one from the path (on RoCE half a
    /// second to a second), and every packet lost at the end of a burst costs that long. A
    /// connection survives an outage of about (retry count + 1) × timeout
    /// ([`ConnParam::retry_count`](crate::ConnParam::retry_count)); a timeout shorter than
    /// the fabric's round trip under load sends again what was not lost.
    pub fn ack_timeout(mut self, timeout: Duration) -> Self {
        self.ack_timeout = Some(timeout);
        self
    }
    /// QP queue sizes. `max_inline_data` is what the QP asks for: a device that refuses it
    /// (`EINVAL`) gets a QP with half as much, and so on down to none, so asking for generous
    /// inline room does not fail on devices with less. The QP's
    /// [`cap`](verbs::Qp::cap) tells what it got.
    pub fn cap(mut self, cap: QpCap) -> Self {
        self.cap = cap;
        self
    }
    /// CQ size (send and receive completions share one CQ).
    pub fn cq_entries(mut self, n: u32) -> Self {
        self.cq_entries = n;
        self
    }
    /// Whether the CQ gets a completion channel (for sleeping waits).
    pub fn cq_channel(mut self, yes: bool) -> Self {
        self.cq_channel = yes;
        self
    }
    /// What the peer may do to this side's memory.
    pub fn access(mut self, access: AccessFlags) -> Self {
        self.access = access;
        self
    }
    /// Create every connection's QP and CQ on this PD instead of a PD per connection, so one
    /// set of registrations (one memory pool) serves them all. It must be a PD of the device
    /// the connections use: open it with
    /// [`verbs::Context::open_by_addr`] for the address you bind or connect from. A PD of
    /// another device is [`Error::PdOnOtherDevice`](crate::Error::PdOnOtherDevice).
    pub fn pd(mut self, pd: &Pd) -> Self {
        self.pd = Some(pd.clone());
        self
    }

    /// The shared PD, if one was given.
    pub fn get_pd(&self) -> Option<&Pd> {
        self.pd.as_ref()
    }

    /// Checks that the shared PD (if any) is on the device `id` is bound to.
    pub(crate) fn check_pd(&self, id: &CmId) -> Result<()> {
        let Some(pd) = &self.pd else { return Ok(()) };
        let id_device = id.context()?.name().to_owned();
        let pd_device = pd.context().name().to_owned();
        if pd_device == id_device {
            return Ok(());
        }
        Err(Error::PdOnOtherDevice {
            pd_device,
            id_device,
            local: id.local_addr().map(|a| a.ip()),
        })
    }

    /// PD, CQ and a QP in the Init state for `id`.
    /// One CQ for the send and receive queues of every connection made with these options
    /// (instead of a CQ per connection; `cq_entries` and `cq_channel` then do not apply). It
    /// must belong to the device the connections use, like [`pd`](Self::pd). Size it for all
    /// their outstanding work: a CQ overrun breaks every QP on it.
    pub fn cq(mut self, cq: &Cq) -> Self {
        self.cq = Some(cq.clone());
        self
    }
    /// A shared receive queue for every connection made with these options: receives are
    /// posted on it, not on the QPs (it must be of the same PD).
    pub fn srq(mut self, srq: &Srq) -> Self {
        self.srq = Some(srq.clone());
        self
    }

    /// These options with the QP on `cq` and `srq` (none: receives on the QP).
    pub(crate) fn on_queues(mut self, cq: &Cq, srq: Option<&Srq>) -> Self {
        self.cq = Some(cq.clone());
        self.srq = srq.cloned();
        self
    }

    pub(crate) fn resources(&self, id: &CmId) -> Result<(Pd, Cq, Qp)> {
        self.check_pd(id)?;
        if let Some(timeout) = self.ack_timeout {
            id.set_ack_timeout(timeout)?;
        }
        let pd = match &self.pd {
            Some(pd) => pd.clone(),
            None => id.context()?.alloc_pd()?,
        };
        let ctx = pd.context();
        let cq = match &self.cq {
            Some(cq) => cq.clone(),
            None => {
                let channel = if self.cq_channel {
                    Some(ctx.create_comp_channel()?)
                } else {
                    None
                };
                ctx.create_cq(self.cq_entries, channel)?
            }
        };
        let qp = self.create_qp(id, &pd, &cq)?;
        Ok((pd, cq, qp))
    }

    /// The QP, with as much of the inline room asked for as the device grants (see
    /// [`cap`](Self::cap)); another failure, or one with no inline room asked, is the error.
    fn create_qp(&self, id: &CmId, pd: &Pd, cq: &Cq) -> Result<Qp> {
        let mut cap = self.cap;
        let mut first = None;
        loop {
            let mut init = QpInitAttr::new(QpType::Rc, cq, cq).cap(cap);
            if let Some(srq) = &self.srq {
                init = init.srq(srq);
            }
            match id.create_qp(pd, &init, self.access) {
                Ok(qp) => return Ok(qp),
                Err(Error::Verbs(verbs::Error::CreateQp { source, .. }))
                    if source.raw_os_error() == Some(libc::EINVAL) && cap.max_inline_data > 0 =>
                {
                    first.get_or_insert(source);
                    cap.max_inline_data /= 2;
                }
                Err(e) => {
                    return Err(match first {
                        // Not even without inline room: the first refusal is the one to report.
                        Some(source) if cap.max_inline_data == 0 => {
                            Error::Verbs(verbs::Error::CreateQp {
                                qp_type: QpType::Rc,
                                source,
                            })
                        }
                        _ => e,
                    });
                }
            }
        }
    }
}
