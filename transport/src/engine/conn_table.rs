//! [`ConnTable`]: an endpoint's connections by QP number, with a generation that changes with
//! every change of the table (a poller's cached lookup stays good while it does not) and a
//! count readable without the table's lock.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use parking_lot::{RwLock, RwLockReadGuard};
use rustc_hash::FxHashMap;

/// Connections (`C`: the engine's `Arc<ConnShared>`) by QP number.
#[derive(Debug)]
pub(crate) struct ConnTable<C> {
    map: RwLock<FxHashMap<u32, C>>,
    /// Bumped after every change of `map`.
    gen: AtomicU64,
    /// How many connections `map` holds, for readers that may not take its lock (one who
    /// holds a connection's state lock: the ticker locks states under the map's lock).
    count: AtomicUsize,
}

impl<C: Clone> ConnTable<C> {
    pub(crate) fn new() -> Self {
        ConnTable {
            map: RwLock::new(FxHashMap::default()),
            gen: AtomicU64::new(0),
            count: AtomicUsize::new(0),
        }
    }

    /// Adds `conn`, known by `qp_num` from now on.
    pub(crate) fn insert(&self, qp_num: u32, conn: C) {
        let mut map = self.map.write();
        map.insert(qp_num, conn);
        self.count.store(map.len(), Ordering::Relaxed);
        drop(map);
        self.gen.fetch_add(1, Ordering::Release);
    }

    /// Removes the connections of `qp_nums`.
    pub(crate) fn remove(&self, qp_nums: impl IntoIterator<Item = u32>) {
        {
            let mut map = self.map.write();
            for qpn in qp_nums {
                map.remove(&qpn);
            }
            self.count.store(map.len(), Ordering::Relaxed);
        }
        self.gen.fetch_add(1, Ordering::Release);
    }

    /// How many connections there are (lock-free).
    pub(crate) fn count(&self) -> usize {
        self.count.load(Ordering::Relaxed)
    }

    /// The table's generation: read it before a lookup, and the lookup is current while the
    /// generation stays the same.
    pub(crate) fn generation(&self) -> u64 {
        self.gen.load(Ordering::Acquire)
    }

    /// The connection of `qp_num`.
    pub(crate) fn get(&self, qp_num: u32) -> Option<C> {
        self.map.read().get(&qp_num).cloned()
    }

    /// Every connection, the table read-locked (do not change it meanwhile).
    pub(crate) fn read(&self) -> RwLockReadGuard<'_, FxHashMap<u32, C>> {
        self.map.read()
    }

    /// Every connection, copied out of the table.
    pub(crate) fn all(&self) -> Vec<C> {
        self.map.read().values().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_change_bumps_the_generation_and_keeps_the_count() {
        let t = ConnTable::new();
        let g0 = t.generation();
        t.insert(7, "a");
        t.insert(9, "b");
        assert_eq!(t.count(), 2);
        let g1 = t.generation();
        assert!(g1 > g0);
        assert_eq!(t.get(7), Some("a"));
        t.remove([7, 8]);
        assert_eq!(t.count(), 1);
        assert!(t.generation() > g1);
        assert_eq!(t.get(7), None);
        assert_eq!(t.all(), vec!["b"]);
    }

    #[test]
    fn a_new_connection_on_a_reused_qp_number_is_a_change() {
        let t = ConnTable::new();
        t.insert(5, 1);
        let g = t.generation();
        t.insert(5, 2);
        assert_ne!(
            t.generation(),
            g,
            "a cached lookup of the old one goes stale"
        );
        assert_eq!(t.get(5), Some(2));
        assert_eq!(t.count(), 1);
    }
}
