//! [`PreparedSend`] and [`PreparedRecv`]: a borrowed request checked once and posted many
//! times, as a benchmark's or a ping-pong's loop posts the same request every iteration.
//!
//! Sound for the reasons [`FixedBuffers::post_send`] is: every scatter/gather entry lies in a
//! region of the fixed buffers (a sink for requests that write local memory), a UD request's
//! address handle is one the buffers keep (until they are dropped, past the last completion),
//! and the prepared request borrows the buffers and its SGE list for as long as it exists, so
//! none of them can be dropped or changed between two posts.
use std::marker::PhantomData;

use verbs_sys as sys;

use super::recv::{check_recv_wr, post_recv_chain, raw_recv_wr};
use super::{check_borrowed_wr_id, invalid, zeroed_send_wr, FixedBuffers, RecvWr, SendWr};
use crate::qp::Qp;
use crate::Result;

/// A send request on fixed buffers, checked once against its QP and its buffers (see
/// [`FixedBuffers::prepare_send`]); each [`post`](Self::post) then costs the provider's post
/// and a look at the QP's state, with no request to build or check again.
pub struct PreparedSend<'a> {
    qp: &'a Qp,
    wr: sys::ibv_send_wr,
    /// The SGE list and address handle `wr` points to, and the buffers its SGEs lie in.
    _borrowed: PhantomData<(&'a FixedBuffers, SendWr<'a>)>,
}

impl std::fmt::Debug for PreparedSend<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PreparedSend")
            .field("qp_num", &self.qp.qp_num())
            .field("wr_id", &self.wr.wr_id)
            .field("opcode", &self.wr.opcode)
            .field("num_sge", &self.wr.num_sge)
            .finish()
    }
}

impl FixedBuffers {
    /// Checks `wr` once, as [`post_send`](Self::post_send) checks each request it posts, and
    /// keeps it ready to post on `qp` as often as wanted.
    pub fn prepare_send<'a>(&'a self, qp: &'a Qp, wr: &SendWr<'a>) -> Result<PreparedSend<'a>> {
        self.check_request(qp, 0, wr)?;
        let mut raw = zeroed_send_wr();
        qp.fill_borrowed(wr, &mut raw)?;
        Ok(PreparedSend {
            qp,
            wr: raw,
            _borrowed: PhantomData,
        })
    }
}

impl PreparedSend<'_> {
    /// Posts the request (one doorbell). The QP must still be able to send (RTS, SQD, or
    /// Error, where the request completes flushed).
    #[doc(alias = "ibv_post_send")]
    pub fn post(&mut self) -> Result<()> {
        if let Some(why) = self.qp.send_state_refusal() {
            return Err(invalid(self.qp.qp_num(), why));
        }
        // The request was checked when prepared, and everything it points to is borrowed for
        // as long as it exists (see the module docs).
        self.qp
            .post_chain(std::slice::from_mut(&mut self.wr))
            .map_err(|(_, e)| e)
    }

    /// Sets the id the next posts carry in their completions (it must not have the
    /// [`OWNED_WR_ID`](super::OWNED_WR_ID) bit).
    pub fn set_wr_id(&mut self, wr_id: u64) -> Result<()> {
        check_borrowed_wr_id(self.qp.qp_num(), wr_id)?;
        self.wr.wr_id = wr_id;
        Ok(())
    }

    /// The id the next posts carry.
    pub fn wr_id(&self) -> u64 {
        self.wr.wr_id
    }
}

/// A receive request on fixed buffers, checked once against its QP and its buffers (see
/// [`FixedBuffers::prepare_recv`]); [`post`](Self::post) posts it any number of times, in
/// chains, with no request to build or check again.
pub struct PreparedRecv<'a> {
    qp: &'a Qp,
    wr: sys::ibv_recv_wr,
    /// The SGE list `wr` points to, and the buffers its SGEs lie in.
    _borrowed: PhantomData<(&'a FixedBuffers, RecvWr<'a>)>,
}

impl std::fmt::Debug for PreparedRecv<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PreparedRecv")
            .field("qp_num", &self.qp.qp_num())
            .field("wr_id", &self.wr.wr_id)
            .field("num_sge", &self.wr.num_sge)
            .finish()
    }
}

impl FixedBuffers {
    /// Checks `wr` once, as [`post_recv`](Self::post_recv) checks each request it posts (every
    /// entry in a sink, an id without the owned bit, no more entries than the QP takes), and
    /// keeps it ready to post on `qp` as often as wanted.
    pub fn prepare_recv<'a>(&'a self, qp: &'a Qp, wr: &RecvWr<'a>) -> Result<PreparedRecv<'a>> {
        self.check_recv(qp, 0, wr)?;
        check_recv_wr(qp.qp_num(), wr, qp.cap().max_recv_sge)?;
        Ok(PreparedRecv {
            qp,
            wr: raw_recv_wr(wr),
            _borrowed: PhantomData,
        })
    }
}

impl PreparedRecv<'_> {
    /// Requests linked into one `ibv_post_recv`.
    pub const CHAIN: usize = 16;

    /// Posts the request `n` times, in chains of up to [`CHAIN`](Self::CHAIN). On an error
    /// (a full queue: [`Error::QueueFull`](crate::Error::QueueFull)) the chains before the
    /// failing one are posted, and of that one the device may have taken some.
    #[doc(alias = "ibv_post_recv")]
    pub fn post(&mut self, n: usize) -> Result<()> {
        let mut chain = [self.wr; Self::CHAIN];
        let qp = self.qp;
        let (qpn, depth) = (qp.qp_num(), qp.cap().max_recv_wr);
        let mut left = n;
        while left > 0 {
            let k = left.min(Self::CHAIN);
            post_recv_chain(
                &mut chain[..k],
                qpn,
                "receive",
                depth,
                // SAFETY: live QP; a well-formed chain of the request checked when prepared,
                // whose entries lie in sinks the fixed buffers keep alive and the program
                // cannot reach, borrowed with the SGE list for as long as `self` exists.
                |wr, bad| unsafe { sys::ibv_post_recv(qp.as_raw(), wr, bad) },
            )
            .map_err(|(_, e)| e)?;
            left -= k;
        }
        Ok(())
    }

    /// The id each posted receive carries in its completion.
    pub fn wr_id(&self) -> u64 {
        self.wr.wr_id
    }
}
