//! The ping loop of rdma-core's `rping`, over `cm` connections, byte-compatible with it.
//!
//! Per iteration: the client SENDs the address of its source buffer (`struct rping_rdma_info`:
//! big-endian 64-bit address, 32-bit rkey, 32-bit size); the server RDMA READs it and SENDs a
//! "go ahead"; the client SENDs its sink buffer; the server RDMA WRITEs the data back (up to
//! its NUL) and SENDs another "go ahead". The client disconnects after the last iteration.
use std::fmt;
use std::io::Write;
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use cm::{ConnOptions, Connection, Connector, Listener};
use verbs::{
    AccessFlags, CompletionBuf, MemoryRegion, QpCap, RecvRequest, RemoteSlice, SendRequest,
    WcOpcode,
};

/// Default port (`rping -p`).
pub const DEFAULT_PORT: u16 = 7174;
/// Largest ping size plus one (`RPING_BUFSIZE`).
pub const BUFSIZE: usize = 64 * 1024;
/// Smallest ping size: room for `"rdma-ping-%d: "` with the largest int and its NUL.
pub const MIN_SIZE: usize = 26;
/// Size of `struct rping_rdma_info` on the wire.
pub const INFO_LEN: usize = 16;
/// Send queue depth (`RPING_SQ_DEPTH`).
const SQ_DEPTH: u32 = 16;
/// Longest wait for one step of the protocol.
pub const STEP_TIMEOUT: Duration = Duration::from_secs(30);

/// What `rping` is asked to do.
#[derive(Debug, Clone)]
pub struct Config {
    /// Server (`-s`) or client (`-c`).
    pub server: bool,
    /// Address to listen on (server) or connect to (client).
    pub addr: IpAddr,
    /// Source address for the client (`-I`).
    pub src: Option<IpAddr>,
    /// Port.
    pub port: u16,
    /// Iterations; 0 = until interrupted (client) or disconnected (server).
    pub count: u32,
    /// Ping data size.
    pub size: usize,
    /// Print the ping data.
    pub verbose: bool,
    /// Check the echoed data.
    pub validate: bool,
    /// Debug output on stderr.
    pub debug: bool,
    /// Server: serve connections until killed, each in its own thread.
    pub persistent: bool,
}

/// Errors of the ping loop.
#[derive(Debug)]
pub enum RpingError {
    /// Connection management failed.
    Cm(cm::Error),
    /// A verbs call failed.
    Verbs(verbs::Error),
    /// A work request failed.
    Completion(verbs::WcError),
    /// The protocol went wrong (unexpected size, timeout, data mismatch).
    Protocol(String),
}

impl fmt::Display for RpingError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RpingError::Cm(e) => write!(f, "{e}"),
            RpingError::Verbs(e) => write!(f, "{e}"),
            RpingError::Completion(e) => write!(f, "cq completion failed: {e}"),
            RpingError::Protocol(s) => f.write_str(s),
        }
    }
}

// The message is the inner error's own, so its source is the inner error's source.
impl std::error::Error for RpingError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            RpingError::Cm(e) => std::error::Error::source(e),
            RpingError::Verbs(e) => std::error::Error::source(e),
            RpingError::Completion(_) | RpingError::Protocol(_) => None,
        }
    }
}

impl From<cm::Error> for RpingError {
    fn from(e: cm::Error) -> Self {
        RpingError::Cm(e)
    }
}
impl From<verbs::Error> for RpingError {
    fn from(e: verbs::Error) -> Self {
        RpingError::Verbs(e)
    }
}
impl<T> From<verbs::PostError<T>> for RpingError {
    fn from(e: verbs::PostError<T>) -> Self {
        RpingError::Verbs(e.error)
    }
}

type Result<T, E = RpingError> = std::result::Result<T, E>;

/// `struct rping_rdma_info`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RdmaInfo {
    /// Buffer address.
    pub buf: u64,
    /// Its rkey.
    pub rkey: u32,
    /// Its size.
    pub size: u32,
}

impl RdmaInfo {
    /// Wire form: `__be64 buf; __be32 rkey; __be32 size;`.
    pub fn to_wire(&self) -> [u8; INFO_LEN] {
        let mut b = [0; INFO_LEN];
        b[..8].copy_from_slice(&self.buf.to_be_bytes());
        b[8..12].copy_from_slice(&self.rkey.to_be_bytes());
        b[12..].copy_from_slice(&self.size.to_be_bytes());
        b
    }
    /// Parses the wire form.
    pub fn from_wire(b: &[u8; INFO_LEN]) -> Self {
        RdmaInfo {
            buf: u64::from_be_bytes(b[..8].try_into().expect("8 bytes")),
            rkey: u32::from_be_bytes(b[8..12].try_into().expect("4 bytes")),
            size: u32::from_be_bytes(b[12..].try_into().expect("4 bytes")),
        }
    }
    fn of(mr: &MemoryRegion, size: usize) -> Self {
        RdmaInfo {
            buf: mr.addr(),
            rkey: mr.rkey(),
            size: size as u32,
        }
    }
}

