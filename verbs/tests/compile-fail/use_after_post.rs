//! A region posted in a request belongs to the request: it cannot be used until reclaimed.
use verbs::{AccessFlags, Pd, Qp, SendRequest};

fn f(pd: &Pd, qp: &Qp) -> verbs::Result<()> {
    let mut mr = pd.reg_mr(4096, AccessFlags::LOCAL_WRITE)?;
    qp.post_send(SendRequest::send(mr, 0..64)?)?;
    mr.as_mut_slice()[0] = 1; // the NIC may be reading it
    Ok(())
}

fn main() {}
