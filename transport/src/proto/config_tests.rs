//! Host tests of the protocol configuration and the connect private data: defaults, setters,
//! refused values and versions, and the refusal that follows the connect info.

use super::*;

#[test]
fn default_config_is_valid_and_the_documented_one() {
    let c = Config::default();
    c.validate().unwrap();
    assert_eq!(c.eager_limit(), 4096);
    assert_eq!(
        (c.window(), c.reserved_credits(), c.sq_depth()),
        (32, 2, 64)
    );
    assert_eq!((c.frame_size(), c.rndv_chunk_size()), (4112, 64 << 10));
    assert_eq!((c.max_chunks_in_flight(), c.max_reads_in_flight()), (16, 4));
    assert_eq!(c.max_message(), 1 << 30);
    assert_eq!(c.keepalive_interval(), Duration::from_secs(1));
    assert_eq!(c.keepalive_timeout(), Duration::from_secs(10));
}

#[test]
fn each_setter_sets_what_its_getter_returns() {
    let c = Config::default()
        .with_window(100)
        .with_reserved_credits(3)
        .with_sq_depth(50)
        .with_frame_size(1000)
        .with_rndv_chunk_size(4096)
        .with_max_chunks_in_flight(7)
        .with_max_reads_in_flight(6)
        .with_max_message(5000)
        .with_keepalive_interval(Duration::from_millis(20))
        .with_keepalive_timeout(Duration::from_millis(90));
    assert_eq!(
        (c.window(), c.reserved_credits(), c.sq_depth()),
        (100, 3, 50)
    );
    assert_eq!((c.frame_size(), c.rndv_chunk_size()), (1000, 4096));
    assert_eq!((c.max_chunks_in_flight(), c.max_reads_in_flight()), (7, 6));
    assert_eq!(c.max_message(), 5000);
    assert_eq!(c.keepalive_interval(), Duration::from_millis(20));
    assert_eq!(c.keepalive_timeout(), Duration::from_millis(90));
    c.validate().unwrap();
    // A setter takes any value: the check is validate's, as before.
    assert!(Config::default().with_sq_depth(0).validate().is_err());
}

#[test]
fn bad_config_names_the_field() {
    let c = Config::default().with_window(5);
    let e = c.validate().unwrap_err();
    assert!(
        matches!(
            e,
            ConfigError::OutOfRange {
                field: "window",
                ..
            }
        ),
        "{e}"
    );
    assert!(e.to_string().contains("reserved_credits"));
    let c = Config::default().with_keepalive_timeout(Duration::from_millis(10));
    assert!(matches!(
        c.validate(),
        Err(ConfigError::OutOfRange {
            field: "keepalive_timeout",
            ..
        })
    ));
    let c = Config::default().with_keepalive_timeout(Duration::MAX);
    assert!(matches!(
        c.validate(),
        Err(ConfigError::OutOfRange {
            field: "keepalive_timeout",
            ..
        })
    ));
    let c = Config::default().with_max_reads_in_flight(127);
    assert!(matches!(
        c.validate(),
        Err(ConfigError::OutOfRange {
            field: "max_reads_in_flight",
            ..
        })
    ));
}

#[test]
fn connect_info_round_trips_and_fits_cm_limits() {
    let info = Config::default().connect_info();
    let b = info.encode();
    assert!(b.len() <= 56);
    assert_eq!(&b[0..4], b"RDRS");
    assert_eq!(ConnectInfo::decode(&b), Ok(info));
    // CM pads private data with zeros
    let mut padded = [0u8; 56];
    padded[..24].copy_from_slice(&b);
    assert_eq!(ConnectInfo::decode(&padded), Ok(info));
}

#[test]
fn a_side_without_immediate_data_says_so_and_undefined_flags_are_refused() {
    let ours = Config {
        immediate_data: false,
        ..Config::default()
    };
    let info = ours.connect_info();
    assert_eq!(info.flags, ConnectInfo::FLAG_NO_IMMEDIATE);
    assert_eq!(ConnectInfo::decode(&info.encode()), Ok(info));
    assert_eq!(Config::default().connect_info().flags, 0);
    let mut b = info.encode();
    b[6] = 0b10;
    assert!(matches!(
        ConnectInfo::decode(&b),
        Err(HandshakeError::Invalid { field: "flags", .. })
    ));
}

#[test]
fn other_versions_and_foreign_peers_are_refused() {
    let mut b = Config::default().connect_info().encode();
    // Version 3 had no NO_IMMEDIATE flag: a peer that speaks it is refused.
    b[4] = 3;
    let e = ConnectInfo::decode(&b).unwrap_err();
    assert_eq!(e, HandshakeError::VersionMismatch { ours: 4, theirs: 3 });
    let msg = e.to_string();
    assert!(
        msg.contains("version 4") && msg.contains("version 3"),
        "{msg}"
    );
    assert!(matches!(
        ConnectInfo::decode(b"XXXXXXXXXXXXXXXXXXXXXXXXXX"),
        Err(HandshakeError::BadMagic { .. })
    ));
    assert!(matches!(
        ConnectInfo::decode(b"RD"),
        Err(HandshakeError::Truncated { .. })
    ));
    let b = Config::default().connect_info().encode();
    assert!(matches!(
        ConnectInfo::decode(&b[..20]),
        Err(HandshakeError::Truncated { .. })
    ));
    let mut z = b;
    z[8..12].copy_from_slice(&0u32.to_le_bytes());
    assert!(matches!(
        ConnectInfo::decode(&z),
        Err(HandshakeError::Invalid {
            field: "window",
            ..
        })
    ));
}

#[test]
fn a_refusal_rides_after_the_connect_info_and_padding_is_no_reason() {
    let info = Config::default().connect_info();
    let b = Refusal::Full { max: 256 }.encode(&info);
    assert_eq!(ConnectInfo::decode(&b).unwrap(), info);
    assert_eq!(Refusal::decode(&b), Some(Refusal::Full { max: 256 }));
    let mut padded = info.encode().to_vec();
    assert_eq!(Refusal::decode(&padded), None);
    padded.resize(56, 0);
    assert_eq!(Refusal::decode(&padded), None);
}
