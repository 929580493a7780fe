//! An extended completion borrows its batch: it cannot be kept across the next step (the
//! provider moves on to another entry), nor outlive the batch.
use verbs::CqEx;

fn keep_across_next(cq: &mut CqEx) -> verbs::Result<()> {
    if let Some(mut batch) = cq.start_poll()? {
        let first = batch.next()?.unwrap();
        let _second = batch.next()?;
        let _ = first.wr_id();
    }
    Ok(())
}

fn two_batches(cq: &mut CqEx) -> verbs::Result<()> {
    let a = cq.start_poll()?;
    let b = cq.start_poll()?;
    drop((a, b));
    Ok(())
}

fn main() {}
