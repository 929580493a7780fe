//! Reliable messaging over RDMA: messages, RPC, large transfers and one-sided access between
//! two hosts, without queue pairs, work requests or keys in sight.
//!
//! Add it with `cargo add rdma-transport`; the library it gives is
//! `transport` (`use transport::...`).
//!
//! # Quick start
//!
//! ```no_run
//! use std::time::Duration;
//! use transport::Endpoint;
//!
//! # fn main() -> transport::Result<()> {
//! // Server: an endpoint on the device that has 10.77.0.2, listening on port 7471.
//! let server = Endpoint::new("10.77.0.2".parse().unwrap())?;
//! let listener = server.listen(7471)?;
//! std::thread::spawn(move || -> transport::Result<()> {
//!     let conn = listener.accept_timeout(Duration::from_secs(10))?;
//!     let msg = conn.recv(Duration::from_secs(10))?;
//!     conn.send(&msg.to_vec())?; // echo
//!     Ok(())
//! });
//!
//! // Client: connect from 10.77.0.1, send, read the echo.
//! let client = Endpoint::new("10.77.0.1".parse().unwrap())?;
//! let conn = client.connect("10.77.0.2:7471".parse().unwrap())?;
//! conn.send(b"hello")?;
//! let echo = conn.recv(Duration::from_secs(10))?;
//! assert_eq!(&echo.bytes()[..], b"hello");
//! # Ok(())
//! # }
//! ```
//!
//! # Shape
//!
//! - [`Endpoint`]: one device, PD, memory pool, completion queues and shared receive queues
//!   (a pair per block of connections, made as connections come:
//!   [`EndpointConfig::with_connections_per_queue`]), and the progress threads, for up to
//!   `max_connections` connections. [`Endpoint::listen`] gives a
//!   [`Listener`]; [`Endpoint::connect`] a [`Conn`]. A listener refuses, before a connection is
//!   set up for it, a peer whose connect data is not our handshake or that would exceed
//!   `max_connections`, then asks the hook of [`EndpointConfig::with_admit`] (peer address
//!   and handshake, an [`IncomingRequest`]) whether to [`Admission::Accept`] it.
//! - Messages: [`Conn::send`] copies into the pool (or [`Conn::alloc`] + [`Conn::send_buf`],
//!   no copy); [`Conn::recv`] lends the receive buffer as a [`Message`] and gives the credit
//!   back when it is dropped. Order and boundaries are preserved. Messages above
//!   [`Conn::eager_limit`] go by rendezvous: the receiver pulls them with RDMA READ, chunk by
//!   chunk, straight into pool buffers. Small one-way messages that outrun the device travel
//!   several to a frame under busy and reactor polling, each still received on its own;
//!   answers never wait ([`Conn::set_nodelay`] turns this off).
//! - RPC: [`Conn::call`] with a timeout, many outstanding per connection; the server takes
//!   [`Request`]s with [`Conn::recv_request`] (answer from any thread) or [`Conn::serve`]
//!   ([`Conn::serve_with`] allocates nothing per request).
//! - One-sided: [`Endpoint::expose`] a [`Region`], give its [`Token`] to the peer, which uses
//!   [`Conn::read`] / [`Conn::write`]; ranges are checked before anything is sent.
//! - Flow control: credits (see `PROTOCOL.md`): a sender never sends without a receive posted
//!   at the peer. No credit, a full send queue or an exhausted pool is backpressure: `try_*`
//!   says [`Error::WouldBlock`], blocking calls wait up to their timeout. A send that times out
//!   sent nothing; a rendezvous message that started is always delivered whole.
//! - Failure: a dead peer (disconnect, or silence past the keepalive timeout) fails every
//!   pending operation of that connection with [`Error::Closed`] naming the cause; the
//!   endpoint keeps serving its other connections. With the `tracing` feature, a connection
//!   that fails emits a warning with the cause, and a debug event with its protocol state
//!   (target `transport`).
//!
//! - Closing: a reader gets every message (every byte of a [`stream`]) the writer sent and
//!   then the end ([`Error::Closed`] without a cause, or a stream's `Ok(0)`), or an error,
//!   never a short clean end: a peer that goes away (its process ends, its queue pair fails)
//!   before everything it announced was received and read is an error
//!   ([`ConnError::PeerGone`]), even after its CLOSE. [`Conn::close`],
//!   [`Conn::close_async`] and the stream's `shutdown` return `Ok` only once the peer has
//!   everything (received, or pulled by RDMA READ and acknowledged), so a writer may exit
//!   right after them; they give up with [`Error::TimedOut`] past their bound
//!   ([`EndpointConfig::with_linger`], 10 s by default, or `close`'s timeout). A connection
//!   dropped without them still delivers what was sent while the process lives (the
//!   endpoint's last handle lingers for it); if the process ends first, the peer gets an
//!   error.
//!
//! - Async: every operation has an async form, most also a `poll_*` function
//!   ([`Conn::recv_async`], [`Conn::send_async`], [`Conn::call_async`], [`Conn::close_async`],
//!   [`Endpoint::connect_async`], [`Listener::accept_async`], ...) woken by the progress
//!   thread through `Waker`s, on any executor; each documents its cancel safety. Connects and
//!   accepts complete on the endpoint's CM thread, no thread each. On a multi-threaded tokio runtime an endpoint
//!   of the default (adaptive) polling is driven from the runtime itself (see
//!   [`Polling::Adaptive`]).
//! - [`stream`]: a byte stream (`TcpStream`-like) with std, `futures-io` and (feature `tokio`)
//!   tokio I/O traits.
//!
//! # Seeing inside
//!
//! - [`Conn::stats`] ([`Stats`]): messages and bytes each way, calls, their answers and
//!   timeouts, rendezvous transfers and the bytes READ, stalls for credit (with their time)
//!   and for send-queue slots, keepalive PINGs, probes and misses, a smoothed round-trip time.
//!   [`Endpoint::stats`] ([`EndpointStats`]) sums every connection the endpoint established,
//!   open or ended, and counts how they ended ([`Ends`]); `stream::Stream::stats` is its
//!   connection's. Counting is additions on paths that run anyway.
//! - The device's own counters (retransmissions, sequence errors, RNR NAKs, congestion
//!   marks) are `verbs::Context::port_counters`.
//! - Feature `tracing` (on by default): a span per connection (`conn`, with its QP number and
//!   addresses) and events for its life (connecting, established, closed, failed with the
//!   cause at warn, removed with its counters), keepalive misses, credit stalls past 10 ms and
//!   rendezvous transfers, target `transport`; a call site's interest check when no
//!   subscriber listens, and none on a message's data path. A program shows them with
//!   `tracing-subscriber` and `RUST_LOG=transport=debug`.
//!
//! # Cancel safety
//!
//! Every buffer the device may touch is a pool buffer owned by the engine from the moment it
//! is posted until its completion, so dropping a future never lets the device touch freed
//! memory. Per method:
//!
//! - [`Conn::poll_recv`], [`Conn::recv_async`], [`Conn::recv_request_async`]: a message is
//!   taken from the connection only when the poll returns it; a dropped future loses nothing.
//! - [`Conn::poll_send`]: the message is queued whole in the poll that returns `Ready(Ok)`, or
//!   not at all; `Pending` queued nothing.
//! - [`Conn::send_async`]: an eager message behaves like `poll_send` (all or nothing). A
//!   rendezvous message is queued chunk by chunk: a future dropped before the message was
//!   announced sent nothing; one dropped after leaves the rest to the endpoint's engine (a
//!   copy of the bytes not yet added), so the peer never sees half a message, and no thread
//!   is started for it.
//! - [`Conn::call_async`]: dropping it forgets the call (a late response is dropped).
//! - [`Conn::close_async`]: the close is queued at the first poll; dropping the future only
//!   stops waiting for the peer's close.
//! - [`Conn::read_async`], [`Conn::write_async`]: dropping the future forgets the request in
//!   progress (the device finishes it into pool memory).
//! - [`Endpoint::connect_async`](crate::Endpoint::connect_async): the connect's CM events come
//!   to the endpoint's CM thread, which wakes the task (no thread per connect); dropping the
//!   future abandons an attempt in progress (the peer is refused) or closes the connection it
//!   made.
//! - [`Listener::accept_async`](crate::Listener::accept_async),
//!   [`Listener::poll_accept`](crate::Listener::poll_accept): the CM thread accepts into the
//!   listener's backlog and a poll takes a connection from it only when it returns it; a
//!   dropped future loses none.
//!
//! # Faults: what holds
//!
//! Proved on a real device between two hosts by the fault suite (`cargo xtask faults`, part of
//! `cargo xtask test`), every byte verified:
//!
//! - **Network faults** (loss 1% and 5%, delay with jitter, reordering, duplication,
//!   corruption): messages, RPC calls, large messages and the byte stream arrive complete, in
//!   order and intact; nothing is lost or duplicated. The device retransmits; the cost is
//!   goodput and latency. A loss the device only notices when its acknowledgement does not
//!   come (the last packet of a burst, a lost acknowledgement) costs one ACK timeout,
//!   [`EndpointConfig::with_ack_timeout`], 67 ms by default instead of the half second to a
//!   second the CM derives on RoCE. Rendezvous READs are kept small
//!   ([`ProtocolConfig::with_rndv_chunk_size`]) because a lost packet makes the device send
//!   again everything after it.
//! - **The link gone**: an outage shorter than the keepalive timeout is survived with nothing
//!   lost. A longer one ends the connection on both sides with [`Error::Closed`] naming
//!   [`ConnError::PeerDead`] (or the queue pair's error) within the keepalive timeout;
//!   what arrived is an intact prefix of what was sent, the rest is reported as that error, and
//!   a new connection works once the link is back.
//! - **The peer process killed**: every pending operation of that connection fails with a
//!   typed [`Error::Closed`] within the keepalive bound (usually at once: the peer's queue pair
//!   is gone); the endpoint's other connections keep their traffic, its listener keeps
//!   accepting, and its pool returns to its baseline (nothing registered leaks).
//! - **Bad keys**: an rkey naming nothing, a token forged past the exposed bytes, a read of a
//!   write-only region, a write after revoke are refused by the device (the attacker gets
//!   [`Error::Completion`] with a remote access error); the target memory is unchanged and the
//!   victim keeps serving. What a token allows is checked locally before anything is sent.
//! - **Broken frames** from a peer that passed the handshake end only that connection, with
//!   [`ConnError::Protocol`] naming the violation; nothing panics, other connections
//!   lose nothing. The frame decoder is fuzzed on the host (100,000 cases a run).
//! - **Exhaustion** (the pool, the send queue, a peer that stops reading) is backpressure:
//!   `try_*` says [`Error::WouldBlock`], blocking calls wait up to their timeout and then say
//!   [`Error::TimedOut`] having sent nothing; once the pressure lifts every message arrives once
//!   and in order.
//! - **Keepalive**: a connection whose peer shows no sign of life for `keepalive_timeout` (no
//!   frame, and its device acknowledges none of our frames, READs or keepalive probes) fails
//!   with [`ConnError::PeerDead`]. A peer whose frames are only held back is alive. A
//!   hung process whose device still answers is not detected (as with TCP): bound calls with
//!   timeouts.
//!
//! Figures of one run of the suite are in the repository's `docs/faults.md`.
//!
//! Not covered: taking a host's interface administratively down. rxe then fails every
//! transmission locally, so a queue pair that sends during the outage (data or only
//! acknowledgements) goes to the error state at once (the connection ends with a typed error),
//! and the device could not connect again for tens of seconds after the interface returned.
//!
//! The protocol core is the module [`proto`]: per-connection state without I/O (events in,
//! actions out, time passed in), tested on the host against a simulated wire, for whoever
//! drives a queue pair of their own; the endpoint is its driver here. The types of it that the
//! API uses are re-exported at the root ([`ConnError`], [`CallError`], [`ProtocolConfig`],
//! [`Stats`], ...). Its wire format is specified in `PROTOCOL.md`.
#![forbid(unsafe_code)]

