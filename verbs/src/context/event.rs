//! Asynchronous device events (`ibv_get_async_event`): errors and state changes of QPs, CQs,
//! SRQs and ports, read with a timeout or as an iterator.
use std::io;
use std::mem::MaybeUninit;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

use verbs_sys as sys;

use super::Context;
use crate::{Error, Result};

c_enum! {
    /// What happened (`enum ibv_event_type`).
    AsyncEventKind: u32 {
        /// CQ overrun: the CQ is in error.
        CqErr = sys::ibv_event_type::IBV_EVENT_CQ_ERR as u32,
        /// A QP hit an error that completions cannot report.
        QpFatal = sys::ibv_event_type::IBV_EVENT_QP_FATAL as u32,
        /// Invalid request on a QP (responder side).
        QpReqErr = sys::ibv_event_type::IBV_EVENT_QP_REQ_ERR as u32,
        /// Access violation on a QP (responder side).
        QpAccessErr = sys::ibv_event_type::IBV_EVENT_QP_ACCESS_ERR as u32,
        /// Communication established (first packet on an RTR QP).
        CommEst = sys::ibv_event_type::IBV_EVENT_COMM_EST as u32,
        /// Send queue drained (SQD).
        SqDrained = sys::ibv_event_type::IBV_EVENT_SQ_DRAINED as u32,
        /// Path migrated.
        PathMig = sys::ibv_event_type::IBV_EVENT_PATH_MIG as u32,
        /// Path migration failed.
        PathMigErr = sys::ibv_event_type::IBV_EVENT_PATH_MIG_ERR as u32,
        /// The device is unusable.
        DeviceFatal = sys::ibv_event_type::IBV_EVENT_DEVICE_FATAL as u32,
        /// Port became active.
        PortActive = sys::ibv_event_type::IBV_EVENT_PORT_ACTIVE as u32,
        /// Port went down.
        PortErr = sys::ibv_event_type::IBV_EVENT_PORT_ERR as u32,
        /// LID changed.
        LidChange = sys::ibv_event_type::IBV_EVENT_LID_CHANGE as u32,
        /// P_Key table changed.
        PkeyChange = sys::ibv_event_type::IBV_EVENT_PKEY_CHANGE as u32,
        /// Subnet manager changed.
        SmChange = sys::ibv_event_type::IBV_EVENT_SM_CHANGE as u32,
        /// SRQ error.
        SrqErr = sys::ibv_event_type::IBV_EVENT_SRQ_ERR as u32,
        /// SRQ fell below its limit.
        SrqLimitReached = sys::ibv_event_type::IBV_EVENT_SRQ_LIMIT_REACHED as u32,
        /// Last WQE of a QP attached to an SRQ reached (after moving it to error).
        QpLastWqeReached = sys::ibv_event_type::IBV_EVENT_QP_LAST_WQE_REACHED as u32,
        /// Client must re-register with the SM.
        ClientReregister = sys::ibv_event_type::IBV_EVENT_CLIENT_REREGISTER as u32,
        /// GID table changed.
        GidChange = sys::ibv_event_type::IBV_EVENT_GID_CHANGE as u32,
        /// Work queue fatal.
        WqFatal = sys::ibv_event_type::IBV_EVENT_WQ_FATAL as u32,
    }
}

/// What an event is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum EventElement {
    /// A QP, by number.
    Qp(u32),
    /// A CQ, by its raw address (compare with `Cq::as_raw`).
    Cq(usize),
    /// An SRQ, by its raw address (compare with `Srq::as_raw`).
    Srq(usize),
    /// A work queue, by its raw address.
    Wq(usize),
    /// A port.
    Port(u8),
    /// The device.
    Device,
}

/// One async event. Its data is copied out and the event acknowledged (`ibv_ack_async_event`)
/// before it is returned, so holding an event never blocks destroying the object it names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AsyncEvent {
    /// The event type; `Err(raw)` for a type newer than this crate.
    pub kind: std::result::Result<AsyncEventKind, u32>,
    /// The object or port it is about.
    pub element: EventElement,
}

impl Context {
    /// Waits up to `timeout` (`None`: forever) for the next async event.
    #[doc(alias = "ibv_get_async_event")]
    pub fn get_async_event(&self, timeout: Option<Duration>) -> Result<Option<AsyncEvent>> {
        loop {
            if !sys::fd::wait_readable(self.async_fd(), timeout).map_err(Error::AsyncEvent)? {
                return Ok(None);
            }
            let mut ev = MaybeUninit::<sys::ibv_async_event_raw>::zeroed();
            // SAFETY: open context; valid out-pointer; the fd is non-blocking.
            let r = unsafe { sys::ibv_get_async_event_raw(self.as_raw(), ev.as_mut_ptr()) };
            if let Err(e) = sys::errno::check_neg(r) {
                if e.kind() == io::ErrorKind::WouldBlock {
                    // Another reader took it; wait again (the timeout restarts, bounded by
                    // the caller's loop in practice).
                    continue;
                }
                return Err(Error::AsyncEvent(e));
            }
            // SAFETY: filled by a successful call.
            let mut ev = unsafe { ev.assume_init() };
            let kind = AsyncEventKind::try_from(ev.event_type);
            let element = element_of(kind, &ev);
            // SAFETY: `ev` came from ibv_get_async_event and is acked exactly once.
            unsafe { sys::ibv_ack_async_event_raw(&mut ev) };
            let ev = AsyncEvent { kind, element };
            crate::trace::async_event(self.name(), &ev);
            return Ok(Some(ev));
        }
    }

