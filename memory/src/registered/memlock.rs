//! The locked-memory limit: reading it, and turning a failed registration into a clear error.

use std::io;

use crate::error::MEMLOCK_HINT;
use crate::Error;

/// The soft RLIMIT_MEMLOCK in bytes, or `None` if unlimited or unreadable.
///
/// Registration pins pages, and the pinned bytes count against this limit.
pub fn memlock_limit() -> Option<u64> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one rlimit into the valid, exclusively borrowed `limit`.
    let rc = unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut limit) };
    (rc == 0 && limit.rlim_cur != libc::RLIM_INFINITY).then_some(limit.rlim_cur)
}

/// The locked-memory limit that binds registrations of this process: `None` when unlimited or
/// when the process may lock memory past it (`CAP_IPC_LOCK`, as root has).
pub(crate) fn pinning_limit() -> Option<u64> {
    let limit = memlock_limit()?;
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    (!has_ipc_lock(&status)).then_some(limit)
}

/// Whether the effective capabilities in `/proc/self/status` include `CAP_IPC_LOCK` (bit 14).
fn has_ipc_lock(status: &str) -> bool {
    status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
        .is_some_and(|caps| caps & (1 << 14) != 0)
}

/// The error for a registration of `len` bytes that failed with `source`:
/// [`Error::MemlockLimit`] (saying what to raise) when the errno is one the locked-memory limit
/// causes and a limit is in force, else [`Error::Register`].
pub fn registration_error(len: usize, source: io::Error) -> Error {
    classify(len, source, memlock_limit())
}

fn classify(len: usize, source: io::Error, limit: Option<u64>) -> Error {
    let memlock_errno = matches!(
        source.raw_os_error(),
        Some(libc::ENOMEM | libc::EPERM | libc::EAGAIN)
    );
    match limit {
        Some(limit) if memlock_errno => Error::MemlockLimit {
            len,
            limit,
            hint: MEMLOCK_HINT,
        },
        _ => Error::Register { len, source },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn enomem_under_a_limit_says_what_to_raise() {
        let err = classify(
            1 << 20,
            io::Error::from_raw_os_error(libc::ENOMEM),
            Some(65536),
        );
        assert!(matches!(
            err,
            Error::MemlockLimit {
                len: 1048576,
                limit: 65536,
                ..
            }
        ));
        let text = err.to_string();
        for needle in ["65536", "ulimit -l", "limits.conf", "LimitMEMLOCK"] {
            assert!(text.contains(needle), "{text:?} lacks {needle}");
        }
    }

    #[test]
    fn other_failures_stay_registration_errors() {
        let err = classify(64, io::Error::from_raw_os_error(libc::EINVAL), Some(65536));
        assert!(matches!(err, Error::Register { len: 64, .. }));
        let err = classify(64, io::Error::from_raw_os_error(libc::ENOMEM), None);
        assert!(matches!(err, Error::Register { len: 64, .. }));
    }

    #[test]
    fn cap_ipc_lock_lifts_the_limit() {
        assert!(has_ipc_lock("Name:\tx\nCapEff:\t000001ffffffffff\n"));
        assert!(has_ipc_lock("CapEff:\t0000000000004000\n"));
        assert!(!has_ipc_lock("CapEff:\t0000000000000000\n"));
        assert!(!has_ipc_lock("CapEff:\t0000000000003fff\n"));
        assert!(!has_ipc_lock("no capabilities line"));
    }

    #[test]
    fn reads_the_limit_of_this_process() {
        // Unlimited (None) or a number; either way the call works.
        if let Some(limit) = memlock_limit() {
            assert!(limit < u64::MAX);
        }
    }
}
