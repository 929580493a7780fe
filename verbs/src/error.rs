//! The crate's error type: one variant per operation, each with its OS error and context.
use std::io;

use crate::qp::QpState;

/// Result of a verbs operation.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything a verbs call can fail with. Each variant names the C call it wraps and carries
/// the `errno` it returned as its [`source`](std::error::Error::source).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// `ibv_get_device_list` failed with ENOSYS/ENODEV: the kernel has no RDMA (uverbs) support.
    #[error("this kernel has no RDMA support (ibv_get_device_list failed): run on a kernel with RDMA, with a NIC's driver or Soft-RoCE loaded (`modprobe rdma_rxe`, then `rdma link add rxe0 type rxe netdev ETH`)")]
    NoRdmaSupport {
        /// The errno from `ibv_get_device_list`.
        #[source]
        source: io::Error,
    },
    /// `ibv_get_device_list` failed otherwise.
    #[error("cannot list RDMA devices")]
    ListDevices(#[source] io::Error),
    /// `getifaddrs` failed: the host's interface addresses, which an iWARP device's addresses
    /// are found among, could not be listed.
    #[error("cannot list the host's network interfaces (getifaddrs)")]
    ListInterfaces(#[source] io::Error),
    /// No device has this name.
    #[error("no RDMA device named {name:?} (found: {found})")]
    NoSuchDevice {
        /// The name asked for.
        name: String,
        /// Names of the devices that exist, comma separated.
        found: String,
    },
    /// `ibv_open_device` failed.
    #[error("cannot open RDMA device {device}")]
    OpenDevice {
        /// Device name.
        device: String,
        /// The errno.
        #[source]
        source: io::Error,
    },
    /// `ibv_query_device` / `ibv_query_device_ex` failed.
    #[error("ibv_query_device failed")]
    QueryDevice(#[source] io::Error),
    /// A port number the device does not have (ports are numbered from 1), found when
    /// `ibv_query_port` refused it.
    #[error("device {device} has no port {port}: its ports are 1..={ports}")]
    NoSuchPort {
        /// Device name.
        device: String,
        /// The port asked for.
        port: u8,
        /// How many ports the device has.
        ports: u8,
    },
    /// `ibv_query_port` failed otherwise.
    #[error("cannot query port {port}")]
    QueryPort {
        /// Port number.
        port: u8,
        /// The errno.
        #[source]
        source: io::Error,
    },
    /// A port's counters directory in sysfs (`/sys/class/infiniband/DEV/ports/N/counters` or
    /// `hw_counters`) exists but could not be listed.
    #[error("cannot read the counters of {device} port {port} ({}): check that sysfs is mounted and readable", dir.display())]
    ReadCounters {
        /// Device name.
        device: String,
        /// Port number.
        port: u8,
        /// The directory.
        dir: std::path::PathBuf,
        /// The errno.
        #[source]
        source: io::Error,
    },
    /// `ibv_query_gid_ex` / `ibv_query_gid_table` failed (EINVAL for an index past the table,
    /// ENODATA for an empty entry).
    #[error("cannot query GID index {index} of port {port}")]
    QueryGid {
        /// Port number.
        port: u8,
        /// GID index (`u32::MAX` for the whole table).
        index: u32,
        /// The errno.
        #[source]
        source: io::Error,
    },
    /// No GID of the port is a RoCE v2 GID for this address.
    #[error("port {port} has no RoCE v2 GID for {addr}")]
    NoGidForAddr {
        /// Port number.
        port: u8,
        /// The address looked for.
        addr: std::net::IpAddr,
    },
    /// No device serves this IP address (no RoCE v2 GID maps it).
    #[error("no RDMA device serves {addr}: RDMA addresses on this host: {served}")]
    NoDeviceForAddr {
        /// The address looked for.
        addr: std::net::IpAddr,
        /// The addresses that are served, with device, port and GID index.
        served: String,
    },
    /// `ibv_get_async_event` failed.
    #[error("ibv_get_async_event failed")]
    AsyncEvent(#[source] io::Error),
    /// `ibv_alloc_pd` failed.
    #[error("ibv_alloc_pd failed")]
    AllocPd(#[source] io::Error),
    /// Access flags `ibv_reg_mr` would refuse with a bare EINVAL, refused before calling it.
    #[error("cannot register memory with {access:?}: {problem}")]
    InvalidAccess {
        /// The flags asked for.
        access: crate::AccessFlags,
        /// What is wrong and what to add.
        problem: &'static str,
    },
    /// `ibv_reg_mr` failed.
    #[error("cannot register {len} bytes of memory")]
    RegMr {
        /// Length asked for.
        len: usize,
        /// The errno.
        #[source]
        source: io::Error,
    },
    /// A dma-buf registration refused before calling `ibv_reg_dmabuf_mr` (which would fail
    /// with a bare EINVAL), or refused by a device that registers dma-bufs because the
    /// descriptor is not one.
    #[error(
        "cannot register {len} bytes at offset {offset} of dma-buf descriptor {fd}: {problem}"
    )]
    InvalidDmabuf {
        /// The descriptor given.
        fd: std::os::fd::RawFd,
        /// Offset asked for.
        offset: u64,
        /// Length asked for.
        len: usize,
        /// What is wrong and what to do instead.
        problem: String,
    },
    /// `ibv_reg_dmabuf_mr` failed (other than for a device without the verb, which is
    /// [`Error::MissingCapability`]).
    #[error("cannot register {len} bytes at offset {offset} of a dma-buf")]
    RegDmabufMr {
        /// Offset asked for.
        offset: u64,
        /// Length asked for.
        len: usize,
        /// The errno.
        #[source]
        source: io::Error,
    },
    /// `ibv_dereg_mr` failed: the region is still registered.
    #[error("cannot deregister a memory region (is a memory window still bound to it?)")]
    DeregMr(#[source] io::Error),
    /// `ibv_alloc_mw` failed.
    #[error("cannot allocate a {mw_type:?} memory window")]
    AllocMw {
        /// The window type asked for.
        mw_type: crate::MwType,
        /// The errno.
        #[source]
        source: io::Error,
    },
    /// A memory-window bind the verbs would refuse (or that would grant nothing), refused
    /// before posting it.
    #[error("cannot bind the memory window (rkey {rkey:#x}): {reason}")]
    InvalidBind {
        /// The window's current rkey.
        rkey: u32,
        /// What is wrong and what to do instead.
        reason: String,
    },
    /// Allocating the buffer of an owned region failed.
    #[error("cannot allocate a {len}-byte buffer")]
    Alloc {
        /// Length asked for.
        len: usize,
    },
    /// A range outside the buffer or region it should describe.
    #[error("range {start}..{end} is outside a {len}-byte buffer")]
    OutOfBounds {
        /// Range start.
        start: usize,
        /// Range end (exclusive).
        end: usize,
        /// Length of the buffer.
        len: usize,
    },
    /// `ibv_create_comp_channel` failed.
    #[error("ibv_create_comp_channel failed")]
    CreateCompChannel(#[source] io::Error),
    /// `ibv_create_cq` failed.
    #[error("cannot create a CQ of {cqe} entries")]
    CreateCq {
        /// Entries asked for.
        cqe: u32,
        /// The errno.
        #[source]
        source: io::Error,
    },
    /// `ibv_poll_cq` failed.
    #[error("ibv_poll_cq failed")]
    PollCq(#[source] io::Error),
    /// `ibv_req_notify_cq` failed.
    #[error("ibv_req_notify_cq failed")]
    ReqNotifyCq(#[source] io::Error),
    /// Waiting for or reading a completion event (`poll(2)`, `ibv_get_cq_event`) failed, or the
    /// CQ has no completion channel.
    #[error("cannot get a completion event")]
    GetCqEvent(#[source] io::Error),
    /// `ibv_create_qp` failed.
    #[error("cannot create a {qp_type:?} QP")]
    CreateQp {
        /// Type asked for.
        qp_type: crate::qp::QpType,
        /// The errno.
        #[source]
        source: io::Error,
    },
    /// A state transition with attributes the transition table forbids or lacks, refused
    /// before calling `ibv_modify_qp`.
    #[error("QP {qp_num}: {from:?} -> {to:?} {problem}")]
    InvalidTransition {
        /// QP number.
        qp_num: u32,
        /// Current state.
        from: QpState,
        /// Requested state.
        to: QpState,
        /// What is wrong (missing or forbidden attributes).
        problem: String,
    },
    /// A source GID index the port's GID table does not have (past its end, or an empty
    /// entry), refused before `ibv_modify_qp` or `ibv_create_ah`.
    #[error("QP {qp_num}: source GID index {index} of port {port} {problem}: use the index of your address's RoCE v2 GID (Context::roce_v2_gid or Context::open_by_addr)")]
    InvalidGidIndex {
        /// QP number (0 for an address handle).
        qp_num: u32,
        /// The port.
        port: u8,
        /// The index given.
        index: u8,
        /// What is wrong with it, e.g. "is past the end of the table of 16 entries".
        problem: String,
    },
    /// `ibv_modify_qp` failed.
    #[error("QP {qp_num}: ibv_modify_qp to {to:?} failed")]
    ModifyQp {
        /// QP number.
        qp_num: u32,
        /// Requested state.
        to: QpState,
        /// The errno.
        #[source]
        source: io::Error,
    },
    /// `ibv_query_qp` failed.
    #[error("QP {qp_num}: ibv_query_qp failed")]
    QueryQp {
        /// QP number.
        qp_num: u32,
        /// The errno.
        #[source]
        source: io::Error,
    },
    /// The send or receive queue is full (`ibv_post_send`/`ibv_post_recv` returned ENOMEM, or
    /// the queue's configured depth is reached): backpressure, poll completions and retry.
    #[error("QP {qp_num}: {queue} queue full ({depth} entries)")]
    QueueFull {
        /// QP (or SRQ) number.
        qp_num: u32,
        /// `"send"`, `"receive"`, `"shared receive"` or `"receive ring"`.
        queue: &'static str,
        /// The configured depth.
        depth: u32,
    },
    /// A work request this QP cannot take (too many SGEs, inline data too long, wrong opcode for
    /// the QP type, misaligned atomic address, ...), refused before posting.
    #[error("QP {qp_num}: invalid work request: {reason}")]
    InvalidWorkRequest {
        /// QP number.
        qp_num: u32,
        /// What is wrong.
        reason: String,
    },
    /// `ibv_post_send` failed.
    #[error("QP {qp_num}: ibv_post_send failed")]
    PostSend {
        /// QP number.
        qp_num: u32,
        /// The errno.
        #[source]
        source: io::Error,
    },
    /// `ibv_post_recv` / `ibv_post_srq_recv` failed.
    #[error("QP/SRQ {qp_num}: ibv_post_recv failed")]
    PostRecv {
        /// QP or SRQ number.
        qp_num: u32,
        /// The errno.
        #[source]
        source: io::Error,
    },
    /// `ibv_create_srq` failed.
    #[error("ibv_create_srq failed")]
    CreateSrq(#[source] io::Error),
    /// `ibv_modify_srq` failed.
    #[error("ibv_modify_srq failed")]
    ModifySrq(#[source] io::Error),
    /// `ibv_create_ah` failed.
    #[error("ibv_create_ah failed")]
    CreateAh(#[source] io::Error),
    /// A work request completed with an error status (from [`WorkCompletion::status`]).
    ///
    /// [`WorkCompletion::status`]: crate::WorkCompletion::status
    #[error(transparent)]
    Completion(#[from] crate::cq::WcError),
    /// An inline send larger than the QP's `max_inline_data` (ask for more with
    /// `QpInitAttr::max_inline_data`, or send from registered memory).
    #[error("QP {qp_num}: {len} bytes of inline data exceed max_inline_data {max}; create the QP with a larger max_inline_data or send from registered memory")]
    InlineTooLong {
        /// QP number.
        qp_num: u32,
        /// Bytes asked for.
        len: usize,
        /// The QP's limit.
        max: u32,
    },
    /// `ibv_attach_mcast` / `ibv_detach_mcast` failed.
    #[error("QP {qp_num}: {op} failed")]
    Mcast {
        /// QP number.
        qp_num: u32,
        /// The call.
        op: &'static str,
        /// The errno.
        #[source]
        source: io::Error,
    },
    /// A completion vector the device does not have.
    #[error("completion vector {vector} does not exist: the device has {count} (Context::num_comp_vectors)")]
    CompVector {
        /// The vector asked for.
        vector: u32,
        /// How many the device has.
        count: u32,
    },
    /// [`Reclaimed::take`](crate::Reclaimed::take) asked for a buffer type the request does not
    /// hold (another type was posted, or that buffer was taken already).
    #[error(
        "request {wr_id:#x} holds no buffer of type {expected} (it holds [{}]): take the type that was posted",
        .held.join(", ")
    )]
    WrongBufferType {
        /// The request's id.
        wr_id: u64,
        /// The type asked for.
        expected: &'static str,
        /// The types of the buffers the request still holds, in SGE order.
        held: Vec<&'static str>,
    },
    /// [`Cq::wait_one`](crate::Cq::wait_one) or [`Cq::wait_n`](crate::Cq::wait_n) ran out of
    /// time.
    #[error("{got} of {wanted} completions arrived within {after:?}")]
    CompletionTimeout {
        /// Completions waited for.
        wanted: usize,
        /// Completions that arrived (returned to the caller).
        got: usize,
        /// The time allowed.
        after: std::time::Duration,
    },
    /// A wait for more completions than its [`CompletionBuf`](crate::CompletionBuf) holds.
    #[error("cannot wait for {wanted} completions in a CompletionBuf of {capacity}: make it at least CompletionBuf::new({wanted})")]
    CompletionBufTooSmall {
        /// Completions asked for.
        wanted: usize,
        /// The buffer's capacity.
        capacity: usize,
    },
    /// The device does not support this operation (EOPNOTSUPP).
    #[error("{what}: not supported by this device")]
    Unsupported {
        /// The operation.
        what: &'static str,
        /// The errno.
        #[source]
        source: io::Error,
    },
    /// The device lacks what was asked of it (decided from its transport and attributes,
    /// before the verb is called: see [`Context::capabilities`](crate::Context::capabilities);
    /// for what no attribute reports, [`Capability::DmabufMr`](crate::Capability::DmabufMr),
    /// from the device's refusal of the verb).
    #[error("{device} ({transport}) has no {capability}: {instead}")]
    MissingCapability {
        /// The device's name.
        device: String,
        /// Its transport.
        transport: crate::Transport,
        /// What it lacks.
        capability: crate::Capability,
        /// What to do instead.
        instead: &'static str,
    },
}

impl Error {
    /// The capability the device lacks, if that is why the call failed.
    pub fn missing_capability(&self) -> Option<crate::Capability> {
        match self {
            Error::MissingCapability { capability, .. } => Some(*capability),
            _ => None,
        }
    }

    /// Whether this error is backpressure (a full queue) rather than a failure.
    pub fn is_queue_full(&self) -> bool {
        matches!(self, Error::QueueFull { .. })
    }
}
