//! A client of rdma-core's rsocket (librdmacm) that times each round trip of `rstream`'s
//! latency test, against an `rstream` server: `rstream` itself prints only the mean, and a
//! tail (p99) compares with a tail. The transfers are `rstream`'s own (`run_test` with
//! `-S size -C 1 -I iters`): a 16-byte sync each way, then `iters` times `size` bytes to the
//! server and `size` bytes back, through non-blocking calls retried at once (`rstream`'s
//! default `MSG_DONTWAIT` without `-T a`), on a socket set up as `rstream`'s `set_options`
//! does.
//!
//! Bench code only: the library itself never calls rsocket.

use std::ffi::{c_int, c_void};
use std::io;
use std::mem::size_of;
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

// librdmacm's rsocket calls (rdma/rsocket.h).
#[link(name = "rdmacm")]
extern "C" {
    fn rsocket(domain: c_int, ty: c_int, protocol: c_int) -> c_int;
    fn rbind(socket: c_int, addr: *const libc::sockaddr, len: libc::socklen_t) -> c_int;
    fn rconnect(socket: c_int, addr: *const libc::sockaddr, len: libc::socklen_t) -> c_int;
    fn rsend(socket: c_int, buf: *const c_void, len: usize, flags: c_int) -> isize;
    fn rrecv(socket: c_int, buf: *mut c_void, len: usize, flags: c_int) -> isize;
    fn rsetsockopt(
        socket: c_int,
        level: c_int,
        name: c_int,
        value: *const c_void,
        len: libc::socklen_t,
    ) -> c_int;
    fn rgetsockopt(
        socket: c_int,
        level: c_int,
        name: c_int,
        value: *mut c_void,
        len: *mut libc::socklen_t,
    ) -> c_int;
    fn rfcntl(socket: c_int, cmd: c_int, ...) -> c_int;
    fn rpoll(fds: *mut libc::pollfd, nfds: libc::nfds_t, timeout: c_int) -> c_int;
    fn rshutdown(socket: c_int, how: c_int) -> c_int;
    fn rclose(socket: c_int) -> c_int;
}

/// An rsocket, closed on drop.
struct Socket(c_int);

impl Drop for Socket {
    fn drop(&mut self) {
        // SAFETY: an rsocket of ours, closed once.
        unsafe {
            rshutdown(self.0, libc::SHUT_RDWR);
            rclose(self.0);
        }
    }
}

fn check(what: &str, r: c_int) -> Result<(), String> {
    if r < 0 {
        Err(format!("{what}: {}", io::Error::last_os_error()))
    } else {
        Ok(())
    }
}

/// `addr` as a `sockaddr_in` (IPv4 only: the bench's addresses are).
fn sockaddr(addr: SocketAddr) -> Result<libc::sockaddr_in, String> {
    let IpAddr::V4(ip) = addr.ip() else {
        return Err(format!("{addr}: the rsocket baseline takes IPv4 addresses"));
    };
    Ok(libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: addr.port().to_be(),
        sin_addr: libc::in_addr {
            s_addr: u32::from(ip).to_be(),
        },
        sin_zero: [0; 8],
    })
}

impl Socket {
    fn set(&self, level: c_int, name: c_int, value: c_int) -> Result<(), String> {
        // SAFETY: a live rsocket; the value is a c_int of the given length.
        let r = unsafe {
            rsetsockopt(
                self.0,
                level,
                name,
                (&value as *const c_int).cast(),
                size_of::<c_int>() as libc::socklen_t,
            )
        };
        check("rsetsockopt", r)
    }

    /// Waits until a connection in progress is made (or refused), at most until `deadline`.
    fn connected(&self, deadline: Instant) -> Result<(), String> {
        let mut fd = libc::pollfd {
            fd: self.0,
            events: libc::POLLOUT,
            revents: 0,
        };
        let left = deadline.saturating_duration_since(Instant::now());
        let ms = c_int::try_from(left.as_millis()).unwrap_or(c_int::MAX);
        // SAFETY: one pollfd of a live rsocket.
        let n = unsafe { rpoll(&mut fd, 1, ms) };
        check("rpoll", n)?;
        if n == 0 {
            return Err(format!("rconnect: no connection within {left:?}"));
        }
        let mut err: c_int = 0;
        let mut len = size_of::<c_int>() as libc::socklen_t;
        // SAFETY: a live rsocket; `err` is a c_int of `len` bytes.
        let r = unsafe {
            rgetsockopt(
                self.0,
                libc::SOL_SOCKET,
                libc::SO_ERROR,
                (&mut err as *mut c_int).cast(),
                &mut len,
            )
        };
        check("rgetsockopt", r)?;
        if err != 0 {
            return Err(format!("rconnect: {}", io::Error::from_raw_os_error(err)));
        }
        Ok(())
    }

