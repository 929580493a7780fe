//! Reliable messaging over RC queue pairs: credit flow control, two-sided messages, one-sided
//! reads and writes, request/response and large transfers. Not written yet; the crate holds its
//! place in the workspace so the layering is fixed from the start.
#![forbid(unsafe_code)]