/// A debug event through `tracing` with the `tracing` feature; nothing without it (the
/// arguments are not evaluated).
#[cfg(feature = "tracing")]
macro_rules! debug_event {
    ($($arg:tt)*) => { tracing::debug!(target: "transport", $($arg)*) };
}
#[cfg(not(feature = "tracing"))]
macro_rules! debug_event {
    ($($arg:tt)*) => {};
}
pub(crate) use debug_event;

mod close;
mod config;
mod conn;
mod endpoint;
mod engine;
mod error;
mod listener;
mod message;
mod messages;
mod one_sided;
mod trace;
// The protocol core, a documented module of its own (as quinn-proto is to quinn): the state
// of a connection without I/O, for a driver of one's own; the endpoint is the driver most
// users want. Its host tests are inside it (`proto/tests/`).
pub mod proto;
mod reactor;
mod region;
mod rendezvous;
mod rpc;
mod send_core;
pub mod stream;
mod task;
mod wait;

pub use config::{
    Admission, AdmitHook, EndpointConfig, IncomingRequest, Polling, DEFAULT_ACK_TIMEOUT,
    DEFAULT_ADAPTIVE_SPIN,
};
pub use conn::{Conn, DEFAULT_OP_TIMEOUT};
pub use endpoint::{Endpoint, EndpointBuilder};
pub use engine::EndpointStats;
pub use error::{ConfigError, Error, Result};
pub use listener::Listener;
pub use message::{Message, MessageBuf, Request};
pub use proto::{
    CallError, Config as ProtocolConfig, ConnError, Ends, HandshakeError, PeerGone, ProtocolError,
    Stats,
};
pub use reactor::ProgressCounts;
pub use region::{Access, Region, Token};
