//! perftest's rdma_cm mode (`-R`, perftest_communication.c): the exchange runs as SEND/RECV
//! messages on a control RC connection made with rdma_cm on the test's port, and the test's
//! own QPs are connected with rdma_cm on the same port (the server listens anew once the
//! control connection is up), so no address message is needed to bring them to RTS.
//!
//! On the control connection each exchange is one SEND per side of exactly the bytes the TCP
//! exchange would write, except the address message, which is perftest's
//! `struct pingpong_dest` in binary with network-order fields ([`Dest::to_binary`]).
use std::collections::VecDeque;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, ToSocketAddrs};
use std::time::{Duration, Instant};

use cm::{ConnOptions, ConnParam, Connection, ConnectionParts, Connector, Listener};
use verbs::{
    AccessFlags, CompletionBuf, Cq, MemoryRegion, Pd, QpCap, RecvRequest, SendRequest, WcOpcode,
};

use super::exchange::Dest;
use super::Error;

/// `sizeof(struct pingpong_dest)` on x86_64: the receive size of perftest's control QP, and
/// the largest message it takes.
pub const DEST_SIZE: usize = 56;
/// perftest's `DEF_RETRY_COUNT` for the CM's retry and RNR retry counts.
const RETRY_COUNT: u8 = 7;
/// Pause between attempts to reach a server that is not listening yet (perftest's).
const RETRY_PAUSE: Duration = Duration::from_millis(100);

impl Dest {
    /// `struct pingpong_dest` as `rdma_write_keys` sends it: `lid`, `out_reads`, `qpn`, `psn`,
    /// `rkey` (4 bytes each, big-endian), 4 bytes of padding, `vaddr` (8, big-endian), the
    /// GID's 16 bytes, `srqn` and `gid_index` (4 each, big-endian).
    pub fn to_binary(&self, gid_index: i32) -> [u8; DEST_SIZE] {
        let mut m = [0u8; DEST_SIZE];
        m[0..4].copy_from_slice(&u32::from(self.lid).to_be_bytes());
        m[4..8].copy_from_slice(&self.out_reads.to_be_bytes());
        m[8..12].copy_from_slice(&self.qpn.to_be_bytes());
        m[12..16].copy_from_slice(&self.psn.to_be_bytes());
        m[16..20].copy_from_slice(&self.rkey.to_be_bytes());
        m[24..32].copy_from_slice(&self.vaddr.to_be_bytes());
        m[32..48].copy_from_slice(&self.gid.raw());
        m[48..52].copy_from_slice(&self.srqn.to_be_bytes());
        m[52..56].copy_from_slice(&gid_index.to_be_bytes());
        m
    }

    /// Parses what `rdma_read_keys` reads (it ignores `srqn` and `gid_index`).
    pub fn from_binary(m: &[u8]) -> Result<Dest, String> {
        if m.len() < 48 {
            return Err(format!(
                "{} bytes, expected {DEST_SIZE}: is the peer a perftest tool in -R mode?",
                m.len()
            ));
        }
        let u = |i: usize| u32::from_be_bytes([m[i], m[i + 1], m[i + 2], m[i + 3]]);
        let mut gid = [0u8; 16];
        gid.copy_from_slice(&m[32..48]);
        Ok(Dest {
            lid: u(0) as u16,
            out_reads: u(4),
            qpn: u(8),
            psn: u(12),
            rkey: u(16),
            vaddr: u64::from_be_bytes(m[24..32].try_into().unwrap_or([0; 8])),
            gid: verbs::Gid(gid),
            srqn: 0,
        })
    }
}

/// The tag of the control connection's receives, which tells their completions from the
/// send's.
const RECV_TAG: u64 = 1;

/// The control connection: one RC QP, one receive always posted, one send at a time.
pub struct CmLink {
    conn: Connection,
    send_buf: Option<MemoryRegion>,
    got: VecDeque<Vec<u8>>,
    /// Why no more messages will come: a receive failed or was flushed (the peer closed or
    /// failed). A send may still have completed; only a later receive fails.
    ended: Option<String>,
    wcs: CompletionBuf,
    timeout: Duration,
}

impl std::fmt::Debug for CmLink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CmLink")
            .field("conn", &self.conn)
            .finish_non_exhaustive()
    }
}

fn control_options() -> ConnOptions {
    ConnOptions::new()
        .cap(QpCap {
            max_send_wr: 2,
            max_recv_wr: 2,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        })
        .cq_entries(8)
        .access(AccessFlags::LOCAL_WRITE)
        .param(
            ConnParam::new()
                .retry_count(RETRY_COUNT)
                .rnr_retry_count(RETRY_COUNT),
        )
}

