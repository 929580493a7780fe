//! A hostile peer on raw verbs: it connects to a transport listener with the `cm` crate,
//! speaks the handshake (so it is admitted), sends a few valid messages (with headers and as
//! compact frames), then posts one broken frame (random bytes, a flipped bit, a truncated or
//! lengthened frame, an unknown kind, a compact frame whose immediate data names no kind, more
//! frames than its credit, a credit limit moving backwards). The victim's
//! connection ends with exactly the protocol error the frame deserves, nothing panics, an
//! ordinary connection on the same endpoint keeps its verified traffic flowing, and the
//! listener accepts new connections afterwards.
use std::time::{Duration, Instant};

use cm::Connector;
use transport::proto::{
    decode, encode_body, ConnError, ConnectInfo, FrameBody, Header, Kind, ProtocolError,
    RemoteChunk,
};
use transport::Error;
use verbs::{AccessFlags, MemoryRegion, RecvRequest, SendRequest, WrOp};

use super::*;

/// Raw connections, one broken frame each.
const ROUNDS: u64 = 24;
/// Credits the raw peer grants the victim (it never releases them).
const RAW_WINDOW: u32 = 16;
/// Receives the raw peer posts for the victim's control frames.
const RAW_RECEIVES: usize = 16;

/// A small deterministic generator (xorshift64*), so a failing round can be replayed by seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn bytes(&mut self, len: usize) -> Vec<u8> {
        (0..len).map(|_| self.next() as u8).collect()
    }
}

/// The kinds of broken frame, one per round in turn.
#[derive(Debug, Clone, Copy)]
enum Fault {
    RandomBytes,
    BitFlip,
    Truncated,
    WrongLength,
    BadKind,
    BadImmediate,
    CreditOverflow,
    CreditBackwards,
}

const FAULTS: [Fault; 8] = [
    Fault::RandomBytes,
    Fault::BitFlip,
    Fault::Truncated,
    Fault::WrongLength,
    Fault::BadKind,
    Fault::BadImmediate,
    Fault::CreditOverflow,
    Fault::CreditBackwards,
];

/// A frame as the protocol encodes it.
fn frame(kind: Kind, credit_limit: u32, tag: u64, body: &FrameBody, data: &[u8]) -> Vec<u8> {
    let mut f = Header {
        kind,
        flags: 0,
        credit_limit,
        tag,
    }
    .encode()
    .to_vec();
    let (b, n) = encode_body(body);
    f.extend_from_slice(&b[..n]);
    f.extend_from_slice(data);
    f
}

/// A valid DATA frame carrying `data`.
fn data_frame(data: &[u8]) -> Vec<u8> {
    frame(
        Kind::Data,
        RAW_WINDOW,
        0,
        &FrameBody::Data { len: data.len() },
        data,
    )
}

/// The immediate data of a compact DATA frame (PROTOCOL.md) whose kind byte is `kind`.
fn compact_imm(kind: u8) -> u32 {
    (u32::from(kind) << 24) | RAW_WINDOW
}

/// A valid control frame of a random kind (whatever its meaning, it decodes).
fn control_frame(rng: &mut Rng) -> Vec<u8> {
    match rng.below(4) {
        0 => frame(Kind::Ping, RAW_WINDOW, 0, &FrameBody::Empty, &[]),
        1 => frame(
            Kind::RndvAck,
            RAW_WINDOW,
            7,
            &FrameBody::RndvAck { offset: 0 },
            &[],
        ),
        2 => frame(
            Kind::RndvStart,
            RAW_WINDOW,
            7,
            &FrameBody::RndvStart {
                total: 1 << 20,
                call: 0,
            },
            &[],
        ),
        _ => frame(
            Kind::RndvChunk,
            RAW_WINDOW,
            7,
            &FrameBody::RndvChunk {
                offset: 0,
                remote: RemoteChunk {
                    addr: 0x1000,
                    rkey: 1,
                    len: 64,
                },
            },
            &[],
        ),
    }
}

