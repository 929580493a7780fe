//! Device tests of the transport (`#[ignore]`, run by `cargo xtask test`), between the two
//! hosts: a server endpoint on the peer's device and a client endpoint on this host's.
//! Host-tier tests of the protocol core live in the crate (`src/proto`).

mod messages;
mod rpc;
mod one_sided;
mod failures;
mod many;
mod support;
