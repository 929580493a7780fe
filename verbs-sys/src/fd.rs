//! The descriptors of completion channels, async events and CM event channels: waiting on one
//! with a timeout (or until a [`Wakeup`]), many at once through an [`EpollSet`], and
//! non-blocking mode. Safe functions: they touch no memory but their own.
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::{Duration, Instant};

/// Waits until `fd` is readable or `timeout` passes (`None`: forever). Returns whether it is
/// readable. Retries on EINTR with the remaining time.
pub fn wait_readable(fd: RawFd, timeout: Option<Duration>) -> io::Result<bool> {
    Ok(wait(fd, None, timeout)? == Ready::Readable)
}

/// What ended a [`wait_readable_or_woken`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ready {
    /// The descriptor is readable.
    Readable,
    /// The [`Wakeup`] was woken (and the descriptor is not readable).
    Woken,
    /// The time passed.
    TimedOut,
}

/// Waits until `fd` is readable, `wakeup` is woken, or `timeout` passes (`None`: forever).
/// A readable descriptor wins over a wakeup. Retries on EINTR with the remaining time.
pub fn wait_readable_or_woken(
    fd: RawFd,
    wakeup: &Wakeup,
    timeout: Option<Duration>,
) -> io::Result<Ready> {
    wait(fd, Some(wakeup.fd.as_raw_fd()), timeout)
}

fn wait(fd: RawFd, wake: Option<RawFd>, timeout: Option<Duration>) -> io::Result<Ready> {
    let deadline = timeout.map(|t| Instant::now() + t);
    let poll_in = |fd| libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    loop {
        let ms = match deadline {
            None => -1,
            Some(d) => {
                let left = d.saturating_duration_since(Instant::now());
                // Round up so a sub-millisecond wait does not become a busy loop.
                i32::try_from(left.as_micros().div_ceil(1000)).unwrap_or(i32::MAX)
            }
        };
        let mut pfds = [poll_in(fd), poll_in(wake.unwrap_or(-1))];
        let count = if wake.is_some() { 2 } else { 1 };
        // SAFETY: `count` valid pollfds for the duration of the call.
        let n = unsafe { libc::poll(pfds.as_mut_ptr(), count, ms) };
        match n {
            1.. if pfds[0].revents != 0 => return Ok(Ready::Readable),
            1.. => return Ok(Ready::Woken),
            0 => return Ok(Ready::TimedOut),
            _ => {
                let e = io::Error::last_os_error();
                if e.kind() != io::ErrorKind::Interrupted {
                    return Err(e);
                }
            }
        }
    }
}

/// Wakes a thread blocked in [`wait_readable_or_woken`] (an eventfd). Once woken it stays
/// woken until [`reset`](Self::reset): a stop signal for a thread that otherwise sleeps until
/// its descriptor has something, so it needs no periodic wakeups to notice that it should
/// stop, or (reset after each wait) a doorbell for one that sleeps until its next deadline.
#[derive(Debug)]
pub struct Wakeup {
    fd: OwnedFd,
}

impl Wakeup {
    /// A new, not yet woken, wakeup.
    pub fn new() -> io::Result<Wakeup> {
        // SAFETY: eventfd takes no memory arguments; it returns a new descriptor or -1.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` is a fresh descriptor that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(Wakeup { fd })
    }

    /// Takes the wakeup back: waits block again until the next [`wake`](Self::wake).
    pub fn reset(&self) {
        let mut count = [0u8; 8];
        // SAFETY: reads at most 8 bytes into a live local buffer from our own non-blocking
        // eventfd; not woken, it fails with EAGAIN and leaves the buffer alone.
        let _ = unsafe { libc::read(self.fd.as_raw_fd(), count.as_mut_ptr().cast(), count.len()) };
    }

    /// Wakes every waiter, now and from now on (until [`reset`](Self::reset)).
    pub fn wake(&self) {
        let one = 1u64.to_ne_bytes();
        // SAFETY: writes 8 bytes from a live local buffer to our own eventfd. It cannot fail
        // but by overflowing the counter (EAGAIN), which leaves it woken anyway.
        let _ = unsafe { libc::write(self.fd.as_raw_fd(), one.as_ptr().cast(), one.len()) };
    }
}

