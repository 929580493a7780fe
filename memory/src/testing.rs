//! Host-only support for tests and benchmarks without an RDMA device: a registrar with keys of
//! no registration (see [`HostRegistrar`]).

pub use crate::registered::host::HostRegistrar;
