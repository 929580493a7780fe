//! How long a blocked call spins before it sleeps under adaptive polling: the configured
//! spin, stretched while the waits of the connection end soon after the spin gave up.
//!
//! A wait that outlasts its spin sleeps until the progress thread wakes it, a handoff that
//! costs far more than the spin itself. Ping-pong traffic whose round trip is close to the
//! spin then flips for good into waits that always sleep: each handoff lengthens the round
//! trip, so the next wait outlasts the spin too. A wait that slept for a frame that arrived
//! within [`GROWTH`] times the configured spin (counted to the frame's arrival, not to the
//! wakeup) stretches the budget to twice that (so the next wait spins through it); waits that
//! end early shrink it back by 1/64 at a time ([`SHRINK`]), never below the configured spin.
//! Frames later than that bound (a quiet peer) leave it alone: spinning would not have caught
//! them. The shrinking is slow because a miss costs far more than a longer spin: a budget is
//! only spent in full when the peer goes quiet, while a wait that outlasts it (a preempted
//! peer, say) pays a handoff.
//!
//! Kept because it pays: with a fixed spin instead, `cargo xtask bench transport` measured
//! the blocking 64 B RPC round trip under adaptive polling at a median of 493 to 741 us
//! against 87 to 131 us (its control rows at 0.67 to 0.92), and the adaptive rows of the
//! echo at 64 B, 4 KiB and 64 KiB 1.5 to 3 times slower (round trips of about 100 us on
//! the emulated device, twice the default spin).
//!
//! Async tasks spin from the same budget before they register their wakers: a wakeup through
//! an executor is such a handoff too. The bound is the same for them: with a lower one, two
//! peers whose waits both outlast it stay in the slow mode for good (each side's wait then
//! lasts the other side's wakeup, which is longer than the bound).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// The budget grows to at most this many times the configured spin.
pub(crate) const GROWTH: u32 = 16;

/// A wait that ends early takes this fraction (one over it) off a stretched budget.
pub(crate) const SHRINK: u32 = 64;

/// A connection's spin budget (lock-free: every waiter of the connection reads and updates
/// it).
#[derive(Debug)]
pub(crate) struct SpinBudget {
    base: Duration,
    budget_ns: AtomicU64,
}

impl SpinBudget {
    /// A budget of `base` (the configured spin).
    pub(crate) fn new(base: Duration) -> Self {
        SpinBudget {
            base,
            budget_ns: AtomicU64::new(nanos(base)),
        }
    }

    /// How long the next wait spins.
    pub(crate) fn get(&self) -> Duration {
        Duration::from_nanos(self.budget_ns.load(Ordering::Relaxed))
    }

    fn max(&self) -> Duration {
        self.base * GROWTH
    }

    /// A wait ended while it spun, `after` its start (as last read off the clock).
    pub(crate) fn spun(&self, after: Duration) {
        let budget = self.get();
        if budget > self.base && after < budget / 4 {
            let shrunk = (budget - budget / SHRINK).max(self.base);
            self.budget_ns.store(nanos(shrunk), Ordering::Relaxed);
        }
    }

    /// A wait ended after it slept, for a frame that arrived `after` its start.
    pub(crate) fn slept(&self, after: Duration) {
        if after <= self.max() {
            let grown = (after * 2).clamp(self.get(), self.max());
            self.budget_ns.store(nanos(grown), Ordering::Relaxed);
        }
    }
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    const US: Duration = Duration::from_micros(1);

    #[test]
    fn a_wait_that_slept_soon_after_the_spin_stretches_it_within_the_bound() {
        let b = SpinBudget::new(50 * US);
        assert_eq!(b.get(), 50 * US);
        b.slept(120 * US);
        assert_eq!(b.get(), 240 * US, "twice the wait");
        b.slept(100 * US);
        assert_eq!(b.get(), 240 * US, "never shrunk by a sleep");
        b.slept(700 * US);
        assert_eq!(b.get(), 800 * US, "at most 16 times the spin");
        b.slept(2000 * US);
        assert_eq!(b.get(), 800 * US, "a quiet peer changes nothing");
    }

    #[test]
    fn early_ends_shrink_it_back_to_the_configured_spin_and_no_further() {
        let b = SpinBudget::new(50 * US);
        b.slept(400 * US);
        assert_eq!(b.get(), 800 * US);
        b.spun(300 * US);
        assert_eq!(b.get(), 800 * US, "a late end keeps it");
        b.spun(10 * US);
        assert_eq!(
            b.get(),
            800 * US - 800 * US / SHRINK,
            "an early end takes a little"
        );
        for _ in 0..400 {
            b.spun(Duration::ZERO);
        }
        assert_eq!(b.get(), 50 * US);
        b.spun(Duration::ZERO);
        assert_eq!(b.get(), 50 * US);
    }

    #[test]
    fn a_round_trip_near_the_spin_settles_with_room_to_spare() {
        // Waits of 45 us against a 50 us spin: one sleep, then the budget settles where a
        // 45 us wait no longer counts as early (a quarter of the budget).
        let b = SpinBudget::new(50 * US);
        b.slept(200 * US);
        for _ in 0..100 {
            b.spun(45 * US);
        }
        let settled = b.get();
        assert!(settled / 4 <= 45 * US, "still shrinking at {settled:?}");
        assert!(settled >= 160 * US, "too little room at {settled:?}");
    }
}
