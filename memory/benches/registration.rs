//! Device benchmark: pool alloc+free against registering per message (`ibv_reg_mr` +
//! `ibv_dereg_mr`), for 64 B, 4 KiB and 1 MiB buffers, on 1 and 2 threads.
//!
//! Run by `cargo xtask bench memory` on the rxe device, or by hand:
//! `cargo bench -p rdma-memory --bench registration` (the executable wants `--bench`).
//! The device is `RDMA_TEST_DEVICE`, else the first one. Prints a table and writes JSON to
//! `MEMORY_BENCH_JSON`, else `<target dir>/bench/memory.json`.
//!
//! "Register per message" is the verbs layer's safe `Pd::reg_mr` and dropping the region: a
//! page-aligned zeroed allocation, `ibv_reg_mr`, `ibv_dereg_mr`, and the free. The pool side
//! allocates from a warm pool (chunks registered before timing) and drops the buffer.
//! Each case runs a few fixed-length samples and reports the median of the mean time per
//! operation per thread; the ratio is reg_mr / pool.

use std::hint::black_box;
use std::process::ExitCode;
use std::sync::Barrier;
use std::thread;
use std::time::{Duration, Instant};

use memory::{Pool, PoolConfig};
use verbs::{AccessFlags, Context, Pd};

const SIZES: [usize; 3] = [64, 4096, 1 << 20];
const THREADS: [usize; 2] = [1, 2];
const SAMPLES: usize = 5;
/// Length of one sample; a case takes about `SAMPLES` times this.
const SAMPLE: Duration = Duration::from_millis(300);

/// One operation measured; runs until told to stop.
trait Op: Sync {
    fn once(&self, len: usize);
}

struct PoolOp(Pool);

impl Op for PoolOp {
    fn once(&self, len: usize) {
        let mut buf = self.0.try_alloc(len).expect("pool alloc");
        buf[0] = 1;
        black_box(&buf);
    }
}

struct RegOp(Pd);

impl Op for RegOp {
    fn once(&self, len: usize) {
        let mr = self
            .0
            .reg_mr(len, AccessFlags::LOCAL_WRITE)
            .expect("ibv_reg_mr");
        black_box(&mr);
    }
}

