//! Blocking on a poll function: the std `Read`/`Write` of the stream park the thread until the
//! engine wakes it or the timeout passes.

use std::io;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll, Wake, Waker};
use std::thread::Thread;
use std::time::{Duration, Instant};

struct Unpark(Thread);

impl Wake for Unpark {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.0.unpark();
    }
}

/// A waker that does nothing (`Waker::noop`, made once).
fn noop_waker() -> &'static Waker {
    struct Noop;
    impl Wake for Noop {
        fn wake(self: Arc<Self>) {}
    }
    static NOOP: OnceLock<Waker> = OnceLock::new();
    NOOP.get_or_init(|| Waker::from(Arc::new(Noop)))
}

/// Polls `f` on this thread until it is ready, parking in between; `timeout` (if any) gives
/// `io::ErrorKind::TimedOut` naming `op`.
pub(crate) fn block_on<T>(
    op: &str,
    timeout: Option<Duration>,
    mut f: impl FnMut(&mut Context<'_>) -> Poll<io::Result<T>>,
) -> io::Result<T> {
    // Most reads find data and most writes room: the first poll registers no waker worth
    // keeping (a no-op one), so the one that wakes this thread is made only for a wait.
    if let Poll::Ready(r) = f(&mut Context::from_waker(noop_waker())) {
        return r;
    }
    park_until_ready(op, timeout, f)
}

/// The rest of [`block_on`] once its first poll found nothing: polls with a waker that
/// unparks this thread, and parks between polls. A function of its own, so that a profile
/// (the cost bench) can tell waiting from work.
#[inline(never)]
fn park_until_ready<T>(
    op: &str,
    timeout: Option<Duration>,
    mut f: impl FnMut(&mut Context<'_>) -> Poll<io::Result<T>>,
) -> io::Result<T> {
    let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    let deadline = timeout.map(|t| Instant::now() + t);
    loop {
        if let Poll::Ready(r) = f(&mut cx) {
            return r;
        }
        match deadline {
            None => std::thread::park(),
            Some(d) => {
                let now = Instant::now();
                if now >= d {
                    return Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        format!("{op} timed out after {:?}", timeout.unwrap_or_default()),
                    ));
                }
                std::thread::park_timeout(d - now);
            }
        }
    }
}
