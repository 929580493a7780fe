//! Raw FFI to libibverbs: `rdma-sys` re-exported, plus what it lacks.
//!
//! Add it with `cargo add rdma-verbs-sys`; the library it gives is
//! `verbs_sys` (`use verbs_sys::...`).
//!
//! - [`_ibv_query_gid_ex`] / [`_ibv_query_gid_table`] and their inline front-ends
//!   [`ibv_query_gid_ex`] / [`ibv_query_gid_table`] (GID-type-aware selection, libibverbs ≥ 1.11).
//! - [`ibv_async_event_raw`] with [`ibv_get_async_event_raw`]: the same call as
//!   `ibv_get_async_event`, but with the event type as a plain integer, so an event type newer than
//!   these bindings cannot produce an invalid Rust enum value.
//! - [`ibv_create_cq_ex`], [`ibv_create_qp_ex`], [`ibv_query_device_ex`] and
//!   [`ibv_query_rt_values_ex`]: ports that find the provider's extended context (rdma-sys's
//!   own never do on 64-bit hosts; see the `ext` module).
//! - [`ibv_alloc_mw`], [`ibv_dealloc_mw`], [`ibv_bind_mw`] and [`ibv_inc_rkey`]: memory-window
//!   ports that check for the provider's operation instead of unwrapping it.
//! - [`errno`]: one helper per C error convention.
//! - [`fd`]: waiting on a channel's descriptor with a timeout, and non-blocking mode.
//!
//! Everything else here is `unsafe` to call; the safe layer is the `verbs` crate.
#![allow(non_camel_case_types)]

pub mod errno;
mod ext;
pub mod fd;
mod mw;
mod shims;

// Named explicitly so that they shadow rdma-sys's versions of the same functions.
pub use ext::{ibv_create_cq_ex, ibv_create_qp_ex, ibv_query_device_ex, ibv_query_rt_values_ex};
pub use mw::{ibv_alloc_mw, ibv_bind_mw, ibv_dealloc_mw, ibv_inc_rkey};
pub use rdma_sys::*;
pub use shims::*;

#[cfg(test)]
mod layout_tests;
