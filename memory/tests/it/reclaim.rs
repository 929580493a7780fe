//! Classes starved by the pool's cap: idle chunks of other classes are deregistered and their
//! bytes serve the starved class; busy or exposed chunks never are; waiters wake for it.

use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use memory::testing::HostRegistrar;
use memory::{Buffer, ClassConfig, Error, Pool, PoolAccess, PoolConfig};

use super::registrar::is_mapped;

/// Classes of 64 B and 1 KiB, each chunk 4 KiB (64 and 4 buffers), a cap of `chunks` chunks.
fn two_classes(chunks: usize, access: PoolAccess) -> (Pool, HostRegistrar) {
    let registrar = HostRegistrar::new();
    let config = PoolConfig::new()
        .classes([
            ClassConfig::new(64).chunk_size(4096),
            ClassConfig::new(1024).chunk_size(4096),
        ])
        .cap_bytes(chunks * 4096)
        .access(access);
    (Pool::new(config, registrar.clone()).unwrap(), registrar)
}

/// Every buffer of the small class the cap allows, each marked with its index.
fn fill_small(pool: &Pool) -> Vec<Buffer> {
    let mut held = Vec::new();
    loop {
        match pool.try_alloc(64) {
            Ok(mut buf) => {
                buf.fill(held.len() as u8);
                held.push(buf);
            }
            Err(Error::Exhausted { .. }) => return held,
            Err(other) => panic!("expected a buffer or Exhausted, got {other:?}"),
        }
    }
}

fn small_chunks(pool: &Pool) -> usize {
    pool.stats().classes[0].chunks
}

#[test]
fn a_class_starved_by_the_cap_gets_the_chunks_another_class_freed() {
    let (pool, registrar) = two_classes(4, PoolAccess::LOCAL_WRITE);
    let held = fill_small(&pool);
    assert_eq!((held.len(), small_chunks(&pool)), (256, 4));
    match pool.try_alloc(1024) {
        Err(Error::Exhausted {
            class_size,
            cap_bytes,
        }) => assert_eq!((class_size, cap_bytes), (1024, 4 * 4096)),
        other => panic!("every small buffer is in use: expected Exhausted, got {other:?}"),
    }
    drop(held);

    let mut large = pool
        .try_alloc(1000)
        .expect("an idle chunk gives its bytes back");
    large.fill(0xee);
    let stats = pool.stats();
    assert_eq!(stats.reclaimed_chunks, 1, "one chunk was enough");
    assert_eq!((stats.classes[0].chunks, stats.classes[1].chunks), (3, 1));
    assert_eq!((stats.chunks, stats.bytes_registered), (4, 4 * 4096));
    assert_eq!(stats.classes[0].capacity, 3 * 64);
    assert_eq!(
        registrar.live_registrations(),
        4,
        "the reclaimed chunk is deregistered"
    );
    assert_eq!(registrar.registrations(), 5);

    // The large class grows on: three more chunks, until the small class has one left.
    let mut more: Vec<Buffer> = (0..11).map(|_| pool.try_alloc(1024).unwrap()).collect();
    let stats = pool.stats();
    assert_eq!((stats.classes[0].chunks, stats.classes[1].chunks), (1, 3));
    assert_eq!(stats.reclaimed_chunks, 3);
    // The small class's last chunk goes too when nothing else is left.
    more.push(pool.try_alloc(1024).unwrap());
    more.push(pool.try_alloc(1024).unwrap());
    let stats = pool.stats();
    assert_eq!((stats.classes[0].chunks, stats.classes[1].chunks), (0, 4));
    assert_eq!(
        (stats.reclaimed_chunks, stats.bytes_registered),
        (4, 4 * 4096)
    );
    assert!(
        large.iter().all(|&b| b == 0xee),
        "a live buffer is untouched"
    );
    assert!(matches!(pool.try_alloc(64), Err(Error::Exhausted { .. })));

    // And back: the small class gets a chunk once a large one is idle (all the buffers of
    // the second large chunk, the first that `more` filled alone).
    let key = more[3].lkey();
    assert_ne!(key, large.lkey());
    more.retain(|buf| buf.lkey() != key);
    assert_eq!(more.len(), 9);
    let small = pool.try_alloc(64).expect("the large class's idle chunk");
    assert_eq!(pool.stats().reclaimed_chunks, 5);
    assert_eq!(registrar.live_registrations(), pool.stats().chunks);
    drop((small, large, more, pool));
    assert_eq!(registrar.live_registrations(), 0);
}

