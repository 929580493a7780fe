//! Host-tier tests of the pool: behaviour, threads, and a model-based property test.
//!
//! They use the host registrar (fake keys); device tests with real registrations come with
//! the verbs binding.

mod model;
mod pool;
mod threads;

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