/// A broken frame the decoder refuses: `mutate` applied to fresh material until the result
/// does not decode (bounded), and the decoder's error, which the victim must report.
fn undecodable(
    rng: &mut Rng,
    mut mutate: impl FnMut(&mut Rng) -> Vec<u8>,
) -> (Vec<u8>, ProtocolError) {
    for _ in 0..1000 {
        let f = mutate(rng);
        if let Err(e) = decode(&f) {
            return (f, e);
        }
    }
    panic!("no undecodable frame in 1000 tries");
}

/// The raw peer: a queue pair of its own, connected through the CM with our connect data.
struct RawPeer {
    conn: cm::Connection,
    /// The victim's connect data (its window and frame size).
    victim: ConnectInfo,
    frames: u64,
}

impl RawPeer {
    fn connect(addr: std::net::SocketAddr) -> RawPeer {
        let ours = transport::ProtocolConfig::default()
            .with_window(RAW_WINDOW)
            .connect_info();
        let pending = Connector::new(addr)
            .src(local_ip())
            .private_data(&ours.encode())
            .expect("private data")
            .timeout(TIMEOUT)
            .resolve()
            .expect("resolve");
        for _ in 0..RAW_RECEIVES {
            let buf = pending
                .pd()
                .reg_mr(ours.frame_size as usize, AccessFlags::LOCAL_WRITE)
                .expect("receive buffer");
            pending
                .qp()
                .post_recv(RecvRequest::new(buf, ..).expect("receive request"))
                .expect("post receive");
        }
        let conn = pending.connect().expect("admitted by the listener");
        let victim = ConnectInfo::decode(conn.private_data()).expect("the victim's connect data");
        RawPeer {
            conn,
            victim,
            frames: 0,
        }
    }

    /// Posts `bytes` as one SEND and waits for its completion (receives that complete
    /// meanwhile are the victim's control frames: dropped).
    fn send(&mut self, bytes: &[u8]) {
        self.send_with(bytes, None);
    }

    /// [`send`](Self::send), with immediate data `imm` if given (a compact DATA frame).
    fn send_with(&mut self, bytes: &[u8], imm: Option<u32>) {
        let mut mr: MemoryRegion = self
            .conn
            .pd()
            .reg_mr(bytes.len().max(1), AccessFlags::LOCAL_WRITE)
            .expect("send buffer");
        mr.write(0, bytes).expect("fill the send buffer");
        let id = self
            .conn
            .qp()
            .post_send(
                SendRequest::new(imm.map_or(WrOp::Send, WrOp::SendWithImm))
                    .sge(mr, 0..bytes.len())
                    .expect("send request"),
            )
            .expect("post send");
        self.frames += 1;
        let deadline = Instant::now() + TIMEOUT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let wc = self.conn.cq().wait_one(left).expect("a completion");
            drop(self.conn.qp().reclaim(&wc));
            if wc.wr_id() == id {
                wc.status().expect("the SEND completed");
                return;
            }
        }
    }
}

/// What the victim reported for one raw connection.
struct Round {
    fault: Fault,
    frames: u64,
    detect_ms: f64,
    as_expected: bool,
}

/// One raw connection: valid messages the victim must deliver, then one broken frame.
/// Whether the device under test has immediate data (what compact frames need).
fn has_immediate_data() -> bool {
    let dev = testkit::device().name;
    verbs::Context::open(&dev)
        .and_then(|c| c.capabilities())
        .expect("query the test device")
        .has(verbs::Capability::ImmediateData)
}

