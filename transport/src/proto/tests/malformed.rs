//! Malformed frames fail the connection with a `ProtocolError` naming the fault; nothing
//! panics.

use std::time::Instant;

use proptest::prelude::*;

use crate::proto::{
    encode_body, Action, Config, ConnError, Connection, FrameBody, Header, Kind, ProtocolError,
    RemoteChunk, FLAG_BATCH, FLAG_NO_HANDLER, FLAG_REQUEST, FLAG_RESPONSE,
};

use super::small_config;

fn conn() -> Connection<Vec<u8>> {
    let cfg = small_config(6, 2, 6, 2, 1);
    Connection::new(&cfg, &cfg.connect_info(), Instant::now()).unwrap()
}

fn frame(kind: Kind, flags: u8, limit: u32, tag: u64, body: FrameBody) -> Vec<u8> {
    let mut f = Header {
        kind,
        flags,
        credit_limit: limit,
        tag,
    }
    .encode()
    .to_vec();
    let (b, n) = encode_body(&body);
    f.extend_from_slice(&b[..n]);
    f
}

fn feed(c: &mut Connection<Vec<u8>>, f: &[u8]) -> Result<(), ProtocolError> {
    c.on_receive(f, f.to_vec(), Instant::now())
}

/// Feeds a compact DATA frame: immediate data `imm`, the message `m` from offset 0.
fn feed_compact(c: &mut Connection<Vec<u8>>, imm: u32, m: &[u8]) -> Result<(), ProtocolError> {
    c.on_receive_compact(imm, m.len(), m.to_vec(), Instant::now())
}

/// The failure `c` reported, after `e` was returned.
fn reported(c: &mut Connection<Vec<u8>>) -> Vec<Option<ConnError>> {
    let mut closed = Vec::new();
    while let Some(a) = c.poll_action() {
        if let Action::Closed { error } = a {
            closed.push(error);
        }
    }
    closed
}

/// A compact DATA frame's immediate data: kind `kind`, the credit limit's low 24 bits.
fn imm(kind: Kind, limit: u32) -> u32 {
    ((kind as u32) << 24) | (limit & 0xff_ffff)
}

#[test]
fn compact_frame_faults_are_named() {
    // A good one is delivered from offset 0.
    let mut c = conn();
    feed_compact(&mut c, imm(Kind::Data, L), b"abc").unwrap();
    let d = std::iter::from_fn(|| c.poll_action())
        .find_map(|a| match a {
            Action::Deliver(d) => Some(d),
            _ => None,
        })
        .expect("delivered");
    assert!(matches!(&d.parts, crate::proto::Parts::Bare(b) if b[..3] == *b"abc"));
    assert!(d.holds_credit());

    type Case<'a> = (u32, &'a [u8], fn(&ProtocolError) -> bool);
    let cases: [Case<'_>; 4] = [
        // the kind byte names no compact frame
        (imm(Kind::Credit, L), b"x", |e| {
            *e == ProtocolError::UnknownKind(Kind::Credit as u8)
        }),
        (0xff00_0000 | L, b"x", |e| {
            *e == ProtocolError::UnknownKind(0xff)
        }),
        // a limit behind the one granted so far (rebuilt as far ahead: implausible)
        (imm(Kind::Data, L - 1), b"x", |e| {
            matches!(e, ProtocolError::BadCreditLimit { .. })
        }),
        // longer than the frames we announced (80 bytes, 16 of them header)
        (imm(Kind::Data, L), &[0; 65], |e| {
            matches!(e, ProtocolError::FrameTooLarge { len: 81, limit: 80 })
        }),
    ];
    for (i, m, check) in cases {
        let mut c = conn();
        let e = feed_compact(&mut c, i, m).unwrap_err();
        assert!(check(&e), "{i:#x}: unexpected error {e:?}");
        assert_eq!(reported(&mut c), vec![Some(ConnError::Protocol(e))]);
        assert_eq!(
            feed_compact(&mut c, i, m),
            Ok(()),
            "the dead connection ignores it"
        );
    }

    // More compact frames than the window grants.
    let mut c = conn();
    for _ in 0..6 {
        feed_compact(&mut c, imm(Kind::Data, L), b"").unwrap();
    }
    let e = feed_compact(&mut c, imm(Kind::Data, L), b"").unwrap_err();
    assert!(matches!(e, ProtocolError::CreditExceeded { .. }), "{e:?}");

    // After the peer's CLOSE.
    let mut c = conn();
    feed(&mut c, &frame(Kind::Close, 0, L, 0, FrameBody::Empty)).unwrap();
    let e = feed_compact(&mut c, imm(Kind::Data, L), b"x").unwrap_err();
    assert_eq!(e, ProtocolError::AfterClose(Kind::Data as u8));

    // From a peer whose window is too wide for 24 bits of limit.
    let ours = small_config(6, 2, 6, 2, 1);
    let wide = small_config(6, 2, 6, 2, 1).with_window(1 << 24);
    let mut c: Connection<Vec<u8>> =
        Connection::new(&ours, &wide.connect_info(), Instant::now()).unwrap();
    let e = feed_compact(&mut c, imm(Kind::Data, 1 << 24), b"x").unwrap_err();
    assert_eq!(e, ProtocolError::CompactNotAllowed { window: 1 << 24 });
    assert!(e.to_string().contains("full headers"), "{e}");
    // ... and such a connection sends full headers itself.
    let mut c: Connection<Vec<u8>> =
        Connection::new(&wide, &ours.connect_info(), Instant::now()).unwrap();
    let header = Header {
        kind: Kind::Data,
        flags: 0,
        credit_limit: 1,
        tag: 0,
    }
    .encode();
    assert_eq!(c.compact_imm(&header), None);
    c.close();
}

