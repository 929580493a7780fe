//! RDMA connection management over librdmacm: event channels with typed, self-acknowledging
//! events, CM ids, and blocking listeners and connectors in which every wait has a timeout.
//!
//! Add it with `cargo add rdma-cm`; the library it gives is `cm` (`use cm::...`).
//!
//! # Quick start
//!
//! A server that accepts one connection and receives one message:
//!
//! ```no_run
//! use std::time::Duration;
//! use cm::{ConnOptions, Listener};
//! use verbs::{AccessFlags, CompletionBuf, RecvRequest};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let listener = Listener::bind("192.168.77.1:7471".parse()?, ConnOptions::new())?;
//! let req = listener.get_request(Duration::from_secs(30))?;
//! let buf = req.pd().reg_mr(64, AccessFlags::LOCAL_WRITE)?;
//! req.qp().post_recv(RecvRequest::new(buf, ..)?)?;
//! let conn = req.accept(b"welcome", Duration::from_secs(5))?;
//! let mut wcs = CompletionBuf::new(4);
//! let done = conn.cq().wait_and_poll(&mut wcs, Some(Duration::from_secs(5)))?;
//! println!("got {} bytes from {:?}", done[0].byte_len(), conn.private_data());
//! # Ok(())
//! # }
//! ```
//!
//! A client that connects with private data and sends one message:
//!
//! ```no_run
//! use std::time::Duration;
//! use cm::Connector;
//! use verbs::{AccessFlags, CompletionBuf, SendRequest};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let conn = Connector::new("192.168.77.1:7471".parse()?)
//!     .src("192.168.77.1".parse()?)
//!     .private_data(b"hello")?
//!     .timeout(Duration::from_secs(5))
//!     .connect()?;
//! let mut msg = conn.pd().reg_mr(64, AccessFlags::LOCAL_WRITE)?;
//! msg.as_mut_slice()[..2].copy_from_slice(b"hi");
//! conn.qp().post_send(SendRequest::send(msg, 0..2)?)?;
//! let mut wcs = CompletionBuf::new(4);
//! conn.cq().wait_and_poll(&mut wcs, Some(Duration::from_secs(5)))?[0].status()?;
//! println!("server said {:?}", conn.private_data());
//! # Ok(())
//! # }
//! ```
//!
//! # One PD and memory pool for many connections
//!
//! Open the device that serves your address, make the PD (and a pool on it) once, and give
//! it to the listener or connector: every connection's QP and CQ are created on it, so one
//! set of registrations serves them all (see `examples/shared_pool.rs`).
//!
//! ```no_run
//! use std::time::Duration;
//! use cm::{ConnOptions, Listener};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let addr = "10.77.0.2:7471".parse()?;
//! let (ctx, _) = verbs::Context::open_by_addr("10.77.0.2".parse()?)?;
//! let pd = ctx.alloc_pd()?;
//! let listener = Listener::bind(addr, ConnOptions::new().pd(&pd))?;
//! let conn = listener.accept(Duration::from_secs(30))?;
//! assert_eq!(conn.pd().as_raw(), pd.as_raw());
//! # Ok(())
//! # }
//! ```
//!
//! # Admission
//!
//! A listener can turn requests away before anything is created for them:
//! [`ConnOptions::admit`] runs a hook on each request's peer address and private data
//! ([`IncomingRequest`]); [`Admission::Reject`] answers the peer with private data of your
//! choosing and the listener goes on waiting, so a flood of unwanted requests costs no
//! channel, PD, CQ, QP or buffer ([`Listener::rejected`] counts them).
//!
//! ```no_run
//! use std::time::Duration;
//! use cm::{Admission, ConnOptions, Listener};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let opts = ConnOptions::new().admit(|req| {
//!     if req.private_data().starts_with(b"v1") {
//!         Admission::Accept
//!     } else {
//!         Admission::Reject(b"speak v1".to_vec())
//!     }
//! });
//! let listener = Listener::bind("10.77.0.2:7471".parse()?, opts)?;
//! let conn = listener.accept(Duration::from_secs(30))?;
//! # drop(conn);
//! # Ok(())
//! # }
//! ```
//!
//! # Layers
//!
//! - [`EventChannel`] and [`CmEvent`]: the raw event stream, with a timeout on every wait.
//! - [`CmId`]: the librdmacm calls (bind, resolve, listen, connect, accept, reject,
//!   disconnect) and the device [`context`](CmId::context) it shares with verbs.
//! - [`Listener`], [`Connector`], [`Connection`]: the blocking helpers most programs use.
//! - Unreliable datagrams (`RDMA_PS_UDP`): [`UdConnector`] resolves a [`UdListener`] and
//!   returns its own [`UdEndpoint`] plus the server as a [`UdPeer`] (address handle, QP
//!   number and Q_Key from the `Established` event's [`UdParam`]); the server answers a
//!   client it knows from its datagram (`verbs::Pd::create_ah_from_wc` and `src_qp`).
//!   [`UdEndpoint::join_multicast`] joins a group (`rdma_join_multicast`), attaches the QP
//!   and gives the group as a send destination; the [`Membership`] detaches and leaves on
//!   drop or [`Membership::leave`].
//!
//! QPs are verbs [`Qp`](verbs::Qp)s created on a verbs PD and CQ; this crate moves them
//! through their states with the attributes the CM computes (`rdma_init_qp_attr`), so the
//! verbs layer owns them entirely.
//!
//! # Private data
//!
//! Limits depend on the message (see [`max_private_data`]): on InfiniBand and RoCE a connect
//! request carries 56 bytes, an accept 196, a reject 148. Longer data is
//! [`Error::PrivateDataTooLong`]. The receiver sees the transport's full field, zero-padded
//! after the sender's bytes; frame your data if its length matters. A reject's private data is
//! a [`PrivateData`], whose `Debug` shows the sender's bytes and the padding's length.
//!
//! # Thread safety
//!
//! All handles are `Send + Sync`. Events go to the channel of the id they concern; the
//! listener moves each new connection to a channel of its own (`rdma_migrate_id`), so several
//! threads can accept and run connections from one listener without their events mixing.
//! Event channels are non-blocking, so threads racing for one event never block past their
//! timeouts.
//!
//! # Tracing
//!
//! With the `tracing` feature (on by default) the crate emits [`tracing`](https://docs.rs/tracing)
//! events with target `cm`: each CM event read from a channel (its type, status and the id's
//! local and peer addresses; at debug, and at warn for address, route and connect errors,
//! unreachable peers, rejections and device removal), each connect, accept, reject, establish
//! and disconnect call (debug; warn when it fails), a resolution or wait that gives up (warn)
//! and a request the admission hook refuses (debug). Without the feature nothing is compiled.
//!
//! # Resource cleanup
//!
//! Every CM event is acknowledged exactly once, when the [`CmEvent`] is dropped, and holds
//! the ids it names, so an id is never destroyed (which waits for its events to be
//! acknowledged) while one of its events is alive. A verbs context obtained from an id keeps
//! that id alive, because librdmacm closes a device context when its last id is destroyed. A
//! [`Connection`] dropped while connected disconnects, moves its QP to the error state, waits
//! (bounded) for the flushed work to complete, and only then destroys QP, CQ, PD and id.
#![warn(missing_docs)]

