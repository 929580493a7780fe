//! Receive posting shared by QPs and SRQs: owned chains and borrowed chains.
use std::ptr;
use std::sync::atomic::{AtomicBool, Ordering};

use parking_lot::Mutex;
use verbs_sys as sys;

use super::{
    check_borrowed_wr_id, invalid, post_chain, Chain, InFlight, PostError, RecvRequest, RecvWr,
};
use crate::{Error, Result};

pub(crate) fn in_reset_error(qpn: u32) -> Error {
    invalid(
        qpn,
        "the QP is in Reset: owned requests need Init or later".into(),
    )
}

/// One owned receive, without the batch's allocations (the common case).
#[allow(clippy::result_large_err)] // hands the request back; rare
#[allow(clippy::too_many_arguments)] // the queue's parts, shared by QPs and SRQs
pub(crate) fn post_recv_one(
    table: &Mutex<InFlight>,
    closed: Option<&AtomicBool>,
    req: RecvRequest,
    qpn: u32,
    queue: &'static str,
    depth: u32,
    max_sge: u32,
    post: impl FnOnce(*mut sys::ibv_recv_wr, *mut *mut sys::ibv_recv_wr) -> i32,
) -> Result<u64, PostError<RecvRequest>> {
    let fail = |error, req| PostError {
        error,
        unposted: req,
        posted: Vec::new(),
    };
    if req.sges.len() > max_sge as usize {
        let e = invalid(
            qpn,
            format!("{} SGEs exceed max_recv_sge {max_sge}", req.sges.len()),
        );
        return Err(fail(e, req));
    }
    let mut q = table.lock();
    // Owned receives are refused in Reset (see `QpInner::in_reset`).
    if closed.is_some_and(|in_reset| in_reset.load(Ordering::Acquire)) {
        return Err(fail(in_reset_error(qpn), req));
    }
    if q.len() >= depth as usize {
        let e = crate::trace::refusing(Error::QueueFull {
            qp_num: qpn,
            queue,
            depth,
        });
        return Err(fail(e, req));
    }
    let id = q.next_id(true);
    let mut wr = [sys::ibv_recv_wr {
        wr_id: id,
        next: ptr::null_mut(),
        sg_list: req.sges.as_slice().as_ptr() as *mut sys::ibv_sge,
        num_sge: req.sges.len() as i32,
    }];
    match post_recv_chain(&mut wr, qpn, queue, depth, post) {
        Ok(()) => {
            q.insert(id, req.tag, req.owners, None, false);
            Ok(id)
        }
        Err((0, error)) => Err(fail(error, req)),
        // Failed, but possibly queued (see post_chain): the request keeps its buffers.
        Err((_, error)) => {
            q.insert(id, req.tag, req.owners, None, false);
            Err(PostError {
                error,
                unposted: RecvRequest::empty(),
                posted: vec![id],
            })
        }
    }
}