/// Feeds the frames; the last must fail with an error matching `check`, and the connection
/// must report exactly that failure.
fn expect_failure(frames: &[Vec<u8>], check: impl Fn(&ProtocolError) -> bool) {
    let mut c = conn();
    let (last, ok) = frames.split_last().unwrap();
    for f in ok {
        feed(&mut c, f).expect("valid frame");
    }
    let e = feed(&mut c, last).unwrap_err();
    assert!(check(&e), "unexpected error {e:?}");
    let mut closed = Vec::new();
    while let Some(a) = c.poll_action() {
        if let Action::Closed { error } = a {
            closed.push(error);
        }
    }
    assert_eq!(closed, vec![Some(ConnError::Protocol(e))]);
    assert!(c.is_closed());
    // the dead connection ignores whatever else comes
    assert_eq!(feed(&mut c, last), Ok(()));
    assert!(c.poll_action().is_none());
}

const L: u32 = 6; // the credit limit a fresh peer grants

/// RNDV_START of message 1, 100 bytes long.
fn rndv_start() -> Vec<u8> {
    let body = FrameBody::RndvStart {
        total: 100,
        call: 0,
    };
    frame(Kind::RndvStart, 0, L, 1, body)
}

/// RNDV_CHUNK of message 1 at `offset`, readable at `remote`.
fn rndv_chunk(offset: u64, remote: RemoteChunk) -> Vec<u8> {
    frame(
        Kind::RndvChunk,
        0,
        L,
        1,
        FrameBody::RndvChunk { offset, remote },
    )
}

#[test]
fn without_immediate_data_on_either_side_no_frame_goes_compact_or_is_taken() {
    let cfg = small_config(6, 2, 6, 2, 1);
    let plain = Header {
        kind: Kind::Data,
        flags: 0,
        credit_limit: L,
        tag: 0,
    }
    .encode();
    // Both sides with immediate data: a plain message may go compact.
    let both = Connection::<Vec<u8>>::new(&cfg, &cfg.connect_info(), Instant::now()).unwrap();
    assert!(both.compact_imm(&plain).is_some());
    let no_imm = Config {
        immediate_data: false,
        ..cfg.clone()
    };
    // Our device without it, or the peer's (its handshake flag): never, and one received
    // anyway fails the connection with the error that says so.
    for (ours, peer) in [(&no_imm, &cfg), (&cfg, &no_imm)] {
        let mut c = Connection::<Vec<u8>>::new(ours, &peer.connect_info(), Instant::now()).unwrap();
        assert_eq!(c.compact_imm(&plain), None);
        let e = feed_compact(&mut c, imm(Kind::Data, L), b"abc").unwrap_err();
        assert_eq!(e, ProtocolError::CompactWithoutImmediate);
        assert_eq!(
            reported(&mut c),
            vec![Some(ConnError::Protocol(
                ProtocolError::CompactWithoutImmediate
            ))]
        );
    }
}

