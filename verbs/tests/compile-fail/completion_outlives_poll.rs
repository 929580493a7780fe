//! Completions borrow the poll buffer: it cannot be polled into while they are in use.
use verbs::{CompletionBuf, Cq};

fn f(cq: &Cq) -> verbs::Result<()> {
    let mut buf = CompletionBuf::new(4);
    let first = cq.poll(&mut buf)?;
    let again = cq.poll(&mut buf)?;
    println!("{:?} {:?}", first.first().map(|w| w.wr_id()), again.len());
    Ok(())
}

fn main() {}
