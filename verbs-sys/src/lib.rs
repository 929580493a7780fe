//! Raw FFI.
pub use rdma_sys::*;
