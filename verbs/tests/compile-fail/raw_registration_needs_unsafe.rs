//! Registering caller memory is unsafe: nothing ties its lifetime to the registration.
use verbs::{AccessFlags, Pd};

fn f(pd: &Pd) -> verbs::Result<()> {
    let mut v = vec![0u8; 4096];
    let _mr = pd.reg_mr_raw(v.as_mut_ptr(), v.len(), AccessFlags::LOCAL_WRITE)?;
    drop(v);
    Ok(())
}

fn main() {}
