//! The pool against a model: random allocs and frees under small caps, checked after every step.
//!
//! Real memory (from the host registrar) backs the buffers, so overlap is checked on actual
//! addresses and contents, not only on the bookkeeping's numbers.

use memory::testing::HostRegistrar;
use memory::{Buffer, ClassConfig, Error, Pool, PoolConfig};
use proptest::prelude::*;

const SIZES: [usize; 3] = [64, 256, 1024];

#[derive(Debug, Clone)]
enum Op {
    /// `try_alloc`, or `alloc` with a zero timeout (one attempt, `Timeout` when exhausted).
    Alloc(usize, bool),
    Free(prop::sample::Index),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        5 => ((0usize..=1100), any::<bool>()).prop_map(|(len, wait)| Op::Alloc(len, wait)),
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
}

fn setup() -> impl Strategy<Value = Setup> {
    (
        [1usize..4, 1usize..4, 1usize..4],
        [
            proptest::option::of(1usize..4),
            proptest::option::of(1usize..4),
            proptest::option::of(1usize..4),
        ],
        // At least the largest chunk (3 KiB), so every class can grow once.
        (48usize..=200).prop_map(|n| n * 64),
    )
        .prop_map(|(per_chunk, class_cap_chunks, pool_cap)| Setup {
            per_chunk,
            class_cap_chunks,
            pool_cap,
        })
}

#[derive(Debug, Default, Clone)]
struct ModelClass {
    chunks: usize,
    in_use: usize,
    high_water: usize,
}

struct Live {
    buf: Buffer,
    mark: u8,
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn pool_matches_model(setup in setup(), ops in proptest::collection::vec(op(), 1..120)) {
        let classes = (0..3).map(|i| {
            let chunk = SIZES[i] * setup.per_chunk[i];
            let class = ClassConfig::new(SIZES[i]).chunk_size(chunk);
            match setup.class_cap_chunks[i] {
                Some(n) => class.cap_bytes(n * chunk),
                None => class,
            }
        });
        let config = PoolConfig::new().classes(classes).cap_bytes(setup.pool_cap);
        let registrar = HostRegistrar::new();
        let pool = Pool::new(config, registrar.clone()).unwrap();

        let mut model = vec![ModelClass::default(); 3];
        let mut registered = 0;
        let mut bytes_in_use = 0;
        let mut live: Vec<Live> = Vec::new();
        let mut next_mark = 0u8;

        for op in ops {
            match op {
                Op::Alloc(len, wait) => {
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
                    let chunk = size * setup.per_chunk[c];
                    let class = &mut model[c];
                    let free = class.chunks * setup.per_chunk[c] - class.in_use;
                    let class_cap = setup.class_cap_chunks[c].map(|n| n * chunk);
                    let expected: Result<(), usize> = if free > 0 {
                        Ok(())
                    } else if class_cap.is_some_and(|cap| (class.chunks + 1) * chunk > cap) {
                        Err(class_cap.unwrap())
                    } else if registered + chunk > setup.pool_cap {
                        Err(setup.pool_cap)
                    } else {
                        class.chunks += 1;
                        registered += chunk;
                        Ok(())
                    };
                    match (expected, result) {
                        (Ok(()), Ok(mut buf)) => {
                            prop_assert_eq!((buf.len(), buf.capacity()), (len, size));
                            next_mark = next_mark.wrapping_add(1);
                            buf.fill(next_mark);
                            class.in_use += 1;
                            class.high_water = class.high_water.max(class.in_use);
                            bytes_in_use += size;
                            live.push(Live { buf, mark: next_mark });
                        }
                        (Err(cap), Err(Error::Exhausted { class_size, cap_bytes })) if !wait => {
                            prop_assert_eq!((class_size, cap_bytes), (size, cap));
                        }
                        (Err(_), Err(Error::Timeout { .. })) if wait => {}
                        (expected, result) => {
                            prop_assert!(false, "model says {:?}, pool gave {:?}", expected, result);
                        }
                    }
                }
                Op::Free(index) => {
                    if live.is_empty() {
                        continue;
                    }
                    let gone = live.swap_remove(index.index(live.len()));
                    let size = gone.buf.capacity();
                    model[SIZES.iter().position(|&s| s == size).unwrap()].in_use -= 1;
                    bytes_in_use -= size;
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
            // Every byte accounted for, caps respected, stats as the model says.
            let stats = pool.stats();
            prop_assert_eq!(stats.bytes_registered, registered);
            prop_assert!(stats.bytes_registered <= setup.pool_cap);
            prop_assert_eq!(stats.chunks, model.iter().map(|m| m.chunks).sum::<usize>());
            prop_assert_eq!(registrar.live_registrations(), stats.chunks);
            prop_assert_eq!(stats.bytes_in_use, bytes_in_use);
            let bound: usize = model.iter().zip(SIZES).map(|(m, s)| m.high_water * s).sum();
            prop_assert_eq!(stats.high_water_bytes_bound(), bound);
            prop_assert_eq!(stats.buffers_in_use(), live.len());
            for (c, (got, want)) in stats.classes.iter().zip(&model).enumerate() {
                let chunk = SIZES[c] * setup.per_chunk[c];
                prop_assert_eq!(got.size, SIZES[c]);
                prop_assert_eq!(got.chunks, want.chunks);
                prop_assert_eq!(got.capacity, want.chunks * setup.per_chunk[c]);
                prop_assert_eq!(got.in_use, want.in_use);
                prop_assert_eq!(got.in_use + got.free, got.capacity);
                prop_assert_eq!(got.high_water, want.high_water);
                if let Some(n) = setup.class_cap_chunks[c] {
                    prop_assert!(got.chunks * chunk <= n * chunk);
                }
            }
        }
        drop(live);
        drop(pool);
        prop_assert_eq!(registrar.live_registrations(), 0);
    }
}
