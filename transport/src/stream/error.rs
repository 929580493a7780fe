//! The transport's errors as the `io::ErrorKind`s stream users expect (the crate's one
//! mapping, [`Error::io_kind`]; the transport error stays inside), and a blocking call's
//! timeout as `io::ErrorKind::TimedOut`.

use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use crate::Error;

/// Blocks on `f` (the crate's one [`block_on`](crate::task::block_on)); past `timeout` (if
/// any): `io::ErrorKind::TimedOut` naming `op`.
pub(crate) fn block_on_io<T>(
    op: &str,
    timeout: Option<Duration>,
    f: impl FnMut(&mut Context<'_>) -> Poll<io::Result<T>>,
) -> io::Result<T> {
    crate::task::block_on(timeout, f).unwrap_or_else(|| {
        Err(io::Error::new(
            io::ErrorKind::TimedOut,
            format!("{op} timed out after {:?}", timeout.unwrap_or_default()),
        ))
    })
}

/// A transport error as the `io::Error` a TCP user would get ([`Error::io_kind`]; the
/// crate's one mapping, `From<Error> for io::Error`).
pub(crate) fn to_io(e: Error) -> io::Error {
    e.into()
}

/// A blocking call's timeout, set through `&self` as `TcpStream::set_read_timeout` is: `None`
/// waits without bound; zero is refused (`InvalidInput`, as std refuses it).
#[derive(Debug, Default)]
pub(crate) struct BlockingTimeout(AtomicU64);

impl BlockingTimeout {
    /// The timeout (`None`: none).
    pub(crate) fn get(&self) -> Option<Duration> {
        match self.0.load(Ordering::Relaxed) {
            0 => None,
            nanos => Some(Duration::from_nanos(nanos)),
        }
    }

    /// Sets it; a zero duration is `InvalidInput` and changes nothing.
    pub(crate) fn set(&self, timeout: Option<Duration>) -> io::Result<()> {
        let nanos = match timeout {
            None => 0,
            Some(t) if t.is_zero() => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "cannot set a 0 duration timeout",
                ))
            }
            Some(t) => u64::try_from(t.as_nanos()).unwrap_or(u64::MAX),
        };
        self.0.store(nanos, Ordering::Relaxed);
        Ok(())
    }
}
