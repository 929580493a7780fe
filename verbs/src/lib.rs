//! Safe RDMA verbs over libibverbs: devices, protection domains, memory regions, completion
//! queues (with completion channels), queue pairs (RC, UC, UD), shared receive queues and
//! address handles.
//!
//! Add it with `cargo add rdma-verbs`; the library it gives is `verbs` (`use verbs::...`).
//!
//! # Quick start
//!
//! An RC queue pair connected to itself (loopback), an RDMA WRITE, and its completion:
//!
//! ```no_run
//! use std::time::Duration;
//! use verbs::{AccessFlags, Context, MemoryRegion, QpEndpoint, QpInitAttr, QpType, SendRequest};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! // The device that serves this host's RDMA address, and the GID (port, index) for it.
//! let (ctx, me) = Context::open_by_addr("10.77.0.1".parse()?)?;
//! let port = me.gid.port;
//! let mtu = ctx.query_port(port)?.active_mtu();
//! let pd = ctx.alloc_pd()?;
//! let cq = ctx.create_cq(16, None)?;
//! let qp = pd.create_qp(&QpInitAttr::new(QpType::Rc, &cq, &cq))?;
//!
//! // Target memory a peer may write; source memory that we fill and hand to the request.
//! let target = pd.reg_mr(4096, AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE)?;
//! let mut source = pd.reg_mr(4096, AccessFlags::LOCAL_WRITE)?;
//! source.as_mut_slice()[..5].copy_from_slice(b"hello");
//!
//! let this_qp = QpEndpoint { qp_num: qp.qp_num(), psn: 0, lid: 0, gid: me.gid.gid };
//! qp.to_init(port, AccessFlags::REMOTE_WRITE)?;
//! qp.to_rtr(&this_qp, port, Some(me.gid.index), mtu)?;
//! qp.to_rts(0)?;
//!
//! // Safe: `source` is moved into the request and comes back with its completion.
//! let wr_id = qp.post_send(SendRequest::rdma_write(source, 0..5, target.remote(0..5)?)?)?;
//! let wc = cq.wait_one(Duration::from_secs(5))?; // exactly one: none is left unseen
//! assert_eq!(wc.wr_id(), wr_id);
//! wc.status()?; // a failure says why, e.g. "remote access error: ..."
//! let source: MemoryRegion = qp.reclaim(&wc)[0].take()?;
//!
//! let mut out = [0u8; 5];
//! target.read(0, &mut out)?;
//! assert_eq!(&out, b"hello");
//! # drop(source);
//! # Ok(())
//! # }
//! ```
//!
//! # Memory safety of posted memory
//!
//! The NIC reads and writes memory behind the compiler's back, so the rules are:
//!
//! - **Owned posting is safe.** [`SendRequest`] and [`RecvRequest`] take their memory by value
//!   through [`RegisteredBuf`] (the NIC only reads it: SEND, WRITE) or [`RegisteredBufMut`] (the
//!   NIC may write it: RECV, READ, atomics). Posting moves it into the QP's in-flight table;
//!   [`Qp::reclaim`] (or [`Srq::reclaim`]) returns it once a polled [`WorkCompletion`] proves the
//!   NIC is done. Completions come in order on a send queue, so a signaled completion also
//!   returns the unsignaled requests posted before it. Buffers of requests still in flight when
//!   the QP is destroyed are dropped only after `ibv_destroy_qp` succeeded (if it fails, the
//!   QP lives on and they are leaked).
//! - **A shared region may only be read by the NIC**: `Arc<MemoryRegion>` is a
//!   [`RegisteredBuf`] but not a [`RegisteredBufMut`].
//! - **Regions a peer may write** (remote write or atomic rights) never hand out slices, only
//!   copies ([`MemoryRegion::read`], [`MemoryRegion::write`]).
//! - **Borrowed posting is `unsafe`**: [`Qp::post_send_unchecked`] and friends take plain
//!   [`LocalSlice`]s; the caller promises the memory outlives the request and is not touched
//!   meanwhile. Registering caller memory ([`Pd::reg_mr_raw`]) is `unsafe` for the same reason.
//!   Registering a dma-buf ([`Pd::reg_dmabuf_mr`]) is safe: no memory of the process is
//!   named, the kernel holds the dma-buf while it is registered and the region owns its
//!   descriptor; its descriptors post through the `unsafe` calls.
//! - **Completions are unforgeable**: a [`WorkCompletion`] only exists inside a
//!   [`CompletionBuf`] after a poll, and the [`Polled`] view borrows the buffer, so it cannot be
//!   polled into again while completions are in use. Owned requests get process-unique ids
//!   (with the [`OWNED_WR_ID`] bit, which unsafe posts may not use), so a completion names
//!   exactly one request.
//!
//! Other crates make their memory postable by implementing [`RegisteredBuf`] (and
//! [`RegisteredBufMut`]) for an owned handle that keeps both the bytes and the registration
//! alive.
//!
//! # Map of the API
//!
//! - Devices: [`devices`], [`Context::open`], [`Context::open_by_addr`] (the device, port and
//!   GID index that serve an IP address; also [`device_for_addr`], [`rdma_addresses`]),
//!   [`Context::query_device`],
//!   [`Context::query_device_ex`], [`Context::query_port`], [`Context::gid_table`],
//!   [`Context::roce_v2_gid`] (the RoCE v2 GID of an IP address).
//! - Async events: [`Context::get_async_event`] (with timeout), [`Context::async_events`]
//!   (iterator), [`Context::async_event_channel`] (channel fed by a thread).
//! - Memory: [`Pd::reg_mr`] (owned [`MemoryRegion`]), `unsafe` [`Pd::reg_mr_raw`] ([`RawMr`]),
//!   [`Pd::reg_dmabuf_mr`] ([`DmabufMr`]: bytes of a dma-buf, whose descriptor the region
//!   owns; [`Error::MissingCapability`] where the device cannot), descriptors [`LocalSlice`] /
//!   [`RemoteSlice`] via `local(range)` / `remote(range)`.
//! - Memory windows: [`Pd::alloc_mw`] ([`Mw`], [`MwType`]); type 1 bound with
//!   [`Qp::bind_mw`] / [`Qp::unbind_mw`], type 2 with [`SendRequest::bind_mw`] and revoked
//!   with [`SendRequest::local_inv`] or a peer's [`SendRequest::send_with_inv`] (the
//!   receiver's completion names the rkey). A window keeps the `Arc<MemoryRegion>` it is bound
//!   to, and each bind or invalidation request keeps what it replaces until its completion.
//! - Ports and device values: [`PortAttr::active_speed`] / [`PortAttr::active_width`] /
//!   [`PortAttr::phys_state`] (printed like `ibv_devinfo`), [`Context::query_rt_values_ex`],
//!   [`Context::num_comp_vectors`]; a port's counters as sysfs names them
//!   ([`Context::port_counters`], [`PortCounters`], differences with [`PortCounters::since`]).
//! - Completions: [`Context::create_cq`] (or [`Context::create_cq_on_vector`]), [`Cq::poll`]
//!   into a [`CompletionBuf`], [`Cq::poll_timeout`], exactly as many as you handle with [`Cq::wait_one`] /
//!   [`Cq::wait_n`], event mode with
//!   [`Context::create_comp_channel`], [`Cq::req_notify`], [`Cq::get_event`] and the lossless
//!   [`Cq::wait_and_poll`].
//! - Extended completions: [`Context::create_cq_ex`] with [`CqExAttr`] (completion vector,
//!   timestamps where the device has them, else [`Error::Unsupported`]); [`CqEx::start_poll`]
//!   gives an [`ExPoll`] batch whose [`ExPoll::next`] lends one [`ExWc`] at a time and whose
//!   drop ends the batch. A [`CqEx`] serves as a QP's CQ in [`QpInitAttr::new`], and
//!   [`Qp::reclaim`] takes an [`ExWc`] as it takes a [`WorkCompletion`].
//! - Queue pairs: [`Pd::create_qp`] with [`QpInitAttr`]; [`Qp::modify`] with [`QpAttr`]
//!   (checked against the transition table), or [`Qp::to_init`] / [`Qp::to_rtr`] /
//!   [`Qp::to_rts`], or the typestate [`QpIn`]; [`Pd::create_srq`], [`Pd::create_ah`].
//! - Posting: [`Qp::post_send`] / [`Qp::post_send_batch`] / [`Qp::post_recv`] with
//!   [`SendRequest`] / [`RecvRequest`], [`Qp::reclaim`] (or, in a polling loop,
//!   [`Qp::reclaim_into`], which appends to a list you reuse and does not allocate);
//!   `unsafe` [`Qp::post_send_unchecked`] / [`Qp::post_recv_unchecked`] with [`SendWr`] /
//!   [`RecvWr`]. A full queue is [`Error::QueueFull`] and hands the request back
//!   ([`PostError`]). [`Qp::post_send_inline`] sends the bytes of a list of `IoSlice`s
//!   copied at post time (safe with any memory; over `max_inline_data` is
//!   [`Error::InlineTooLong`]); [`Qp::post_inline_send`] is its lean form for one connected
//!   SEND at a time. [`Srq::recv_ring`] gives a [`RecvRing`]: whole-buffer receives of one
//!   type that its `reclaim` finds by the slot the completion's `wr_id` names.
//!   [`Qp::query`] returns every attribute ([`QpQuery`]).
//! - The `ibv_wr_*` API: [`Pd::create_qp_ex`] with [`SendOps`] gives a [`QpEx`] (a [`Qp`]
//!   plus [`QpEx::wr_post`], [`QpEx::wr_post_inline`] and `unsafe`
//!   [`QpEx::wr_post_unchecked`]), with the same ownership rules as plain posting.
//!
//! # Building on this crate
//!
//! - Registered-memory pools implement [`RegisteredBuf`] / [`RegisteredBufMut`] for their
//!   buffer handles (see the traits' safety contracts); such buffers post safely.
//! - Connection managers wrap objects librdmacm creates: [`Context::from_raw`] for its device
//!   context, [`QpInitAttr::to_raw`] to create a QP with `rdma_create_qp` on this crate's PD
//!   and CQs, [`Qp::from_raw`] to adopt it (with its own destroy function), then
//!   [`Qp::query_state`] after the CM moved it to RTS.
//! - Every handle has `as_raw()` for calls this crate does not wrap; [`sys`] is the FFI.
//!
//! # Thread safety
//!
//! Every handle ([`Context`], [`Pd`], [`MemoryRegion`], [`Cq`], [`Qp`], [`Srq`], [`Ah`]) is
//! `Send + Sync`: libibverbs verbs are thread-safe, and this crate's own bookkeeping (QP state,
//! in-flight tables, unacknowledged event counts) sits behind mutexes. Handles are cheap
//! `Arc` clones. Several threads may poll one CQ; each completion is returned once.
//!
//! # Resource cleanup
//!
//! Objects are destroyed when their last handle is dropped, children first: each child holds
//! an `Arc` of its parent (MR → PD → context, QP → CQs/SRQ/PD), so a parent is never destroyed
//! under a live child, whatever order handles are dropped in. Completion events are
//! acknowledged in batches and at the latest before their CQ is destroyed; async events are
//! acknowledged as soon as they are read. Errors from destroy calls cannot be reported from
//! `drop` and are ignored.
//!
//! # Tracing
//!
//! With the `tracing` feature (on by default) the crate emits [`tracing`](https://docs.rs/tracing)
//! events with target `verbs`: a device opened and each async event read (at debug; faults such
//! as `QpFatal` or `PortErr` at warn), a QP moved to Err (debug) or found there by a query
//! (warn), a failed `ibv_modify_qp` (warn), and every refused post with its QP number and errno
//! (warn; a full queue, backpressure, at debug). They are emitted on error and setup paths only:
//! a successful post or poll runs nothing for them. Without the feature nothing is compiled.
//!
//! # Limitations
//!
//! - A completion channel serves one CQ (the CQ takes it by value), so events never need
//!   routing between CQs.
//! - Owned requests get library-assigned `wr_id`s (carry your own value with
//!   `SendRequest::tag`); borrowed (`unsafe`) requests keep yours, without the
//!   [`OWNED_WR_ID`] bit.
//! - The tracked QP state follows transitions made through the handle; errors move a QP to
//!   Err on their own, which [`Qp::query_state`] picks up.
//! - rxe (rdma-core 44) quirks handled here: an [`ExPoll`] batch holds one completion (its
//!   `ibv_next_poll` past the last entry corrupts the CQ before rdma-core 61), and inline
//!   lists go through `ibv_wr_set_inline_data` (its list call posts zero bytes before 64).
//!   Its `ibv_wr_set_sge_list` counts every SGE as long as the first, so on rxe a
//!   [`QpEx::wr_post`] request whose SGEs differ in length completes with `LocQpOpErr`
//!   and the QP goes to the error state (fixed upstream after rdma-core 64); post such
//!   requests with [`Qp::post_send`].
//! - rxe does not enforce a memory window's bounds: it checks an access through a window
//!   against the window's region (its rights are enforced). It also reports a received
//!   SEND_WITH_INV with the kernel's flag value, which userspace reads as `IP_CSUM_OK`;
//!   completions polled from a CQ of an rxe device have it translated to
//!   [`WcFlags::WITH_INV`].
//! - Not wrapped yet: XRC, device memory, flow steering; use `as_raw()` and
//!   [`sys`].
#![warn(missing_docs)]

