//! Posting plain descriptors (borrowed memory) is unsafe.
use verbs::{Qp, RecvWr};

fn f(qp: &Qp, wrs: &[RecvWr<'_>]) -> verbs::Result<()> {
    qp.post_recv_unchecked(wrs)
}

fn main() {}
