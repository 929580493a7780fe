//! The transport's errors as the `io::ErrorKind`s stream users expect (the transport error
//! stays inside as the source), and a blocking call's timeout as `io::ErrorKind::TimedOut`.

use std::io;
use std::task::{Context, Poll};
use std::time::Duration;

use crate::proto::ConnError;
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

/// Maps a transport error to an `io::Error` of the kind a TCP user would get.
pub(crate) fn to_io(e: Error) -> io::Error {
    use io::ErrorKind as K;
    let kind = match &e {
        Error::Closed { cause: None } | Error::ClosedLocally => K::BrokenPipe,
        Error::Closed {
            cause: Some(ConnError::PeerGone(_)),
        } => K::ConnectionReset,
        Error::Closed {
            cause: Some(ConnError::PeerDead { .. }),
        } => K::TimedOut,
        Error::Closed { .. } | Error::Handshake(_) => K::InvalidData,
        Error::TimedOut { .. } => K::TimedOut,
        Error::WouldBlock => K::WouldBlock,
        Error::TooLarge { .. } => K::InvalidInput,
        Error::NoAddress { .. } => K::NotConnected,
        Error::NoDevice { source, .. } => cm_kind(source),
        Error::Cm(c) => cm_kind(c),
        _ => K::Other,
    };
    io::Error::new(kind, e)
}

/// The kind of a connection-management error: what the CM said, in the kinds socket calls
/// give (a port in use is `AddrInUse`, a resolution that timed out `TimedOut`).
fn cm_kind(c: &cm::Error) -> io::ErrorKind {
    use io::ErrorKind as K;
    match c {
        // Nothing serving RDMA at a destination of this host is a port nobody listens on.
        cm::Error::Rejected { .. }
        | cm::Error::Unreachable { .. }
        | cm::Error::LocalNotRdma { .. } => K::ConnectionRefused,
        cm::Error::Timeout { .. } => K::TimedOut,
        cm::Error::NotRdmaAddress { .. } | cm::Error::NoRdmaRoute { .. } => K::AddrNotAvailable,
        _ => match os_kind(c) {
            Some(kind) => kind,
            None if matches!(c, cm::Error::Bind { .. }) => K::AddrNotAvailable,
            None => K::Other,
        },
    }
}

/// The kind of the OS error `c` carries, when it is one a socket user would recognise.
fn os_kind(c: &cm::Error) -> Option<io::ErrorKind> {
    use io::ErrorKind as K;
    let kind = std::error::Error::source(c)?
        .downcast_ref::<io::Error>()?
        .kind();
    matches!(
        kind,
        K::AddrInUse
            | K::AddrNotAvailable
            | K::TimedOut
            | K::ConnectionRefused
            | K::ConnectionReset
            | K::PermissionDenied
    )
    .then_some(kind)
}

#[cfg(test)]
mod tests {
    use std::io::ErrorKind as K;

    use super::*;

    fn kind(e: cm::Error) -> K {
        to_io(Error::Cm(e)).kind()
    }

    #[test]
    fn cm_failures_get_the_kinds_socket_calls_give() {
        let addr = "10.0.0.1:7471".parse().unwrap();
        let os = |errno| io::Error::from_raw_os_error(errno);
        let bind = |errno| cm::Error::Bind {
            addr,
            source: os(errno),
        };
        assert_eq!(kind(bind(libc::EADDRINUSE)), K::AddrInUse);
        assert_eq!(kind(bind(libc::EADDRNOTAVAIL)), K::AddrNotAvailable);
        assert_eq!(kind(bind(libc::ENODEV)), K::AddrNotAvailable);
        assert_eq!(kind(cm::Error::Listen(os(libc::EADDRINUSE))), K::AddrInUse);
        let resolve = cm::Error::ResolveAddr {
            dst: addr,
            source: os(libc::ETIMEDOUT),
        };
        assert_eq!(kind(resolve), K::TimedOut);
        let local = cm::Error::LocalNotRdma {
            dst: addr,
            served: String::new(),
        };
        assert_eq!(kind(local), K::ConnectionRefused);
        assert_eq!(kind(cm::Error::Disconnected), K::Other);
    }
}