/// The client's data for iteration `ping`: `"rdma-ping-<ping>: "` followed by letters
/// cycling through `'A'..='z'` starting at `'A' + ping % 58`, NUL-terminated at `size - 1`.
pub fn ping_data(ping: u32, size: usize) -> Vec<u8> {
    let mut buf = format!("rdma-ping-{ping}: ").into_bytes();
    buf.truncate(size.saturating_sub(1));
    let mut c = b'A' + (ping % 58) as u8;
    while buf.len() < size {
        buf.push(c);
        c = if c >= b'z' { b'A' } else { c + 1 };
    }
    if let Some(last) = buf.last_mut() {
        *last = 0;
    }
    buf
}

/// The bytes before the first NUL, as text.
pub fn c_str(b: &[u8]) -> String {
    let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    String::from_utf8_lossy(&b[..end]).into_owned()
}

fn options() -> ConnOptions {
    ConnOptions::new()
        .cap(QpCap {
            max_send_wr: SQ_DEPTH,
            max_recv_wr: 2,
            ..QpCap::default()
        })
        .cq_entries(SQ_DEPTH * 2)
        .param(param())
}

/// rping's connection parameters: one outstanding READ each way, 7 retries of each kind.
fn param() -> cm::ConnParam {
    cm::ConnParam::new()
        .responder_resources(1)
        .initiator_depth(1)
        .retry_count(7)
        .rnr_retry_count(7)
}

/// One side's buffers and the completions it waits for. Each buffer is in exactly one place:
/// here, or in flight on the QP (and back here once its completion is polled).
struct Endpoint<'a> {
    conn: &'a Connection,
    send: Option<MemoryRegion>,
    recv: Option<MemoryRegion>,
    rdma: Option<MemoryRegion>,
    /// Bytes of the last receive, once it completed.
    received: Option<[u8; INFO_LEN]>,
    debug: bool,
    cqe: CompletionBuf,
}

impl<'a> Endpoint<'a> {
    fn new(conn: &'a Connection, send: MemoryRegion, rdma: MemoryRegion, debug: bool) -> Self {
        Endpoint {
            conn,
            send: Some(send),
            recv: None,
            rdma: Some(rdma),
            received: None,
            debug,
            cqe: CompletionBuf::new(8),
        }
    }

    fn post_send_info(&mut self, info: RdmaInfo) -> Result<()> {
        let mut mr = self.take_send()?;
        mr.as_mut_slice()[..INFO_LEN].copy_from_slice(&info.to_wire());
        if self.debug {
            eprintln!(
                "RDMA addr {:x} rkey {:x} len {}",
                info.buf, info.rkey, info.size
            );
        }
        self.conn
            .qp()
            .post_send(SendRequest::send(mr, 0..INFO_LEN)?.signaled(true))?;
        Ok(())
    }

    fn take_send(&mut self) -> Result<MemoryRegion> {
        if self.send.is_none() {
            self.wait(|e| e.send.is_some())?;
        }
        Ok(self.send.take().expect("send buffer is back"))
    }

    fn take_rdma(&mut self) -> Result<MemoryRegion> {
        if self.rdma.is_none() {
            self.wait(|e| e.rdma.is_some())?;
        }
        Ok(self.rdma.take().expect("rdma buffer is back"))
    }

    /// Waits for the next receive and re-posts its buffer at once (as rping does), so the
    /// peer's next message always finds one.
    fn next_recv(&mut self) -> Result<[u8; INFO_LEN]> {
        self.wait(|e| e.received.is_some())?;
        let mr = self.recv.take().expect("receive buffer is back");
        self.conn.qp().post_recv(RecvRequest::new(mr, ..)?)?;
        Ok(self.received.take().expect("checked"))
    }

