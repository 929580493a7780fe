//! RDMA READ writes its local memory: a shared region cannot be its destination.
use std::sync::Arc;
use verbs::{AccessFlags, Pd, Qp, RemoteSlice, SendRequest};

fn f(pd: &Pd, qp: &Qp, remote: RemoteSlice) -> verbs::Result<()> {
    let mr = Arc::new(pd.reg_mr(4096, AccessFlags::LOCAL_WRITE)?);
    qp.post_send(SendRequest::rdma_read(mr, 0..64, remote)?)?;
    Ok(())
}

fn main() {}