#[test]
fn each_fault_is_named() {
    let remote = RemoteChunk {
        addr: 1,
        rkey: 2,
        len: 10,
    };
    let start = rndv_start();
    let chunk = |offset, len| rndv_chunk(offset, RemoteChunk { len, ..remote });
    expect_failure(&[vec![5, 0, 0]], |e| {
        matches!(e, ProtocolError::BadLength { .. })
    });
    expect_failure(&[vec![42; 16]], |e| {
        matches!(e, ProtocolError::UnknownKind(42))
    });
    let mut f = frame(Kind::Ping, 0, L, 0, FrameBody::Empty);
    f[1] = 0x40;
    expect_failure(&[f], |e| {
        matches!(e, ProtocolError::BadFlags { flags: 0x40, .. })
    });
    let mut f = frame(Kind::Ping, 0, L, 0, FrameBody::Empty);
    f[3] = 1;
    expect_failure(&[f], |e| matches!(e, ProtocolError::ReservedNonZero(0x100)));
    expect_failure(&[start[..30].to_vec()], |e| {
        matches!(
            e,
            ProtocolError::BadLength {
                what: "RNDV_START",
                ..
            }
        )
    });
    expect_failure(&[chunk(0, 10)], |e| {
        matches!(e, ProtocolError::UnknownMessage(1))
    });
    // A request, a response or a "no handler" answer with call id 0, eager or rendezvous:
    // no call has it.
    let data = Kind::Data as u8;
    for flags in [FLAG_REQUEST, FLAG_RESPONSE, FLAG_RESPONSE | FLAG_NO_HANDLER] {
        let len = if flags & FLAG_NO_HANDLER != 0 { 0 } else { 3 };
        let mut f = frame(Kind::Data, flags, L, 0, FrameBody::Data { len: 0 });
        f.extend_from_slice(&b"req"[..len]);
        expect_failure(&[f], |e| *e == ProtocolError::ZeroCallId(data));
    }
    let start_request = frame(
        Kind::RndvStart,
        FLAG_REQUEST,
        L,
        1,
        FrameBody::RndvStart {
            total: 100,
            call: 0,
        },
    );
    expect_failure(&[start_request], |e| {
        *e == ProtocolError::ZeroCallId(Kind::RndvStart as u8)
    });
    // A batch whose second message runs past the frame's end.
    let mut batch = frame(Kind::Data, FLAG_BATCH, L, 0, FrameBody::Data { len: 0 });
    batch.extend_from_slice(&[1, 0, 0, 0, 7, 9, 0, 0, 0, 1, 2]);
    expect_failure(&[batch], |e| {
        matches!(
            e,
            ProtocolError::BadBatch {
                at: 5,
                len: 9,
                body: 11
            }
        )
    });
    expect_failure(&[start.clone(), chunk(0, 101)], |e| {
        matches!(e, ProtocolError::BadChunk { total: 100, .. })
    });
    expect_failure(&[start.clone(), chunk(10, 10)], |e| {
        matches!(e, ProtocolError::BadChunk { expected: 0, .. })
    });
    expect_failure(&[start.clone(), chunk(0, 0)], |e| {
        matches!(e, ProtocolError::BadChunk { .. })
    });
    expect_failure(
        &[start.clone(), chunk(0, 50), chunk(50, 50), chunk(100, 1)],
        |e| matches!(e, ProtocolError::UnknownMessage(1)),
    );
    expect_failure(&[start.clone(), start.clone()], |e| {
        matches!(e, ProtocolError::DuplicateMessage(1))
    });
    let huge = frame(
        Kind::RndvStart,
        0,
        L,
        1,
        FrameBody::RndvStart {
            total: 100_001,
            call: 0,
        },
    );
    expect_failure(&[huge], |e| {
        matches!(e, ProtocolError::MessageTooLarge { max: 100_000, .. })
    });
    expect_failure(
        &[frame(
            Kind::RndvAck,
            0,
            L,
            3,
            FrameBody::RndvAck { offset: 0 },
        )],
        |e| matches!(e, ProtocolError::UnknownAck { msg: 3, offset: 0 }),
    );
    expect_failure(&[frame(Kind::Credit, 0, L + 1, 0, FrameBody::Empty)], |e| {
        matches!(e, ProtocolError::BadCreditLimit { .. })
    });
    expect_failure(
        &[
            frame(Kind::Credit, 0, L, 0, FrameBody::Empty),
            frame(Kind::Credit, 0, L - 1, 0, FrameBody::Empty),
        ],
        |e| {
            matches!(
                e,
                ProtocolError::BadCreditLimit {
                    limit: 5,
                    previous: 6,
                    ..
                }
            )
        },
    );
    let close = frame(Kind::Close, 0, L, 0, FrameBody::Empty);
    let mut data = Header {
        kind: Kind::Data,
        flags: 0,
        credit_limit: L,
        tag: 0,
    }
    .encode()
    .to_vec();
    data.extend_from_slice(b"late");
    expect_failure(&[close, data.clone()], |e| {
        matches!(e, ProtocolError::AfterClose(1))
    });
    let mut big = Header {
        kind: Kind::Data,
        flags: FLAG_REQUEST,
        credit_limit: L,
        tag: 1,
    }
    .encode()
    .to_vec();
    big.resize(81, 0);
    expect_failure(&[big], |e| {
        matches!(e, ProtocolError::FrameTooLarge { len: 81, limit: 80 })
    });
    // beyond the granted credit: six unreleased DATA frames fill the window
    let mut frames = vec![data.clone(); 7];
    frames[6] = data;
    expect_failure(&frames, |e| {
        matches!(e, ProtocolError::CreditExceeded { seq: 6, limit: 6 })
    });
}

