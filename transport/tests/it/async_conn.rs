//! The async core on its own: `poll_send` queues a rendezvous message up to
//! `max_whole_send` whole in one poll; a rendezvous message longer than one poll can queue,
//! sent through `send_async`, arrives whole, also when its future is dropped half way; many
//! such messages, and blocking sends past their timeout, are finished by the engine without a
//! thread each.
use std::future::Future;
use std::pin::pin;
use std::task::{Context, Poll};

use futures::executor::block_on;
use futures::task::noop_waker;

use transport::{Error, ProtocolConfig};

use crate::support::*;

/// Threads of this process now.
fn threads() -> usize {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("Threads:")).unwrap();
    line["Threads:".len()..].trim().parse().unwrap()
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn a_large_send_async_arrives_whole_even_when_its_future_is_dropped_half_way() {
    let (server, client) = pair();
    let len = 3 * client.max_whole_send() + 12_345;
    let first = pattern(21, len);
    let second = pattern(22, len);
    let receiver = std::thread::spawn(move || {
        let a = server.recv(TIMEOUT).expect("first message");
        assert_eq!(a.len(), len);
        assert!(
            a.to_vec() == pattern(21, len),
            "the finished message differs"
        );
        drop(a);
        let b = server.recv(TIMEOUT).expect("second message");
        assert!(
            b.to_vec() == pattern(22, len),
            "the awaited message differs"
        );
    });
    {
        // One poll queues the start of the message, then the future is dropped.
        let waker = noop_waker();
        let mut cx = Context::from_waker(&waker);
        let mut fut = pin!(client.send_async(&first));
        assert!(
            matches!(fut.as_mut().poll(&mut cx), Poll::Pending),
            "a message of {len} bytes was queued in one poll"
        );
    }
    block_on(client.send_async(&second)).expect("send_async");
    receiver.join().unwrap();
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn abandoned_rendezvous_sends_are_finished_by_the_engine_in_order_without_a_thread_each() {
    // Small chunks, few in flight: every message below takes many rounds of READs, so what
    // its sender leaves is most of it.
    let cfg = || {
        config().with_proto(
            ProtocolConfig::default()
                .with_rndv_chunk_size(4096)
                .with_max_chunks_in_flight(2),
        )
    };
    let (server, client) = pair_with(cfg(), cfg());
    let len = 64 << 10;
    // Fewer than the window: each message is announced at its first poll (the queue of
    // messages waiting to go holds a window's worth).
    let n = 24;
    let before = threads();
    // Half the senders drop their futures after one poll, half are blocking sends with a
    // timeout far too short for the whole message; nobody takes the messages yet.
    let mut sent = Vec::new();
    for k in 0..n {
        let data = pattern(100 + k, len);
        if k % 2 == 0 {
            let waker = noop_waker();
            let mut cx = Context::from_waker(&waker);
            let mut fut = pin!(client.send_async(&data));
            match fut.as_mut().poll(&mut cx) {
                Poll::Ready(Ok(())) | Poll::Pending => sent.push(k),
                Poll::Ready(Err(e)) => panic!("send_async {k}: {e}"),
            }
        } else {
            match client.send_timeout(&data, std::time::Duration::from_millis(1)) {
                Ok(()) => sent.push(k),
                // Not announced in time: nothing of it was sent.
                Err(Error::TimedOut { .. }) => {}
                Err(e) => panic!("send_timeout {k}: {e}"),
            }
        }
    }
    let after = threads();
    assert!(
        after <= before,
        "{} threads started for {n} abandoned sends",
        after - before
    );
    assert!(sent.len() > n as usize / 2, "only {sent:?} went");
    for &k in &sent {
        let m = server.recv(TIMEOUT).expect("an abandoned message");
        assert_eq!(m.len(), len, "message {k}");
        assert!(m.to_vec() == pattern(100 + k, len), "message {k} differs");
    }
    let r = server.try_recv();
    assert!(
        matches!(r, Err(Error::WouldBlock)),
        "a message too many: {r:?}"
    );
    // The connection goes on as before.
    client.send(b"after").unwrap();
    assert_eq!(&server.recv(TIMEOUT).unwrap().bytes()[..], b"after");
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn poll_send_queues_a_rendezvous_message_whole_in_one_poll() {
    let (server, client) = pair();
    let waker = noop_waker();
    let mut cx = Context::from_waker(&waker);
    let whole = client.max_whole_send();
    for (k, len) in [client.eager_limit() + 1, whole].into_iter().enumerate() {
        let data = pattern(400 + k as u64, len);
        let r = client.poll_send(&mut cx, &data);
        assert!(matches!(r, Poll::Ready(Ok(()))), "{len} bytes: {r:?}");
        let m = server.recv(TIMEOUT).expect("the message");
        assert!(m.to_vec() == data, "{len} bytes differ");
    }
    let r = client.poll_send(&mut cx, &vec![0; whole + 1]);
    assert!(
        matches!(r, Poll::Ready(Err(Error::TooLarge { limit, .. })) if limit == whole as u64),
        "{r:?}"
    );
}
