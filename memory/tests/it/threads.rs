//! Threads: waiting with a timeout, wake-ups, buffers dropped elsewhere, many threads at once.

use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use memory::Error;

use super::small_pool;

#[test]
fn alloc_times_out_when_nothing_comes_back() {
    let (pool, _registrar) = small_pool(64, 1, 1);
    let _held = pool.try_alloc(64).unwrap();
    let start = Instant::now();
    match pool.alloc(64, Duration::from_millis(50)) {
        Err(Error::Timeout { waited }) => {
            assert!(
                waited >= Duration::from_millis(50),
                "gave up early: {waited:?}"
            );
        }
        other => panic!("expected Timeout, got {other:?}"),
    }
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "the wait is bounded"
    );
    // A zero timeout is a single attempt.
    assert!(matches!(
        pool.alloc(64, Duration::ZERO),
        Err(Error::Timeout { .. })
    ));
}

#[test]
fn alloc_wakes_when_another_thread_drops_a_buffer() {
    let (pool, _registrar) = small_pool(64, 1, 1);
    let held = pool.try_alloc(64).unwrap();
    let dropper = thread::spawn(move || {
        thread::sleep(Duration::from_millis(50));
        drop(held);
    });
    let start = Instant::now();
    let buf = pool.alloc(64, Duration::from_secs(30)).unwrap();
    assert!(start.elapsed() < Duration::from_secs(30));
    assert_eq!(buf.len(), 64);
    dropper.join().unwrap();
}

#[test]
fn a_buffer_dropped_on_another_thread_returns_to_the_pool() {
    let (pool, _registrar) = small_pool(64, 1, 1);
    let mut buf = pool.try_alloc(64).unwrap();
    buf.fill(5);
    let addr = buf.addr();
    thread::spawn(move || {
        assert!(buf.iter().all(|&b| b == 5));
        drop(buf);
    })
    .join()
    .unwrap();
    assert_eq!(pool.stats().buffers_in_use(), 0);
    let again = pool.try_alloc(64).unwrap();
    assert_eq!(again.addr(), addr, "the same slot came back");
}

#[test]
fn eight_threads_exhaust_recover_and_account_for_every_byte() {
    const THREADS: usize = 8;
    const ROUNDS: usize = 500;
    // 6 buffers for 8 threads holding up to 2 each: exhaustion and waiting are routine.
    let (pool, registrar) = small_pool(256, 2, 3);
    let all: Vec<_> = (0..6).map(|_| pool.try_alloc(256).unwrap()).collect();
    let exhausted = Arc::new(Barrier::new(THREADS + 1));
    let workers: Vec<_> = (0..THREADS)
        .map(|t| {
            let pool = pool.clone();
            let exhausted = Arc::clone(&exhausted);
            thread::spawn(move || {
                // Everything is held by the main thread: backpressure, not a panic.
                assert!(matches!(pool.try_alloc(1), Err(Error::Exhausted { .. })));
                exhausted.wait();
                // The main thread lets go; every thread gets a buffer by waiting.
                let first = pool.alloc(100, Duration::from_secs(30)).unwrap();
                drop(first);
                let mut timeouts = 0;
                for round in 0..ROUNDS {
                    let mark = (t * ROUNDS + round) as u8;
                    let first = match pool.try_alloc(100) {
                        Ok(buf) => Some(buf),
                        Err(Error::Exhausted { .. }) => None,
                        Err(other) => panic!("unexpected {other:?}"),
                    };
                    let mut second = match pool.alloc(256, Duration::from_millis(1)) {
                        Ok(buf) => buf,
                        Err(Error::Timeout { .. }) => {
                            timeouts += 1;
                            continue;
                        }
                        Err(other) => panic!("unexpected {other:?}"),
                    };
                    second.fill(mark);
                    thread::yield_now();
                    assert!(second.iter().all(|&b| b == mark), "a buffer was shared");
                    drop(first);
                }
                timeouts
            })
        })
        .collect();
    exhausted.wait();
    drop(all);
    for worker in workers {
        worker.join().unwrap();
    }

    let stats = pool.stats();
    let class = stats.classes[0];
    assert_eq!(stats.chunks, 3, "grew to the cap and no further");
    assert_eq!(stats.bytes_registered, stats.cap_bytes);
    assert_eq!((class.in_use, class.free, class.capacity), (0, 6, 6));
    assert_eq!(class.high_water, 6);
    assert_eq!(stats.bytes_in_use, 0);
    assert_eq!(stats.high_water_bytes_bound(), 6 * 256);
    assert_eq!(registrar.live_registrations(), 3);
    drop(pool);
    assert_eq!(registrar.live_registrations(), 0);
}

