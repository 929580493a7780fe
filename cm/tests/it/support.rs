//! Shared helpers: addresses of this host and the peer, the peer program, bounded waits.
#![allow(dead_code)]
use std::net::{IpAddr, SocketAddr};
use std::process::Command;
use std::time::{Duration, Instant};

use cm::{ConnOptions, Connection, Connector, Error};
use testkit::ChildGuard;
use verbs::{AccessFlags, CompletionBuf, MemoryRegion, RecvRequest, SendRequest, WorkCompletion};

pub const DEVICE: &str = "needs an RDMA device: cargo xtask test";
pub const TIMEOUT: Duration = Duration::from_secs(10);

/// This host's RDMA address.
pub fn local_ip() -> IpAddr {
    IpAddr::V4(testkit::device().addr)
}

/// The peer host's RDMA address.
pub fn peer_ip() -> IpAddr {
    IpAddr::V4(testkit::peer().device.addr)
}

/// A port per test, so tests never meet each other's listeners.
/// The transport of the device under test.
pub fn local_transport() -> verbs::Transport {
    verbs::Context::open(&testkit::device().name)
        .expect("open the test device")
        .transport()
}

/// Skips the calling test (`test`) when the device under test lacks `capability`, and says
/// whether it did.
pub fn lacks(test: &str, capability: verbs::Capability) -> bool {
    let dev = testkit::device().name;
    let caps = verbs::Context::open(&dev)
        .and_then(|c| c.capabilities())
        .expect("query the test device");
    testkit::skip_unless(test, caps.require(&dev, capability))
}

pub fn port(n: u16) -> u16 {
    21000 + n
}

/// The peer program (`src/bin/cm_test_peer.rs`) with `args`, run on the peer host.
pub fn peer_command(args: &[&str]) -> Command {
    let mut c = testkit::peer().command(env!("CARGO_BIN_EXE_cm-test-peer"));
    c.args(args);
    c
}

/// Starts the peer program as a server on the peer's address and `port`.
pub fn spawn_peer_server(port: u16, extra: &[&str]) -> ChildGuard {
    let addr = SocketAddr::new(peer_ip(), port).to_string();
    let mut args = vec!["server", "--addr", &addr];
    args.extend_from_slice(extra);
    ChildGuard::spawn(peer_command(&args)).expect("spawn peer server")
}

/// Connects to `dst`, retrying while nobody listens yet (a freshly started peer), within
/// `total`.
pub fn connect_retry(dst: SocketAddr, private_data: &[u8], total: Duration) -> Connection {
    let deadline = Instant::now() + total;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let attempt = Connector::new(dst)
            .src(local_ip())
            .private_data(private_data)
            .unwrap()
            .timeout(left.min(TIMEOUT))
            .connect();
        match attempt {
            Ok(c) => return c,
            Err(
                e @ (Error::Rejected { .. } | Error::Unreachable { .. } | Error::Timeout { .. }),
            ) if Instant::now() < deadline => {
                let _ = e;
                std::thread::sleep(Duration::from_millis(100));
            }
            Err(e) => panic!("connect to {dst} failed: {e} ({e:?})"),
        }
    }
}

/// Waits for one completion on `conn`'s CQ and checks it succeeded.
pub fn wait_one(conn: &Connection) -> WorkCompletionInfo {
    let mut buf = CompletionBuf::new(1);
    let deadline = Instant::now() + TIMEOUT;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        assert!(!left.is_zero(), "no completion within {TIMEOUT:?}");
        let polled = conn.cq().wait_and_poll(&mut buf, Some(left)).unwrap();
        if let Some(wc) = polled.first() {
            return WorkCompletionInfo::take(conn, wc);
        }
    }
}

/// What a test needs from a completion, with its buffers reclaimed.
pub struct WorkCompletionInfo {
    pub status: Result<(), verbs::WcError>,
    pub byte_len: u32,
    pub mr: Option<MemoryRegion>,
}

impl WorkCompletionInfo {
    fn take(conn: &Connection, wc: &WorkCompletion) -> Self {
        let mut rec = conn.qp().reclaim(wc);
        let mr = rec.iter_mut().find_map(|r| r.take::<MemoryRegion>().ok());
        WorkCompletionInfo {
            status: wc.status(),
            byte_len: wc.byte_len(),
            mr,
        }
    }
}

