//! Ports of the `static inline` extended verbs that reach the provider through
//! `verbs_context`. rdma-sys 0.3 ports them, but its `verbs_get_ctx` compares `abi_compat`
//! with `u32::MAX` where `<infiniband/verbs.h>` means `(void *)UINT64_MAX`, so on 64-bit
//! hosts it never finds the extended context: its `ibv_create_cq_ex`, `ibv_create_qp_ex` and
//! `ibv_query_rt_values_ex` always fail with EOPNOTSUPP, and its `ibv_query_device_ex`
//! always falls back to the basic query. These ports shadow them.
use std::mem::{offset_of, size_of};
use std::os::raw::c_int;

use rdma_sys::{
    ibv_context, ibv_cq_ex, ibv_cq_init_attr_ex, ibv_create_qp, ibv_device_attr_ex, ibv_qp,
    ibv_qp_init_attr, ibv_qp_init_attr_ex, ibv_qp_init_attr_mask, ibv_query_device,
    ibv_query_device_ex_input, ibv_values_ex, verbs_context,
};

/// `__VERBS_ABI_IS_EXTENDED`: `abi_compat` of a context that is embedded in a
/// `verbs_context`.
const VERBS_ABI_IS_EXTENDED: usize = usize::MAX;

/// Port of `verbs_get_ctx`: the `verbs_context` around `ctx`, if it has one.
///
/// # Safety
/// `ctx` must be an open device context.
unsafe fn verbs_get_ctx(ctx: *mut ibv_context) -> Option<*mut verbs_context> {
    // SAFETY: open context per the caller; plain field read.
    if unsafe { (*ctx).abi_compat } as usize != VERBS_ABI_IS_EXTENDED {
        return None;
    }
    Some(
        ctx.cast::<u8>()
            .wrapping_sub(offset_of!(verbs_context, context))
            .cast(),
    )
}

/// Port of `verbs_get_ctx_op`: the `verbs_context` if the provider's one is large enough to
/// have the operation at `op_offset` and sets it (`present` reads it).
///
/// # Safety
/// `ctx` must be an open device context.
unsafe fn verbs_get_ctx_op(
    ctx: *mut ibv_context,
    op_offset: usize,
    present: impl FnOnce(&verbs_context) -> bool,
) -> Option<*mut verbs_context> {
    // SAFETY: forwarded caller contract.
    let vctx = unsafe { verbs_get_ctx(ctx) }?;
    // SAFETY: an extended context lives inside a verbs_context whose `sz` says how much of
    // it (counted from its end) the provider has.
    let sz = unsafe { (*vctx).sz };
    if sz < size_of::<verbs_context>() - op_offset {
        return None;
    }
    // SAFETY: the field lies within the part the provider has (checked above).
    present(unsafe { &*vctx }).then_some(vctx)
}

/// Port of the `static inline` `ibv_create_cq_ex`: NULL with errno on failure (EOPNOTSUPP
/// when the provider has no extended CQs).
///
/// # Safety
/// `context` must be an open device context and `cq_attr` a valid attribute struct whose
/// pointers (channel, parent domain) belong to that context.
pub unsafe fn ibv_create_cq_ex(
    context: *mut ibv_context,
    cq_attr: *mut ibv_cq_init_attr_ex,
) -> *mut ibv_cq_ex {
    // IBV_CQ_INIT_ATTR_MASK_RESERVED is 1 << 2: only FLAGS and PD are known.
    // SAFETY: valid attribute struct per the caller.
    if unsafe { (*cq_attr).comp_mask } & !0b11 != 0 {
        set_errno(libc::EINVAL);
        return std::ptr::null_mut();
    }
    // SAFETY: open context per the caller.
    let vctx = unsafe {
        verbs_get_ctx_op(context, offset_of!(verbs_context, create_cq_ex), |v| {
            v.create_cq_ex.is_some()
        })
    };
    match vctx {
        // SAFETY: the provider's operation (present, checked), with the caller's arguments.
        Some(v) => unsafe { ((*v).create_cq_ex.unwrap_unchecked())(context, cq_attr) },
        None => {
            set_errno(libc::EOPNOTSUPP);
            std::ptr::null_mut()
        }
    }
}