/// One sample: `threads` threads run `op` for [`SAMPLE`]; the mean ns per operation per thread.
fn sample(op: &dyn Op, len: usize, threads: usize) -> (f64, u64) {
    let start = Barrier::new(threads);
    let per_thread: Vec<(Duration, u64)> = thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| {
                    start.wait();
                    let begin = Instant::now();
                    let mut ops = 0u64;
                    while begin.elapsed() < SAMPLE {
                        for _ in 0..16 {
                            op.once(len);
                        }
                        ops += 16;
                    }
                    (begin.elapsed(), ops)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let ns = per_thread
        .iter()
        .map(|(t, ops)| t.as_nanos() as f64 / *ops as f64)
        .sum::<f64>()
        / threads as f64;
    (ns, per_thread.iter().map(|(_, ops)| ops).sum())
}

/// Median ns/op/thread over [`SAMPLES`] samples, after one warm-up operation per thread, and
/// the operations counted.
fn measure(op: &dyn Op, len: usize, threads: usize) -> (f64, u64) {
    for _ in 0..threads {
        op.once(len);
    }
    let mut samples: Vec<(f64, u64)> = (0..SAMPLES).map(|_| sample(op, len, threads)).collect();
    let ops = samples.iter().map(|s| s.1).sum();
    samples.sort_by(|a, b| a.0.total_cmp(&b.0));
    (samples[SAMPLES / 2].0, ops)
}

struct Row {
    size: usize,
    threads: usize,
    pool_ns: f64,
    pool_ops: u64,
    reg_ns: f64,
    reg_ops: u64,
}

fn open_device() -> Result<Context, String> {
    let wanted = std::env::var("RDMA_TEST_DEVICE")
        .ok()
        .filter(|n| !n.is_empty());
    let opened = match &wanted {
        Some(name) => Context::open(name),
        None => Context::open_first(),
    };
    opened.map_err(|e| {
        format!(
            "cannot open the RDMA device {} ({e}); set RDMA_TEST_DEVICE or run `cargo xtask bench memory`",
            wanted.as_deref().unwrap_or("(first one)")
        )
    })
}

fn run() -> Result<(), String> {
    let ctx = open_device()?;
    let pd = ctx.alloc_pd().map_err(|e| format!("ibv_alloc_pd: {e}"))?;
    let config = PoolConfig::new().class_sizes(SIZES).cap_bytes(256 << 20);
    let pool = Pool::on_pd(&pd, config).map_err(|e| format!("pool: {e}"))?;
    // Warm: register every class's first chunk before timing.
    for len in SIZES {
        let held: Vec<_> = (0..THREADS[THREADS.len() - 1])
            .map(|_| pool.try_alloc(len))
            .collect::<Result<_, _>>()
            .map_err(|e| format!("pool warm-up: {e}"))?;
        drop(held);
    }
    pd.reg_mr(4096, AccessFlags::LOCAL_WRITE)
        .map_err(|e| format!("ibv_reg_mr: {e}"))?;

    let (pool_op, reg_op) = (PoolOp(pool.clone()), RegOp(pd.clone()));
    println!(
        "memory pool vs register per message on {}: median of {SAMPLES} x {SAMPLE:?}, ns/op per thread",
        ctx.name()
    );
    println!(
        "{:>9} {:>7} {:>12} {:>14} {:>10}",
        "size", "threads", "pool ns/op", "reg_mr ns/op", "reg/pool"
    );
    let mut rows = Vec::new();
    for size in SIZES {
        for threads in THREADS {
            let (pool_ns, pool_ops) = measure(&pool_op, size, threads);
            let (reg_ns, reg_ops) = measure(&reg_op, size, threads);
            println!(
                "{size:>9} {threads:>7} {pool_ns:>12.1} {reg_ns:>14.1} {:>9.0}x",
                reg_ns / pool_ns
            );
            rows.push(Row {
                size,
                threads,
                pool_ns,
                pool_ops,
                reg_ns,
                reg_ops,
            });
        }
    }
    let stats = pool.stats();

    let json = serde_json::json!({
        "benchmark": "memory/registration",
        "device": ctx.name(),
        "unit": "ns/op/thread",
        "samples": SAMPLES,
        "sample_ms": SAMPLE.as_millis() as u64,
        "reg_mr": "verbs Pd::reg_mr + drop: aligned zeroed allocation, ibv_reg_mr, ibv_dereg_mr, free",
        "pool": "Pool::try_alloc + drop on a warm pool",
        "pool_chunks": stats.chunks,
        "pool_bytes_registered": stats.bytes_registered,
        "results": rows.iter().map(|r| serde_json::json!({
            "size": r.size,
            "threads": r.threads,
            "pool_ns_per_op": r.pool_ns,
            "pool_ops": r.pool_ops,
            "reg_mr_ns_per_op": r.reg_ns,
            "reg_mr_ops": r.reg_ops,
            "ratio": r.reg_ns / r.pool_ns,
        })).collect::<Vec<_>>(),
    });
    let path = testkit::bench_json_path("MEMORY_BENCH_JSON", "memory.json");
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| format!("create {}: {e}", dir.display()))?;
    }
    let text = serde_json::to_string_pretty(&json).expect("JSON of plain values");
    std::fs::write(&path, text + "\n").map_err(|e| format!("write {}: {e}", path.display()))?;
    println!("JSON: {}", path.display());
    Ok(())
}

fn main() -> ExitCode {
    // `cargo test --benches` runs this without `--bench`: it needs a device, so only say how.
    if !std::env::args().any(|a| a == "--bench") {
        println!("registration bench: run with `cargo bench -p rdma-memory --bench registration` (needs an RDMA device)");
        return ExitCode::SUCCESS;
    }
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("registration bench: {e}");
            ExitCode::FAILURE
        }
    }
}
