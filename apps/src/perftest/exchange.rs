//! perftest's out-of-band TCP exchange (perftest_communication.c), byte-compatible with
//! perftest 4.5-0.17 (protocol version 6.06): versions, system data, MTU, then the
//! `"%04x:%04x:%06x:%06x:%08x:%016llx:<16 GID bytes>:%08x:"` address messages ("handshakes"),
//! bandwidth reports, and the closing `"done"`.
//!
//! Every exchange is symmetric: the client writes then reads, the server reads then writes.
use std::io::{self, Read, Write};
use std::net::{Ipv4Addr, TcpListener, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use verbs::Gid;

use super::cm_link::CmLink;
use super::Error;

/// The protocol version we speak (perftest's `VERSION`).
pub const VERSION: &str = "6.06";
/// The oldest peer version perftest 6.06 accepts (`check_version_compatibility`).
pub const MIN_PEER_VERSION: f64 = 5.70;
/// `KEY_MSG_SIZE`: an address message without GID.
pub const KEY_MSG_SIZE: usize = 59;
/// `KEY_MSG_SIZE_GID`: an address message with GID.
pub const KEY_MSG_SIZE_GID: usize = 108;

/// One QP's address as exchanged (`struct pingpong_dest`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Dest {
    /// LID (0 on RoCE).
    pub lid: u16,
    /// Outstanding reads/atomics this side accepts (its `max_dest_rd_atomic`).
    pub out_reads: u32,
    /// QP number.
    pub qpn: u32,
    /// Initial PSN.
    pub psn: u32,
    /// Remote key of the buffer the peer may access.
    pub rkey: u32,
    /// Address of that buffer.
    pub vaddr: u64,
    /// GID (when a GID index is in use).
    pub gid: Gid,
    /// SRQ number (XRC/DC only; 0 here).
    pub srqn: u32,
}

impl Dest {
    /// The wire message: with GID (108 bytes) or without (59 bytes), NUL-terminated.
    pub fn to_wire(&self, with_gid: bool) -> Vec<u8> {
        let head = format!(
            "{:04x}:{:04x}:{:06x}:{:06x}:{:08x}:{:016x}:",
            self.lid, self.out_reads, self.qpn, self.psn, self.rkey, self.vaddr
        );
        let mut text = head;
        let size = if with_gid {
            for b in self.gid.raw() {
                text.push_str(&format!("{b:02x}:"));
            }
            text.push_str(&format!("{:08x}:", self.srqn));
            KEY_MSG_SIZE_GID
        } else {
            text.push_str(&format!("{:08x}", self.srqn));
            KEY_MSG_SIZE
        };
        let mut msg = text.into_bytes();
        msg.resize(size, 0);
        msg
    }

    /// Parses a wire message (`ethernet_read_keys`).
    pub fn from_wire(msg: &[u8], with_gid: bool) -> Result<Dest, String> {
        let end = msg.iter().position(|&b| b == 0).unwrap_or(msg.len());
        let text = std::str::from_utf8(&msg[..end]).map_err(|_| "not text".to_string())?;
        let fields: Vec<&str> = text.split(':').collect();
        let want = if with_gid { 23 } else { 7 };
        if fields.len() < want {
            return Err(format!(
                "{} fields in {text:?}, expected {want}{}",
                fields.len(),
                if with_gid {
                    " (does the peer use a GID? give both sides -x)"
                } else {
                    ""
                }
            ));
        }
        let hex = |i: usize| {
            u64::from_str_radix(fields[i], 16).map_err(|_| format!("field {i} of {text:?}"))
        };
        let mut gid = [0u8; 16];
        let srqn_at = if with_gid {
            for (i, g) in gid.iter_mut().enumerate() {
                *g = hex(6 + i)? as u8;
            }
            22
        } else {
            6
        };
        Ok(Dest {
            lid: hex(0)? as u16,
            out_reads: hex(1)? as u32,
            qpn: hex(2)? as u32,
            psn: hex(3)? as u32,
            rkey: hex(4)? as u32,
            vaddr: hex(5)?,
            gid: Gid(gid),
            srqn: hex(srqn_at)? as u32,
        })
    }
}