    /// All of `buf`, retrying at once while the socket would block; gives up at `deadline`.
    fn send_all(&self, buf: &[u8], deadline: Instant) -> Result<(), String> {
        let mut off = 0;
        while off < buf.len() {
            let rest = &buf[off..];
            // SAFETY: a live rsocket; `rest` is readable for its length.
            let n = unsafe { rsend(self.0, rest.as_ptr().cast(), rest.len(), libc::MSG_DONTWAIT) };
            off += progress("rsend", n, deadline)?;
        }
        Ok(())
    }

    /// Fills `buf`, as [`send_all`](Self::send_all) sends.
    fn recv_all(&self, buf: &mut [u8], deadline: Instant) -> Result<(), String> {
        let mut off = 0;
        while off < buf.len() {
            let rest = &mut buf[off..];
            // SAFETY: a live rsocket; `rest` is writable for its length.
            let n = unsafe {
                rrecv(
                    self.0,
                    rest.as_mut_ptr().cast(),
                    rest.len(),
                    libc::MSG_DONTWAIT,
                )
            };
            if n == 0 {
                return Err("rrecv: the rstream server closed the connection".into());
            }
            off += progress("rrecv", n, deadline)?;
        }
        Ok(())
    }
}

/// Bytes moved by one call: `n`, or 0 when it would block (until `deadline`).
fn progress(what: &str, n: isize, deadline: Instant) -> Result<usize, String> {
    if n >= 0 {
        return Ok(n as usize);
    }
    let e = io::Error::last_os_error();
    if e.kind() != io::ErrorKind::WouldBlock {
        return Err(format!("{what}: {e}"));
    }
    if Instant::now() >= deadline {
        return Err(format!("{what}: nothing moved before the deadline"));
    }
    Ok(0)
}

/// Connects from `local` to the `rstream` server at `server` and runs its latency test of
/// `iters` round trips of `size` bytes; returns each round trip's time. Bounded by `timeout`.
pub fn round_trips(
    local: IpAddr,
    server: SocketAddr,
    size: usize,
    iters: u64,
    timeout: Duration,
) -> Result<Vec<Duration>, String> {
    let deadline = Instant::now() + timeout;
    // SAFETY: plain socket creation.
    let fd = unsafe { rsocket(libc::AF_INET, libc::SOCK_STREAM, 0) };
    check("rsocket", fd)?;
    let s = Socket(fd);
    // rstream's set_options: 512 KiB buffers, no delay (inline size left to rsocket, as
    // rstream leaves it for a custom test).
    s.set(libc::SOL_SOCKET, libc::SO_SNDBUF, 1 << 19)?;
    s.set(libc::SOL_SOCKET, libc::SO_RCVBUF, 1 << 19)?;
    s.set(libc::IPPROTO_TCP, libc::TCP_NODELAY, 1)?;
    let src = sockaddr(SocketAddr::new(local, 0))?;
    let dst = sockaddr(server)?;
    let len = size_of::<libc::sockaddr_in>() as libc::socklen_t;
    // SAFETY: a live rsocket; `src` is a sockaddr_in of `len` bytes.
    check("rbind", unsafe {
        rbind(s.0, (&src as *const libc::sockaddr_in).cast(), len)
    })?;
    // Non-blocking from here on, and connected as rstream connects: the connection in
    // progress, then rpoll until it is writable (bounded by the deadline) and its error.
    // SAFETY: a live rsocket; F_SETFL takes an int.
    check("rfcntl", unsafe {
        rfcntl(s.0, libc::F_SETFL, libc::O_NONBLOCK)
    })?;
    // SAFETY: a live rsocket; `dst` is a sockaddr_in of `len` bytes.
    let r = unsafe { rconnect(s.0, (&dst as *const libc::sockaddr_in).cast(), len) };
    if r < 0 && io::Error::last_os_error().raw_os_error() != Some(libc::EINPROGRESS) {
        check("rconnect", r)?;
    }
    if r < 0 {
        s.connected(deadline)?;
    }

    let mut sync = [0u8; 16];
    s.send_all(&sync, deadline)?;
    s.recv_all(&mut sync, deadline)?;
    let mut buf = vec![0u8; size];
    let mut times = crate::report::prefaulted(iters as usize);
    for _ in 0..iters {
        let t = Instant::now();
        s.send_all(&buf, deadline)?;
        s.recv_all(&mut buf, deadline)?;
        times.push(t.elapsed());
    }
    Ok(times)
}

/// The comparison JSON's name of this baseline: `iters` round trips of `size` bytes, measured
/// as `rounds` says.
pub fn baseline_name(size: usize, iters: u64, rounds: &str) -> String {
    format!(
        "rsocket, each round trip of rstream's latency test (-S {size} -I {iters}) timed \
         against an rstream server, {rounds}"
    )
}
