//! Integration tests of the `cm` crate. Device tests (`#[ignore]`) run with `cargo xtask test`
//! between two hosts (network namespaces with an rxe device each); without a configured peer
//! the peer is this host. The far end runs `cm-test-peer` (src/bin) on the peer host.
mod admission;
mod channel;
mod completion_order;
mod connect;
mod disconnect;
mod failures;
mod first_connect;
mod id_fields;
mod many;
mod multicast;
mod private_data;
mod shared_pool;
mod support;
mod tracing_events;
mod ud;