impl AsRawFd for Wakeup {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

/// An epoll set: its descriptor is readable while any member is (level-triggered), so one
/// wait, or one reactor registration, covers many descriptors, members added later included.
/// A member leaves the set when it is closed.
#[derive(Debug)]
pub struct EpollSet {
    fd: OwnedFd,
}

impl EpollSet {
    /// An empty set.
    pub fn new() -> io::Result<EpollSet> {
        // SAFETY: epoll_create1 takes no memory arguments; it returns a new descriptor or -1.
        let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` is a fresh descriptor that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(EpollSet { fd })
    }

    /// Adds `fd`, watched for readability.
    pub fn add(&self, fd: RawFd) -> io::Result<()> {
        let mut event = libc::epoll_event {
            events: libc::EPOLLIN as u32,
            u64: fd as u64,
        };
        // SAFETY: `event` is a live local for the duration of the call (the kernel copies
        // it); a bad descriptor is an error (EBADF), not undefined behaviour.
        let r =
            unsafe { libc::epoll_ctl(self.fd.as_raw_fd(), libc::EPOLL_CTL_ADD, fd, &mut event) };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
}

impl AsRawFd for EpollSet {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_epoll_set_is_readable_while_a_member_is_added_later_included() {
        let set = EpollSet::new().unwrap();
        let (first, second) = (Wakeup::new().unwrap(), Wakeup::new().unwrap());
        set.add(first.as_raw_fd()).unwrap();
        let fd = set.as_raw_fd();
        assert!(!wait_readable(fd, Some(Duration::ZERO)).unwrap());
        first.wake();
        assert!(wait_readable(fd, Some(Duration::ZERO)).unwrap());
        first.reset();
        assert!(!wait_readable(fd, Some(Duration::ZERO)).unwrap());
        set.add(second.as_raw_fd()).unwrap();
        second.wake();
        assert!(wait_readable(fd, Some(Duration::ZERO)).unwrap());
        assert_eq!(
            set.add(-1).unwrap_err().raw_os_error(),
            Some(libc::EBADF),
            "a bad descriptor is refused"
        );
    }

    #[test]
    fn a_wakeup_ends_a_wait_on_a_quiet_descriptor_and_stays_woken() {
        let quiet = Wakeup::new().unwrap();
        let stop = std::sync::Arc::new(Wakeup::new().unwrap());
        let waiter = {
            let stop = stop.clone();
            let fd = quiet.as_raw_fd();
            std::thread::spawn(move || {
                let start = Instant::now();
                let r = wait_readable_or_woken(fd, &stop, Some(Duration::from_secs(10)));
                (r.unwrap(), start.elapsed())
            })
        };
        std::thread::sleep(Duration::from_millis(50));
        stop.wake();
        let (ready, waited) = waiter.join().unwrap();
        assert_eq!(ready, Ready::Woken);
        assert!(waited < Duration::from_secs(5), "woken after {waited:?}");
        // Woken for good: the next wait returns at once.
        let again = wait_readable_or_woken(quiet.as_raw_fd(), &stop, None).unwrap();
        assert_eq!(again, Ready::Woken);
    }

    #[test]
    fn a_readable_descriptor_wins_over_a_wakeup_and_a_quiet_one_times_out() {
        let ready = Wakeup::new().unwrap();
        let stop = Wakeup::new().unwrap();
        let quiet = Wakeup::new().unwrap();
        let t = Some(Duration::from_millis(20));
        assert_eq!(
            wait_readable_or_woken(quiet.as_raw_fd(), &stop, t).unwrap(),
            Ready::TimedOut
        );
        assert!(!wait_readable(quiet.as_raw_fd(), t).unwrap());
        ready.wake();
        stop.wake();
        assert_eq!(
            wait_readable_or_woken(ready.as_raw_fd(), &stop, t).unwrap(),
            Ready::Readable
        );
        assert!(wait_readable(ready.as_raw_fd(), t).unwrap());
    }
}
