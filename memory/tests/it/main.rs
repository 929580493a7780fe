//! Tests of the pool. Host tier: behaviour, threads and a model-based property test, with the
//! host registrar (fake keys). Device tier (`device`, ignored unless run by
//! `cargo xtask test`): pools registered on a real device, used in real transfers.

mod device;
mod model;
mod pool;
mod reclaim;
mod registrar;
mod support;
mod threads;
mod tracing_events;

use memory::testing::HostRegistrar;
use memory::{ClassConfig, Pool, PoolConfig};

/// A pool with one class of `size`-byte buffers, `per_chunk` per chunk, at most `chunks` chunks.
fn small_pool(size: usize, per_chunk: usize, chunks: usize) -> (Pool, HostRegistrar) {
    let registrar = HostRegistrar::new();
    let config = PoolConfig::new()
        .classes([ClassConfig::new(size).chunk_size(size * per_chunk)])
        .cap_bytes(size * per_chunk * chunks);
    (Pool::new(config, registrar.clone()).unwrap(), registrar)
}