#[test]
fn a_chunk_with_a_buffer_in_use_is_never_reclaimed() {
    let (pool, registrar) = two_classes(2, PoolAccess::LOCAL_WRITE);
    let mut held = fill_small(&pool);
    assert_eq!(held.len(), 128);
    // Keep one buffer of each chunk (the first and the last handed out).
    let last = held.pop().unwrap();
    let mut first = held.swap_remove(0);
    assert_ne!(first.lkey(), last.lkey());
    first.fill(0x5a);
    drop(held);
    assert!(
        matches!(pool.try_alloc(1024), Err(Error::Exhausted { .. })),
        "each chunk still lends a buffer"
    );
    assert_eq!(pool.stats().reclaimed_chunks, 0);
    assert_eq!(registrar.live_registrations(), 2);
    drop(last);
    let large = pool
        .try_alloc(1024)
        .expect("the chunk whose buffers all came back");
    assert!(
        first.iter().all(|&b| b == 0x5a),
        "the busy chunk kept its buffer's bytes"
    );
    assert_eq!(pool.stats().reclaimed_chunks, 1);
    assert_eq!(first.lkey(), pool.try_alloc(64).unwrap().lkey());
    drop((first, large));
}

#[test]
fn a_chunk_whose_remote_key_was_handed_out_is_never_reclaimed() {
    let (pool, registrar) = two_classes(2, PoolAccess::REMOTE_READ);
    let held = fill_small(&pool);
    // A peer learns the key of the first chunk.
    let exposed_key = held[0].lkey();
    assert!(held[0].remote().is_some());
    drop(held);
    let large = pool
        .try_alloc(1024)
        .expect("the other chunk is idle and unexposed");
    assert_eq!(pool.stats().reclaimed_chunks, 1);
    let small = pool.try_alloc(64).unwrap();
    assert_eq!(small.lkey(), exposed_key, "the exposed chunk stayed");
    drop(small);
    // The large chunk's other three buffers, held.
    let rest: Vec<Buffer> = (1..4).map(|_| pool.try_alloc(1024).unwrap()).collect();
    assert!(
        matches!(pool.try_alloc(1024), Err(Error::Exhausted { .. })),
        "an idle chunk whose key a peer may hold stays registered"
    );
    assert_eq!(registrar.live_registrations(), 2);
    drop((large, rest));
}

#[test]
fn steady_use_within_the_cap_reclaims_nothing() {
    // Room for two chunks of each class: alternating bursts never need another class's chunk.
    let (pool, registrar) = two_classes(4, PoolAccess::LOCAL_WRITE);
    for round in 0..200 {
        let burst: Vec<Buffer> = (0..100).map(|_| pool.try_alloc(64).unwrap()).collect();
        drop(burst);
        let burst: Vec<Buffer> = (0..6).map(|_| pool.try_alloc(1024).unwrap()).collect();
        drop(burst);
        if round == 0 {
            assert_eq!(registrar.registrations(), 4);
        }
    }
    assert_eq!(
        registrar.registrations(),
        4,
        "no registration after the first round"
    );
    assert_eq!(pool.stats().reclaimed_chunks, 0);
}

#[test]
fn a_chunk_freed_on_a_thread_that_lives_on_can_be_reclaimed() {
    // The freeing thread caches the small class's slots; the starved class takes them back.
    let (pool, _registrar) = two_classes(1, PoolAccess::LOCAL_WRITE);
    let held = fill_small(&pool);
    let (to_thread, from_main) = mpsc::channel::<Vec<Buffer>>();
    let (done, dropped) = mpsc::channel::<()>();
    let keeper = thread::spawn(move || {
        while let Ok(bufs) = from_main.recv() {
            drop(bufs);
            done.send(()).unwrap();
        }
    });
    to_thread.send(held).unwrap();
    dropped.recv().unwrap();
    let large = pool
        .try_alloc(1024)
        .expect("the slots cached by the other thread count");
    assert_eq!(pool.stats().reclaimed_chunks, 1);
    drop((large, to_thread));
    keeper.join().unwrap();
}