#[test]
fn a_chunk_longer_than_this_side_reads_is_named_and_one_as_long_is_taken() {
    let mut cfg = small_config(6, 2, 6, 2, 1);
    cfg.max_read_chunk = 40;
    let start = rndv_start();
    let chunk = |offset, len| {
        let remote = RemoteChunk {
            addr: 0x1000,
            rkey: 7,
            len,
        };
        rndv_chunk(offset, remote)
    };
    let mut c = Connection::new(&cfg, &cfg.connect_info(), Instant::now()).unwrap();
    feed(&mut c, &start).unwrap();
    feed(&mut c, &chunk(0, 40)).expect("a chunk as long as the limit");
    let e = feed(&mut c, &chunk(40, 41)).unwrap_err();
    assert_eq!(
        e,
        ProtocolError::ChunkTooLarge {
            msg: 1,
            len: 41,
            max: 40
        }
    );
    assert!(e.to_string().contains("largest class"), "{e}");
    assert!(reported(&mut c).contains(&Some(ConnError::Protocol(e))));
}

#[test]
fn failure_hands_back_held_buffers() {
    let mut c = conn();
    let mut data = Header {
        kind: Kind::Data,
        flags: 0,
        credit_limit: L,
        tag: 0,
    }
    .encode()
    .to_vec();
    data.extend_from_slice(b"x");
    // a large message in progress keeps the next eager message waiting behind it
    feed(
        &mut c,
        &frame(
            Kind::RndvStart,
            0,
            L,
            1,
            FrameBody::RndvStart { total: 10, call: 0 },
        ),
    )
    .unwrap();
    feed(&mut c, &data).unwrap();
    let e = feed(&mut c, &[0; 3]).unwrap_err();
    let mut released = 0;
    let mut order = Vec::new();
    while let Some(a) = c.poll_action() {
        match a {
            Action::Release(b) => {
                assert_eq!(b, data);
                released += 1;
                order.push("release");
            }
            Action::Closed { error } => {
                assert_eq!(error, Some(ConnError::Protocol(e.clone())));
                order.push("closed");
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(released, 1);
    assert_eq!(order, ["closed", "release"]);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(10_000))]

    /// Arbitrary frames, after a few valid ones, never panic the connection: each is accepted
    /// or fails it with a protocol error, after which it stays closed.
    #[test]
    fn arbitrary_frames_never_panic(
        frames in proptest::collection::vec(
            prop_oneof![
                proptest::collection::vec(any::<u8>(), 0..48).prop_map(|f| (None, f)),
                (1u8..9, 0u8..4, 0u32..8, 0u64..3, proptest::collection::vec(any::<u8>(), 0..32)).prop_map(|(k, fl, l, t, b)| {
                    let mut f = vec![k, fl, 0, 0];
                    f.extend_from_slice(&l.to_le_bytes());
                    f.extend_from_slice(&t.to_le_bytes());
                    f.extend_from_slice(&b);
                    (None, f)
                }),
                // compact DATA frames: any immediate data, and some near-valid ones
                (any::<u32>(), proptest::collection::vec(any::<u8>(), 0..100)).prop_map(|(i, m)| (Some(i), m)),
                (0u32..12, proptest::collection::vec(any::<u8>(), 0..70)).prop_map(|(l, m)| (Some(imm(Kind::Data, l)), m)),
            ],
            1..12,
        )
    ) {
        let mut c = conn();
        let mut failed = false;
        let mut closed = Vec::new();
        for (compact, f) in &frames {
            let r = match compact {
                Some(i) => feed_compact(&mut c, *i, f),
                None => feed(&mut c, f),
            };
            if !closed.is_empty() {
                prop_assert_eq!(&r, &Ok(()), "an ended connection ignores frames");
            }
            if let Err(e) = r {
                failed = true;
                prop_assert!(!e.to_string().is_empty());
            }
            while let Some(a) = c.poll_action() {
                if let Action::Closed { error } = a {
                    closed.push(error);
                }
            }
            let _ = c.poll_timeout();
        }
        prop_assert!(closed.len() <= 1, "Closed at most once");
        prop_assert_eq!(failed, matches!(closed.first(), Some(Some(_))), "a protocol error is reported as the failure");
    }
}