fn post_control_recv(qp: &verbs::Qp, pd: &Pd) -> Result<(), Error> {
    let b = pd
        .reg_mr(DEST_SIZE, AccessFlags::LOCAL_WRITE)
        .map_err(|e| Error::Verbs("register the control receive buffer", e))?;
    let req = RecvRequest::new(b, ..)
        .map_err(|e| Error::Verbs("build a receive", e))?
        .tag(RECV_TAG);
    qp.post_recv(req)
        .map(|_| ())
        .map_err(|e| Error::Verbs("post a control receive", e.error))
}

/// Resolves `server` to its IPv4 address and `port`.
pub fn server_addr(server: &str, port: u16) -> Result<SocketAddr, Error> {
    (server, port)
        .to_socket_addrs()
        .map_err(|e| Error::Usage(format!("cannot resolve server {server:?}: {e}")))?
        .find(|a| a.is_ipv4())
        .ok_or_else(|| Error::Usage(format!("server {server:?} has no IPv4 address")))
}

/// Whether a failed connect is worth another try: nobody listened yet.
fn not_listening(e: &cm::Error) -> bool {
    matches!(
        e,
        cm::Error::Rejected { .. } | cm::Error::Unreachable { .. }
    )
}

fn cm_err(what: &'static str, e: cm::Error) -> Error {
    Error::Peer(format!("rdma_cm {what} failed: {e}"))
}

/// Connects to `dst` with `opts` (QP created by the connector), retrying while the server is
/// not listening, until `timeout`. `prepare` runs on the QP before the connect request
/// (receives to post).
fn connect_retrying(
    dst: SocketAddr,
    src: Option<IpAddr>,
    opts: &ConnOptions,
    timeout: Duration,
    prepare: &dyn Fn(&verbs::Qp, &Pd) -> Result<(), Error>,
) -> Result<Connection, Error> {
    let deadline = Instant::now() + timeout;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let mut c = Connector::new(dst).options(opts.clone()).timeout(left);
        if let Some(ip) = src {
            c = c.src(ip);
        }
        let pending = c.resolve().map_err(|e| cm_err("address resolution", e))?;
        prepare(pending.qp(), pending.pd())?;
        match pending.connect() {
            Ok(conn) => return Ok(conn),
            Err(e) if not_listening(&e) && Instant::now() + RETRY_PAUSE < deadline => {
                std::thread::sleep(RETRY_PAUSE);
            }
            Err(e) if not_listening(&e) => {
                return Err(Error::Peer(format!(
                    "no rdma_cm server at {dst} after {} s ({e}): start the server (with -R) \
                     first, or check the address and -p",
                    timeout.as_secs()
                )))
            }
            Err(e) => return Err(cm_err("connect", e)),
        }
    }
}

impl CmLink {
    /// Client: the control connection to `server:port` (from `src`, if given).
    pub fn connect(
        server: &str,
        port: u16,
        src: Option<IpAddr>,
        timeout: Duration,
    ) -> Result<CmLink, Error> {
        let dst = server_addr(server, port)?;
        let conn = connect_retrying(dst, src, &control_options(), timeout, &|qp, pd| {
            post_control_recv(qp, pd)
        })?;
        CmLink::new(conn, timeout)
    }

    /// Server: waits up to `timeout` for the client's control connection on `port`; the
    /// listener is gone when this returns, so the port can be listened on again.
    pub fn accept(port: u16, timeout: Duration) -> Result<CmLink, Error> {
        let listener = listen(port)?;
        let req = listener.get_request(timeout).map_err(|e| match e {
            cm::Error::Timeout { .. } => Error::Peer(format!(
                "no rdma_cm client connected to port {port} within {} s (--timeout)",
                timeout.as_secs()
            )),
            e => cm_err("wait for a connect request", e),
        })?;
        post_control_recv(req.qp(), req.pd())?;
        let param = ConnParam::new()
            .retry_count(RETRY_COUNT)
            .rnr_retry_count(RETRY_COUNT);
        let conn = req
            .accept_with(param, timeout)
            .map_err(|e| cm_err("accept", e))?;
        drop(listener);
        CmLink::new(conn, timeout)
    }

