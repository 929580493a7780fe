//! Reliable messaging over RDMA: messages, RPC, large transfers and one-sided access between
//! two hosts, without queue pairs, work requests or keys in sight.
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
//!     let conn = listener.accept(Duration::from_secs(10))?;
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
//! - [`Endpoint`]: one device, PD, memory pool, completion queue and shared receive queue,
//!   and the progress threads, for any number of connections. [`Endpoint::listen`] gives a
//!   [`Listener`]; [`Endpoint::connect`] a [`Conn`]. A listener refuses, before anything is
//!   set up for it, a peer whose connect data is not our handshake or that would exceed
//!   `max_connections`, then asks [`EndpointConfig::admit`] (peer address and handshake, an
//!   [`IncomingRequest`]) whether to [`Admission::Accept`] it.
//! - Messages: [`Conn::send`] copies into the pool (or [`Conn::alloc`] + [`Conn::send_buf`],
//!   no copy); [`Conn::recv`] lends the receive buffer as a [`Message`] and gives the credit
//!   back when it is dropped. Order and boundaries are preserved. Messages above
//!   [`Conn::eager_limit`] go by rendezvous: the receiver pulls them with RDMA READ, chunk by
//!   chunk, straight into pool buffers.
//! - RPC: [`Conn::call`] with a timeout, many outstanding per connection; the server takes
//!   [`Request`]s with [`Conn::recv_request`] (answer from any thread) or [`Conn::serve`].
//! - One-sided: [`Endpoint::expose`] a [`Region`], give its [`Token`] to the peer, which uses
//!   [`Conn::read`] / [`Conn::write`]; ranges are checked before anything is sent.
//! - Flow control: credits (see `PROTOCOL.md`): a sender never sends without a receive posted
//!   at the peer. No credit, a full send queue or an exhausted pool is backpressure: `try_*`
//!   says [`Error::WouldBlock`], blocking calls wait up to their timeout. A send that times out
//!   sent nothing; a rendezvous message that started is always delivered whole.
//! - Failure: a dead peer (disconnect, or silence past the keepalive timeout) fails every
//!   pending operation of that connection with [`Error::Closed`] naming the cause; the
//!   endpoint keeps serving its other connections. With `TRANSPORT_DEBUG` set in the
//!   environment, a connection that fails prints its protocol state to stderr.
//!
//! - Async: every operation has an async form, most also a `poll_*` function
//!   ([`Conn::recv_async`], [`Conn::send_async`], [`Conn::call_async`], [`Conn::close_async`],
//!   [`Endpoint::connect_async`], [`Listener::accept_async`], ...) woken by the progress
//!   thread through `Waker`s, on any executor; each documents its cancel safety. Connect and
//!   one-sided reads and writes run on a thread of their own behind their future.
//! - [`stream`]: a byte stream (`TcpStream`-like) with std, `futures-io` and (feature `tokio`)
//!   tokio I/O traits.
//!
//! [`proto`] is the protocol core: per-connection state without I/O, tested on the host; its
//! wire format is specified in `PROTOCOL.md`.
#![forbid(unsafe_code)]

mod config;
mod conn;
mod conn_async;
mod endpoint;
mod engine;
mod error;
mod listener;
mod message;
pub mod proto;
mod region;
pub mod stream;
mod task;

pub use config::{Admission, EndpointConfig, IncomingRequest, Polling};
pub use conn::{Conn, DEFAULT_OP_TIMEOUT};
pub use endpoint::{Endpoint, EndpointBuilder};
pub use error::{Error, Result};
pub use listener::Listener;
pub use message::{Message, MessageBuf, Request};
pub use region::{Access, Region, Token};