    /// A blocking iterator over async events; each `next` waits up to `timeout` and ends the
    /// iteration when it passes.
    pub fn async_events(&self, timeout: Option<Duration>) -> AsyncEvents<'_> {
        AsyncEvents { ctx: self, timeout }
    }
}

fn element_of(
    kind: std::result::Result<AsyncEventKind, u32>,
    ev: &sys::ibv_async_event_raw,
) -> EventElement {
    use AsyncEventKind::*;
    let el = &ev.element;
    match kind {
        // SAFETY: for a CQ event libibverbs wrote the `cq` member; reading a pointer value.
        Ok(CqErr) => EventElement::Cq(unsafe { el.cq } as usize),
        Ok(
            QpFatal | QpReqErr | QpAccessErr | CommEst | SqDrained | PathMig | PathMigErr
            | QpLastWqeReached,
        ) => {
            // SAFETY: for a QP event the `qp` member is a live QP until the event is acked,
            // which happens after this read.
            EventElement::Qp(unsafe { (*el.qp).qp_num })
        }
        // SAFETY: for an SRQ event libibverbs wrote the `srq` member.
        Ok(SrqErr | SrqLimitReached) => EventElement::Srq(unsafe { el.srq } as usize),
        // SAFETY: for a WQ event libibverbs wrote the `wq` member.
        Ok(WqFatal) => EventElement::Wq(unsafe { el.wq } as usize),
        Ok(
            PortActive | PortErr | LidChange | PkeyChange | SmChange | ClientReregister | GidChange,
        ) => {
            // SAFETY: for a port event libibverbs wrote the `port_num` member.
            EventElement::Port(unsafe { el.port_num } as u8)
        }
        Ok(DeviceFatal) | Err(_) => EventElement::Device,
    }
}

/// Async events delivered on a channel by a background thread (see
/// [`Context::async_event_channel`]). Dropping it stops the thread.
#[derive(Debug)]
pub struct AsyncEventReceiver {
    rx: mpsc::Receiver<Result<AsyncEvent>>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl AsyncEventReceiver {
    /// The channel: `recv`, `recv_timeout`, `try_recv`, `iter` as usual. A read error of the
    /// device's event queue arrives as an `Err` item, after which the thread stops.
    pub fn receiver(&self) -> &mpsc::Receiver<Result<AsyncEvent>> {
        &self.rx
    }

    /// Waits up to `timeout` for the next event.
    pub fn recv_timeout(&self, timeout: Duration) -> Option<Result<AsyncEvent>> {
        self.rx.recv_timeout(timeout).ok()
    }
}

impl Drop for AsyncEventReceiver {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// How often the event thread checks whether its receiver is gone.
const STOP_CHECK: Duration = Duration::from_millis(50);

impl Context {
    /// Starts a thread that reads async events and sends them on a channel; the thread keeps
    /// the context open until the returned receiver is dropped.
    pub fn async_event_channel(&self) -> std::io::Result<AsyncEventReceiver> {
        let (tx, rx) = mpsc::channel();
        let stop = Arc::new(AtomicBool::new(false));
        let ctx = self.clone();
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name(format!("{}-async-events", self.name()))
            .spawn(move || {
                while !flag.load(Ordering::Relaxed) {
                    match ctx.get_async_event(Some(STOP_CHECK)) {
                        Ok(None) => {}
                        Ok(Some(ev)) => {
                            if tx.send(Ok(ev)).is_err() {
                                return;
                            }
                        }
                        Err(e) => {
                            let _ = tx.send(Err(e));
                            return;
                        }
                    }
                }
            })?;
        Ok(AsyncEventReceiver {
            rx,
            stop,
            thread: Some(thread),
        })
    }
}

/// Iterator returned by [`Context::async_events`].
#[derive(Debug)]
pub struct AsyncEvents<'a> {
    ctx: &'a Context,
    timeout: Option<Duration>,
}

impl Iterator for AsyncEvents<'_> {
    type Item = Result<AsyncEvent>;
    fn next(&mut self) -> Option<Self::Item> {
        self.ctx.get_async_event(self.timeout).transpose()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_match_the_c_enum() {
        use sys::ibv_event_type as t;
        assert_eq!(
            AsyncEventKind::try_from(t::IBV_EVENT_CQ_ERR as u32),
            Ok(AsyncEventKind::CqErr)
        );
        assert_eq!(
            AsyncEventKind::try_from(t::IBV_EVENT_SRQ_LIMIT_REACHED as u32),
            Ok(AsyncEventKind::SrqLimitReached)
        );
        assert_eq!(
            AsyncEventKind::try_from(t::IBV_EVENT_QP_LAST_WQE_REACHED as u32),
            Ok(AsyncEventKind::QpLastWqeReached)
        );
        assert_eq!(
            AsyncEventKind::try_from(t::IBV_EVENT_WQ_FATAL as u32),
            Ok(AsyncEventKind::WqFatal)
        );
        assert_eq!(AsyncEventKind::try_from(20), Err(20));
    }
}