fn round(listener: &Listener, seed: u64, fault: Fault, immediate: bool) -> Round {
    let mut rng = Rng(seed | 1);
    let addr = addr_of(listener);
    let raw = std::thread::spawn(move || RawPeer::connect(addr));
    let victim = listener
        .accept_timeout(TIMEOUT)
        .expect("accept the raw peer");
    let mut raw = raw.join().expect("raw connect");
    let window = raw.victim.window;
    let max_data = raw.victim.frame_size as usize - 16;

    // Valid messages first: the peer really speaks the protocol. (Before an overflow, as
    // many as the credit allows, left unread so none comes back.)
    let valid = match fault {
        Fault::CreditOverflow => window,
        _ => 2,
    };
    let mut sent = Vec::new();
    for i in 0..valid {
        let len = rng.below(max_data as u64) as usize;
        let data = rng.bytes(len);
        // Every other one as a compact frame: the message alone, the header in the immediate.
        if i % 2 == 1 && immediate {
            raw.send_with(&data, Some(compact_imm(Kind::Data as u8)));
        } else {
            raw.send(&data_frame(&data));
        }
        sent.push(data);
    }
    if !matches!(fault, Fault::CreditOverflow) {
        for data in &sent {
            let m = victim
                .recv(TIMEOUT)
                .expect("a valid message from the raw peer");
            assert!(
                m.to_vec() == *data,
                "seed {seed}: a valid message arrived changed"
            );
        }
        sent.clear();
    }

    let mut bad_imm = None;
    let (bad, expected): (Vec<u8>, Option<ProtocolError>) = match fault {
        Fault::RandomBytes => {
            let (f, e) = undecodable(&mut rng, |r| {
                let len = 1 + r.below(max_data as u64 + 15) as usize;
                r.bytes(len)
            });
            (f, Some(e))
        }
        Fault::BitFlip => {
            let (f, e) = undecodable(&mut rng, |r| {
                let mut f = if r.below(2) == 0 {
                    control_frame(r)
                } else {
                    let len = r.below(200) as usize;
                    data_frame(&r.bytes(len))
                };
                // Any header bit but the credit limit's (which decodes whatever it is).
                let byte = [0, 1, 2, 3, 8, 9, 10, 11, 12, 13, 14, 15][r.below(12) as usize];
                f[byte] ^= 1 << r.below(8);
                f
            });
            (f, Some(e))
        }
        Fault::Truncated => {
            let (f, e) = undecodable(&mut rng, |r| {
                let mut f = control_frame(r);
                f.truncate(1 + r.below(f.len() as u64 - 1) as usize);
                f
            });
            (f, Some(e))
        }
        Fault::WrongLength => {
            let (f, e) = undecodable(&mut rng, |r| {
                let mut f = control_frame(r);
                let extra = 1 + r.below(8) as usize;
                f.extend(r.bytes(extra));
                f
            });
            (f, Some(e))
        }
        Fault::BadKind => {
            let (f, e) = undecodable(&mut rng, |r| {
                let mut f = control_frame(r);
                f[0] = if r.below(4) == 0 {
                    0
                } else {
                    9 + r.below(247) as u8
                };
                f
            });
            (f, Some(e))
        }
        // A compact frame whose immediate data names a kind other than DATA.
        Fault::BadImmediate => {
            let kind = loop {
                let k = rng.below(256) as u8;
                if k != Kind::Data as u8 {
                    break k;
                }
            };
            bad_imm = Some(compact_imm(kind));
            let len = rng.below(max_data as u64) as usize;
            (rng.bytes(len), Some(ProtocolError::UnknownKind(kind)))
        }
        // One frame more than the credit the victim granted.
        Fault::CreditOverflow => (
            data_frame(&rng.bytes(32)),
            Some(ProtocolError::CreditExceeded {
                seq: window,
                limit: window,
            }),
        ),
        // The raw peer's credit limit for the victim moves backwards (sent, the victim's
        // count, is not known here: matched by kind).
        Fault::CreditBackwards => (
            frame(Kind::Ping, RAW_WINDOW - 1, 0, &FrameBody::Empty, &[]),
            None,
        ),
    };

    let started = Instant::now();
    raw.send_with(&bad, bad_imm);
    // Wait for the failure without taking a message: taking one would release its credit,
    // and the frame beyond the credit might then be processed within it.
    let deadline = started + TIMEOUT;
    while !victim.is_closed() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_micros(100));
    }
    let detect_ms = started.elapsed().as_secs_f64() * 1e3;
    // Messages delivered before the fault come first, then the error.
    let error = loop {
        match victim.recv(TIMEOUT) {
            Ok(m) => {
                let data = if sent.is_empty() {
                    None
                } else {
                    Some(sent.remove(0))
                };
                let got = m.to_vec();
                let want = data.unwrap_or_else(|| panic!("seed {seed}: a message more than sent"));
                assert!(
                    got == want,
                    "seed {seed}: message of {} bytes, expected {} bytes, first difference at {:?}, {} left",
                    got.len(),
                    want.len(),
                    got.iter().zip(&want).position(|(a, b)| a != b),
                    sent.len()
                );
            }
            Err(e) => break e,
        }
    };
    let as_expected = match (&error, &expected) {
        (
            Error::Closed {
                cause: Some(ConnError::Protocol(got)),
            },
            Some(want),
        ) => got == want,
        (
            Error::Closed {
                cause: Some(ConnError::Protocol(ProtocolError::BadCreditLimit { limit, .. })),
            },
            None,
        ) => *limit == RAW_WINDOW - 1,
        _ => false,
    };
    eprintln!(
        "round seed {seed:#018x} {fault:?}: {} bytes {:02x?}.. -> {error} after {detect_ms:.1} ms (expected {expected:?})",
        bad.len(),
        &bad[..bad.len().min(16)]
    );
    let frames = raw.frames;
    drop(victim);
    drop(raw);
    Round {
        fault,
        frames,
        detect_ms,
        as_expected: as_expected && sent.is_empty(),
    }
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn broken_frames_from_a_raw_peer_end_only_its_connection() {
    let counters = DeviceCounters::read();
    let base = std::env::var("FAULTS_SEED")
        .ok()
        .and_then(|s| u64::from_str_radix(s.trim_start_matches("0x"), 16).ok())
        .unwrap_or(0x5eed_0000_f00d_0000);
    eprintln!("malformed frames: base seed {base:#x} (replay with FAULTS_SEED)");
    let cfg = config().with_max_connections(32);
    let server = Endpoint::with_config(peer_ip(), cfg).expect("victim endpoint");
    let listener = server.listen(0).expect("listen");
    let (by_server, by_client) = connect(&listener);
    let bystander = Bystander::start(by_server, by_client);

    // A device without immediate data (iWARP) sends no compact frame, broken or not.
    let immediate = has_immediate_data();
    let faults: Vec<Fault> = FAULTS
        .into_iter()
        .filter(|f| immediate || !matches!(f, Fault::BadImmediate))
        .collect();
    let rounds: Vec<Round> = (0..ROUNDS)
        .map(|i| {
            round(
                &listener,
                base.wrapping_add(i.wrapping_mul(0x9e37_79b9)),
                faults[i as usize % faults.len()],
                immediate,
            )
        })
        .collect();

    // The listener accepts an ordinary connection afterwards.
    let (again_server, again_client) = connect(&listener);
    let after = echo_traffic(&again_server, &again_client, 1 << 40);
    let (by_tally, by_messages) = bystander.finish();
    // Every failed connection is torn down (bounded wait): only the last ordinary one stays.
    let deadline = Instant::now() + TIMEOUT;
    while server.connections() > 1 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    let left_over = server.connections();

    let tally = Tally {
        sent: by_tally.sent + after.sent,
        received: by_tally.received + after.received,
        corrupted: by_tally.corrupted + after.corrupted,
        secs: by_tally.secs,
    };
    let first_detect = rounds.first().map(|r| r.detect_ms);
    let max_detect = rounds.iter().map(|r| r.detect_ms).fold(0.0, f64::max);
    let mut figures = Figures::new(
        "malformed frames",
        "raw peer: 8 kinds of broken frame",
        tally,
    );
    figures.detect_ms = first_detect;
    figures.kept_serving = after.received == after.sent && by_tally.received == by_tally.sent;
    figures.checks = vec![
        (
            "every raw connection ended with the expected protocol error",
            rounds.iter().all(|r| r.as_expected),
        ),
        ("the failed connections were torn down", left_over == 1),
    ];
    figures.extra = serde_json::json!({
        "rounds": rounds.len(),
        "frames_injected": rounds.iter().map(|r| r.frames).sum::<u64>(),
        "broken_frames": rounds.len(),
        "detect_ms_max": max_detect,
        "base_seed": format!("{base:#x}"),
        "faults": rounds.iter().map(|r| serde_json::json!({
            "fault": format!("{:?}", r.fault),
            "detect_ms": r.detect_ms,
            "ok": r.as_expected,
        })).collect::<Vec<_>>(),
        "bystander_messages": by_messages,
        "connections_left": left_over,
    });
    figures.counters_before = Some(counters);
    figures.record();
}