#[test]
fn a_waiter_starved_by_the_cap_wakes_when_another_class_frees_a_chunk() {
    for cached in [false, true] {
        let (pool, _registrar) = two_classes(1, PoolAccess::LOCAL_WRITE);
        let held = fill_small(&pool);
        let (to_thread, from_main) = mpsc::channel::<Vec<Buffer>>();
        // The buffers go to a thread that lives on (and would cache what it frees).
        let keeper = thread::spawn(move || {
            let held = from_main.recv().unwrap();
            if cached {
                // Free all but one first, while nobody waits: they may be cached.
                let mut held = held;
                let last = held.pop().unwrap();
                drop(held);
                thread::sleep(Duration::from_millis(100));
                drop(last);
            } else {
                thread::sleep(Duration::from_millis(100));
                drop(held);
            }
            // Live on until the waiter is served.
            from_main.recv().ok();
        });
        to_thread.send(held).unwrap();
        // Served by the news of the idle chunk, not by the last look at the deadline.
        let timeout = Duration::from_secs(30);
        let start = Instant::now();
        let buf = pool
            .alloc(1024, timeout)
            .expect("woken by the other class's idle chunk");
        assert!(start.elapsed() < timeout, "the waiter was not woken");
        assert_eq!(buf.capacity(), 1024);
        assert_eq!(pool.stats().reclaimed_chunks, 1);
        drop(to_thread);
        keeper.join().unwrap();
    }
}

#[test]
fn a_failed_deregistration_leaks_the_chunk_and_keeps_its_bytes_counted() {
    let (pool, registrar) = two_classes(1, PoolAccess::LOCAL_WRITE);
    let held = fill_small(&pool);
    let addr = held[0].addr();
    drop(held);
    registrar.fail_deregister(true);
    assert!(
        matches!(pool.try_alloc(1024), Err(Error::Exhausted { .. })),
        "the bytes of a chunk still registered are not free"
    );
    let stats = pool.stats();
    assert_eq!((stats.reclaimed_chunks, stats.leaked_chunks), (0, 1));
    assert_eq!((stats.chunks, stats.bytes_registered), (1, 4096));
    assert_eq!(stats.classes[0].chunks, 0);
    assert_eq!(registrar.live_registrations(), 1);
    registrar.fail_deregister(false);
    drop(pool);
    assert_eq!(
        registrar.live_registrations(),
        1,
        "the leaked registration is never dropped"
    );
    assert!(
        is_mapped(addr),
        "the pool unmapped memory the device may still access"
    );
}

/// Eight threads use four classes under a cap of three chunks, so classes keep taking chunks
/// from each other: every wait ends with a buffer (no lost wake-up, no deadlock between
/// classes), no buffer is handed out twice, and every registration is accounted for.
#[test]
fn eight_threads_trade_chunks_between_classes_under_a_tight_cap() {
    const THREADS: usize = 8;
    const ROUNDS: usize = 1500;
    const SIZES: [usize; 4] = [64, 256, 1024, 4096];
    let registrar = HostRegistrar::new();
    let config = PoolConfig::new()
        .classes(SIZES.map(|size| ClassConfig::new(size).chunk_size(16 << 10)))
        .cap_bytes(3 * (16 << 10));
    let pool = Pool::new(config, registrar.clone()).unwrap();
    thread::scope(|s| {
        for t in 0..THREADS {
            let pool = &pool;
            s.spawn(move || {
                for round in 0..ROUNDS {
                    let size = SIZES[(t + round / 7) % SIZES.len()];
                    let mark = (t * ROUNDS + round) as u8;
                    let mut buf = pool
                        .alloc(size, Duration::from_secs(30))
                        .unwrap_or_else(|e| panic!("thread {t}, round {round}: {e}"));
                    buf.fill(mark);
                    thread::yield_now();
                    assert!(buf.iter().all(|&b| b == mark), "a buffer handed out twice");
                }
            });
        }
    });
    let stats = pool.stats();
    assert_eq!(stats.buffers_in_use(), 0);
    assert!(stats.bytes_registered <= 3 * (16 << 10), "{stats:?}");
    assert!(
        stats.reclaimed_chunks > 0,
        "four classes never fit in three chunks"
    );
    assert_eq!(stats.leaked_chunks, 0);
    assert_eq!(registrar.live_registrations(), stats.chunks);
    assert_eq!(
        registrar.registrations(),
        stats.chunks + stats.reclaimed_chunks
    );
    drop(pool);
    assert_eq!(registrar.live_registrations(), 0);
}
