//! Host benchmark of pool alloc+free: 1 and 2 threads, 64 B, 4 KiB and 1 MiB buffers.
//!
//! Uses the host registrar (no device): it measures the pool's own cost, the part that
//! replaces per-message registration. `cargo bench -p rdma-memory --bench alloc`.
//! The device comparison against `ibv_reg_mr` + `ibv_dereg_mr` belongs to `cargo xtask bench`.

use std::hint::black_box;
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::Instant;

use memory::testing::HostRegistrar;
use memory::{Pool, PoolConfig};

const ITERATIONS: u32 = 200_000;
const SAMPLES: usize = 7;

fn pool() -> Pool {
    let config = PoolConfig::new().cap_bytes(256 << 20);
    Pool::new(config, HostRegistrar::new()).expect("pool")
}

/// One thread's run: nanoseconds per alloc+free.
fn run(pool: &Pool, len: usize, start: &Barrier) -> f64 {
    start.wait();
    let begin = Instant::now();
    for _ in 0..ITERATIONS {
        let mut buf = pool.try_alloc(len).expect("alloc");
        buf[0] = 1;
        black_box(&buf);
    }
    begin.elapsed().as_nanos() as f64 / f64::from(ITERATIONS)
}

/// Median over samples of the mean ns per alloc+free per thread. Thread `t` allocates
/// `lens[t]` bytes: equal lengths contend for one class, different ones use separate classes.
fn measure(lens: &[usize]) -> f64 {
    let pool = pool();
    for &len in lens {
        drop(pool.try_alloc(len).expect("warm-up")); // register chunks outside the timing
    }
    let threads = lens.len();
    let mut samples: Vec<f64> = (0..SAMPLES)
        .map(|_| {
            let start = Arc::new(Barrier::new(threads));
            let handles: Vec<_> = (0..threads)
                .map(|t| {
                    let (pool, start, len) = (pool.clone(), Arc::clone(&start), lens[t]);
                    thread::spawn(move || run(&pool, len, &start))
                })
                .collect();
            let per_thread: Vec<f64> = handles.into_iter().map(|h| h.join().unwrap()).collect();
            per_thread.iter().sum::<f64>() / per_thread.len() as f64
        })
        .collect();
    samples.sort_by(f64::total_cmp);
    samples[SAMPLES / 2]
}

fn main() {
    // `cargo test --benches` runs this with `--bench` absent: keep that quick.
    if !std::env::args().any(|a| a == "--bench") {
        println!("alloc bench: run with `cargo bench -p rdma-memory --bench alloc`");
        return;
    }
    println!("pool alloc+free (host registrar), median of {SAMPLES} x {ITERATIONS} iterations");
    println!(
        "{:>9} {:>22} {:>14} {:>16}",
        "size", "threads", "ns/op/thread", "Mops/s (total)"
    );
    for len in [64, 4096, 1 << 20] {
        // The second thread of the last row uses the next smaller class.
        let other = if len == 64 { 256 } else { len / 4 };
        let rows: [(&str, Vec<usize>); 3] = [
            ("1", vec![len]),
            ("2, same class", vec![len, len]),
            ("2, separate classes", vec![len, other]),
        ];
        for (label, lens) in rows {
            let ns = measure(&lens);
            let total = lens.len() as f64 * 1e3 / ns;
            println!("{len:>9} {label:>22} {ns:>14.1} {total:>16.2}");
        }
    }
}
