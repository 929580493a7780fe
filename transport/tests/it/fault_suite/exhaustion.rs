//! Exhaustion: the sender's data pool used up, a send queue of a few slots shared by many
//! senders, a receiver that stops reading. Senders get backpressure (they block within their
//! timeout, `try_send` says `WouldBlock`, a timed-out send sent nothing), nothing panics or
//! hangs, and once the pressure lifts every message arrives exactly once, in each sender's
//! order, every byte verified.
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use transport::{Conn, EndpointConfig, Error};

use super::*;

/// Message sizes, cycled: eager ones and rendezvous ones of several chunks.
const MIXED: [usize; 5] = [64, 4000, 1000, 200 << 10, 70 << 10];
/// Chunk size of the rendezvous messages here (small, so messages take several).
const CHUNK: u32 = 64 << 10;
/// Bound of every wait for the whole traffic of a scenario.
const LONG: Duration = Duration::from_secs(60);

/// Message `seq` of sender `sender`: its header (sender, seq) and a pattern of both.
fn message(sender: u64, seq: u64) -> Vec<u8> {
    let len = MIXED[(seq + sender) as usize % MIXED.len()];
    let mut m = payload(sender << 32 | seq, len);
    m[..8].copy_from_slice(&(sender << 32 | seq).to_le_bytes());
    m
}

/// Receives `counts[s]` messages of each sender `s` and checks each is the next of its
/// sender: the tally (bytes) and whether every sender's order held.
fn receive_all(server: &Conn, counts: &[u64]) -> (Tally, bool) {
    let started = Instant::now();
    let expected_bytes = (0..counts.len() as u64)
        .flat_map(|s| (0..counts[s as usize]).map(move |q| message(s, q).len() as u64))
        .sum();
    let mut next = vec![0u64; counts.len()];
    let mut t = Tally {
        sent: expected_bytes,
        ..Tally::default()
    };
    let mut in_order = true;
    for _ in 0..counts.iter().sum::<u64>() {
        let Ok(m) = server.recv(LONG) else { break };
        let m = m.to_vec();
        let Some(head) = m.get(..8) else {
            t.corrupted += m.len() as u64;
            continue;
        };
        let id = u64::from_le_bytes(head.try_into().unwrap());
        let (sender, seq) = (id >> 32, id & 0xffff_ffff);
        match next.get_mut(sender as usize) {
            Some(n) if m == message(sender, seq) => {
                in_order &= seq == *n;
                *n = seq + 1;
                t.received += m.len() as u64;
            }
            _ => t.corrupted += (m.len() as u64).min(t.sent - t.received - t.corrupted),
        }
    }
    t.secs = started.elapsed().as_secs_f64();
    (t, in_order)
}

/// A configuration with small rendezvous chunks.
fn chunked(cfg: EndpointConfig) -> EndpointConfig {
    let proto = cfg.proto().clone().with_rndv_chunk_size(CHUNK);
    cfg.with_proto(proto)
}

