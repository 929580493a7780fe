//! Run-time values of a device (`ibv_query_rt_values_ex`) and its completion vectors.
use std::time::Duration;

use verbs_sys as sys;

use super::Context;
use crate::{Error, Result};

impl Context {
    /// The device's free-running clock now (`raw_clock`: the clock completion timestamps
    /// count in). A provider that cannot read it gives [`Error::Unsupported`].
    #[doc(alias = "ibv_query_rt_values_ex")]
    pub fn query_rt_values_ex(&self) -> Result<Duration> {
        // SAFETY: all-zero is a valid ibv_values_ex.
        let mut v: sys::ibv_values_ex = unsafe { std::mem::zeroed() };
        v.comp_mask = sys::ibv_values_mask::IBV_VALUES_MASK_RAW_CLOCK.0;
        // SAFETY: open context; valid in/out struct.
        let r = unsafe { sys::ibv_query_rt_values_ex(self.as_raw(), &mut v) };
        match sys::errno::check_ret(r) {
            Ok(()) => {}
            Err(e) if e.raw_os_error() == Some(libc::EOPNOTSUPP) => {
                return Err(Error::Unsupported {
                    what: "reading the device clock (ibv_query_rt_values_ex)",
                    source: e,
                })
            }
            Err(e) => return Err(Error::QueryDevice(e)),
        }
        if v.comp_mask & sys::ibv_values_mask::IBV_VALUES_MASK_RAW_CLOCK.0 == 0 {
            return Err(Error::Unsupported {
                what: "reading the device clock (ibv_query_rt_values_ex left raw_clock unset)",
                source: std::io::Error::from_raw_os_error(libc::EOPNOTSUPP),
            });
        }
        let secs = u64::try_from(v.raw_clock.tv_sec).unwrap_or(0);
        let nanos = u32::try_from(v.raw_clock.tv_nsec).unwrap_or(0);
        Ok(Duration::new(secs, 0) + Duration::from_nanos(u64::from(nanos)))
    }

    /// Number of completion vectors (interrupt vectors) a CQ can signal on; CQs choose one
    /// with [`create_cq_on_vector`](Self::create_cq_on_vector) or
    /// [`CqExAttr::comp_vector`](crate::CqExAttr::comp_vector).
    pub fn num_comp_vectors(&self) -> u32 {
        // SAFETY: plain field of an open context.
        let n = unsafe { (*self.as_raw()).num_comp_vectors };
        u32::try_from(n).unwrap_or(0)
    }
}