mod ack_timeout;
mod addr;
mod admission;
mod connection;
mod connector;
mod error;
mod event;
mod id;
mod listener;
mod multicast;
mod options;
mod param;
mod private_data;
mod qp_attr;
mod step;
mod trace;
mod ud;

pub use ack_timeout::{
    ack_timeout_duration, ack_timeout_exponent, MAX_ACK_TIMEOUT, MAX_ACK_TIMEOUT_EXPONENT,
};
pub use admission::{Admission, AdmitHook, IncomingRequest};
pub use connection::{Connection, ConnectionParts, DRAIN_TIMEOUT};
pub use connector::{
    connect, Connecting, Connector, PendingConnection, Resolving, DEFAULT_CONNECT_TIMEOUT,
    RESOLVE_ATTEMPT,
};
pub use error::{Error, Result};
pub use event::{CmEvent, EventChannel, EventKind, PeerParam, Wakeup};
pub use id::{CmId, PortSpace};
pub use listener::{Accepting, ConnectRequest, Listener, DEFAULT_BACKLOG};
pub use multicast::Membership;
pub use options::ConnOptions;
pub use param::{max_private_data, ConnParam, PrivateDataOp};
pub use private_data::{reject_reason, PrivateData};
pub use step::Step;
pub use ud::{UdConnector, UdEndpoint, UdListener, UdParam, UdPeer};