/// Lets the first registration through, then holds the second until told to go on.
#[derive(Debug)]
struct SlowRegistrar {
    inner: memory::testing::HostRegistrar,
    held: std::sync::atomic::AtomicBool,
    entered: std::sync::mpsc::SyncSender<()>,
    proceed: parking_lot::Mutex<std::sync::mpsc::Receiver<()>>,
}

// SAFETY: registers through the host registrar and returns its registrations unchanged.
unsafe impl memory::Registrar for SlowRegistrar {
    fn register(
        &self,
        memory: &memory::ChunkMemory,
        access: memory::PoolAccess,
    ) -> memory::Result<Box<dyn memory::Registration>> {
        use std::sync::atomic::Ordering;
        if self.inner.registrations() == 1 && !self.held.swap(true, Ordering::SeqCst) {
            self.entered.send(()).unwrap();
            self.proceed.lock().recv().unwrap();
        }
        self.inner.register(memory, access)
    }
}

#[test]
fn buffers_come_back_while_the_class_registers_a_chunk() {
    use memory::{ClassConfig, Pool, PoolConfig};
    use std::sync::mpsc;

    let (entered_tx, entered) = mpsc::sync_channel(1);
    let (proceed, proceed_rx) = mpsc::sync_channel(1);
    let host = memory::testing::HostRegistrar::new();
    let registrar = SlowRegistrar {
        inner: host.clone(),
        held: Default::default(),
        entered: entered_tx,
        proceed: parking_lot::Mutex::new(proceed_rx),
    };
    // Two buffers per chunk, three chunks at most.
    let config = PoolConfig::new()
        .classes([ClassConfig::new(64).chunk_size(128)])
        .cap_bytes(128 * 3);
    let pool = Pool::new(config, registrar).unwrap();
    let first = pool.try_alloc(64).unwrap();
    let second = pool.try_alloc(64).unwrap();
    let addr = first.addr();

    let grower = {
        let pool = pool.clone();
        thread::spawn(move || pool.try_alloc(64))
    };
    entered.recv().unwrap(); // the second chunk is being registered

    // Dropping and re-taking a buffer of the class does not wait for the registration.
    let (done_tx, done) = mpsc::channel();
    let recycler = {
        let pool = pool.clone();
        thread::spawn(move || {
            drop(first);
            let again = pool.try_alloc(64).unwrap();
            done_tx.send(again.addr()).unwrap();
            again
        })
    };
    let recycled = done.recv_timeout(Duration::from_secs(30));
    assert_eq!(recycled, Ok(addr), "blocked behind the registration");

    // The class is empty and growing: a caller waits for that growth instead of starting one.
    let waiter = {
        let pool = pool.clone();
        thread::spawn(move || pool.alloc(64, Duration::from_secs(30)))
    };
    // Give the waiter time to find the class empty (if it is late, it finds the new slot).
    thread::sleep(Duration::from_millis(50));
    proceed.send(()).unwrap();
    let grown = grower.join().unwrap().unwrap();
    let waited = waiter.join().unwrap().unwrap();
    assert_eq!(
        waited.addr().abs_diff(grown.addr()),
        64,
        "both from the new chunk"
    );
    assert_eq!(host.registrations(), 2, "one growth, not one per caller");
    drop((second, recycler.join().unwrap()));
}

/// A thread that dropped a buffer and lives on: the slot is free for every other thread, in
/// the statistics, for `try_alloc`, and for a waiter; dropping the pool deregisters the chunk
/// although that thread still runs.
#[test]
fn a_slot_freed_on_a_thread_that_lives_on_is_free_for_all() {
    let (pool, registrar) = small_pool(64, 1, 1);
    let (to_thread, from_main) = std::sync::mpsc::channel::<Option<memory::Buffer>>();
    let (done, dropped) = std::sync::mpsc::channel::<()>();
    let keeper = thread::spawn(move || {
        while let Ok(buf) = from_main.recv() {
            drop(buf);
            done.send(()).unwrap();
        }
    });

    let buf = pool.try_alloc(64).unwrap();
    let addr = buf.addr();
    to_thread.send(Some(buf)).unwrap();
    dropped.recv().unwrap();
    let stats = pool.stats();
    assert_eq!((stats.classes[0].in_use, stats.classes[0].free), (0, 1));
    assert_eq!(stats.bytes_in_use, 0);
    let again = pool.try_alloc(64).expect("the slot the other thread freed");
    assert_eq!(again.addr(), addr);

    to_thread.send(Some(again)).unwrap();
    dropped.recv().unwrap();
    let waited = pool
        .alloc(64, Duration::from_secs(30))
        .expect("a waiter gets the slot the other thread freed");
    to_thread.send(Some(waited)).unwrap();
    dropped.recv().unwrap();

    drop(pool);
    assert_eq!(
        registrar.live_registrations(),
        0,
        "the other thread's cache keeps no chunk registered"
    );
    drop(to_thread);
    keeper.join().unwrap();
}
