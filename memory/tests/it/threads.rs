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