/// Every buffer the pool can still give, in every size class, until it says `Exhausted`.
/// First one buffer of each class, largest first, so every class has a chunk when the cap is
/// reached (a pool never unregisters chunks: a class without one could not grow afterwards).
fn hog(pool: &memory::Pool) -> (Vec<memory::Buffer>, bool) {
    let classes = [256 << 10, 64 << 10, 16 << 10, 4 << 10, 1 << 10, 256, 64];
    let mut held: Vec<_> = classes
        .iter()
        .map(|&c| pool.try_alloc(c).expect("a first buffer of each class"))
        .collect();
    let mut all_typed = true;
    for class in classes {
        for _ in 0..100_000 {
            match pool.try_alloc(class) {
                Ok(b) => held.push(b),
                Err(memory::Error::Exhausted { .. }) => break,
                Err(e) => {
                    eprintln!("hog: {class}-byte class: {e}");
                    all_typed = false;
                    break;
                }
            }
        }
    }
    (held, all_typed)
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn an_exhausted_pool_is_backpressure_and_loses_nothing() {
    let counters = DeviceCounters::read();
    const SENDERS: u64 = 4;
    const PER_SENDER: u64 = 10;
    // One chunk of each class up to 256 KiB: 6 x 2 MiB and 4 MiB.
    let small = chunked(config()).with_pool_bytes(16 << 20);
    let (server, client) = pair_with(chunked(config()), small);
    let (held, hog_typed) = hog(client.endpoint().pool());
    eprintln!("pool exhausted: {} buffers held", held.len());

    // Backpressure, each typed, and nothing sent by the refused or timed-out sends (an eager
    // message above the inline room needs a pool buffer).
    let short = Duration::from_millis(300);
    let try_eager = client.try_send(&[1u8; 1000]);
    let timed_eager = client.send_timeout(&[2u8; 3000], short);
    let timed_large = client.send_timeout(&vec![3u8; 300 << 10], short);
    eprintln!("under exhaustion: {try_eager:?} / {timed_eager:?} / {timed_large:?}");
    let refused = matches!(try_eager, Err(Error::WouldBlock))
        && matches!(timed_eager, Err(Error::TimedOut { .. }))
        && matches!(timed_large, Err(Error::TimedOut { .. }));
    // A message small enough to be posted inline, with nothing queued ahead of it, needs no
    // pool buffer: it goes all the same. (40 bytes and the frame's header fit every
    // device's inline room: siw grants 64 bytes of the 128 asked.)
    let inline_sent = client.try_send(&[4u8; 40]);
    let inline_arrived = server.recv(short).map(|m| m.bytes().as_ref() == [4u8; 40]);
    eprintln!("an inline message under exhaustion: {inline_sent:?} / {inline_arrived:?}");
    // Room for a rendezvous message's first chunk only: it starts within the timeout, so it
    // is delivered whole, its other chunk finished once the pool has room.
    let mut held = held;
    let one = held
        .iter()
        .position(|b| b.capacity() == CHUNK as usize)
        .expect("a chunk-sized buffer held");
    drop(held.swap_remove(one));
    let started_large = client.send_timeout(&message(SENDERS, 0), short);
    eprintln!("a message started under exhaustion: {started_large:?}");

    // Senders block while the pool is empty; the pool frees up after a while.
    let done = Arc::new(AtomicU64::new(0));
    let senders: Vec<_> = (0..SENDERS)
        .map(|s| {
            let (client, done) = (client.clone(), done.clone());
            std::thread::spawn(move || {
                for seq in 0..PER_SENDER {
                    client
                        .send_timeout(&message(s, seq), LONG)
                        .unwrap_or_else(|e| panic!("sender {s} message {seq}: {e}"));
                    done.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    std::thread::sleep(Duration::from_secs(1));
    let done_while_exhausted = done.load(Ordering::Relaxed);
    let pressure_lifted = Instant::now();
    drop(held);
    // Each sender's messages, and the one started under exhaustion.
    let mut counts = vec![PER_SENDER; SENDERS as usize];
    counts.push(1);
    let (tally, in_order) = receive_all(&server, &counts);
    let recovery_ms = pressure_lifted.elapsed().as_secs_f64() * 1e3;
    for s in senders {
        s.join().expect("sender");
    }
    // Nothing more arrives: the refused sends sent nothing.
    let extra = server.recv(Duration::from_millis(500));

    let mut figures = Figures::new("pool exhausted", "4 senders, 64 B-200 KiB", tally);
    figures.kept_serving = echo_once();
    figures.checks = vec![
        ("the pool says Exhausted when it is", hog_typed),
        ("try_send WouldBlock, send_timeout TimedOut", refused),
        (
            "an inline message needs no pool buffer and arrives",
            inline_sent.is_ok() && matches!(inline_arrived, Ok(true)),
        ),
        (
            "a message started under exhaustion was accepted",
            started_large.is_ok(),
        ),
        (
            "no send completed while the pool was empty",
            done_while_exhausted == 0,
        ),
        ("each sender's messages arrived in order", in_order),
        (
            "nothing arrived from refused sends",
            matches!(extra, Err(Error::TimedOut { .. })),
        ),
    ];
    figures.extra = serde_json::json!({
        "recovery_ms": recovery_ms,
        "under_exhaustion": [format!("{try_eager:?}"), format!("{timed_eager:?}"), format!("{timed_large:?}")],
    });
    figures.counters_before = Some(counters);
    figures.record();
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn a_full_send_queue_blocks_many_senders_and_loses_nothing() {
    let counters = DeviceCounters::read();
    const SENDERS: u64 = 8;
    const PER_SENDER: u64 = 30;
    let tiny = chunked(config());
    let proto = tiny
        .proto()
        .clone()
        .with_sq_depth(4)
        .with_max_reads_in_flight(2);
    let tiny = tiny.with_proto(proto).with_max_one_sided(1);
    let (server, client) = pair_with(tiny.clone(), tiny);
    let would_block = Arc::new(AtomicU64::new(0));
    let timed_out = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let senders: Vec<_> = (0..SENDERS)
        .map(|s| {
            let (client, would_block, timed_out) =
                (client.clone(), would_block.clone(), timed_out.clone());
            std::thread::spawn(move || {
                let deadline = Instant::now() + LONG;
                for seq in 0..PER_SENDER {
                    let m = message(s, seq);
                    // Eager messages try first without waiting: a full queue says so.
                    if m.len() <= client.eager_limit() {
                        match client.try_send(&m) {
                            Ok(()) => continue,
                            Err(Error::WouldBlock) => {
                                would_block.fetch_add(1, Ordering::Relaxed);
                            }
                            Err(e) => panic!("sender {s} message {seq}: {e}"),
                        }
                    }
                    // Then wait, in short slices: a timed-out send sent nothing, so retry.
                    loop {
                        match client.send_timeout(&m, Duration::from_millis(200)) {
                            Ok(()) => break,
                            Err(Error::TimedOut { .. }) if Instant::now() < deadline => {
                                timed_out.fetch_add(1, Ordering::Relaxed);
                            }
                            Err(e) => panic!("sender {s} message {seq}: {e}"),
                        }
                    }
                }
            })
        })
        .collect();
    let (mut tally, in_order) = receive_all(&server, &[PER_SENDER; SENDERS as usize]);
    for s in senders {
        s.join().expect("sender");
    }
    tally.secs = started.elapsed().as_secs_f64();
    let stats = client.stats();

    let mut figures = Figures::new("send queue full", "8 senders, sq_depth 4", tally);
    figures.kept_serving = echo_once();
    figures.checks = vec![("each sender's messages arrived in order", in_order)];
    figures.extra = serde_json::json!({
        "try_send_would_block": would_block.load(Ordering::Relaxed),
        "send_timed_out": timed_out.load(Ordering::Relaxed),
        "stats": format!("{stats:?}"),
    });
    figures.counters_before = Some(counters);
    figures.record();
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn a_peer_that_stops_reading_gets_everything_in_order_later() {
    let counters = DeviceCounters::read();
    const MESSAGES: u64 = 120;
    const PAUSE: Duration = Duration::from_secs(3);
    let (server, client) = pair_with(chunked(config()), chunked(config()));
    // A frame per message, so that small messages fill the send queue and meet the wall too:
    // in batches they take fewer queue entries, and the wall comes at a rendezvous message,
    // which try_send does not take.
    client.set_nodelay(true);
    let sender = std::thread::spawn(move || {
        let deadline = Instant::now() + LONG;
        let (mut timeouts, mut would_block, mut first_wall) = (0u64, 0u64, None);
        let started = Instant::now();
        let mut seq = 0;
        while seq < MESSAGES {
            let m = message(0, seq);
            match client.send_timeout(&m, Duration::from_millis(200)) {
                Ok(()) => seq += 1,
                Err(Error::TimedOut { .. }) if Instant::now() < deadline => {
                    timeouts += 1;
                    first_wall.get_or_insert(started.elapsed());
                    // Blocked on the peer: a send that cannot wait says so.
                    let next = message(0, seq);
                    if next.len() <= client.eager_limit() {
                        match client.try_send(&next) {
                            Ok(()) => seq += 1,
                            Err(Error::WouldBlock) => would_block += 1,
                            Err(e) => panic!("try_send {seq}: {e}"),
                        }
                    }
                }
                Err(e) => panic!("message {seq}: {e}"),
            }
        }
        (client, timeouts, would_block, first_wall)
    });
    // The receiver reads nothing for a while.
    std::thread::sleep(PAUSE);
    let (tally, in_order) = receive_all(&server, &[MESSAGES]);
    let (_client, timeouts, would_block, first_wall) = sender.join().expect("sender");
    let extra = server.recv(Duration::from_millis(500));

    let mut figures = Figures::new("peer not reading", "3 s pause, 64 B-200 KiB", tally);
    figures.kept_serving = echo_once();
    figures.checks = vec![
        (
            "the sender hit the wall: send_timeout TimedOut",
            timeouts > 0,
        ),
        ("try_send said WouldBlock while blocked", would_block > 0),
        ("the messages arrived in order", in_order),
        (
            "nothing more arrived (timed-out sends sent nothing)",
            matches!(extra, Err(Error::TimedOut { .. })),
        ),
    ];
    figures.extra = serde_json::json!({
        "send_timed_out": timeouts,
        "try_send_would_block": would_block,
        "first_blocked_after_ms": first_wall.map(|d| d.as_secs_f64() * 1e3),
    });
    figures.counters_before = Some(counters);
    figures.record();
}
