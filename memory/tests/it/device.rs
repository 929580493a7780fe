//! Device tier: pool buffers registered on a real device and used in SEND, RDMA WRITE and READ
//! with the data verified; a local-only pool refusing remote access; exhaustion and recovery
//! under 8 threads; a class starved by the cap served from other classes' idle chunks; buffers
//! of the host registrar reaching nothing on a device.

use std::thread;
use std::time::Duration;

use memory::{Buffer, ClassConfig, Error, Pool, PoolAccess, PoolConfig};
use verbs::{RecvRequest, RemoteSlice, SendRequest, WcOpcode, WcStatus};

use crate::support::{completions, one, pd, Pair, TIMEOUT};

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

fn pool(pd: &verbs::Pd, access: PoolAccess) -> Pool {
    let config = PoolConfig::new()
        .class_sizes([64, 4096, 64 << 10])
        .cap_bytes(64 << 20)
        .access(access);
    Pool::on_pd(pd, config).expect("pool on the device")
}

fn filled(pool: &Pool, data: &[u8]) -> Buffer {
    let mut buf = pool.try_alloc(data.len()).unwrap();
    buf.copy_from_slice(data);
    buf
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn send_from_a_pool_buffer_into_a_posted_pool_buffer() {
    if crate::support::lacks(testkit::test_name!(), verbs::Capability::ManualConnect) {
        return;
    }
    let pd = pd();
    let p = Pair::on(&pd);
    let tx_pool = pool(&pd, PoolAccess::LOCAL_WRITE);
    let rx_pool = pool(&pd, PoolAccess::LOCAL_WRITE);

    // The receive buffer is reclaimed after each message and posted again.
    let mut rx = rx_pool.try_alloc(64 << 10).unwrap();
    for (round, len) in [1, 64, 3000, 4096, 64 << 10, 100].into_iter().enumerate() {
        let data = pattern(len, round as u8);
        let rid = p.b.post_recv(RecvRequest::new(rx, ..).unwrap()).unwrap();
        let tx = filled(&tx_pool, &data);
        let sid =
            p.a.post_send(SendRequest::send(tx, ..len).unwrap())
                .unwrap();
        assert_eq!(tx_pool.stats().buffers_in_use(), 1, "owned by the request");

        let (sc, tx): (_, Buffer) = one(&p.cq_a, &p.a);
        assert_eq!(
            (sc.wr_id, sc.status, sc.opcode),
            (sid, Ok(()), Some(WcOpcode::Send))
        );
        assert_eq!(&tx[..], &data[..], "the sender's bytes come back untouched");
        drop(tx);

        let (rc, mut back): (_, Buffer) = one(&p.cq_b, &p.b);
        assert_eq!(
            (rc.wr_id, rc.status, rc.opcode),
            (rid, Ok(()), Some(WcOpcode::Recv))
        );
        assert_eq!(rc.byte_len as usize, len);
        back.set_len(rc.byte_len as usize).unwrap();
        assert!(back[..] == data[..], "round {round}: {len} bytes differ");
        back.set_len(back.capacity()).unwrap();
        rx = back;
    }
    assert_eq!((p.a.in_flight(), p.b.in_flight()), ((0, 0), (0, 0)));
    drop(rx);

    for stats in [tx_pool.stats(), rx_pool.stats()] {
        assert_eq!(stats.buffers_in_use(), 0);
        // Every size was served from one chunk per class: buffers were reused, not re-registered.
        assert!(stats.classes.iter().all(|c| c.chunks <= 1), "{stats:?}");
    }
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn rdma_write_into_and_read_from_a_remote_access_pool_buffer() {
    if crate::support::lacks(testkit::test_name!(), verbs::Capability::ManualConnect) {
        return;
    }
    let pd = pd();
    let p = Pair::on(&pd);
    let local = pool(&pd, PoolAccess::LOCAL_WRITE);
    let remote = pool(&pd, PoolAccess::REMOTE_WRITE | PoolAccess::REMOTE_READ);

    for len in [64, 4096, 64 << 10] {
        let mut target = remote.try_alloc(len).unwrap();
        target.write(0, &vec![0; len]).unwrap();
        let descriptor = target.remote().expect("a remote-access pool gives an rkey");
        assert_eq!(
            (descriptor.addr, descriptor.len as usize),
            (target.addr(), len)
        );

        // WRITE from a local-only pool buffer into the target.
        let data = pattern(len, len as u8);
        let src = filled(&local, &data);
        let req = SendRequest::rdma_write(src, ..len, descriptor.into()).unwrap();
        p.a.post_send(req).unwrap();
        let (c, src): (_, Buffer) = one(&p.cq_a, &p.a);
        assert_eq!((c.status, c.opcode), (Ok(()), Some(WcOpcode::RdmaWrite)));
        drop(src);
        let mut seen = vec![0; len];
        target.read(0, &mut seen).unwrap();
        assert!(seen == data, "WRITE of {len} bytes differs");

        // Change the target locally, then READ it back into a fresh local buffer.
        let data = pattern(len, !(len as u8));
        target.write(0, &data).unwrap();
        let mut dst = local.try_alloc(len).unwrap();
        dst.fill(0);
        let req = SendRequest::rdma_read(dst, ..len, descriptor.into()).unwrap();
        p.a.post_send(req).unwrap();
        let (c, dst): (_, Buffer) = one(&p.cq_a, &p.a);
        assert_eq!((c.status, c.opcode), (Ok(()), Some(WcOpcode::RdmaRead)));
        assert_eq!(c.byte_len as usize, len);
        assert!(dst[..] == data[..], "READ of {len} bytes differs");

        // A sub-range of the descriptor works as a target too.
        let half = RemoteSlice::from(descriptor).slice(len / 2..).unwrap();
        let src = filled(&local, &vec![0xee; len - len / 2]);
        // The buffer's own length: `..` would be its whole slot, its class size.
        let n = src.len();
        p.a.post_send(SendRequest::rdma_write(src, ..n, half).unwrap())
            .unwrap();
        let (c, _src): (_, Buffer) = one(&p.cq_a, &p.a);
        assert_eq!(c.status, Ok(()));
        target.read(0, &mut seen).unwrap();
        assert!(seen[..len / 2] == data[..len / 2]);
        assert!(seen[len / 2..].iter().all(|&b| b == 0xee));
    }
    assert_eq!(local.stats().buffers_in_use(), 0);
    assert_eq!(remote.stats().buffers_in_use(), 0);
}

/// A local-only pool's chunks are registered without remote rights and its buffers carry no
/// rkey. This proves the device enforces it: the only key such a chunk has is its lkey, and an
/// RDMA WRITE or READ naming the buffer with that key (posted safely: a remote descriptor is a
/// plain value that the responder's NIC checks) completes with a remote access error, leaving
/// the buffer's bytes untouched. Afterwards the pools work on a new QP pair.
#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn a_local_only_pool_refuses_remote_access() {
    if crate::support::lacks(testkit::test_name!(), verbs::Capability::ManualConnect) {
        return;
    }
    let pd = pd();
    let local = pool(&pd, PoolAccess::LOCAL_WRITE);
    let mut target = local.try_alloc(4096).unwrap();
    target.fill(0xaa);
    assert_eq!(target.remote(), None, "a local-only pool exposes no rkey");
    let forged = RemoteSlice {
        addr: target.addr(),
        len: 4096,
        rkey: target.lkey(),
    };

    let write = SendRequest::rdma_write(filled(&local, &[0x55; 4096]), .., forged).unwrap();
    let read = SendRequest::rdma_read(local.try_alloc(4096).unwrap(), .., forged).unwrap();
    for req in [write, read] {
        let p = Pair::on(&pd); // the failure moves the requester to the error state
        p.a.post_send(req).unwrap();
        let (c, back): (_, Buffer) = one(&p.cq_a, &p.a);
        let err = c
            .status
            .expect_err("the device must refuse the lkey as an rkey");
        assert_eq!(err.status, Some(WcStatus::RemAccessErr), "{err}");
        drop(back); // the request's buffer came back with the failed completion
        assert!(target.iter().all(|&b| b == 0xaa), "the target was written");
    }
    drop(target);
    assert_eq!(local.stats().buffers_in_use(), 0);

    // The pool and a new pair keep working.
    let p = Pair::on(&pd);
    let data = pattern(4096, 9);
    p.b.post_recv(RecvRequest::new(local.try_alloc(4096).unwrap(), ..).unwrap())
        .unwrap();
    p.a.post_send(SendRequest::send(filled(&local, &data), ..).unwrap())
        .unwrap();
    let (c, tx): (_, Buffer) = one(&p.cq_a, &p.a);
    assert_eq!(c.status, Ok(()));
    drop(tx);
    let (c, rx): (_, Buffer) = one(&p.cq_b, &p.b);
    assert_eq!(c.status, Ok(()));
    assert!(rx[..] == data[..]);
    drop(rx);
    let stats = local.stats();
    assert_eq!((stats.buffers_in_use(), stats.chunks), (0, 1), "{stats:?}");
}

/// The host registrar registers nothing: its buffers' keys name no registration, so a device
/// given one reaches nothing. Posted as a receive on a real QP, a buffer of such a pool gets a
/// failed completion and keeps its bytes; as a SEND's source, the SEND fails and the peer's
/// receive is not written.
#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn buffers_of_the_host_registrar_reach_nothing_on_a_device() {
    if crate::support::lacks(testkit::test_name!(), verbs::Capability::ManualConnect) {
        return;
    }
    let pd = pd();
    let host = Pool::new(
        PoolConfig::new().class_sizes([4096]).cap_bytes(64 << 20),
        memory::testing::HostRegistrar::new(),
    )
    .unwrap();
    let device = pool(&pd, PoolAccess::LOCAL_WRITE);

    // As a receive: the device must not write it.
    let p = Pair::on(&pd);
    let mut sink = host.try_alloc(4096).unwrap();
    sink.fill(0xaa);
    p.b.post_recv(RecvRequest::new(sink, ..).unwrap()).unwrap();
    p.a.post_send(SendRequest::send(filled(&device, &[0x55; 4096]), ..).unwrap())
        .unwrap();
    let (c, sink): (_, Buffer) = one(&p.cq_b, &p.b);
    c.status
        .expect_err("a receive into memory no registration covers must fail");
    assert!(
        sink.iter().all(|&b| b == 0xaa),
        "the device wrote the host pool's memory"
    );
    let (_, tx): (_, Buffer) = one(&p.cq_a, &p.a);
    drop((sink, tx));

    // As a source: nothing is read from it, so nothing arrives.
    let p = Pair::on(&pd);
    let mut sink = device.try_alloc(4096).unwrap();
    sink.fill(0xaa);
    p.b.post_recv(RecvRequest::new(sink, ..).unwrap()).unwrap();
    p.a.post_send(SendRequest::send(filled(&host, &[0x55; 4096]), ..).unwrap())
        .unwrap();
    let (c, tx): (_, Buffer) = one(&p.cq_a, &p.a);
    c.status
        .expect_err("a SEND from memory no registration covers must fail");
    drop(tx);
    assert_eq!(
        p.b.in_flight().1,
        1,
        "the peer's receive is still posted, unwritten"
    );
    assert_eq!(
        (
            host.stats().buffers_in_use(),
            device.stats().buffers_in_use()
        ),
        (0, 1)
    );
}

