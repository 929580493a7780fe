//! Bad keys: a peer reads or writes the victim's exposed memory with an rkey that names
//! nothing, a token forged past the exposed bytes, a read the region does not allow, or a key
//! already revoked. The device refuses each (the attacker gets a remote access error), the
//! victim's exposed bytes and the regions around them are unchanged, and the victim's endpoint
//! serves a bystander connection throughout and a new connection afterwards.
use std::time::Instant;

use transport::{Access, Conn, Endpoint, Error, Region, Token};

use super::*;

/// Bytes of each exposed region.
const REGION: usize = 4096;

/// What the attacker does with its (forged) token.
#[derive(Clone, Copy)]
enum Op {
    Read { offset: u64, len: usize },
    Write { offset: u64, len: usize },
}

/// A region and a copy of what it must still hold.
struct Guarded {
    region: Region,
    expected: Vec<u8>,
}

impl Guarded {
    fn new(ep: &Endpoint, access: Access, seed: u64) -> Guarded {
        let region = ep.expose(REGION, access).expect("expose");
        let expected = pattern(seed, REGION);
        region.write(0, &expected).expect("fill the region");
        Guarded { region, expected }
    }

    /// Bytes that differ from what the region held before the attack.
    fn changed(&self) -> u64 {
        let mut now = vec![0u8; REGION];
        self.region.read(0, &mut now).expect("read the region");
        now.iter()
            .zip(&self.expected)
            .filter(|(a, b)| a != b)
            .count() as u64
    }
}

/// One attack: `prepare` may revoke the target and returns the token to use (forged or not);
/// the attacker's `op` must fail at the device with a remote access error.
fn attack(
    name: &'static str,
    target_access: Access,
    op: Op,
    prepare: impl FnOnce(&Conn, Guarded) -> (Token, Option<Guarded>),
) {
    let counters = DeviceCounters::read();
    let victim = Endpoint::with_config(peer_ip(), config()).expect("victim endpoint");
    let listener = victim.listen(0).expect("listen");
    let (victim_side, attacker) = connect(&listener);
    let (by_server, by_client) = connect(&listener);

    let before = Guarded::new(&victim, Access::ReadWrite, 1);
    let target = Guarded::new(&victim, target_access, 2);
    let after = Guarded::new(&victim, Access::ReadWrite, 3);
    let bystander = Bystander::start(by_server, by_client);

    let (token, target) = prepare(&attacker, target);
    let started = Instant::now();
    let result = match op {
        Op::Read { offset, len } => {
            let mut buf = vec![0u8; len];
            attacker.read(&token, offset, &mut buf, TIMEOUT)
        }
        Op::Write { offset, len } => attacker.write(&token, offset, &pattern(9, len), TIMEOUT),
    };
    let detect_ms = started.elapsed().as_secs_f64() * 1e3;
    eprintln!("{name}: the attacker got {result:?} after {detect_ms:.1} ms");
    // InfiniBand and RoCE answer the request with a remote access error; an iWARP device
    // sends a TERMINATE instead, which ends the connection: the attacker's operation fails
    // with the connection's end (or a flushed completion).
    let iwarp = iwarp();
    let refused_by_device = if iwarp {
        matches!(
            &result,
            Err(Error::Closed { .. } | Error::Completion { .. })
        )
    } else {
        matches!(
            &result,
            Err(Error::Completion { status, .. }) if status.contains("remote access error")
        )
    };
    // RC ends the attacker's connection on a remote access error; the victim's side of it
    // ends too (the attacker's endpoint tears it down).
    let attacker_closed = attacker.is_closed();
    let victim_side_end = match victim_side.recv(TIMEOUT) {
        Err(e) => e.to_string(),
        Ok(_) => "a message arrived".to_owned(),
    };

    // The victim's endpoint serves a new connection: verified messages both ways.
    let (again_server, again_client) = connect(&listener);
    let after_tally = echo_traffic(&again_server, &again_client, 1 << 32);
    let (by_tally, by_messages) = bystander.finish();

    // The guarded bytes: the target (unless revoked) and its neighbours.
    let guarded: Vec<&Guarded> = [Some(&before), target.as_ref(), Some(&after)]
        .into_iter()
        .flatten()
        .collect();
    let changed: u64 = guarded.iter().map(|g| g.changed()).sum();
    let guarded_bytes = (guarded.len() * REGION) as u64;

    let tally = Tally {
        sent: by_tally.sent + after_tally.sent + guarded_bytes,
        received: by_tally.received + after_tally.received + guarded_bytes - changed,
        corrupted: by_tally.corrupted + after_tally.corrupted + changed,
        secs: by_tally.secs,
    };
    let mut figures = Figures::new(name, "bad READ/WRITE + msgs 64 B-64 KiB", tally);
    figures.detect_ms = Some(detect_ms);
    figures.kept_serving = after_tally.received == after_tally.sent
        && by_tally.received == by_tally.sent
        && by_messages > 0;
    // siw (Linux 6.1) checks a READ's key, protection domain and bounds but not the
    // region's REMOTE_READ right: a device that lets the forged read through cannot be
    // judged here (iWARP only; InfiniBand and RoCE devices must refuse it).
    if iwarp && matches!(op, Op::Read { .. }) && result.is_ok() {
        figures.skipped = Some(format!(
            "{} does not enforce remote read permission: a READ of a region registered              without REMOTE_READ succeeded",
            testkit::device().name
        ));
    }
    figures.checks = vec![
        (
            if iwarp {
                "the device refused it: the connection ended (iWARP TERMINATE)"
            } else {
                "the device refused it: remote access error"
            },
            refused_by_device,
        ),
        ("the attacker's connection ended", attacker_closed),
        ("the guarded bytes are unchanged", changed == 0),
    ];
    figures.extra = serde_json::json!({
        "attacker_error": format!("{result:?}"),
        "victim_side_end": victim_side_end,
        "guarded_bytes": guarded_bytes,
        "bystander_messages": by_messages,
    });
    figures.counters_before = Some(counters);
    figures.record();
}

