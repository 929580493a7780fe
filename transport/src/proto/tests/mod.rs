//! Host tests of the protocol core: two connections against a simulated RC wire (`sim` and
//! the modules that use it: `close`, `flood`, `keepalive`, `merge`, `order`, `rpc`, `stats`) and one
//! connection fed malformed frames (`malformed`). The proptest seeds that once failed are in
//! `transport/proptest-regressions/proto/tests/`.

mod close;
mod flood;
mod keepalive;
mod malformed;
mod merge;
mod order;
mod rpc;
mod sim;
mod stats;

use std::time::Duration;

use crate::proto::Config;

/// A small configuration so that schedules reach every limit: 64-byte eager limit, 50-byte
/// chunks.
pub fn small_config(window: u32, reserve: u32, sq_depth: u32, chunks: u32, reads: u32) -> Config {
    Config::default()
        .with_window(window)
        .with_reserved_credits(reserve)
        .with_sq_depth(sq_depth)
        .with_frame_size(80)
        .with_rndv_chunk_size(50)
        .with_max_chunks_in_flight(chunks)
        .with_max_reads_in_flight(reads)
        .with_max_message(100_000)
        .with_keepalive_interval(Duration::from_millis(5))
        .with_keepalive_timeout(Duration::from_secs(3600))
}