/// Port of the `static inline` `ibv_create_qp_ex`: NULL with errno on failure (EOPNOTSUPP
/// when the provider has no extended QPs).
///
/// # Safety
/// `context` must be an open device context and `attr` a valid attribute struct whose
/// objects (PD, CQs, SRQ) belong to that context.
pub unsafe fn ibv_create_qp_ex(
    context: *mut ibv_context,
    attr: *mut ibv_qp_init_attr_ex,
) -> *mut ibv_qp {
    // SAFETY: valid attribute struct per the caller.
    let mask = unsafe { (*attr).comp_mask };
    if mask == ibv_qp_init_attr_mask::IBV_QP_INIT_ATTR_PD.0 {
        // SAFETY: ibv_qp_init_attr is the leading part of ibv_qp_init_attr_ex.
        return unsafe { ibv_create_qp((*attr).pd, attr.cast::<ibv_qp_init_attr>()) };
    }
    // SAFETY: open context per the caller.
    let vctx = unsafe {
        verbs_get_ctx_op(context, offset_of!(verbs_context, create_qp_ex), |v| {
            v.create_qp_ex.is_some()
        })
    };
    match vctx {
        // SAFETY: the provider's operation (present, checked), with the caller's arguments.
        Some(v) => unsafe { ((*v).create_qp_ex.unwrap_unchecked())(context, attr) },
        None => {
            set_errno(libc::EOPNOTSUPP);
            std::ptr::null_mut()
        }
    }
}

/// Port of the `static inline` `ibv_query_rt_values_ex`: 0 or an errno (EOPNOTSUPP when
/// the provider cannot).
///
/// # Safety
/// `context` must be an open device context and `values` valid for reads and writes.
pub unsafe fn ibv_query_rt_values_ex(
    context: *mut ibv_context,
    values: *mut ibv_values_ex,
) -> c_int {
    // SAFETY: open context per the caller.
    let vctx = unsafe {
        verbs_get_ctx_op(context, offset_of!(verbs_context, query_rt_values), |v| {
            v.query_rt_values.is_some()
        })
    };
    match vctx {
        // SAFETY: the provider's operation (present, checked), with the caller's arguments.
        Some(v) => unsafe { ((*v).query_rt_values.unwrap_unchecked())(context, values) },
        None => libc::EOPNOTSUPP,
    }
}

/// Port of the `static inline` `ibv_query_device_ex`: the provider's extended query, or the
/// basic one (with the extended part zeroed) where it has none. 0 or an errno.
///
/// # Safety
/// `context` must be an open device context, `attr` valid for writes, `input` null or valid.
pub unsafe fn ibv_query_device_ex(
    context: *mut ibv_context,
    input: *const ibv_query_device_ex_input,
    attr: *mut ibv_device_attr_ex,
) -> c_int {
    // SAFETY: null or valid per the caller.
    if !input.is_null() && unsafe { (*input).comp_mask } != 0 {
        return libc::EINVAL;
    }
    // SAFETY: open context per the caller.
    let vctx = unsafe {
        verbs_get_ctx_op(context, offset_of!(verbs_context, query_device_ex), |v| {
            v.query_device_ex.is_some()
        })
    };
    if let Some(v) = vctx {
        // SAFETY: the provider's operation (present, checked), with the caller's arguments
        // and the size of the struct we pass.
        let r = unsafe {
            ((*v).query_device_ex.unwrap_unchecked())(
                context,
                input,
                attr,
                size_of::<ibv_device_attr_ex>(),
            )
        };
        if r != libc::EOPNOTSUPP && r != libc::ENOSYS {
            return r;
        }
    }
    // SAFETY: `attr` is valid for writes; all-zero is a valid ibv_device_attr_ex.
    unsafe { attr.write_bytes(0, 1) };
    // SAFETY: open context; the basic part of the struct is valid for writes.
    unsafe { ibv_query_device(context, &mut (*attr).orig_attr) }
}

fn set_errno(e: c_int) {
    // SAFETY: errno is thread-local; writing it is what the C inline functions do.
    unsafe { *libc::__errno_location() = e };
}
