//! Ports of the `static inline` memory-window verbs (`ibv_alloc_mw`, `ibv_dealloc_mw`,
//! `ibv_bind_mw`, `ibv_inc_rkey`). rdma-sys 0.3 ports them too, but unwraps the provider's
//! operation (a panic where C would crash or return an error) and skips `ibv_bind_mw`'s
//! argument checks; these follow `<infiniband/verbs.h>` and shadow them.
use std::os::raw::c_int;

use rdma_sys::{ibv_mw, ibv_mw_bind, ibv_mw_type, ibv_pd, ibv_qp};

/// Sets `errno` (the "NULL + errno" convention of `ibv_alloc_mw`).
fn set_errno(e: c_int) {
    // SAFETY: __errno_location returns this thread's errno slot.
    unsafe { *libc::__errno_location() = e };
}

/// Port of `ibv_alloc_mw`: a window of `type_` in `pd`, or NULL with errno (EOPNOTSUPP when
/// the provider has no memory windows).
///
/// # Safety
/// `pd` must be a live protection domain.
#[inline]
pub unsafe fn ibv_alloc_mw(pd: *mut ibv_pd, type_: ibv_mw_type::Type) -> *mut ibv_mw {
    // SAFETY: live PD per the caller; its context is open while the PD lives.
    let op = unsafe { (*(*pd).context).ops.alloc_mw };
    match op {
        // SAFETY: the provider's own operation on its PD.
        Some(alloc) => unsafe { alloc(pd, type_) },
        None => {
            set_errno(libc::EOPNOTSUPP);
            std::ptr::null_mut()
        }
    }
}

/// Port of `ibv_dealloc_mw`: 0 or an errno (EOPNOTSUPP when the provider has no windows).
///
/// # Safety
/// `mw` must be a window from [`ibv_alloc_mw`], not deallocated yet; after success it is gone.
#[inline]
pub unsafe fn ibv_dealloc_mw(mw: *mut ibv_mw) -> c_int {
    // SAFETY: live window per the caller; its context is open while it lives.
    match unsafe { (*(*mw).context).ops.dealloc_mw } {
        // SAFETY: the provider's own operation on its window.
        Some(dealloc) => unsafe { dealloc(mw) },
        None => libc::EOPNOTSUPP,
    }
}

/// Port of `ibv_bind_mw`: posts a bind of the type 1 window `mw` on `qp`'s send queue as
/// `mw_bind` describes; 0 or an errno. On success the provider has set `mw->rkey` to the
/// key the bind gives (if the bind then completes with an error, the caller restores it).
///
/// # Safety
/// `qp` and `mw` must be live, `mw_bind` valid for reads, and its `bind_info.mr` null or a
/// live region.
#[inline]
pub unsafe fn ibv_bind_mw(qp: *mut ibv_qp, mw: *mut ibv_mw, mw_bind: *mut ibv_mw_bind) -> c_int {
    // SAFETY: valid pointers per the caller.
    let (mw_ref, info) = unsafe { (&*mw, &(*mw_bind).bind_info) };
    if mw_ref.type_ != ibv_mw_type::IBV_MW_TYPE_1 {
        return libc::EINVAL;
    }
    if info.mr.is_null() && (info.addr != 0 || info.length != 0) {
        return libc::EINVAL;
    }
    // SAFETY: a non-null region is live per the caller.
    if !info.mr.is_null() && mw_ref.pd != unsafe { (*info.mr).pd } {
        return libc::EPERM;
    }
    // SAFETY: the window's context is open while it lives.
    match unsafe { (*mw_ref.context).ops.bind_mw } {
        // SAFETY: the provider's own operation; arguments valid per the caller.
        Some(bind) => unsafe { bind(qp, mw, mw_bind) },
        None => libc::EOPNOTSUPP,
    }
}

/// Port of `ibv_inc_rkey`: `rkey` with its low 8 bits (the key a bind chooses) incremented.
pub fn ibv_inc_rkey(rkey: u32) -> u32 {
    (rkey & !0xff) | (rkey.wrapping_add(1) & 0xff)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inc_rkey_wraps_within_the_low_byte() {
        assert_eq!(ibv_inc_rkey(0x1234_5601), 0x1234_5602);
        assert_eq!(ibv_inc_rkey(0x1234_56ff), 0x1234_5600);
    }
}