/// The token's bytes, changed by `forge`, as a token again.
fn forged(token: Token, forge: impl FnOnce(&mut [u8; Token::LEN])) -> Token {
    let mut b = token.to_bytes();
    forge(&mut b);
    Token::from_bytes(&b).expect("a well-formed forged token")
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn an_invalid_rkey_is_refused_by_the_device() {
    attack(
        "key: invalid rkey",
        Access::ReadWrite,
        Op::Write {
            offset: 0,
            len: 256,
        },
        |_, target| {
            // Another index in the device's key table (rxe: index << 8 | key), same key byte.
            let token = forged(target.region.token(), |b| {
                let rkey = u32::from_le_bytes(b[24..28].try_into().unwrap());
                b[24..28].copy_from_slice(&(rkey ^ 0x00ab_cd00).to_le_bytes());
            });
            (token, Some(target))
        },
    );
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn an_address_out_of_range_is_refused_by_the_device() {
    attack(
        "key: out of range",
        Access::ReadWrite,
        // Straddles the end: the first 32 bytes are the region's, the rest are not.
        Op::Write {
            offset: REGION as u64 - 32,
            len: 128,
        },
        |_, target| {
            let token = forged(target.region.token(), |b| {
                b[16..24].copy_from_slice(&(2 * REGION as u64).to_le_bytes());
            });
            (token, Some(target))
        },
    );
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn a_read_of_a_write_only_region_is_refused_by_the_device() {
    attack(
        "key: read of write-only",
        Access::Write,
        Op::Read {
            offset: 0,
            len: 512,
        },
        |attacker, target| {
            // The honest token is refused locally, before anything is sent.
            let mut buf = [0u8; 8];
            let r = attacker.read(&target.region.token(), 0, &mut buf, TIMEOUT);
            assert!(
                matches!(r, Err(Error::AccessDenied { op: "read" })),
                "{r:?}"
            );
            // Forged to claim read access: only the device can refuse it.
            let token = forged(target.region.token(), |b| b[4] = 3);
            (token, Some(target))
        },
    );
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn a_write_after_revoke_is_refused_by_the_device() {
    attack(
        "key: write after revoke",
        Access::ReadWrite,
        Op::Write {
            offset: 0,
            len: 256,
        },
        |attacker, target| {
            // The token works until the owner revokes it.
            let token = target.region.token();
            let update = pattern(5, 256);
            attacker
                .write(&token, 0, &update, TIMEOUT)
                .expect("write before revoke");
            let mut check = vec![0u8; 256];
            target.region.read(0, &mut check).unwrap();
            assert_eq!(check, update, "the write before revoke did not land");
            target.region.revoke();
            (token, None)
        },
    );
}