    fn new(conn: Connection, timeout: Duration) -> Result<CmLink, Error> {
        let send_buf = conn
            .pd()
            .reg_mr(DEST_SIZE, AccessFlags::LOCAL_WRITE)
            .map_err(|e| Error::Verbs("register the control send buffer", e))?;
        Ok(CmLink {
            conn,
            send_buf: Some(send_buf),
            got: VecDeque::new(),
            ended: None,
            wcs: CompletionBuf::new(4),
            timeout,
        })
    }

    /// Sends `msg` (at most [`DEST_SIZE`] bytes) and waits for its completion.
    pub fn send(&mut self, msg: &[u8], what: &str) -> Result<(), Error> {
        let mut b = self
            .send_buf
            .take()
            .ok_or_else(|| Error::Peer(format!("control send buffer lost during {what}")))?;
        let n = msg.len().min(DEST_SIZE);
        b.as_mut_slice()[..n].copy_from_slice(&msg[..n]);
        let req = SendRequest::send(b, 0..n).map_err(|e| Error::Verbs("build a send", e))?;
        self.conn
            .qp()
            .post_send(req)
            .map_err(|e| Error::Verbs("post a control send", e.error))?;
        while self.send_buf.is_none() {
            self.poll_once(what)?;
        }
        Ok(())
    }

    /// Waits up to `bound` for the peer to disconnect; whatever happens, the link is then
    /// ready to be dropped.
    pub fn wait_for_peer_close(&self, bound: Duration) {
        let _ = self.conn.wait_disconnect(bound);
    }

    /// Waits for the peer's next message.
    pub fn recv(&mut self, what: &str) -> Result<Vec<u8>, Error> {
        loop {
            if let Some(m) = self.got.pop_front() {
                return Ok(m);
            }
            if let Some(why) = &self.ended {
                return Err(Error::Peer(format!(
                    "the control connection failed during {what} ({why}): the peer exited or \
                     failed (see its output)"
                )));
            }
            self.poll_once(what)?;
        }
    }

    fn poll_once(&mut self, what: &str) -> Result<(), Error> {
        let qp = self.conn.qp().clone();
        let pd = self.conn.pd().clone();
        let polled = self
            .conn
            .cq()
            .wait_and_poll(&mut self.wcs, Some(self.timeout))
            .map_err(|e| Error::Verbs("wait for control completions", e))?;
        if polled.is_empty() {
            return Err(Error::Peer(format!(
                "no answer from the peer for {} s during {what}: it stopped or runs a \
                 different test or parameters",
                self.timeout.as_secs()
            )));
        }
        let mut repost = 0;
        for wc in &polled {
            let bufs = qp.reclaim(wc);
            if let Err(e) = wc.status() {
                // A receive flushed once the peer closed says nothing of a send that went
                // before: the exchange fails only if it still needs a message.
                if bufs.iter().any(|r| r.tag == RECV_TAG) {
                    self.ended.get_or_insert(e.to_string());
                    continue;
                }
                return Err(Error::Peer(format!(
                    "the control connection failed during {what} ({e}): the peer exited or \
                     failed (see its output)"
                )));
            }
            for mut r in bufs {
                if let Ok(mut b) = r.take::<MemoryRegion>() {
                    if wc.opcode() == Some(WcOpcode::Recv) {
                        let n = (wc.byte_len() as usize).min(b.len());
                        self.got.push_back(b.as_mut_slice()[..n].to_vec());
                        repost += 1;
                    } else {
                        self.send_buf = Some(b);
                    }
                }
            }
        }
        for _ in 0..repost {
            post_control_recv(&qp, &pd)?;
        }
        Ok(())
    }
}

fn listen(port: u16) -> Result<Listener, Error> {
    let addr = SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), port);
    Listener::bind(addr, control_options()).map_err(|e| {
        Error::Usage(format!(
            "cannot listen with rdma_cm on port {port}: {e}; pick another with -p"
        ))
    })
}

/// The test's QPs connected with rdma_cm, on the endpoint's PD and CQ. Keeping the ids keeps
/// the connections; [`TestConns::disconnect`] ends them.
#[derive(Debug, Default)]
pub struct TestConns {
    /// One per QP, in order.
    pub parts: Vec<ConnectionParts>,
}

/// What the test QPs need: PD, CQ, queue sizes, access, and the read/atomic depth.
#[derive(Debug)]
pub struct QpSpec<'a> {
    /// The endpoint's PD.
    pub pd: &'a Pd,
    /// The endpoint's CQ.
    pub cq: &'a Cq,
    /// Queue sizes and inline limit.
    pub cap: QpCap,
    /// What the peer may do.
    pub access: AccessFlags,
    /// Outstanding reads/atomics (0 for SEND and WRITE tests, as perftest asks).
    pub rd_atomic: u8,
}

