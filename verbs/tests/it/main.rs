//! Integration tests of the safe verbs layer. Host-tier tests run everywhere; device-tier
//! tests (`#[ignore]`d) need the RDMA device `cargo xtask test` provides.
mod support;

mod compile_fail;
mod counters;
mod cq;
mod device;
mod dmabuf;
mod errors;
mod events;
mod ext;
mod ext_hosts;
mod host;
mod mr;
mod mw;
mod query;
mod rc;
mod reset;
mod srq;
mod tracing_events;
mod ud;