/// A bandwidth report as `xchg_bw_reports` sends it (network order).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct BwReport {
    /// Message size.
    pub size: u64,
    /// Iterations.
    pub iters: u64,
    /// Peak bandwidth.
    pub bw_peak: f64,
    /// Average bandwidth.
    pub bw_avg: f64,
    /// Message rate (Mpps).
    pub msg_rate: f64,
}

/// What the exchange runs on: a TCP connection, or (`-R`) an rdma_cm control connection.
#[derive(Debug)]
enum Link {
    Tcp(TcpStream),
    Cm(Box<CmLink>),
}

/// How long the rdma_cm server waits for the client to close the control connection after
/// the last handshake: ours closes as soon as it has the server's message; perftest's leaves
/// it to its exit, so this is also what a run against perftest's client takes longer. The
/// last message is in the peer's hands within milliseconds of its send's completion.
const PEER_CLOSE_WAIT: Duration = Duration::from_secs(1);

/// The connection to the peer that carries the exchange.
#[derive(Debug)]
pub struct Comm {
    link: Link,
    client: bool,
    with_gid: bool,
    gid_index: i32,
    timeout: Duration,
}

fn no_answer(timeout: Duration, what: &str) -> Error {
    Error::Peer(format!(
        "no answer from the peer for {} s during {what}: it stopped or runs a different test \
         or parameters",
        timeout.as_secs()
    ))
}

