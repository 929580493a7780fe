//! The async core on its own: a rendezvous message longer than one poll can queue, sent
//! through `send_async`, arrives whole, also when its future is dropped half way.
use std::future::Future;
use std::pin::pin;
use std::task::{Context, Poll};

use futures::executor::block_on;
use futures::task::noop_waker;

use crate::support::*;

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
