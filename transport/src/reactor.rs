//! Driving an endpoint's progress from a reactor ([`Polling::Reactor`]): the completion
//! channel as a pollable fd, the call that handles its readiness without losing a wakeup,
//! and, with the `tokio` feature, a task that does both on tokio's reactor (`AsyncFd`).
//!
//! With a reactor, a completion wakes the reactor's thread, which polls the completion queue
//! and wakes the tasks the completions finish; on a current-thread runtime, all of it happens
//! on one thread.

use std::os::fd::RawFd;
use std::sync::atomic::Ordering;

use crate::config::Polling;
use crate::Endpoint;

/// Completions an endpoint handled, by who polled them ([`Endpoint::progress_counts`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ProgressCounts {
    /// Polled by the endpoint's progress thread.
    pub progress_thread: u64,
    /// Polled by [`Endpoint::progress_ready`] (a reactor).
    pub reactor: u64,
    /// Polled by the application's own threads and tasks while they wait.
    pub callers: u64,
}

impl Endpoint {
    /// The fd of the endpoint's completion channel: readable when the device signals a
    /// completion on the armed queue. For a reactor of yours, with [`Polling::Reactor`]
    /// (in the other modes the progress thread consumes its events). Register it for
    /// readability (edge or level triggered) and call [`progress_ready`](Self::progress_ready)
    /// when it is readable. Valid while the endpoint lives.
    pub fn progress_fd(&self) -> RawFd {
        self.engine.shared.channel_fd()
    }

    /// Handles readiness of [`progress_fd`](Self::progress_fd): consumes and acknowledges
    /// every event on it (the fd is non-blocking; after this call it is not readable until
    /// the next event), re-arms the queue and polls until it is empty, waking the threads and
    /// tasks the completions finish. Call it once before the first wait (it arms the queue),
    /// then whenever the fd is readable; a spurious call only polls. Returns how many
    /// completions it handled.
    pub fn progress_ready(&self) -> usize {
        self.engine.shared.on_channel_ready()
    }

    /// Completions handled so far, by who polled them: shows which path carries the
    /// traffic (a reactor that never runs leaves the progress thread to poll once per tick).
    pub fn progress_counts(&self) -> ProgressCounts {
        let c = &self.engine.shared.counts;
        ProgressCounts {
            progress_thread: c.progress_thread.load(Ordering::Relaxed),
            reactor: c.reactor.load(Ordering::Relaxed),
            callers: c.callers.load(Ordering::Relaxed),
        }
    }

    /// Checks that the endpoint polls from a reactor.
    #[cfg_attr(not(feature = "tokio"), allow(dead_code))]
    fn expect_reactor(&self) -> crate::Result<()> {
        match self.config().polling {
            Polling::Reactor { .. } => Ok(()),
            other => Err(crate::ConfigError::NotReactor {
                polling: format!("{other:?}"),
            }
            .into()),
        }
    }
}

#[cfg(not(feature = "tokio"))]
impl Endpoint {
    /// Without the `tokio` feature there is no runtime to drive from.
    pub(crate) fn drive_from_current_runtime(&self) {}
}

#[cfg(feature = "tokio")]
mod tokio_driver {
    use std::future::poll_fn;
    use std::os::fd::{AsRawFd, RawFd};
    use std::sync::atomic::Ordering;
    use std::sync::Arc;
    use std::task::Poll;
    use std::time::Instant;

    use tokio::io::unix::AsyncFd;
    use tokio::io::Interest;

    use crate::engine::{Policy, Shared};
    use crate::{Endpoint, Error, Result};

    /// The completion channel's fd, owned by the shared state it belongs to (so the fd
    /// outlives its registration with the reactor).
    struct ChannelFd(Arc<Shared>);

    impl AsRawFd for ChannelFd {
        fn as_raw_fd(&self) -> RawFd {
            self.0.channel_fd()
        }
    }

    impl Endpoint {
        /// Spawns, on the current tokio runtime, the task that drives this endpoint's
        /// progress from tokio's reactor: the completion channel registered with `AsyncFd`,
        /// and [`progress_ready`](Self::progress_ready) at each readiness. After a
        /// completion it keeps polling for the configured `spin` (yielding between polls, so
        /// on a current-thread runtime a ping-pong never leaves the thread), then waits for
        /// the channel again. For endpoints made
        /// with [`Polling::Reactor`](crate::Polling::Reactor) (else [`Error::Config`] with
        /// [`ConfigError::NotReactor`](crate::ConfigError::NotReactor)), one driver per
        /// endpoint. The task ends when the endpoint's last handle goes.
        ///
        /// Call it from within a runtime (else [`Error::NoRuntime`]).
        pub fn spawn_tokio_driver(&self) -> Result<tokio::task::JoinHandle<()>> {
            self.expect_reactor()?;
            let rt = tokio::runtime::Handle::try_current().map_err(|_| Error::NoRuntime)?;
            self.spawn_driver(&rt)
        }