    /// Processes completions until `done` holds. A disconnect (flushed work, or the CM
    /// event) is `Ok(false)`-worthy for callers: reported as `Cm(Disconnected)`.
    fn wait(&mut self, done: impl Fn(&Self) -> bool) -> Result<()> {
        let deadline = Instant::now() + STEP_TIMEOUT;
        while !done(self) {
            if Instant::now() >= deadline {
                return Err(RpingError::Protocol(format!(
                    "no progress within {STEP_TIMEOUT:?}"
                )));
            }
            let polled = self
                .conn
                .cq()
                .wait_and_poll(&mut self.cqe, Some(Duration::from_millis(100)))?;
            if polled.is_empty() {
                if self.conn.poll_event(Duration::ZERO)? == Some(cm::EventKind::Disconnected) {
                    return Err(RpingError::Cm(cm::Error::Disconnected));
                }
                continue;
            }
            let mut failure = None;
            for wc in polled.iter() {
                let status = wc.status();
                let opcode = wc.opcode();
                let len = wc.byte_len();
                let mut rec = self.conn.qp().reclaim(wc);
                let mr = rec.iter_mut().find_map(|r| r.take::<MemoryRegion>().ok());
                if let Err(e) = status {
                    if e.status == Some(verbs::WcStatus::WrFlushErr) {
                        failure.get_or_insert(RpingError::Cm(cm::Error::Disconnected));
                    } else {
                        failure = Some(RpingError::Completion(e));
                    }
                    continue;
                }
                match opcode {
                    Some(WcOpcode::Send) => self.send = mr,
                    Some(WcOpcode::RdmaRead | WcOpcode::RdmaWrite) => self.rdma = mr,
                    Some(WcOpcode::Recv) => {
                        let mr = mr.expect("a receive returns its buffer");
                        if len as usize != INFO_LEN {
                            failure = Some(RpingError::Protocol(format!(
                                "Received bogus data, size {len}"
                            )));
                        }
                        let mut info = [0; INFO_LEN];
                        info.copy_from_slice(&mr.as_slice()[..INFO_LEN]);
                        self.received = Some(info);
                        self.recv = Some(mr);
                    }
                    other => {
                        failure = Some(RpingError::Protocol(format!(
                            "unexpected completion {other:?}"
                        )))
                    }
                }
            }
            if let Some(f) = failure {
                return Err(f);
            }
        }
        Ok(())
    }
}

/// Runs the client: connects, pings `count` times, disconnects. Ping data goes to `out`.
pub fn run_client(cfg: &Config, out: &mut dyn Write) -> Result<u32> {
    let mut connector = Connector::new(SocketAddr::new(cfg.addr, cfg.port))
        .options(options())
        .timeout(Duration::from_secs(10));
    if let Some(src) = cfg.src {
        connector = connector.src(src);
    }
    let pending = connector.resolve()?;
    let pd = pending.pd().clone();
    let remote = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ | AccessFlags::REMOTE_WRITE;
    let recv = pd.reg_mr(INFO_LEN, AccessFlags::LOCAL_WRITE)?;
    let send = pd.reg_mr(INFO_LEN, AccessFlags::empty())?;
    let mut start = pd.reg_mr(cfg.size, remote)?;
    let rdma = pd.reg_mr(cfg.size, remote)?;
    pending.qp().post_recv(RecvRequest::new(recv, ..)?)?;
    let conn = pending.connect()?;
    if cfg.debug {
        eprintln!("rdma_connect successful");
    }
    let start_info = RdmaInfo::of(&start, cfg.size);
    let sink_info = RdmaInfo::of(&rdma, cfg.size);
    let mut ep = Endpoint::new(&conn, send, rdma, cfg.debug);
    let mut ping = 0u32;
    let result = (|| {
        while cfg.count == 0 || ping < cfg.count {
            let data = ping_data(ping, cfg.size);
            start.write(0, &data)?;
            ep.post_send_info(start_info)?;
            ep.next_recv()?; // the server has read our data
            ep.post_send_info(sink_info)?;
            ep.next_recv()?; // the server has written it back
            let sink = ep.rdma.as_ref().expect("the sink is never posted");
            let mut echo = vec![0; cfg.size];
            sink.read(0, &mut echo)?;
            if cfg.validate && echo != data {
                return Err(RpingError::Protocol("data mismatch!".into()));
            }
            if cfg.verbose {
                let _ = writeln!(out, "ping data: {}", c_str(&echo));
            }
            ping += 1;
        }
        Ok(())
    })();
    drop(ep);
    let _ = conn.disconnect(Duration::from_secs(5));
    result.map(|()| ping)
}

