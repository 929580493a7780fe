//! The typed bring-up only offers the transition out of the current state.
use verbs::{AccessFlags, Cq, Pd, QpInitAttr, QpType};

fn f(pd: &Pd, cq: &Cq) -> verbs::Result<()> {
    let qp = pd.create_qp_typed(&QpInitAttr::new(QpType::Rc, cq, cq))?;
    let init = qp.init(1, AccessFlags::empty())?;
    let _ready = init.rts(0)?; // RTR is skipped
    Ok(())
}

fn main() {}
