//! Host tests of the frame format: every kind and body round-trips, compact and batch forms,
//! and every malformed frame is refused by name.

use super::*;
use proptest::prelude::*;

#[test]
fn every_kind_decodes_from_its_byte_and_no_other_byte_is_a_kind() {
    for &kind in Kind::ALL {
        assert_eq!(Kind::try_from(kind as u8), Ok(kind));
    }
    for b in 0..=u8::MAX {
        if !Kind::ALL.iter().any(|&k| k as u8 == b) {
            assert_eq!(Kind::try_from(b), Err(ProtocolError::UnknownKind(b)));
        }
    }
}

fn frame(h: Header, body: &FrameBody) -> Vec<u8> {
    let (b, n) = encode_body(body);
    let mut f = h.encode().to_vec();
    f.extend_from_slice(&b[..n]);
    f
}

#[test]
fn only_a_plain_message_header_has_a_compact_form_and_it_round_trips() {
    let plain = Header {
        kind: Kind::Data,
        flags: 0,
        credit_limit: 0x1234_5678,
        tag: 0,
    };
    let imm = compact_imm(&plain.encode()).expect("a plain message goes compact");
    assert_eq!(
        imm >> COMPACT_LIMIT_BITS,
        Kind::Data as u32,
        "kind in the top byte"
    );
    assert_eq!(
        decode_compact(imm),
        Ok(0x34_5678),
        "the limit's low 24 bits"
    );
    for h in [
        Header {
            flags: FLAG_REQUEST,
            tag: 9,
            ..plain
        },
        Header {
            flags: FLAG_RESPONSE,
            tag: 9,
            ..plain
        },
        Header {
            flags: FLAG_BATCH,
            ..plain
        },
        Header { tag: 3, ..plain },
        Header {
            kind: Kind::Credit,
            ..plain
        },
        Header {
            kind: Kind::RndvStart,
            ..plain
        },
    ] {
        assert_eq!(compact_imm(&h.encode()), None, "{h:?} keeps its header");
    }
    let mut reserved = plain.encode();
    reserved[2] = 1;
    assert_eq!(compact_imm(&reserved), None);
}

proptest! {
    #[test]
    fn any_immediate_decodes_or_names_its_kind(imm in any::<u32>()) {
        match decode_compact(imm) {
            Ok(low) => {
                prop_assert_eq!(imm >> 24, Kind::Data as u32);
                prop_assert_eq!(low, imm & 0xff_ffff);
            }
            Err(e) => prop_assert_eq!(e, ProtocolError::UnknownKind((imm >> 24) as u8)),
        }
    }
}

fn hdr(kind: Kind, flags: u8, tag: u64) -> Header {
    Header {
        kind,
        flags,
        credit_limit: 0xdead_beef,
        tag,
    }
}

#[test]
fn header_layout_is_little_endian() {
    let h = Header {
        kind: Kind::RndvAck,
        flags: 0,
        credit_limit: 0x0403_0201,
        tag: 0x0c0b_0a09_0807_0605,
    };
    assert_eq!(
        h.encode(),
        [4, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]
    );
}

#[test]
fn every_kind_round_trips() {
    let remote = RemoteChunk {
        addr: 0x1122_3344_5566_7788,
        rkey: 0xabcd,
        len: 4096,
    };
    let cases = [
        (
            hdr(Kind::RndvStart, FLAG_REQUEST, 7),
            FrameBody::RndvStart {
                total: 1 << 33,
                call: 9,
            },
        ),
        (
            hdr(Kind::RndvChunk, 0, 7),
            FrameBody::RndvChunk {
                offset: 1 << 20,
                remote,
            },
        ),
        (hdr(Kind::RndvAck, 0, 7), FrameBody::RndvAck { offset: 77 }),
        (hdr(Kind::Credit, 0, 0), FrameBody::Empty),
        (hdr(Kind::Close, 0, 0), FrameBody::Empty),
        (hdr(Kind::Ping, 0, 0), FrameBody::Empty),
        (hdr(Kind::Pong, 0, 0), FrameBody::Empty),
        (
            hdr(Kind::Data, FLAG_RESPONSE | FLAG_NO_HANDLER, 3),
            FrameBody::Data { len: 0 },
        ),
    ];
    for (h, b) in cases {
        assert_eq!(decode(&frame(h, &b)), Ok((h, b)), "{h:?}");
    }
    let mut data = hdr(Kind::Data, FLAG_REQUEST, 5).encode().to_vec();
    data.extend_from_slice(b"hello");
    assert_eq!(
        decode(&data),
        Ok((hdr(Kind::Data, FLAG_REQUEST, 5), FrameBody::Data { len: 5 }))
    );
}

