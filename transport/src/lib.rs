//! Reliable messaging over RC queue pairs: credit flow control, two-sided messages, one-sided
//! reads and writes, request/response and large transfers.
//!
//! [`proto`] is the protocol core: per-connection state without I/O, tested on the host; its
//! wire format is specified in `PROTOCOL.md`.
#![forbid(unsafe_code)]

pub mod proto;