impl QpSpec<'_> {
    fn options(&self) -> ConnOptions {
        ConnOptions::new()
            .pd(self.pd)
            .cq(self.cq)
            .cap(self.cap)
            .access(self.access)
            .param(self.param())
    }

    fn param(&self) -> ConnParam {
        ConnParam::new()
            .responder_resources(self.rd_atomic)
            .initiator_depth(self.rd_atomic)
            .retry_count(RETRY_COUNT)
            .rnr_retry_count(RETRY_COUNT)
    }
}

impl TestConns {
    /// Client: connects `n` QPs to `server:port`.
    pub fn connect(
        spec: &QpSpec<'_>,
        n: usize,
        dst: SocketAddr,
        src: Option<IpAddr>,
        timeout: Duration,
    ) -> Result<TestConns, Error> {
        let opts = spec.options();
        let mut parts = Vec::with_capacity(n);
        for _ in 0..n {
            let conn = connect_retrying(dst, src, &opts, timeout, &|_, _| Ok(()))?;
            parts.push(conn.into_parts());
        }
        Ok(TestConns { parts })
    }

    /// Server: listens on `port` again for the test's QPs. This must happen before the
    /// handshake that lets the client connect them: perftest's client gives up (and crashes
    /// on its retry) when its first connect request finds nobody listening.
    pub fn listen(spec: &QpSpec<'_>, port: u16) -> Result<Listener, Error> {
        let addr = SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), port);
        Listener::bind(addr, spec.options()).map_err(|e| match e {
            cm::Error::PdOnOtherDevice { .. } => Error::Usage(format!(
                "{e}: with -R the device is the one of the address the client connects to; \
                 pick it with -d"
            )),
            e => Error::Usage(format!(
                "cannot listen with rdma_cm on port {port} for the test QPs: {e}"
            )),
        })
    }

    /// Server: accepts `n` QPs on `listener` (from [`TestConns::listen`]).
    pub fn accept(
        spec: &QpSpec<'_>,
        listener: &Listener,
        n: usize,
        timeout: Duration,
    ) -> Result<TestConns, Error> {
        let mut parts = Vec::with_capacity(n);
        for _ in 0..n {
            let req = listener.get_request(timeout).map_err(|e| match e {
                cm::Error::Timeout { .. } => Error::Peer(format!(
                    "the client did not connect its test QPs within {} s: it failed (see its \
                     output) or does not run -R",
                    timeout.as_secs()
                )),
                cm::Error::PdOnOtherDevice { .. } => Error::Usage(format!(
                    "{e}: with -R the device is the one of the address the client connects \
                     to; pick it with -d"
                )),
                e => cm_err("wait for a test QP's connect request", e),
            })?;
            let conn = req
                .accept_with(spec.param(), timeout)
                .map_err(|e| cm_err("accept a test QP", e))?;
            parts.push(conn.into_parts());
        }
        Ok(TestConns { parts })
    }

    /// Disconnects every QP (without waiting: the peer may already be gone).
    pub fn disconnect(&self) {
        for p in &self.parts {
            let _ = p.qp.to_error();
            let _ = p.id.disconnect();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn binary_address_matches_perftest_struct() {
        let d = Dest {
            lid: 0x12,
            out_reads: 0x80,
            qpn: 0x11,
            psn: 0xabcdef,
            rkey: 0x1234,
            vaddr: 0x5555_0000_1000,
            gid: verbs::Gid::from_ip("10.77.0.1".parse().unwrap()),
            srqn: 0,
        };
        let m = d.to_binary(1);
        assert_eq!(&m[0..4], &[0, 0, 0, 0x12]);
        assert_eq!(&m[8..12], &[0, 0, 0, 0x11]);
        assert_eq!(&m[12..16], &[0, 0xab, 0xcd, 0xef]);
        assert_eq!(&m[20..24], &[0; 4], "padding before the 8-byte vaddr");
        assert_eq!(&m[24..32], &[0, 0, 0x55, 0x55, 0, 0, 0x10, 0]);
        assert_eq!(&m[42..48], &[0xff, 0xff, 10, 77, 0, 1]);
        assert_eq!(&m[52..56], &[0, 0, 0, 1]);
        assert_eq!(Dest::from_binary(&m).unwrap(), d);
        assert!(Dest::from_binary(&m[..16]).unwrap_err().contains("-R"));
    }
}
