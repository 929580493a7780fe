//! Tests of the transport on devices (`#[ignore]`, run by `cargo xtask test`), between the
//! two hosts: a server endpoint on the peer's device and a client endpoint on this host's
//! (`support`): `messages`, `zero_copy` (buffers sent without a copy), `calls`, `one_sided`,
//! `failures`, `close_exit` (writer processes that exit right after closing), `many`, `stats`
//! (connection and endpoint statistics), the fault suite (`fault_suite`: netem, bad keys,
//! broken frames from a raw-verbs peer, exhaustion; reported by `cargo xtask faults`), the
//! async core (`async_conn`), progress from a reactor (`reactor`), and the byte stream: `seed`
//! (the tokio echo with only its two types swapped), `stream`, `stream_executor`,
//! `stream_faults`, `stream_parity` (beside `tokio::net` past the echo), `stream_scale`, `grpc`
//! (feature `grpc`).
//!
//! The protocol core's host tests, against a simulated RC wire, live inside the crate beside
//! the core (`transport/src/proto/tests/`): `cargo test -p rdma-transport --lib`.

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
mod peer_patterns;
mod polling;
mod reactor;
mod resources;
mod seed;
mod stats;
mod stream;
mod stream_executor;
mod stream_faults;
mod stream_parity;
mod stream_scale;
mod support;
mod zero_copy;
