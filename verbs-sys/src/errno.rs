//! Errno helpers, one per C error convention used by libibverbs and librdmacm.
use std::io;
use std::os::raw::c_int;
use std::ptr::NonNull;

/// Convention "NULL + errno" (`ibv_alloc_pd`, `ibv_reg_mr`, `ibv_create_qp`, ...): a null pointer
/// means failure and `errno` says why.
pub fn check_ptr<T>(ptr: *mut T) -> io::Result<NonNull<T>> {
    NonNull::new(ptr).ok_or_else(last_error_or_unknown)
}

/// Convention "returned errno" (`ibv_modify_qp`, `ibv_post_send`, `ibv_dealloc_pd`, ...):
/// zero is success, a positive value is the errno. Some providers return `-1` and set `errno`
/// instead; that is handled too.
pub fn check_ret(ret: c_int) -> io::Result<()> {
    match ret {
        0 => Ok(()),
        r if r < 0 => Err(last_error_or_unknown()),
        r => Err(io::Error::from_raw_os_error(r)),
    }
}

/// Convention "-1 + errno" (`ibv_get_async_event`, `rdma_create_id`, ...): a negative value is
/// failure and `errno` says why; non-negative values are returned unchanged.
pub fn check_neg<T: PartialOrd + Default + Copy>(ret: T) -> io::Result<T> {
    if ret < T::default() {
        Err(last_error_or_unknown())
    } else {
        Ok(ret)
    }
}

/// `errno` as an [`io::Error`]; a C call that failed without setting errno yields `EIO`
/// rather than a misleading "success".
fn last_error_or_unknown() -> io::Error {
    let err = io::Error::last_os_error();
    match err.raw_os_error() {
        Some(0) | None => io::Error::from_raw_os_error(libc::EIO),
        _ => err,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn returned_errno_is_the_error() {
        assert!(check_ret(0).is_ok());
        let e = check_ret(libc::ENOMEM).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ENOMEM));
    }

    #[test]
    fn null_uses_errno() {
        // SAFETY: __errno_location returns this thread's errno slot.
        unsafe { *libc::__errno_location() = libc::ENOSYS };
        let e = check_ptr(std::ptr::null_mut::<u8>()).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ENOSYS));
        let mut x = 1u8;
        assert!(check_ptr(&mut x as *mut u8).is_ok());
    }

    #[test]
    fn negative_uses_errno_and_zero_errno_is_eio() {
        // SAFETY: as above.
        unsafe { *libc::__errno_location() = libc::EAGAIN };
        assert_eq!(
            check_neg(-1).unwrap_err().raw_os_error(),
            Some(libc::EAGAIN)
        );
        assert_eq!(check_neg(5isize).unwrap(), 5);
        // SAFETY: as above.
        unsafe { *libc::__errno_location() = 0 };
        assert_eq!(check_neg(-1).unwrap_err().raw_os_error(), Some(libc::EIO));
    }
}
