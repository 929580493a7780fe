//! Tests of the transport.
//!
//! Host tier: the protocol core against a simulated RC wire (`sim` and the modules that use
//! it: `close`, `flood`, `keepalive`, `malformed`, `merge`, `order`, `rpc`).
//!
//! Device tier (`#[ignore]`, run by `cargo xtask test`), between the two hosts: a server
//! endpoint on the peer's device and a client endpoint on this host's (`support`): `messages`,
//! `calls`, `one_sided`, `failures`, `close_exit` (writer processes that exit right after closing), `many`, the fault suite (`fault_suite`: netem, bad keys,
//! broken frames from a raw-verbs peer, exhaustion; reported by `cargo xtask faults`), the async core (`async_conn`), progress from a reactor (`reactor`), and the byte stream:
//! `seed` (the tokio echo with only its two types swapped), `stream`, `stream_executor`, `stream_faults`, `stream_scale`, `grpc` (feature `grpc`).

mod close;
mod flood;
mod keepalive;
mod malformed;
mod merge;
mod order;
mod rpc;
mod sim;

mod admission;
mod async_conn;
mod calls;
mod close_exit;
mod connect_async;
mod failures;
mod fault_suite;
#[cfg(feature = "grpc")]
mod grpc;
mod many;
mod messages;
mod one_sided;
mod polling;
mod reactor;
mod resources;
mod seed;
mod stream;
mod stream_executor;
mod stream_faults;
mod stream_scale;
mod support;

use std::time::Duration;

use transport::proto::Config;

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