impl Comm {
    /// Client: connects to `server:port`, retrying refused connections until `timeout` (the
    /// server may not be listening yet).
    pub fn connect(server: &str, port: u16, timeout: Duration) -> Result<Comm, Error> {
        let deadline = Instant::now() + timeout;
        let addrs: Vec<_> = (server, port)
            .to_socket_addrs()
            .map_err(|e| Error::Usage(format!("cannot resolve server {server:?}: {e}")))?
            .filter(|a| a.is_ipv4())
            .collect();
        if addrs.is_empty() {
            return Err(Error::Usage(format!(
                "server {server:?} has no IPv4 address"
            )));
        }
        let mut last = None;
        loop {
            for a in &addrs {
                let left = deadline.saturating_duration_since(Instant::now());
                match TcpStream::connect_timeout(a, left.max(Duration::from_millis(10))) {
                    Ok(s) => return Comm::new(s, true, timeout),
                    Err(e) => last = Some(e),
                }
            }
            if Instant::now() >= deadline {
                return Err(Error::Peer(format!(
                    "no server at {server}:{port} after {} s ({}): start the server first, or \
                     check the address and -p",
                    timeout.as_secs(),
                    last.map(|e| e.to_string()).unwrap_or_default()
                )));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Server: waits up to `timeout` for one client on `port`.
    pub fn accept(port: u16, timeout: Duration) -> Result<Comm, Error> {
        let listener = TcpListener::bind((Ipv4Addr::UNSPECIFIED, port)).map_err(|e| {
            Error::Usage(format!(
                "cannot listen on TCP port {port}: {e}; pick another with -p"
            ))
        })?;
        listener.set_nonblocking(true)?;
        let deadline = Instant::now() + timeout;
        loop {
            match listener.accept() {
                Ok((s, _)) => {
                    s.set_nonblocking(false)?;
                    return Comm::new(s, false, timeout);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    if Instant::now() >= deadline {
                        return Err(Error::Peer(format!(
                            "no client connected to port {port} within {} s (--timeout)",
                            timeout.as_secs()
                        )));
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
                Err(e) => return Err(e.into()),
            }
        }
    }

    fn new(stream: TcpStream, client: bool, timeout: Duration) -> Result<Comm, Error> {
        stream.set_read_timeout(Some(timeout))?;
        stream.set_write_timeout(Some(timeout))?;
        stream.set_nodelay(true)?;
        Ok(Comm {
            link: Link::Tcp(stream),
            client,
            with_gid: false,
            gid_index: -1,
            timeout,
        })
    }

    /// Client of `-R`: the rdma_cm control connection to `server:port`, from `src`.
    pub fn connect_cm(
        server: &str,
        port: u16,
        src: Option<std::net::IpAddr>,
        timeout: Duration,
    ) -> Result<Comm, Error> {
        let link = CmLink::connect(server, port, src, timeout)?;
        Ok(Comm::over_cm(link, true, timeout))
    }

    /// Server of `-R`: waits for the client's rdma_cm control connection on `port`.
    pub fn accept_cm(port: u16, timeout: Duration) -> Result<Comm, Error> {
        let link = CmLink::accept(port, timeout)?;
        Ok(Comm::over_cm(link, false, timeout))
    }

    fn over_cm(link: CmLink, client: bool, timeout: Duration) -> Comm {
        Comm {
            link: Link::Cm(Box::new(link)),
            client,
            with_gid: false,
            gid_index: -1,
            timeout,
        }
    }

    /// Whether the exchange runs over rdma_cm (`-R`).
    pub fn is_cm(&self) -> bool {
        matches!(self.link, Link::Cm(_))
    }

    /// The GID index sent in binary address messages (`-R`); -1 for none.
    pub fn set_gid_index(&mut self, index: Option<u32>) {
        self.gid_index = index.map_or(-1, |i| i as i32);
    }

    /// Whether address messages carry a GID (both sides must agree: perftest decides by its
    /// own GID index).
    pub fn set_with_gid(&mut self, yes: bool) {
        self.with_gid = yes;
    }

    fn read_exact(&mut self, buf: &mut [u8], what: &str) -> Result<(), Error> {
        let stream = match &mut self.link {
            Link::Tcp(s) => s,
            Link::Cm(c) => {
                let m = c.recv(what)?;
                let n = m.len().min(buf.len());
                buf[..n].copy_from_slice(&m[..n]);
                buf[n..].fill(0);
                return Ok(());
            }
        };
        match stream.read_exact(buf) {
            Ok(()) => Ok(()),
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                Err(no_answer(self.timeout, what))
            }
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => Err(Error::Peer(format!(
                "the peer closed the connection during {what}: it failed or exited (see its \
                 output), or runs a different test"
            ))),
            Err(e) => Err(Error::Peer(format!("reading {what} from the peer: {e}"))),
        }
    }

    fn write_all(&mut self, buf: &[u8], what: &str) -> Result<(), Error> {
        let stream = match &mut self.link {
            Link::Tcp(s) => s,
            Link::Cm(c) => return c.send(buf, what),
        };
        stream
            .write_all(buf)
            .map_err(|e| Error::Peer(format!("sending {what} to the peer: {e}")))
    }

    /// `ctx_xchg_data`: client writes then reads, server reads then writes.
    pub fn xchg(&mut self, mine: &[u8], what: &str) -> Result<Vec<u8>, Error> {
        let mut theirs = vec![0u8; mine.len()];
        if self.client {
            self.write_all(mine, what)?;
            self.read_exact(&mut theirs, what)?;
        } else {
            self.read_exact(&mut theirs, what)?;
            self.write_all(mine, what)?;
        }
        Ok(theirs)
    }

    /// `exchange_versions` + `check_version_compatibility`: returns the peer's version.
    pub fn versions(&mut self) -> Result<f64, Error> {
        let mut mine = [0u8; 16];
        mine[..VERSION.len()].copy_from_slice(VERSION.as_bytes());
        let theirs = self.xchg(&mine, "the version exchange")?;
        let end = theirs.iter().position(|&b| b == 0).unwrap_or(theirs.len());
        let text = String::from_utf8_lossy(&theirs[..end]).into_owned();
        let v: f64 = text.trim().parse().map_err(|_| {
            Error::Peer(format!(
                "the peer's version {text:?} is not a perftest version: is it a perftest tool?"
            ))
        })?;
        if v < MIN_PEER_VERSION {
            return Err(Error::Peer(format!(
                "the peer speaks perftest protocol {v}; this tool needs {MIN_PEER_VERSION} or newer"
            )));
        }
        Ok(v)
    }

    /// `check_sys_data`: cycle buffer (page size) and cache line size, network order.
    pub fn sys_data(&mut self, cycle_buffer: u32, cache_line: u32) -> Result<(u32, u32), Error> {
        let c = self.xchg(&cycle_buffer.to_be_bytes(), "the system data exchange")?;
        let l = self.xchg(&cache_line.to_be_bytes(), "the system data exchange")?;
        let be = |v: Vec<u8>| u32::from_be_bytes([v[0], v[1], v[2], v[3]]);
        Ok((be(c), be(l)))
    }

    /// `check_mtu`: each side's MTU as the decimal `enum ibv_mtu` value in 2 bytes; returns
    /// the peer's (1..=5), or `None` if it sent something else.
    pub fn mtu(&mut self, mtu_enum: u8) -> Result<Option<u8>, Error> {
        let mine = [b'0' + mtu_enum, 0];
        let theirs = self.xchg(&mine, "the MTU exchange")?;
        Ok(match theirs[0] {
            d @ b'1'..=b'5' => Some(d - b'0'),
            _ => None,
        })
    }

    /// `ctx_hand_shake`: one address message each way.
    pub fn hand_shake(&mut self, mine: &Dest) -> Result<Dest, Error> {
        let cm = self.is_cm();
        let msg = if cm {
            mine.to_binary(self.gid_index).to_vec()
        } else {
            mine.to_wire(self.with_gid)
        };
        let theirs = self.xchg(&msg, "the address exchange")?;
        if cm {
            Dest::from_binary(&theirs)
        } else {
            Dest::from_wire(&theirs, self.with_gid)
        }
        .map_err(|e| Error::Peer(format!("bad address message from the peer: {e}")))
    }

    /// `xchg_bw_reports` (peer version >= 5.33: 64-bit iterations).
    pub fn bw_reports(&mut self, mine: &BwReport) -> Result<BwReport, Error> {
        let mut out = BwReport::default();
        let u = |v: Vec<u8>| u64::from_be_bytes(v.try_into().unwrap_or([0; 8]));
        let what = "the bandwidth report exchange";
        out.size = u(self.xchg(&mine.size.to_be_bytes(), what)?);
        out.iters = u(self.xchg(&mine.iters.to_be_bytes(), what)?);
        out.bw_peak = f64::from_bits(u(self.xchg(&mine.bw_peak.to_bits().to_be_bytes(), what)?));
        out.bw_avg = f64::from_bits(u(self.xchg(&mine.bw_avg.to_bits().to_be_bytes(), what)?));
        out.msg_rate = f64::from_bits(u(self.xchg(&mine.msg_rate.to_bits().to_be_bytes(), what)?));
        Ok(out)
    }

    /// `ctx_close_connection`: a last handshake, then (over TCP) `"done"`, which nobody reads.
    ///
    /// Over rdma_cm the server sends the last message; its send completes once the device has
    /// taken it (on iWARP: once it is in the TCP socket), not once the peer has it, so the
    /// server lets the client close first (up to [`PEER_CLOSE_WAIT`]) rather than tear down a
    /// connection whose last message may still be on its way.
    pub fn close(mut self, mine: &Dest) -> Result<(), Error> {
        self.hand_shake(mine)?;
        match &mut self.link {
            Link::Tcp(stream) => {
                let _ = stream.write_all(b"done\0");
                let _ = stream.shutdown(std::net::Shutdown::Write);
            }
            Link::Cm(link) if !self.client => link.wait_for_peer_close(PEER_CLOSE_WAIT),
            Link::Cm(_) => {}
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dest() -> Dest {
        Dest {
            lid: 0,
            out_reads: 0x80,
            qpn: 0x11,
            psn: 0xabcdef,
            rkey: 0x1234,
            vaddr: 0x5555_0000_1000,
            gid: Gid::from_ip("10.77.0.1".parse().unwrap()),
            srqn: 0,
        }
    }

    #[test]
    fn address_message_matches_perftest_format() {
        let d = dest();
        let m = d.to_wire(true);
        assert_eq!(m.len(), KEY_MSG_SIZE_GID);
        assert_eq!(
            std::str::from_utf8(&m[..KEY_MSG_SIZE_GID - 1]).unwrap(),
            "0000:0080:000011:abcdef:00001234:0000555500001000:\
             00:00:00:00:00:00:00:00:00:00:ff:ff:0a:4d:00:01:00000000:"
        );
        assert_eq!(m[KEY_MSG_SIZE_GID - 1], 0);
        assert_eq!(Dest::from_wire(&m, true).unwrap(), d);

        let m = d.to_wire(false);
        assert_eq!(m.len(), KEY_MSG_SIZE);
        assert_eq!(
            std::str::from_utf8(&m[..KEY_MSG_SIZE - 1]).unwrap(),
            "0000:0080:000011:abcdef:00001234:0000555500001000:00000000"
        );
        let back = Dest::from_wire(&m, false).unwrap();
        assert_eq!(
            back,
            Dest {
                gid: Gid::ZERO,
                ..d
            }
        );
        let err = Dest::from_wire(&m, true).unwrap_err();
        assert!(err.contains("-x"), "{err}");
    }

    #[test]
    fn full_exchange_over_tcp() {
        let port = 20_000 + (std::process::id() % 2000) as u16;
        let t = std::thread::spawn(move || {
            let mut s = Comm::accept(port, Duration::from_secs(10)).unwrap();
            s.set_with_gid(true);
            assert_eq!(s.versions().unwrap(), 6.06);
            assert_eq!(s.sys_data(4096, 64).unwrap(), (8192, 128));
            assert_eq!(s.mtu(3).unwrap(), Some(5));
            let mut d = dest();
            d.qpn = 2;
            let got = s.hand_shake(&d).unwrap();
            let r = s
                .bw_reports(&BwReport {
                    size: 1,
                    iters: 2,
                    bw_peak: 3.0,
                    bw_avg: 4.0,
                    msg_rate: 5.0,
                })
                .unwrap();
            s.close(&d).unwrap();
            (got, r)
        });
        let mut c = Comm::connect("127.0.0.1", port, Duration::from_secs(10)).unwrap();
        c.set_with_gid(true);
        assert_eq!(c.versions().unwrap(), 6.06);
        assert_eq!(c.sys_data(8192, 128).unwrap(), (4096, 64));
        assert_eq!(c.mtu(5).unwrap(), Some(3));
        let mine = dest();
        assert_eq!(c.hand_shake(&mine).unwrap().qpn, 2);
        let r = BwReport {
            size: 64,
            iters: 1000,
            bw_peak: 1.5,
            bw_avg: 1.25,
            msg_rate: 0.5,
        };
        let theirs = c.bw_reports(&r).unwrap();
        assert_eq!(theirs.bw_avg, 4.0);
        c.close(&mine).unwrap();
        let (got, r_srv) = t.join().unwrap();
        assert_eq!(got, mine);
        assert_eq!(r_srv, r);
    }

    #[test]
    fn a_missing_server_is_reported_not_waited_for_forever() {
        // A port nobody listens on (bound and dropped).
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let t0 = Instant::now();
        let e = Comm::connect("127.0.0.1", port, Duration::from_millis(300)).unwrap_err();
        assert!(t0.elapsed() < Duration::from_secs(5));
        assert!(e.to_string().contains("start the server first"), "{e}");
    }
}
