//! The table of owned requests in flight on one queue, keyed by their process-unique ids.
use std::collections::BTreeMap;

use super::request::Owner;
use super::small::Small;
use super::{Reclaimed, OWNED_WR_ID, RECV_WR_ID};
use crate::ah::Ah;
use crate::cq::WorkCompletion;

struct Entry {
    bufs: Small<Owner>,
    tag: u64,
    _ah: Option<Ah>,
}

/// Requests in flight on one queue, by id (ids grow in post order).
#[derive(Default)]
pub(crate) struct InFlight {
    map: BTreeMap<u64, Entry>,
}

impl InFlight {
    pub(crate) fn len(&self) -> usize {
        self.map.len()
    }
    pub(crate) fn insert(&mut self, id: u64, tag: u64, bufs: Small<Owner>, ah: Option<Ah>) {
        self.map.insert(id, Entry { bufs, tag, _ah: ah });
    }
    /// Removes `id` and, for an in-order queue, everything posted before it.
    pub(crate) fn complete(&mut self, id: u64, in_order: bool) -> Vec<Reclaimed> {
        if !self.map.contains_key(&id) {
            return Vec::new();
        }
        if in_order {
            // Everything up to `id` is done; usually that is one entry at the front.
            let mut done = Vec::with_capacity(1);
            while let Some(entry) = self.map.first_entry() {
                if *entry.key() > id {
                    break;
                }
                let (wr_id, e) = entry.remove_entry();
                done.push(Reclaimed {
                    wr_id,
                    bufs: e.bufs,
                    tag: e.tag,
                });
            }
            done
        } else {
            let e = self.map.remove(&id).expect("checked");
            vec![Reclaimed {
                wr_id: id,
                bufs: e.bufs,
                tag: e.tag,
            }]
        }
    }
    pub(crate) fn take_all(&mut self) -> Vec<Reclaimed> {
        std::mem::take(&mut self.map)
            .into_iter()
            .map(|(wr_id, e)| Reclaimed {
                wr_id,
                bufs: e.bufs,
                tag: e.tag,
            })
            .collect()
    }
}

/// Whether a completion is for an owned request, and which queue.
pub(crate) fn owned_kind(wc: &WorkCompletion) -> Option<bool> {
    let id = wc.wr_id();
    (id & OWNED_WR_ID != 0).then_some(id & RECV_WR_ID != 0)
}

impl InFlight {
    pub(crate) fn complete_recv(&mut self, id: u64) -> Vec<Reclaimed> {
        self.complete(id, false)
    }
}
