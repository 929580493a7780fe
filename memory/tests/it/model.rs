//! The pool against a model: random allocs and frees under small caps, checked after every step.
//!
//! Real memory (from the host registrar) backs the buffers, so overlap is checked on actual
//! addresses and contents, not only on the bookkeeping's numbers. The model knows each chunk
//! by its key (the host registrar's keys are unique), so it follows which chunks are idle and
//! predicts exactly which ones a class starved by the pool's cap reclaims.

use memory::testing::HostRegistrar;
use memory::{Buffer, ClassConfig, Error, Pool, PoolAccess, PoolConfig};
use proptest::prelude::*;

const SIZES: [usize; 3] = [64, 256, 1024];

#[derive(Debug, Clone)]
enum Op {
    /// `try_alloc`, or `alloc` with a zero timeout (one attempt, `Timeout` when exhausted);
    /// then, in a remote pool, maybe hand out the buffer's remote descriptor.
    Alloc {
        len: usize,
        wait: bool,
        expose: bool,
    },
    Free(prop::sample::Index),
}

/// Each class as often as the others (so that classes take the cap from each other), and
/// now and then a length no class serves.
fn len() -> impl Strategy<Value = usize> {
    prop_oneof![
        4 => 1usize..=64,
        4 => 65usize..=256,
        4 => 257usize..=1024,
        1 => prop_oneof![Just(0usize), 1025usize..=1100],
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        5 => (len(), any::<bool>(), prop::bool::weighted(0.05))
            .prop_map(|(len, wait, expose)| Op::Alloc { len, wait, expose }),
        4 => any::<prop::sample::Index>().prop_map(Op::Free),
    ]
}

#[derive(Debug, Clone)]
struct Setup {
    /// Buffers per chunk, per class.
    per_chunk: [usize; 3],
    /// Each class's own cap, in chunks.
    class_cap_chunks: [Option<usize>; 3],
    pool_cap: usize,
    /// Remote read access: buffers have descriptors, and exposing one pins its chunk.
    remote: bool,
}

fn setup() -> impl Strategy<Value = Setup> {
    (
        [1usize..4, 1usize..4, 1usize..4],
        [
            proptest::option::weighted(0.3, 1usize..4),
            proptest::option::weighted(0.3, 1usize..4),
            proptest::option::weighted(0.3, 1usize..4),
        ],
        // At least the largest chunk (3 KiB), so every class can grow once; small enough
        // that classes often take the cap from each other.
        (48usize..=112).prop_map(|n| n * 64),
        any::<bool>(),
    )
        .prop_map(|(per_chunk, class_cap_chunks, pool_cap, remote)| Setup {
            per_chunk,
            class_cap_chunks,
            pool_cap,
            remote,
        })
}

#[derive(Debug, Clone, Copy)]
struct ModelChunk {
    /// The lkey of its buffers: one registration per chunk.
    key: u32,
    in_use: usize,
    /// Its rkey was handed out: never reclaimed.
    exposed: bool,
}

#[derive(Debug, Clone)]
struct ModelClass {
    chunk_bytes: usize,
    /// Oldest first.
    chunks: Vec<ModelChunk>,
    in_use: usize,
    high_water: usize,
}

impl ModelClass {
    fn chunk(&mut self, key: u32) -> Option<&mut ModelChunk> {
        self.chunks.iter_mut().find(|c| c.key == key)
    }

    /// Chunks another class may reclaim, newest first.
    fn idle(&self) -> impl Iterator<Item = &ModelChunk> {
        self.chunks
            .iter()
            .rev()
            .filter(|c| c.in_use == 0 && !c.exposed)
    }
}

/// The pool's reclaim for class `c`, which needs `bytes` with `slack` bytes of the cap left:
/// takes the chunks of other classes it deregisters out of the model and counts them, or
/// returns `None` (and changes nothing) if they would not be enough.
fn reclaim(model: &mut [ModelClass], c: usize, bytes: usize, slack: usize) -> Option<usize> {
    let others = move || (0..3).filter(move |&o| o != c);
    let idle: usize = others()
        .map(|o| model[o].idle().count() * model[o].chunk_bytes)
        .sum();
    if slack + idle < bytes {
        return None;
    }
    let (mut held, mut reclaimed) = (0, 0);
    // First leave every class a chunk; take a class's last chunk only if that is not enough.
    for keep_last in [true, false] {
        for o in others() {
            while held < bytes && bytes - held > slack {
                if keep_last && model[o].chunks.len() <= 1 {
                    break;
                }
                let Some(key) = model[o].idle().next().map(|c| c.key) else {
                    break;
                };
                model[o].chunks.retain(|c| c.key != key);
                held += model[o].chunk_bytes;
                reclaimed += 1;
            }
        }
    }
    Some(reclaimed)
}