/// Serves one connected client until it disconnects; returns the iterations served.
pub fn serve(
    conn: &Connection,
    send: MemoryRegion,
    rdma: MemoryRegion,
    cfg: &Config,
    out: &mut dyn Write,
) -> Result<u32> {
    let mut ep = Endpoint::new(conn, send, rdma, cfg.debug);
    let mut served = 0;
    loop {
        // Source advertisement: read the client's data.
        let src = match ep.next_recv() {
            Ok(b) => RdmaInfo::from_wire(&b),
            Err(RpingError::Cm(cm::Error::Disconnected)) => return Ok(served),
            Err(e) => return Err(e),
        };
        if cfg.debug {
            eprintln!(
                "Received rkey {:x} addr {:x} len {} from peer",
                src.rkey, src.buf, src.size
            );
        }
        let len = (src.size as usize).min(BUFSIZE);
        let mr = ep.take_rdma()?;
        let remote = RemoteSlice {
            addr: src.buf,
            len: len as u32,
            rkey: src.rkey,
        };
        conn.qp()
            .post_send(SendRequest::rdma_read(mr, 0..len, remote)?.signaled(true))?;
        ep.wait(|e| e.rdma.is_some())?;
        let data = c_str(ep.rdma.as_ref().expect("back").as_slice());
        if cfg.verbose {
            let _ = writeln!(out, "server ping data: {data}");
        }
        let go = ep.take_send()?;
        conn.qp()
            .post_send(SendRequest::send(go, 0..INFO_LEN)?.signaled(true))?;

        // Sink advertisement: write the data back, up to and including its NUL.
        let sink = RdmaInfo::from_wire(&ep.next_recv()?);
        let n = (data.len() + 1).min(len).min(sink.size as usize);
        let mr = ep.take_rdma()?;
        let remote = RemoteSlice {
            addr: sink.buf,
            len: n as u32,
            rkey: sink.rkey,
        };
        conn.qp()
            .post_send(SendRequest::rdma_write(mr, 0..n, remote)?.signaled(true))?;
        ep.wait(|e| e.rdma.is_some())?;
        let go = ep.take_send()?;
        conn.qp()
            .post_send(SendRequest::send(go, 0..INFO_LEN)?.signaled(true))?;
        served += 1;
    }
}

/// Accepts one connection (with its buffers and first receive posted) and serves it.
fn accept_and_serve(listener: &Listener, cfg: &Config, out: &mut dyn Write) -> Result<u32> {
    let req = loop {
        match listener.get_request(Duration::from_secs(1)) {
            Ok(r) => break r,
            Err(e) if e.is_timeout() => continue,
            Err(e) => return Err(e.into()),
        }
    };
    serve_request(req, cfg, out)
}

fn serve_request(req: cm::ConnectRequest, cfg: &Config, out: &mut dyn Write) -> Result<u32> {
    let pd = req.pd().clone();
    let recv = pd.reg_mr(INFO_LEN, AccessFlags::LOCAL_WRITE)?;
    let send = pd.reg_mr(INFO_LEN, AccessFlags::empty())?;
    let rdma = pd.reg_mr(BUFSIZE, AccessFlags::LOCAL_WRITE)?;
    req.qp().post_recv(RecvRequest::new(recv, ..)?)?;
    let conn = req.accept_with(param(), Duration::from_secs(10))?;
    serve(&conn, send, rdma, cfg, out)
}

/// Runs the server: one connection, or (persistent) connections until killed.
pub fn run_server(cfg: &Config, out: &mut dyn Write) -> Result<u32> {
    let listener = Listener::bind(SocketAddr::new(cfg.addr, cfg.port), options())?;
    if cfg.debug {
        eprintln!("rdma_listen on {:?}", listener.local_addr());
    }
    if !cfg.persistent {
        return accept_and_serve(&listener, cfg, out);
    }
    loop {
        let req = match listener.get_request(Duration::from_secs(1)) {
            Ok(r) => r,
            Err(e) if e.is_timeout() => continue,
            Err(e) => return Err(e.into()),
        };
        let cfg = cfg.clone();
        std::thread::spawn(move || {
            let mut out = std::io::stdout();
            if let Err(e) = serve_request(req, &cfg, &mut out) {
                eprintln!(
                    "rping server connection failed: {}",
                    crate::report::error_chain(&e)
                );
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn info_wire_is_big_endian_buf_rkey_size() {
        let i = RdmaInfo {
            buf: 0x0102030405060708,
            rkey: 0x0a0b0c0d,
            size: 64,
        };
        let w = i.to_wire();
        assert_eq!(&w[..8], &[1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(&w[8..12], &[0x0a, 0x0b, 0x0c, 0x0d]);
        assert_eq!(&w[12..], &[0, 0, 0, 64]);
        assert_eq!(RdmaInfo::from_wire(&w), i);
    }

    #[test]
    fn ping_data_matches_rping() {
        let d = ping_data(0, 64);
        assert_eq!(d.len(), 64);
        assert_eq!(
            c_str(&d),
            "rdma-ping-0: ABCDEFGHIJKLMNOPQRSTUVWXYZ[\\]^_`abcdefghijklmnopqr"
        );
        let d = ping_data(1, 64);
        assert!(c_str(&d).starts_with("rdma-ping-1: BCD"));
        // The start letter wraps after 'z' back to 'A' (58 letters).
        assert!(c_str(&ping_data(57, 64)).starts_with("rdma-ping-57: zAB"));
        assert!(c_str(&ping_data(58, 64)).starts_with("rdma-ping-58: ABC"));
        assert_eq!(ping_data(3, 26).len(), 26);
    }
}
