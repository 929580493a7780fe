//! Declarations rdma-sys 0.3 lacks: the GID-table queries, an async-event struct whose event
//! type is a plain integer, and the `rdma_set_option` levels and names of `rdma_cma.h`.
// C mirror types: unions cannot derive Debug, and rdma-sys types do not either.
#![allow(missing_debug_implementations)]

use rdma_sys::{ibv_context, ibv_cq, ibv_gid_entry, ibv_qp, ibv_srq, ibv_wq};
use std::os::raw::c_int;

/// The event's element: which object (or port) it is about; which member is valid depends on
/// the event type (`man ibv_get_async_event`).
#[repr(C)]
#[derive(Clone, Copy)]
pub union ibv_async_event_element {
    pub cq: *mut ibv_cq,
    pub qp: *mut ibv_qp,
    pub srq: *mut ibv_srq,
    pub wq: *mut ibv_wq,
    pub port_num: c_int,
}

/// `struct ibv_async_event` with `event_type` as the raw `enum ibv_event_type` value.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_async_event_raw {
    pub element: ibv_async_event_element,
    pub event_type: u32,
}

/// `RDMA_OPTION_ID`: the level of `rdma_set_option`'s options about the id itself.
pub const RDMA_OPTION_ID: c_int = 0;
/// `RDMA_OPTION_ID_ACK_TIMEOUT` (level [`RDMA_OPTION_ID`]): a `u8`, the local ACK timeout
/// exponent the id's QP gets (4.096 µs × 2^value).
pub const RDMA_OPTION_ID_ACK_TIMEOUT: c_int = 3;

#[link(name = "ibverbs")]
extern "C" {
    /// `int _ibv_query_gid_ex(struct ibv_context *, uint32_t port_num, uint32_t gid_index,
    /// struct ibv_gid_entry *, uint32_t flags, size_t entry_size)` (IBVERBS_1.11).
    pub fn _ibv_query_gid_ex(
        context: *mut ibv_context,
        port_num: u32,
        gid_index: u32,
        entry: *mut ibv_gid_entry,
        flags: u32,
        entry_size: usize,
    ) -> c_int;

    /// `ssize_t _ibv_query_gid_table(struct ibv_context *, struct ibv_gid_entry *entries,
    /// size_t max_entries, uint32_t flags, size_t entry_size)` (IBVERBS_1.11).
    pub fn _ibv_query_gid_table(
        context: *mut ibv_context,
        entries: *mut ibv_gid_entry,
        max_entries: usize,
        flags: u32,
        entry_size: usize,
    ) -> isize;

    /// `ibv_get_async_event` declared over [`ibv_async_event_raw`].
    #[link_name = "ibv_get_async_event"]
    pub fn ibv_get_async_event_raw(
        context: *mut ibv_context,
        event: *mut ibv_async_event_raw,
    ) -> c_int;

    /// `ibv_ack_async_event` declared over [`ibv_async_event_raw`].
    #[link_name = "ibv_ack_async_event"]
    pub fn ibv_ack_async_event_raw(event: *mut ibv_async_event_raw);
}

/// Port of the `static inline` `ibv_query_gid_ex`: reads one GID table entry with its type.
/// Returns 0 or an errno (`ENODATA` for an empty entry, `EINVAL` for an index past the table).
///
/// # Safety
/// `context` must be an open device context and `entry` valid for writes.
#[inline]
pub unsafe fn ibv_query_gid_ex(
    context: *mut ibv_context,
    port_num: u32,
    gid_index: u32,
    entry: *mut ibv_gid_entry,
    flags: u32,
) -> c_int {
    // SAFETY: forwarded caller contract; the size is that of the struct we pass.
    unsafe {
        _ibv_query_gid_ex(
            context,
            port_num,
            gid_index,
            entry,
            flags,
            std::mem::size_of::<ibv_gid_entry>(),
        )
    }
}

/// Port of the `static inline` `ibv_query_gid_table`: fills `entries` with the valid GID
/// entries of all ports; returns how many, or -1 with errno.
///
/// # Safety
/// `context` must be an open device context and `entries` valid for `max_entries` writes.
#[inline]
pub unsafe fn ibv_query_gid_table(
    context: *mut ibv_context,
    entries: *mut ibv_gid_entry,
    max_entries: usize,
    flags: u32,
) -> isize {
    // SAFETY: forwarded caller contract; the size is that of the struct we pass.
    unsafe {
        _ibv_query_gid_table(
            context,
            entries,
            max_entries,
            flags,
            std::mem::size_of::<ibv_gid_entry>(),
        )
    }
}
