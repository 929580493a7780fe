//! The transport's errors as the `io::ErrorKind`s stream users expect (the crate's one
//! mapping, [`Error::io_kind`]; the transport error stays inside), and a blocking call's
//! timeout as `io::ErrorKind::TimedOut`.

use std::io;
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