/// Posts a receive of `len` bytes.
pub fn post_recv(qp: &verbs::Qp, pd: &verbs::Pd, len: usize) {
    let mr = pd.reg_mr(len, AccessFlags::LOCAL_WRITE).unwrap();
    qp.post_recv(RecvRequest::new(mr, ..).unwrap()).unwrap();
}

/// Sends `data` and waits for the send completion.
pub fn send(conn: &Connection, data: &[u8]) {
    let mut mr = conn
        .pd()
        .reg_mr(data.len().max(1), AccessFlags::LOCAL_WRITE)
        .unwrap();
    mr.as_mut_slice()[..data.len()].copy_from_slice(data);
    conn.qp()
        .post_send(SendRequest::send(mr, 0..data.len()).unwrap())
        .unwrap();
}

/// Default options for test connections.
pub fn options() -> ConnOptions {
    ConnOptions::new()
}

/// Waits for the next receive completion (send completions on the way are checked and
/// dropped) and returns the received bytes.
pub fn wait_recv(conn: &Connection) -> Result<Vec<u8>, String> {
    let mut buf = CompletionBuf::new(4);
    let deadline = Instant::now() + TIMEOUT;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(format!("no receive within {TIMEOUT:?}"));
        }
        let polled = conn
            .cq()
            .wait_and_poll(&mut buf, Some(left))
            .map_err(|e| e.to_string())?;
        let mut got = None;
        for wc in polled.iter() {
            let info = WorkCompletionInfo::take(conn, wc);
            info.status.map_err(|e| e.to_string())?;
            if wc.opcode() == Some(verbs::WcOpcode::Recv) {
                let mr = info.mr.expect("receive buffer");
                got = Some(mr.as_slice()[..info.byte_len as usize].to_vec());
            }
        }
        if let Some(g) = got {
            return Ok(g);
        }
    }
}

/// Has the peer server echo `msg` and checks the echo.
pub fn echo(conn: &Connection, msg: &[u8]) {
    post_recv(conn.qp(), conn.pd(), 256);
    send(conn, msg);
    assert_eq!(wait_recv(conn).unwrap(), msg);
}

/// The peer server's region, advertised in the first 16 bytes of its accept private data.
pub fn peer_region(conn: &Connection) -> verbs::RemoteSlice {
    let b: [u8; 16] = conn.private_data()[..16].try_into().unwrap();
    verbs::RemoteSlice::from_bytes(b)
}

/// RDMA WRITEs a pattern into the peer server's region and READs it back.
pub fn write_then_read(conn: &Connection, seed: u8) {
    let remote = peer_region(conn);
    assert_eq!(remote.len, 4096);
    let mut src = conn.pd().reg_mr(4096, AccessFlags::LOCAL_WRITE).unwrap();
    for (i, b) in src.as_mut_slice().iter_mut().enumerate() {
        *b = seed.wrapping_add(i as u8);
    }
    let expected = src.as_slice().to_vec();
    conn.qp()
        .post_send(
            SendRequest::rdma_write(src, .., remote)
                .unwrap()
                .signaled(true),
        )
        .unwrap();
    let wc = wait_one(conn);
    wc.status.unwrap();
    let dst = conn.pd().reg_mr(4096, AccessFlags::LOCAL_WRITE).unwrap();
    conn.qp()
        .post_send(
            SendRequest::rdma_read(dst, .., remote)
                .unwrap()
                .signaled(true),
        )
        .unwrap();
    let wc = wait_one(conn);
    wc.status.unwrap();
    let dst = wc.mr.expect("read buffer");
    assert_eq!(dst.as_slice(), &expected[..]);
}

/// stdout of a finished peer program, after checking it succeeded.
pub fn finish_peer(peer: ChildGuard) -> String {
    let out = peer.wait_output(Duration::from_secs(30));
    testkit::assert_success("cm-test-peer", &out);
    String::from_utf8_lossy(&out.stdout).into_owned()
}