/// Owned receive posting shared by QPs and SRQs.
#[allow(clippy::too_many_arguments)] // the queue's parts, shared by QPs and SRQs
pub(crate) fn post_recv_owned(
    table: &Mutex<InFlight>,
    closed: Option<&AtomicBool>,
    reqs: Vec<RecvRequest>,
    qpn: u32,
    queue: &'static str,
    depth: u32,
    max_sge: u32,
    post: impl FnOnce(*mut sys::ibv_recv_wr, *mut *mut sys::ibv_recv_wr) -> i32,
) -> Result<Vec<u64>, PostError<Vec<RecvRequest>>> {
    let fail = |error, reqs| PostError {
        error,
        unposted: reqs,
        posted: Vec::new(),
    };
    if let Some(r) = reqs.iter().find(|r| r.sges.len() > max_sge as usize) {
        let e = invalid(
            qpn,
            format!("{} SGEs exceed max_recv_sge {max_sge}", r.sges.len()),
        );
        return Err(fail(e, reqs));
    }
    let mut q = table.lock();
    // Owned receives are refused in Reset (see `QpInner::in_reset`).
    if closed.is_some_and(|in_reset| in_reset.load(Ordering::Acquire)) {
        return Err(fail(in_reset_error(qpn), reqs));
    }
    if q.len() + reqs.len() > depth as usize {
        let e = crate::trace::refusing(Error::QueueFull {
            qp_num: qpn,
            queue,
            depth,
        });
        return Err(fail(e, reqs));
    }
    let ids: Vec<u64> = reqs.iter().map(|_| q.next_id(true)).collect();
    let mut wrs: Vec<sys::ibv_recv_wr> = reqs
        .iter()
        .zip(&ids)
        .map(|(r, id)| sys::ibv_recv_wr {
            wr_id: *id,
            next: ptr::null_mut(),
            sg_list: r.sges.as_slice().as_ptr() as *mut sys::ibv_sge,
            num_sge: r.sges.len() as i32,
        })
        .collect();
    let res = post_recv_chain(&mut wrs, qpn, queue, depth, post);
    let n_ok = match &res {
        Ok(()) => reqs.len(),
        Err((k, _)) => *k,
    };
    let mut reqs = reqs;
    let rest = reqs.split_off(n_ok);
    for (r, id) in reqs.into_iter().zip(&ids) {
        q.insert(*id, r.tag, r.owners, None, false);
    }
    match res {
        Ok(()) => Ok(ids),
        Err((_, error)) => Err(PostError {
            error,
            unposted: rest,
            posted: ids[..n_ok].to_vec(),
        }),
    }
}

/// Checks a borrowed receive's id and entry count against its QP's (`qpn`) limit.
pub(super) fn check_recv_wr(qpn: u32, w: &RecvWr<'_>, max_sge: u32) -> Result<()> {
    check_borrowed_wr_id(qpn, w.wr_id)?;
    if w.sges.len() > max_sge as usize {
        return Err(invalid(
            qpn,
            format!("{} SGEs exceed max_recv_sge {max_sge}", w.sges.len()),
        ));
    }
    Ok(())
}

/// The verbs request of a borrowed receive (its SGE list by pointer: it must outlive the post).
pub(super) fn raw_recv_wr(w: &RecvWr<'_>) -> sys::ibv_recv_wr {
    sys::ibv_recv_wr {
        wr_id: w.wr_id,
        next: ptr::null_mut(),
        // ibv_post_recv does not write the SGE list; the cast drops const only.
        sg_list: w.sges.as_ptr() as *mut sys::ibv_sge,
        num_sge: w.sges.len() as i32,
    }
}

/// Borrowed receive posting shared by QPs and SRQs.
pub(crate) fn post_recv_raw(
    wrs: &[RecvWr<'_>],
    qpn: u32,
    queue: &'static str,
    depth: u32,
    max_sge: u32,
    post: impl FnOnce(*mut sys::ibv_recv_wr, *mut *mut sys::ibv_recv_wr) -> i32,
) -> Result<()> {
    let mut chain = Chain::new(wrs.len(), || sys::ibv_recv_wr {
        wr_id: 0,
        next: ptr::null_mut(),
        sg_list: ptr::null_mut(),
        num_sge: 0,
    });
    let raw = chain.as_mut_slice();
    for (w, raw) in wrs.iter().zip(raw.iter_mut()) {
        check_recv_wr(qpn, w, max_sge)?;
        *raw = raw_recv_wr(w);
    }
    post_recv_chain(raw, qpn, queue, depth, post).map_err(|(_, e)| e)
}

pub(super) fn post_recv_chain(
    wrs: &mut [sys::ibv_recv_wr],
    qpn: u32,
    queue: &'static str,
    depth: u32,
    post: impl FnOnce(*mut sys::ibv_recv_wr, *mut *mut sys::ibv_recv_wr) -> i32,
) -> Result<(), (usize, Error)> {
    post_chain(
        wrs,
        || Error::QueueFull {
            qp_num: qpn,
            queue,
            depth,
        },
        |source| Error::PostRecv {
            qp_num: qpn,
            source,
        },
        post,
    )
}
