//! Raw FFI to libibverbs: `rdma-sys` re-exported, plus what it lacks.
//!
//! - [`_ibv_query_gid_ex`] / [`_ibv_query_gid_table`] and their inline front-ends
//!   [`ibv_query_gid_ex`] / [`ibv_query_gid_table`] (GID-type-aware selection, libibverbs ≥ 1.11).
//! - [`ibv_async_event_raw`] with [`ibv_get_async_event_raw`]: the same call as
//!   `ibv_get_async_event`, but with the event type as a plain integer, so an event type newer than
//!   these bindings cannot produce an invalid Rust enum value.
//! - [`errno`]: one helper per C error convention.
//! - [`fd`]: waiting on a channel's descriptor with a timeout, and non-blocking mode.
//!
//! Everything else here is `unsafe` to call; the safe layer is the `verbs` crate.
#![allow(non_camel_case_types)]

pub mod errno;
pub mod fd;
mod shims;

pub use rdma_sys::*;
pub use shims::*;

#[cfg(test)]
mod layout_tests;
