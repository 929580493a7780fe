//! A shared region may only be read by the NIC: it cannot receive.
use std::sync::Arc;
use verbs::{AccessFlags, Pd, Qp, RecvRequest};

fn f(pd: &Pd, qp: &Qp) -> verbs::Result<()> {
    let mr = Arc::new(pd.reg_mr(4096, AccessFlags::LOCAL_WRITE)?);
    qp.post_recv(RecvRequest::new(mr.clone(), ..)?)?;
    let _racy = mr.as_slice()[0];
    Ok(())
}

fn main() {}
