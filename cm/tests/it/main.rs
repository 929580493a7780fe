//! Integration tests of the `cm` crate. Device tests (`#[ignore]`) run with `cargo xtask test`
//! between two hosts (network namespaces with an rxe device each); without a configured peer
//! the peer is this host.
mod connect;
mod support;
