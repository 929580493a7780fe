//! Sending and receiving small messages, and making and serving small calls, in steady state
//! allocates nothing on the heap: a counting global allocator (this test binary's own, hence a binary of its own) watches every
//! thread, the endpoints' progress threads included, while messages flow between the hosts.
//! Device tier (`#[ignore]`, run by `cargo xtask test`).

use std::alloc::{GlobalAlloc, Layout, System};
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use transport::{Conn, Endpoint, EndpointConfig};

/// Counts allocations (not frees) while `COUNTING` is set.
struct Counting;

static COUNTING: AtomicBool = AtomicBool::new(false);
static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

// SAFETY: every call is forwarded unchanged to the system allocator, which upholds the
// GlobalAlloc contract; counting touches only atomics and never allocates.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if COUNTING.load(Ordering::Relaxed) {
            ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: forwarded with the caller's layout.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System.alloc` with this layout (every allocation is
        // forwarded there).
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if COUNTING.load(Ordering::Relaxed) {
            ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: forwarded unchanged; `ptr` came from `System`.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

const TIMEOUT: Duration = Duration::from_secs(20);

/// Round trips before anything is counted: pool chunks, caches and queues (a window of 32
/// credits) reach their working size many times over.
const WARM_UP: u64 = 1000;

/// Round trips of a counted window: an allocation per message would show as hundreds.
const WINDOW: u64 = 500;

/// A connection between the two hosts: (client side, server side).
fn connected() -> (Conn, Conn) {
    let cfg = || {
        EndpointConfig::default()
            .with_pool_bytes(32 << 20)
            .with_max_connections(2)
    };
    let server = Endpoint::with_config(IpAddr::V4(testkit::peer().device.addr), cfg()).unwrap();
    let listener = server.listen(0).unwrap();
    let addr = listener.local_addr().unwrap();
    let client = Endpoint::with_config(IpAddr::V4(testkit::device().addr), cfg()).unwrap();
    let accept = std::thread::spawn(move || listener.accept_timeout(TIMEOUT).unwrap());
    let c = client.connect(addr).unwrap();
    (c, accept.join().unwrap())
}

/// Runs `round` in windows of `n` until one allocates nothing (at most three); returns the
/// allocations of each window. One-time setup that warm-up happened not to reach (a thread's
/// first cache of a pool class) may land in a window; it cannot repeat, so the next window
/// is clean. An allocation per message shows in every window.
fn windows(n: u64, mut round: impl FnMut(u64)) -> Vec<u64> {
    let mut windows = Vec::new();
    for w in 0..3 {
        ALLOCATIONS.store(0, Ordering::Relaxed);
        COUNTING.store(true, Ordering::Relaxed);
        for i in 0..n {
            round(w * n + i);
        }
        COUNTING.store(false, Ordering::Relaxed);
        let allocations = ALLOCATIONS.load(Ordering::Relaxed);
        eprintln!("{allocations} heap allocations in {n} round trips");
        windows.push(allocations);
        if allocations == 0 {
            break;
        }
    }
    windows
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn small_messages_in_steady_state_allocate_nothing() {
    let (c, s) = connected();

    // Echo in the same thread (no thread spawn inside the measured window): the client sends,
    // the server receives and answers, the client receives.
    let mut payload = [0u8; 64];
    let mut round = |i: u64| {
        payload[..8].copy_from_slice(&i.to_le_bytes());
        c.send(&payload).unwrap();
        let m = s.recv(TIMEOUT).unwrap();
        s.send(&m.bytes()).unwrap();
        drop(m);
        let back = c.recv(TIMEOUT).unwrap();
        assert_eq!(back.bytes()[..8], i.to_le_bytes());
    };
    // Warm up: pool chunks, caches and queues reach their working size.
    for i in 0..WARM_UP {
        round(i);
    }
    // A thread's first free into a pool class gives it a cache of that class (a one-time
    // allocation). Send buffers (frames and control frames) are freed by whichever thread
    // handles their completion, this one included, so free one of each size here first.
    for conn in [&c, &s] {
        for len in [0, 64] {
            drop(conn.alloc(len).unwrap());
        }
    }
    // Steady state: a window of round trips in which nothing allocates.
    let n = WINDOW;
    let windows = windows(n, round);
    assert_eq!(
        windows.last(),
        Some(&0),
        "heap allocations per window of {n} round trips: {windows:?}"
    );
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn small_calls_in_steady_state_allocate_nothing() {
    let (c, s) = connected();
    // The server answers on a thread of its own, started before anything is counted.
    let server = std::thread::spawn(move || {
        s.serve_with(|request, response| response.extend_from_slice(&request.bytes()))
    });
    let mut payload = [0u8; 64];
    let mut round = |i: u64| {
        payload[..8].copy_from_slice(&i.to_le_bytes());
        let back = c.call(&payload, TIMEOUT).unwrap();
        assert_eq!(back.bytes()[..8], i.to_le_bytes());
    };
    for i in 0..WARM_UP {
        round(i);
    }
    drop(c.alloc(64).unwrap());
    let n = WINDOW;
    let windows = windows(n, round);
    c.close(TIMEOUT).unwrap();
    server.join().unwrap().unwrap();
    assert_eq!(
        windows.last(),
        Some(&0),
        "heap allocations per window of {n} calls: {windows:?}"
    );
}
