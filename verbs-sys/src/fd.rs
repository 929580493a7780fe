//! The descriptors of completion channels, async events and CM event channels: waiting on one
//! with a timeout, and non-blocking mode. Safe functions: they touch no memory but their own.
use std::io;
use std::os::fd::RawFd;
use std::time::{Duration, Instant};

/// Waits until `fd` is readable or `timeout` passes (`None`: forever). Returns whether it is
/// readable. Retries on EINTR with the remaining time.
pub fn wait_readable(fd: RawFd, timeout: Option<Duration>) -> io::Result<bool> {
    let deadline = timeout.map(|t| Instant::now() + t);
    loop {
        let ms = match deadline {
            None => -1,
            Some(d) => {
                let left = d.saturating_duration_since(Instant::now());
                // Round up so a sub-millisecond wait does not become a busy loop.
                i32::try_from(left.as_micros().div_ceil(1000)).unwrap_or(i32::MAX)
            }
        };
        let mut pfd = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd for the duration of the call.
        let n = unsafe { libc::poll(&mut pfd, 1, ms) };
        match n {
            1.. => return Ok(true),
            0 => return Ok(false),
            _ => {
                let e = io::Error::last_os_error();
                if e.kind() != io::ErrorKind::Interrupted {
                    return Err(e);
                }
            }
        }
    }
}

/// Puts `fd` in non-blocking mode, so a read that races with another reader returns EAGAIN
/// instead of blocking past a timeout.
pub fn set_nonblocking(fd: RawFd) -> io::Result<()> {
    // SAFETY: fcntl with F_GETFL has no memory arguments; a bad descriptor is an error (EBADF).
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    if flags < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: F_SETFL takes an integer argument; no memory is involved.
    if unsafe { libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}