/// 8 threads exhaust a small pool registered on the device, time out waiting, then recover as
/// buffers come back; the recovered buffers work in RDMA WRITEs and the stats account for
/// every byte.
#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn exhaustion_and_recovery_under_8_threads() {
    if crate::support::lacks(testkit::test_name!(), verbs::Capability::ManualConnect) {
        return;
    }
    const THREADS: usize = 8;
    const SIZE: usize = 4096;
    const PER_CHUNK: usize = 4;
    const BUFFERS: usize = 8;
    let pd = pd();
    let config = PoolConfig::new()
        .classes([ClassConfig::new(SIZE).chunk_size(SIZE * PER_CHUNK)])
        .cap_bytes(SIZE * BUFFERS);
    let pool = Pool::on_pd(&pd, config).unwrap();

    // Everyone allocates until the pool says it is exhausted.
    let held: Vec<Buffer> = thread::scope(|s| {
        let threads: Vec<_> = (0..THREADS)
            .map(|_| {
                s.spawn(|| {
                    let mut mine = Vec::new();
                    loop {
                        match pool.try_alloc(SIZE) {
                            Ok(buf) => mine.push(buf),
                            Err(Error::Exhausted {
                                class_size,
                                cap_bytes,
                            }) => {
                                assert_eq!((class_size, cap_bytes), (SIZE, SIZE * BUFFERS));
                                return mine;
                            }
                            Err(other) => panic!("unexpected {other}"),
                        }
                    }
                })
            })
            .collect();
        threads
            .into_iter()
            .flat_map(|t| t.join().unwrap())
            .collect()
    });
    assert_eq!(held.len(), BUFFERS);
    let stats = pool.stats();
    assert_eq!((stats.chunks, stats.bytes_registered), (2, SIZE * BUFFERS));
    assert_eq!(stats.bytes_in_use, SIZE * BUFFERS);

    // Waiting with a bound gives up: nothing comes back.
    thread::scope(|s| {
        for _ in 0..THREADS {
            s.spawn(|| match pool.alloc(SIZE, Duration::from_millis(100)) {
                Err(Error::Timeout { waited }) => assert!(waited < TIMEOUT),
                other => panic!("expected a timeout, got {other:?}"),
            });
        }
    });

    // Waiters block until the buffers are dropped, one by one, by this thread.
    let recovered: Vec<Buffer> = thread::scope(|s| {
        let waiters: Vec<_> = (0..THREADS)
            .map(|i| {
                let pool = &pool;
                s.spawn(move || {
                    let mut buf = pool.alloc(SIZE, TIMEOUT).expect("a buffer comes back");
                    buf.fill(i as u8 + 1);
                    buf
                })
            })
            .collect();
        for buf in held {
            thread::sleep(Duration::from_millis(5));
            drop(buf);
        }
        waiters.into_iter().map(|t| t.join().unwrap()).collect()
    });
    let stats = pool.stats();
    assert_eq!(stats.chunks, 2, "recovery reuses the chunks: {stats:?}");
    assert_eq!(stats.classes[0].in_use, BUFFERS);
    assert_eq!(stats.classes[0].high_water, BUFFERS);

    // The recovered buffers are still registered: WRITE each into its own slice of a target.
    let p = Pair::on(&pd);
    let targets = Pool::on_pd(
        &pd,
        PoolConfig::new()
            .class_sizes([SIZE * BUFFERS])
            .access(PoolAccess::REMOTE_WRITE),
    )
    .unwrap();
    let mut target = targets.try_alloc(SIZE * BUFFERS).unwrap();
    target.write(0, &[0; SIZE * BUFFERS]).unwrap();
    let remote = RemoteSlice::from(target.remote().unwrap());
    let expected: Vec<u8> = recovered.iter().flat_map(|b| b.to_vec()).collect();
    for (i, buf) in recovered.into_iter().enumerate() {
        let slice = remote.slice(i * SIZE..(i + 1) * SIZE).unwrap();
        p.a.post_send(SendRequest::rdma_write(buf, .., slice).unwrap())
            .unwrap();
    }
    for (c, reclaimed) in completions(&p.cq_a, &p.a, BUFFERS) {
        assert_eq!(c.status, Ok(()));
        drop(reclaimed); // back to the pool
    }
    let mut written = vec![0; SIZE * BUFFERS];
    target.read(0, &mut written).unwrap();
    assert!(written == expected);
    let mut seen: Vec<u8> = written.chunks(SIZE).map(|c| c[0]).collect();
    seen.sort_unstable();
    assert_eq!(
        seen,
        (1..=BUFFERS as u8).collect::<Vec<_>>(),
        "one buffer per waiter"
    );

    let stats = pool.stats();
    assert_eq!(
        (stats.buffers_in_use(), stats.bytes_in_use),
        (0, 0),
        "{stats:?}"
    );
    assert_eq!((stats.chunks, stats.bytes_registered), (2, SIZE * BUFFERS));
    assert_eq!(stats.classes[0].free, BUFFERS);
    assert_eq!(stats.high_water_bytes_bound(), SIZE * BUFFERS);
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn the_pool_keeps_its_protection_domain_alive() {
    let pd = pd();
    let config = PoolConfig::new().classes([ClassConfig::new(4096).chunk_size(4096)]);
    let pool = Pool::on_pd(&pd, config).unwrap();
    let first = pool.try_alloc(4096).unwrap();
    drop(pd); // the registrar and the first chunk's registration still hold it
    let second = pool
        .try_alloc(4096)
        .expect("register a chunk after the handle is gone");
    assert_eq!(pool.stats().chunks, 2);
    assert_ne!(first.lkey(), second.lkey(), "one registration per chunk");
    drop(pool);
    drop((first, second)); // deregisters both chunks, then the PD goes
}