        /// Under [`Polling::Adaptive`](crate::Polling::Adaptive), called by the async entry
        /// points (connect, accept): when no driver task lives and the caller runs on a
        /// multi-threaded tokio runtime, spawns one there, so that the endpoint's
        /// completions and the tasks they wake meet on the runtime's threads. A driver ends
        /// with its runtime; the next async entry point on another runtime spawns a new one,
        /// and meanwhile the progress thread polls as configured.
        pub(crate) fn drive_from_current_runtime(&self) {
            let policy = &self.engine.shared.policy;
            if !policy.wants_driver() {
                return;
            }
            let Ok(rt) = tokio::runtime::Handle::try_current() else {
                return;
            };
            // A current-thread runtime's one thread would spin for the endpoint between
            // every other task: the progress thread serves it better.
            if rt.runtime_flavor() != tokio::runtime::RuntimeFlavor::MultiThread {
                return;
            }
            self.spawn_driver_once(&rt, Policy::wants_driver);
        }

        /// Under [`Polling::Reactor`](crate::Polling::Reactor), for the stream's shared
        /// endpoints (which no user spawns a driver for): when no driver task lives and the
        /// caller runs in a tokio runtime, spawns one there.
        pub(crate) fn drive_reactor_from_current_runtime(&self) {
            if self.expect_reactor().is_err() || !self.engine.shared.policy.driverless() {
                return;
            }
            if let Ok(rt) = tokio::runtime::Handle::try_current() {
                self.spawn_driver_once(&rt, Policy::driverless);
            }
        }

        /// Spawns a driver on `rt` if `wanted` still says so under the policy's spawning
        /// lock: two first callers at once spawn one driver.
        fn spawn_driver_once(&self, rt: &tokio::runtime::Handle, wanted: fn(&Policy) -> bool) {
            let policy = &self.engine.shared.policy;
            let _spawning = policy.spawning_driver();
            if wanted(policy) {
                let _ = self.spawn_driver(rt);
            }
        }

        fn spawn_driver(&self, rt: &tokio::runtime::Handle) -> Result<tokio::task::JoinHandle<()>> {
            let shared = self.engine.shared.clone();
            let _enter = rt.enter();
            // tokio's safe constructor is deprecated because a type could close its fd while
            // registered; `ChannelFd` cannot (the fd lives as long as the shared state it
            // holds), and its unsafe replacement is not for this crate (no unsafe here).
            #[allow(deprecated)]
            let fd = AsyncFd::with_interest(ChannelFd(shared.clone()), Interest::READABLE)
                .map_err(Error::Reactor)?;
            // Counted from now: a task dropped before it ran (its runtime shutting down)
            // uncounts itself with it.
            let alive = Alive::new(shared.clone());
            Ok(rt.spawn(async move {
                let _alive = alive;
                drive(shared, fd).await
            }))
        }
    }

    /// A driver task, counted by the endpoint's `Policy` while it lives; the progress thread takes
    /// over when the last goes.
    struct Alive(Arc<Shared>);

    impl Alive {
        fn new(shared: Arc<Shared>) -> Self {
            shared.policy.driver_began();
            Alive(shared)
        }
    }

    impl Drop for Alive {
        fn drop(&mut self) {
            self.0.policy.driver_ended();
        }
    }

    async fn drive(shared: Arc<Shared>, fd: AsyncFd<ChannelFd>) {
        let spin = shared.policy.driver_spin();
        let mut last = Instant::now();
        let mut turns = 0u32;
        loop {
            // Spin: poll, and let the other tasks run between polls.
            if shared.stop.load(Ordering::Relaxed) {
                break;
            }
            if shared.reactor_poll() > 0 {
                last = Instant::now();
                shared.policy.reactor_drove_at(last);
                tokio::task::yield_now().await;
                continue;
            }
            // The clock only every few turns, as a spinning call looks at it: a shorter turn
            // sees a completion sooner.
            turns = turns.wrapping_add(1);
            if !spin.is_zero()
                && (turns % crate::engine::SPIN_TURNS_PER_CLOCK != 0 || last.elapsed() < spin)
            {
                tokio::task::yield_now().await;
                continue;
            }
            // Then wait: arm (polling once more) before waiting for readiness.
            if shared.on_channel_ready() > 0 {
                last = Instant::now();
                continue;
            }
            let ready = poll_fn(|cx| {
                if shared.stop.load(Ordering::Relaxed) {
                    return Poll::Ready(None);
                }
                *shared.reactor_waker.lock() = Some(cx.waker().clone());
                // Stopped between the check and the registration: the stop's wake found no
                // waker, so look again.
                if shared.stop.load(Ordering::Relaxed) {
                    return Poll::Ready(None);
                }
                fd.poll_read_ready(cx).map(Some)
            })
            .await;
            match ready {
                Some(Ok(mut guard)) => {
                    // Drains the channel before clearing: an event after the drain raises
                    // readiness anew, so none is lost.
                    shared.on_channel_ready();
                    guard.clear_ready();
                    last = Instant::now();
                }
                // The reactor failed us, or the endpoint stopped: the progress thread's
                // per-tick poll remains.
                Some(Err(_)) | None => break,
            }
        }
        shared.reactor_waker.lock().take();
    }
}
