//! Completions cannot be made up (they would hand back buffers still in use).
use verbs::{Qp, WorkCompletion};

fn f(qp: &Qp) {
    let raw: verbs::sys::ibv_wc = todo!();
    let wc = WorkCompletion(raw);
    qp.reclaim(&wc);
}

fn main() {}
