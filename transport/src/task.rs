//! The one `block_on` that blocking calls with a poll form wait through (connect, accept, the
//! stream's reads and writes, rendezvous sends): executor-neutral, it knows nothing of the
//! engine (the tasks' wakers are registered with the engine's state, `engine/user.rs`).

use std::future::Future;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

/// Wakes a thread parked in [`block_on`].
struct Unpark(std::thread::Thread);

impl Wake for Unpark {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.0.unpark();
    }
}

/// Polls `f` on this thread until it is ready, parking in between (the engine's threads
/// wake it through the waker): the blocking form of every operation that has a poll form.
/// `None` once `timeout` (if any), counted from the first poll that found nothing, passed.
/// Most calls find what they want at once: the first poll registers a no-op waker, so the
/// one that wakes this thread is made only for a wait, and the clock is read only then.
pub(crate) fn block_on<T>(
    timeout: Option<Duration>,
    mut f: impl FnMut(&mut Context<'_>) -> Poll<T>,
) -> Option<T> {
    if let Poll::Ready(r) = f(&mut Context::from_waker(noop_waker())) {
        return Some(r);
    }
    park_until_ready(timeout, f)
}

/// A waker that does nothing, made once.
pub(crate) fn noop_waker() -> &'static Waker {
    struct Noop;
    impl Wake for Noop {
        fn wake(self: Arc<Self>) {}
    }
    static NOOP: std::sync::OnceLock<Waker> = std::sync::OnceLock::new();
    NOOP.get_or_init(|| Waker::from(Arc::new(Noop)))
}

/// [`block_on`] for a future: `None` once `timeout` passed, the future dropped then.
pub(crate) fn block_on_future<F: Future>(timeout: Option<Duration>, fut: F) -> Option<F::Output> {
    let mut fut = std::pin::pin!(fut);
    block_on(timeout, |cx| fut.as_mut().poll(cx))
}

/// The rest of [`block_on`] once its first poll found nothing: polls with a waker that
/// unparks this thread, and parks between polls. A function of its own, so that a profile
/// (the cost bench) can tell waiting from work.
#[inline(never)]
fn park_until_ready<T>(
    timeout: Option<Duration>,
    mut f: impl FnMut(&mut Context<'_>) -> Poll<T>,
) -> Option<T> {
    let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    let deadline = timeout.map(|t| Instant::now() + t);
    loop {
        if let Poll::Ready(r) = f(&mut cx) {
            return Some(r);
        }
        match deadline {
            None => std::thread::park(),
            Some(d) => {
                let now = Instant::now();
                if now >= d {
                    return None;
                }
                std::thread::park_timeout(d - now);
            }
        }
    }
}
