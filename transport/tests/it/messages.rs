//! Messages: every size from empty through several MiB past the rendezvous threshold arrives
//! intact, in order, with its boundaries; close delivers everything, then end of stream; no
//! RNR on the wire.
use std::time::Duration;

use transport::{Error, Polling};

use crate::support::*;

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn sizes_from_empty_past_the_rendezvous_threshold_echo_intact() {
    let rnr_before = rnr_counters();
    let (server, client) = pair();
    let eager = client.eager_limit();
    let sizes = [
        0,
        1,
        100,
        eager - 1,
        eager,
        eager + 1,
        64 << 10,
        (1 << 20) - 3,
        1 << 20,
        (3 << 20) + 5,
        8 << 20,
    ];
    let echo = std::thread::spawn(move || {
        for _ in 0..sizes.len() {
            let msg = server.recv(TIMEOUT).expect("server recv");
            server.send(&msg.to_vec()).expect("echo");
        }
        server
    });
    for (i, &len) in sizes.iter().enumerate() {
        let data = pattern(i as u64, len);
        client.send(&data).unwrap();
        let back = client.recv(TIMEOUT).unwrap();
        assert_eq!(back.len(), len, "size {len}");
        assert!(
            back.to_vec() == data,
            "bytes of the {len}-byte message differ"
        );
    }
    let _server = echo.join().unwrap();
    assert_eq!(rnr_counters(), rnr_before, "RNR NAKs on the wire");
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn thousands_of_messages_keep_order_and_boundaries_then_end_of_stream() {
    // Under busy polling the small ones also travel in batches, and the close comes right
    // behind the last batch.
    let busy = config().with_polling(Polling::Busy);
    for cfg in [config(), busy] {
        let (server, client) = pair_with(cfg.clone(), cfg);
        let n = 3000u64;
        let len_of = |i: u64| (i as usize * 37) % 3000;
        let sender = std::thread::spawn(move || {
            for i in 0..n {
                client.send(&pattern(i, len_of(i))).unwrap();
            }
            client.close(TIMEOUT).unwrap();
        });
        for i in 0..n {
            let msg = server.recv(TIMEOUT).unwrap();
            assert_eq!(msg.len(), len_of(i), "message {i}");
            assert!(msg.to_vec() == pattern(i, len_of(i)), "message {i} differs");
        }
        let end = server.recv(TIMEOUT);
        assert!(matches!(end, Err(Error::Closed { cause: None })), "{end:?}");
        sender.join().unwrap();
    }
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn both_sides_flooding_never_deadlock() {
    let (server, client) = pair();
    let n = 2000u64;
    let flood = |conn: transport::Conn, seed: u64| {
        std::thread::spawn(move || {
            let reader = {
                let conn = conn.clone();
                std::thread::spawn(move || {
                    for i in 0..n {
                        let m = conn.recv(TIMEOUT).unwrap();
                        assert!(m.to_vec() == pattern(i ^ (seed ^ 1), 512), "message {i}");
                    }
                })
            };
            for i in 0..n {
                conn.send(&pattern(i ^ seed, 512)).unwrap();
            }
            reader.join().unwrap();
        })
    };
    let a = flood(server, 0);
    let b = flood(client, 1);
    a.join().unwrap();
    b.join().unwrap();
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn a_slow_reader_is_backpressure_not_loss() {
    let (server, client) = pair();
    // The window is 32: the 33rd message cannot go until the reader frees credits.
    let mut sent = 0;
    loop {
        match client.try_send(b"x") {
            Ok(()) => sent += 1,
            Err(e) if e.is_would_block() => break,
            Err(e) => panic!("{e}"),
        }
        assert!(sent < 10_000, "no backpressure");
    }
    assert!(sent >= 30, "only {sent} sent before backpressure");
    let r = client.send_timeout(b"y", Duration::from_millis(200));
    assert!(matches!(r, Err(Error::TimedOut { .. })), "{r:?}");
    for _ in 0..sent {
        drop(server.recv(TIMEOUT).unwrap());
    }
    client.send_timeout(b"z", TIMEOUT).unwrap();
    assert_eq!(&server.recv(TIMEOUT).unwrap().bytes()[..], b"z");
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn a_message_of_a_thousand_chunks_arrives_intact() {
    // 1024 rendezvous chunks: four times as many as may be announced and unacknowledged at
    // once (`MAX_OUTSTANDING_CHUNKS`), so the announcements, the READs and their
    // acknowledgements go round the window several times. Chunks of 8 KiB (the default is 64
    // KiB): the same thousand chunks in 8 MiB, where larger ones prove no more and take
    // minutes on siw.
    const CHUNK: u32 = 8 << 10;
    const LEN: usize = 1024 * CHUNK as usize;
    const BLOCK: usize = 64 << 10;
    let small_chunks = || {
        let proto = config().proto().clone().with_rndv_chunk_size(CHUNK);
        config().with_proto(proto)
    };
    assert!(LEN / CHUNK as usize >= 4 * transport::proto::MAX_OUTSTANDING_CHUNKS);
    // The receiver holds the whole message in its pool until it is complete.
    let server_cfg = small_chunks().with_pool_bytes(LEN + (64 << 20));
    let (server, client) = pair_with(server_cfg, small_chunks());
    // Messages of a GiB are allowed.
    assert!(client.max_message() >= 1 << 30);
    // Every 64 KiB carries its index at both ends, so a misplaced or repeated block is seen.
    let base = pattern(7, BLOCK);
    let mut data = Vec::with_capacity(LEN);
    for i in 0..(LEN / BLOCK) as u64 {
        let start = data.len();
        data.extend_from_slice(&base);
        data[start..start + 8].copy_from_slice(&i.to_le_bytes());
        data[start + BLOCK - 8..start + BLOCK].copy_from_slice(&(!i).to_le_bytes());
    }
    // A bound against a hang, not a speed.
    let big = Duration::from_secs(300);
    let sender = std::thread::spawn(move || {
        client.send_timeout(&data, big).expect("send 8 MiB");
        (client, data)
    });
    let msg = server.recv(big).expect("receive 8 MiB");
    let (_client, data) = sender.join().unwrap();
    assert_eq!(msg.len(), LEN);
    let mut offset = 0;
    for chunk in msg.chunks() {
        assert!(
            chunk == &data[offset..offset + chunk.len()],
            "bytes {offset}..{} differ",
            offset + chunk.len()
        );
        offset += chunk.len();
    }
    assert_eq!(offset, LEN);
}

/// A sender of small messages that outruns the device (busy polling, which batches
/// messages): they travel in batch frames (blocking and async sends alike) and arrive one by
/// one, intact, in order; with `nodelay`, or under adaptive polling, each goes in a frame of
/// its own. No RNR either way.
#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn small_messages_travel_in_batches_and_arrive_one_by_one() {
    let rnr_before = rnr_counters();
    let busy = config().with_polling(Polling::Busy);
    for (nodelay, cfg) in [(false, busy.clone()), (true, busy), (false, config())] {
        let batches = !nodelay && matches!(cfg.polling(), Polling::Busy);
        let (server, client) = pair_with(cfg.clone(), cfg);
        assert!(!client.nodelay(), "batching is on by default");
        client.set_nodelay(nodelay);
        let n = if batches { 20_000 } else { 2_000 };
        let len_of = |i: u64| (i as usize * 13) % 200;
        let sender = std::thread::spawn(move || {
            for i in 0..n {
                let data = pattern(i, len_of(i));
                if i % 2 == 0 {
                    client.send(&data).unwrap();
                } else {
                    futures::executor::block_on(client.send_async(&data)).unwrap();
                }
            }
            client
        });
        for i in 0..n {
            let msg = server.recv(TIMEOUT).unwrap();
            assert_eq!(msg.len(), len_of(i), "message {i}");
            assert!(msg.to_vec() == pattern(i, len_of(i)), "message {i} differs");
        }
        let client = sender.join().unwrap();
        let stats = client.stats();
        let (frames, batched) = (stats.frames_sent, stats.messages_batched);
        if !batches {
            assert_eq!(batched, 0);
            assert!(frames >= n, "{n} messages in {frames} frames");
        } else {
            // How many join a batch depends on the device's pace against the sender's; each
            // either joined one or went in a frame that started one or went alone.
            assert!(
                batched > 0 && frames < n && frames + batched >= n,
                "{n} messages: {frames} frames, {batched} batched"
            );
        }
    }
    assert_eq!(rnr_counters(), rnr_before, "RNR NAKs on the wire");
}

/// Packets the device `dev` has sent (its `sent_pkts` hardware counter).
fn sent_packets(dev: &str) -> u64 {
    let path = format!("/sys/class/infiniband/{dev}/ports/1/hw_counters/sent_pkts");
    std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{path}: {e}"))
        .trim()
        .parse()
        .unwrap()
}

/// A plain message whose size is a multiple of the path MTU takes exactly that many packets:
/// its frame carries no header in the payload (a compact DATA frame), so a 4 KiB message is
/// 4 packets at a 1 KiB MTU, not 5. Counted on the sender's device, the messages intact.
#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn messages_of_whole_mtus_take_no_extra_packet() {
    let dev = testkit::device().name;
    let ctx = verbs::Context::open(&dev).expect("open the device");
    // A compact frame carries its header in the immediate data.
    let caps = ctx.capabilities().expect("query the device");
    if testkit::skip_unless(
        testkit::test_name!(),
        caps.require(&dev, verbs::Capability::ImmediateData),
    ) {
        return;
    }
    let mtu = ctx
        .query_port(1)
        .expect("query the port")
        .active_mtu()
        .bytes() as usize;
    assert!(mtu >= 256, "active MTU {mtu}");
    let (server, client) = pair();
    let eager = client.eager_limit();
    let sizes: Vec<usize> = [1, 2, 4]
        .iter()
        .map(|k| k * mtu)
        .filter(|&len| len <= eager)
        .collect();
    assert!(!sizes.is_empty(), "eager limit {eager} below the MTU {mtu}");
    const COUNT: usize = 100;
    let total = sizes.len() * COUNT;
    let receiver = std::thread::spawn(move || {
        let mut got = Vec::with_capacity(total);
        for _ in 0..total {
            got.push(server.recv(TIMEOUT).expect("recv").to_vec());
        }
        (server, got)
    });
    let before = sent_packets(&dev);
    let mut data_packets = 0;
    let mut sent = Vec::with_capacity(total);
    for (i, &len) in sizes.iter().enumerate() {
        for k in 0..COUNT {
            let data = pattern((i * COUNT + k) as u64, len);
            client.send(&data).expect("send");
            data_packets += (len / mtu) as u64;
            sent.push(data);
        }
    }
    let (_server, got) = receiver.join().unwrap();
    let packets = sent_packets(&dev) - before;
    assert!(got == sent, "every message intact, in order");
    // Beside the data, the sender's device sends only the acknowledgements of the few credit
    // frames coming back; a header in each frame would cost one more packet per message.
    assert!(
        packets >= data_packets && packets < data_packets + total as u64 / 2,
        "{packets} packets sent for {total} messages of {sizes:?} B that fill {data_packets} \
         packets of {mtu} B"
    );
}