struct Live {
    buf: Buffer,
    class: usize,
    mark: u8,
}

/// What the model expects of an allocation.
#[derive(Debug)]
enum Expect {
    /// A buffer from a chunk the class has.
    Free,
    /// A buffer from a new chunk, after reclaiming this many chunks of other classes.
    Grow { reclaimed: usize },
    /// Exhausted, naming this cap.
    Exhausted(usize),
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn pool_matches_model(setup in setup(), ops in proptest::collection::vec(op(), 1..200)) {
        let classes = (0..3).map(|i| {
            let chunk = SIZES[i] * setup.per_chunk[i];
            let class = ClassConfig::new(SIZES[i]).chunk_size(chunk);
            match setup.class_cap_chunks[i] {
                Some(n) => class.cap_bytes(n * chunk),
                None => class,
            }
        });
        let access = if setup.remote { PoolAccess::REMOTE_READ } else { PoolAccess::LOCAL_WRITE };
        let config = PoolConfig::new()
            .classes(classes)
            .cap_bytes(setup.pool_cap)
            .access(access);
        let registrar = HostRegistrar::new();
        let pool = Pool::new(config, registrar.clone()).unwrap();

        let mut model: Vec<ModelClass> = (0..3)
            .map(|c| ModelClass {
                chunk_bytes: SIZES[c] * setup.per_chunk[c],
                chunks: Vec::new(),
                in_use: 0,
                high_water: 0,
            })
            .collect();
        let mut reclaimed = 0;
        let mut bytes_in_use = 0;
        let mut live: Vec<Live> = Vec::new();
        let mut next_mark = 0u8;

        for op in ops {
            match op {
                Op::Alloc { len, wait, expose } => {
                    let result = if wait {
                        pool.alloc(len, std::time::Duration::ZERO)
                    } else {
                        pool.try_alloc(len)
                    };
                    if len == 0 {
                        prop_assert!(matches!(result, Err(Error::ZeroLength)));
                        continue;
                    }
                    let Some(c) = SIZES.iter().position(|&s| s >= len) else {
                        let too_large =
                            matches!(result, Err(Error::TooLarge { requested, max: 1024 }) if requested == len);
                        prop_assert!(too_large, "expected TooLarge, got {:?}", result);
                        continue;
                    };
                    let size = SIZES[c];
                    let chunk = model[c].chunk_bytes;
                    let registered: usize =
                        model.iter().map(|m| m.chunks.len() * m.chunk_bytes).sum();
                    let free = model[c].chunks.len() * setup.per_chunk[c] - model[c].in_use;
                    let class_cap = setup.class_cap_chunks[c].map(|n| n * chunk);
                    let expected = if free > 0 {
                        Expect::Free
                    } else if class_cap.is_some_and(|cap| (model[c].chunks.len() + 1) * chunk > cap) {
                        Expect::Exhausted(class_cap.unwrap())
                    } else if registered + chunk <= setup.pool_cap {
                        Expect::Grow { reclaimed: 0 }
                    } else {
                        match reclaim(&mut model, c, chunk, setup.pool_cap - registered) {
                            Some(n) => Expect::Grow { reclaimed: n },
                            None => Expect::Exhausted(setup.pool_cap),
                        }
                    };
                    let buf = match (expected, result) {
                        (Expect::Free, Ok(buf)) => {
                            let known = model[c].chunk(buf.lkey()).is_some();
                            prop_assert!(known, "a buffer of an unknown chunk");
                            Some(buf)
                        }
                        (Expect::Grow { reclaimed: n }, Ok(buf)) => {
                            let key = buf.lkey();
                            let known = model.iter_mut().any(|m| m.chunk(key).is_some());
                            prop_assert!(!known, "a new chunk has a new key");
                            model[c].chunks.push(ModelChunk { key, in_use: 0, exposed: false });
                            reclaimed += n;
                            Some(buf)
                        }
                        (Expect::Exhausted(cap), Err(Error::Exhausted { class_size, cap_bytes })) if !wait => {
                            prop_assert_eq!((class_size, cap_bytes), (size, cap));
                            None
                        }
                        (Expect::Exhausted(_), Err(Error::Timeout { .. })) if wait => None,
                        (expected, result) => {
                            return Err(TestCaseError::fail(format!(
                                "model says {expected:?}, pool gave {result:?}"
                            )));
                        }
                    };
                    if let Some(mut buf) = buf {
                        prop_assert_eq!((buf.len(), buf.capacity()), (len, size));
                        next_mark = next_mark.wrapping_add(1);
                        buf.fill(next_mark);
                        let class = &mut model[c];
                        let key = buf.lkey();
                        let chunk = class.chunk(key).unwrap();
                        chunk.in_use += 1;
                        if expose {
                            let remote = buf.remote();
                            prop_assert_eq!(remote.is_some(), setup.remote);
                            chunk.exposed |= remote.is_some();
                        }
                        class.in_use += 1;
                        class.high_water = class.high_water.max(class.in_use);
                        bytes_in_use += size;
                        live.push(Live { buf, class: c, mark: next_mark });
                    }
                }
                Op::Free(index) => {
                    if live.is_empty() {
                        continue;
                    }
                    let gone = live.swap_remove(index.index(live.len()));
                    let class = &mut model[gone.class];
                    class.in_use -= 1;
                    class.chunk(gone.buf.lkey()).unwrap().in_use -= 1;
                    bytes_in_use -= gone.buf.capacity();
                    drop(gone);
                }
            }

            // No buffer handed out twice and no overlap: live ranges are disjoint...
            let mut ranges: Vec<(u64, u64)> = live
                .iter()
                .map(|l| (l.buf.addr(), l.buf.addr() + l.buf.capacity() as u64))
                .collect();
            ranges.sort_unstable();
            for pair in ranges.windows(2) {
                prop_assert!(pair[0].1 <= pair[1].0, "overlap: {:?}", pair);
            }
            // ...and nothing written through one buffer showed up in another.
            for l in &live {
                prop_assert!(l.buf.iter().all(|&b| b == l.mark), "contents changed");
            }
            // Every byte accounted for, caps respected, stats as the model says; exactly the
            // model's chunks are registered (reclaimed ones are deregistered).
            let stats = pool.stats();
            let registered: usize = model.iter().map(|m| m.chunks.len() * m.chunk_bytes).sum();
            prop_assert_eq!(stats.bytes_registered, registered);
            prop_assert!(stats.bytes_registered <= setup.pool_cap);
            prop_assert_eq!(stats.chunks, model.iter().map(|m| m.chunks.len()).sum::<usize>());
            prop_assert_eq!(registrar.live_registrations(), stats.chunks);
            prop_assert_eq!(stats.reclaimed_chunks, reclaimed);
            prop_assert_eq!(stats.leaked_chunks, 0);
            prop_assert_eq!(stats.bytes_in_use, bytes_in_use);
            let bound: usize = model.iter().zip(SIZES).map(|(m, s)| m.high_water * s).sum();
            prop_assert_eq!(stats.high_water_bytes_bound(), bound);
            prop_assert_eq!(stats.buffers_in_use(), live.len());
            for (c, (got, want)) in stats.classes.iter().zip(&model).enumerate() {
                prop_assert_eq!(got.size, SIZES[c]);
                prop_assert_eq!(got.chunks, want.chunks.len());
                prop_assert_eq!(got.capacity, want.chunks.len() * setup.per_chunk[c]);
                prop_assert_eq!(got.in_use, want.in_use);
                prop_assert_eq!(got.in_use + got.free, got.capacity);
                prop_assert_eq!(got.high_water, want.high_water);
                if let Some(n) = setup.class_cap_chunks[c] {
                    prop_assert!(got.chunks <= n);
                }
            }
        }
        drop(live);
        drop(pool);
        prop_assert_eq!(registrar.live_registrations(), 0);
    }
}
