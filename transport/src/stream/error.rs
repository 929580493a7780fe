//! The transport's errors as the `io::ErrorKind`s stream users expect; the transport error
//! stays inside as the source.

use std::io;

use crate::proto::ConnError;
use crate::Error;

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
        Error::NoDevice { .. } => K::AddrNotAvailable,
        Error::Cm(c) => match c {
            cm::Error::Rejected { .. } | cm::Error::Unreachable { .. } => K::ConnectionRefused,
            cm::Error::Timeout { .. } => K::TimedOut,
            cm::Error::NotRdmaAddress { .. } | cm::Error::Bind { .. } => K::AddrNotAvailable,
            _ => K::Other,
        },
        _ => K::Other,
    };
    io::Error::new(kind, e)
}