#[test]
fn malformed_frames_are_named() {
    assert!(matches!(
        decode(&[1; 15]),
        Err(ProtocolError::BadLength { .. })
    ));
    let mut f = hdr(Kind::Ping, 0, 0).encode();
    f[0] = 9;
    assert_eq!(decode(&f), Err(ProtocolError::UnknownKind(9)));
    f[0] = 0;
    assert_eq!(decode(&f), Err(ProtocolError::UnknownKind(0)));
    let mut f = hdr(Kind::Ping, 0, 0).encode();
    f[2] = 1;
    assert_eq!(decode(&f), Err(ProtocolError::ReservedNonZero(1)));
    for flags in [
        0x10,
        0x80,
        FLAG_REQUEST | FLAG_RESPONSE,
        FLAG_NO_HANDLER,
        FLAG_REQUEST | FLAG_NO_HANDLER,
        FLAG_BATCH | FLAG_REQUEST,
        FLAG_BATCH | FLAG_RESPONSE,
    ] {
        let f = hdr(Kind::Data, flags, 1).encode();
        assert!(
            matches!(decode(&f), Err(ProtocolError::BadFlags { .. })),
            "{flags}"
        );
    }
    let f = hdr(Kind::Ping, FLAG_REQUEST, 0).encode();
    assert!(matches!(decode(&f), Err(ProtocolError::BadFlags { .. })));
    let f = hdr(Kind::Credit, 0, 3).encode();
    assert!(matches!(
        decode(&f),
        Err(ProtocolError::NonZeroField { field: "tag", .. })
    ));
    let f = hdr(Kind::Data, 0, 3).encode();
    assert!(matches!(
        decode(&f),
        Err(ProtocolError::NonZeroField { field: "tag", .. })
    ));
    // truncated and overlong bodies
    let full = frame(
        hdr(Kind::RndvChunk, 0, 1),
        &FrameBody::RndvChunk {
            offset: 0,
            remote: RemoteChunk {
                addr: 1,
                rkey: 2,
                len: 3,
            },
        },
    );
    for n in 16..full.len() {
        assert!(matches!(
            decode(&full[..n]),
            Err(ProtocolError::BadLength {
                what: "RNDV_CHUNK",
                ..
            })
        ));
    }
    let mut long = full.clone();
    long.push(0);
    assert!(matches!(
        decode(&long),
        Err(ProtocolError::BadLength { .. })
    ));
    let start = frame(
        hdr(Kind::RndvStart, 0, 1),
        &FrameBody::RndvStart { total: 5, call: 1 },
    );
    assert!(matches!(
        decode(&start),
        Err(ProtocolError::NonZeroField {
            field: "call id",
            ..
        })
    ));
}

#[test]
fn decodes_from_the_head_alone() {
    let mut data = hdr(Kind::Data, FLAG_REQUEST, 5).encode().to_vec();
    data.resize(1000, 7);
    assert_eq!(
        decode_head(&data[..MAX_HEAD], 1000),
        Ok((
            hdr(Kind::Data, FLAG_REQUEST, 5),
            FrameBody::Data { len: 984 }
        ))
    );
    assert!(matches!(
        decode_head(&data[..16], 1000),
        Err(ProtocolError::BadLength {
            what: "frame head",
            ..
        })
    ));
    let ack = frame(hdr(Kind::RndvAck, 0, 1), &FrameBody::RndvAck { offset: 9 });
    assert_eq!(decode_head(&ack, ack.len()), decode(&ack));
    assert!(matches!(
        decode_head(&ack, 30),
        Err(ProtocolError::BadLength { .. })
    ));
}

#[test]
fn batch_flag_only_on_plain_data_and_batches_list_their_messages() {
    let f = hdr(Kind::Data, FLAG_BATCH, 0).encode();
    assert_eq!(
        decode(&f),
        Ok((hdr(Kind::Data, FLAG_BATCH, 0), FrameBody::Data { len: 0 }))
    );
    let f = hdr(Kind::Credit, FLAG_BATCH, 0).encode();
    assert!(matches!(decode(&f), Err(ProtocolError::BadFlags { .. })));

    let mut body = Vec::new();
    for m in [&b"ab"[..], b"", b"xyz"] {
        body.extend_from_slice(&(m.len() as u32).to_le_bytes());
        body.extend_from_slice(m);
    }
    let entries: Vec<_> = BatchEntries::parse(&body).unwrap().collect();
    assert_eq!(entries, vec![(4, 2), (10, 0), (14, 3)]);
    // Empty, a length cut short, an entry past the end, bytes after the last entry.
    for (bad, at) in [
        (&[][..], 0),
        (&[1, 0, 0][..], 0),
        (&[3, 0, 0, 0, 1, 2][..], 0),
        (&[0, 0, 0, 0, 9][..], 4),
    ] {
        assert!(
            matches!(BatchEntries::parse(bad), Err(ProtocolError::BadBatch { at: a, .. }) if a == at),
            "{bad:?}"
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(10_000))]
    #[test]
    fn decoder_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
        let _ = decode(&bytes);
    }

    #[test]
    fn batch_parser_never_panics_and_its_entries_tile_the_body(
        bytes in proptest::collection::vec(prop_oneof![0u8..8, any::<u8>()], 0..64),
    ) {
        if let Ok(entries) = BatchEntries::parse(&bytes) {
            let mut at = 0;
            for (offset, len) in entries {
                prop_assert_eq!(offset, at + BATCH_ENTRY_HEADER);
                at = offset + len;
            }
            prop_assert_eq!(at, bytes.len());
        }
    }

    #[test]
    fn decoder_never_panics_on_near_valid_frames(
        kind in 0u8..10, flags in any::<u8>(), limit in any::<u32>(), tag in 0u64..3,
        body in proptest::collection::vec(any::<u8>(), 0..40),
    ) {
        let mut f = vec![kind, flags, 0, 0];
        f.extend_from_slice(&limit.to_le_bytes());
        f.extend_from_slice(&tag.to_le_bytes());
        f.extend_from_slice(&body);
        if let Ok((h, b)) = decode(&f) {
            // whatever decodes re-encodes to the same bytes
            let mut again = h.encode().to_vec();
            match b {
                FrameBody::Data { len } => { prop_assert_eq!(len, body.len()); again.extend_from_slice(&body); }
                other => { let (e, n) = encode_body(&other); again.extend_from_slice(&e[..n]); }
            }
            prop_assert_eq!(again, f);
        }
    }
}

#[test]
fn decoder_never_panics_100k() {
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig::with_cases(100_000));
    runner
        .run(&proptest::collection::vec(any::<u8>(), 0..48), |bytes| {
            let _ = decode(&bytes);
            Ok(())
        })
        .unwrap();
}
