//! A typestate front-end to bringing a connected QP up: Reset → Init → RTR → RTS, where each
//! step is only callable in the state it starts from. The result is a plain [`Qp`] in RTS.
use std::marker::PhantomData;

use super::{Qp, QpEndpoint, QpInitAttr, QpState};
use crate::context::Mtu;
use crate::mr::AccessFlags;
use crate::pd::Pd;
use crate::{Error, Result};

/// Marker types of [`QpIn`].
pub mod states {
    /// Just created.
    #[derive(Debug)]
    pub enum Reset {}
    /// Initialised: receives may be posted.
    #[derive(Debug)]
    pub enum Init {}
    /// Ready to receive.
    #[derive(Debug)]
    pub enum Rtr {}
}

/// A QP known (by its type) to be in state `S`. Each transition consumes it; a failed
/// transition drops the QP.
#[derive(Debug)]
pub struct QpIn<S> {
    qp: Qp,
    _state: PhantomData<S>,
}

impl<S> QpIn<S> {
    fn wrap(qp: Qp) -> Self {
        QpIn {
            qp,
            _state: PhantomData,
        }
    }
    /// The QP, e.g. for its number (to exchange before RTR) or to post receives in Init/RTR.
    pub fn qp(&self) -> &Qp {
        &self.qp
    }
}

impl Pd {
    /// Creates a QP in the typed Reset state.
    #[doc(alias = "ibv_create_qp")]
    pub fn create_qp_typed(&self, init: &QpInitAttr<'_>) -> Result<QpIn<states::Reset>> {
        Ok(QpIn::wrap(self.create_qp(init)?))
    }
}

impl QpIn<states::Reset> {
    /// Takes an untyped QP that is in Reset (as tracked by its handle).
    pub fn new(qp: Qp) -> Result<Self> {
        match qp.state() {
            QpState::Reset => Ok(Self::wrap(qp)),
            from => Err(Error::InvalidTransition {
                qp_num: qp.qp_num(),
                from,
                to: QpState::Reset,
                problem: "is not in Reset".into(),
            }),
        }
    }
    /// Reset → Init for RC/UC (see [`Qp::to_init`]).
    pub fn init(self, port: u8, access: AccessFlags) -> Result<QpIn<states::Init>> {
        self.qp.to_init(port, access)?;
        Ok(QpIn::wrap(self.qp))
    }
    /// Reset → Init for UD (see [`Qp::to_init_ud`]).
    pub fn init_ud(self, port: u8, qkey: u32) -> Result<QpIn<states::Init>> {
        self.qp.to_init_ud(port, qkey)?;
        Ok(QpIn::wrap(self.qp))
    }
}

impl QpIn<states::Init> {
    /// Init → RTR (see [`Qp::to_rtr`]).
    pub fn rtr(
        self,
        remote: &QpEndpoint,
        port: u8,
        sgid_index: Option<u8>,
        mtu: Mtu,
    ) -> Result<QpIn<states::Rtr>> {
        self.qp.to_rtr(remote, port, sgid_index, mtu)?;
        Ok(QpIn::wrap(self.qp))
    }
}

impl QpIn<states::Rtr> {
    /// RTR → RTS (see [`Qp::to_rts`]); the QP is ready to send.
    pub fn rts(self, sq_psn: u32) -> Result<Qp> {
        self.qp.to_rts(sq_psn)?;
        Ok(self.qp)
    }
}