#[macro_use]
mod c_enum;

mod addr;
pub mod ah;
pub mod context;
pub mod cq;
pub mod device;
mod error;
pub mod mr;
pub mod mw;
pub mod pd;
pub mod qp;
pub mod recv_ring;
pub mod srq;
mod trace;

pub use addr::{device_for_addr, rdma_addresses, RdmaAddr};
pub use ah::{Ah, GRH_LEN};
pub use context::{
    AsyncEvent, AsyncEventKind, AsyncEventReceiver, AtomicCap, Capabilities, Capability, Context,
    Counter, CounterGroup, CounterIter, DeviceAttr, DeviceAttrEx, EventElement, Gid, GidEntry,
    GidType, LinkLayer, Mtu, PhysState, PortAttr, PortCounters, PortSpeed, PortState, PortWidth,
};
pub use cq::{
    AsCq, Completion, CompletionBuf, CompletionChannel, Cq, CqEx, CqExAttr, ExPoll, ExWc, Polled,
    PolledWc, WcError, WcFlags, WcOpcode, WcStatus, WorkCompletion,
};
pub use device::{devices, DeviceInfo, NodeType, Transport};
pub use error::{Error, Result};
pub use mr::{
    AccessFlags, DmabufMr, LocalSlice, MemoryRegion, RawMr, RegisteredBuf, RegisteredBufMut,
    RemoteSlice,
};
pub use mw::{Mw, MwType};
pub use pd::Pd;
pub use qp::post::OWNED_WR_ID;
pub use qp::{states, QpIn};
pub use qp::{
    AhAttr, FixedBuffers, GlobalRoute, Outstanding, PostError, PreparedRecv, PreparedSend, Qp,
    QpAttr, QpAttrMask, QpCap, QpDestroy, QpEndpoint, QpEx, QpInitAttr, QpQuery, QpState, QpType,
    Reclaimed, RecvRequest, RecvWr, SendFlags, SendOps, SendRequest, SendWr, UdDest, WrOp,
};
pub use recv_ring::RecvRing;
pub use srq::Srq;
pub use verbs_sys as sys;