/// The device registrar reports the device's largest region (and the locked-memory limit when
/// it binds this process) as the bound `Pool::new` checks chunks against.
#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn the_device_registrar_reports_its_chunk_limit() {
    use memory::{PdRegistrar, Registrar};
    let pd = pd();
    let max_mr = pd.context().query_device().unwrap().max_mr_size();
    let limit = PdRegistrar::new(&pd)
        .max_chunk()
        .expect("a device reports its largest region");
    assert!(limit.bytes <= max_mr);
    if limit.bytes == max_mr {
        assert!(limit.reason.contains(pd.context().name()), "{limit:?}");
    } else {
        assert!(limit.reason.contains("locked-memory limit"), "{limit:?}");
    }
    // A pool whose chunks fit is accepted and allocates.
    let pool = pool(&pd, PoolAccess::LOCAL_WRITE);
    drop(pool.try_alloc(64).unwrap());
}

/// A burst of 64 B and 256 B buffers takes the whole cap of a pool registered on the device;
/// once they are all dropped, 1 KiB and 4 KiB buffers are served from the registered bytes of
/// deregistered idle chunks (a waiter among them, woken by the drops), and they work in a
/// SEND whose bytes arrive intact.
#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn a_class_starved_by_the_cap_is_served_once_other_classes_are_idle() {
    if crate::support::lacks(testkit::test_name!(), verbs::Capability::ManualConnect) {
        return;
    }
    const CHUNK: usize = 64 << 10;
    let pd = pd();
    let p = Pair::on(&pd);
    let config = PoolConfig::new()
        .classes([64, 256, 1024, 4096].map(|size| ClassConfig::new(size).chunk_size(CHUNK)))
        .cap_bytes(4 * CHUNK);
    let pool = Pool::on_pd(&pd, config).unwrap();

    // The burst: small buffers until both small classes are exhausted.
    let mut burst = Vec::new();
    for len in [64, 256].into_iter().cycle() {
        match pool.try_alloc(len) {
            Ok(buf) => burst.push(buf),
            Err(Error::Exhausted { .. }) if len == 256 => break,
            Err(Error::Exhausted { .. }) => {}
            Err(other) => panic!("unexpected {other}"),
        }
    }
    while let Ok(buf) = pool.try_alloc(64) {
        burst.push(buf);
    }
    let stats = pool.stats();
    assert_eq!(stats.bytes_registered, 4 * CHUNK, "{stats:?}");
    assert!(matches!(
        pool.try_alloc(1000),
        Err(Error::Exhausted {
            class_size: 1024,
            ..
        })
    ));

    let (tx, rx) = thread::scope(|s| {
        // Waits while the burst is still held: woken when its chunks become idle.
        let waiter = s.spawn(|| pool.alloc(1000, TIMEOUT));
        thread::sleep(Duration::from_millis(50));
        drop(std::mem::take(&mut burst));
        let tx = waiter
            .join()
            .unwrap()
            .expect("a 1 KiB buffer once the burst is gone");
        let rx = pool
            .alloc(4096, TIMEOUT)
            .expect("a 4 KiB buffer once the burst is gone");
        (tx, rx)
    });
    let stats = pool.stats();
    assert_eq!(stats.reclaimed_chunks, 2, "{stats:?}");
    assert_eq!(stats.leaked_chunks, 0);
    assert_eq!((stats.chunks, stats.bytes_registered), (4, 4 * CHUNK));
    assert!(
        stats.classes.iter().all(|c| c.chunks >= 1),
        "each class keeps a chunk: {stats:?}"
    );

    // The new registrations work on the device.
    let data = pattern(1000, 9);
    let mut tx = tx;
    tx.copy_from_slice(&data);
    let rid = p.b.post_recv(RecvRequest::new(rx, ..).unwrap()).unwrap();
    let sid =
        p.a.post_send(SendRequest::send(tx, ..1000).unwrap())
            .unwrap();
    let (sc, tx): (_, Buffer) = one(&p.cq_a, &p.a);
    assert_eq!((sc.wr_id, sc.status), (sid, Ok(())));
    let (rc, mut back): (_, Buffer) = one(&p.cq_b, &p.b);
    assert_eq!((rc.wr_id, rc.status, rc.byte_len), (rid, Ok(()), 1000));
    back.set_len(1000).unwrap();
    assert!(back[..] == data[..], "the bytes differ");
    drop((tx, back));

    // The small classes still serve from the chunk each kept.
    drop((pool.try_alloc(64).unwrap(), pool.try_alloc(256).unwrap()));
    assert_eq!(pool.stats().reclaimed_chunks, 2);
}
