//! Safe posting needs memory the request owns: a borrow could end while the NIC uses it.
use verbs::{AccessFlags, Pd, Qp, SendRequest};

fn f(pd: &Pd, qp: &Qp) -> verbs::Result<()> {
    let mr = pd.reg_mr(4096, AccessFlags::LOCAL_WRITE)?;
    qp.post_send(SendRequest::send(&mr, 0..64)?)?;
    drop(mr);
    Ok(())
}

fn main() {}
