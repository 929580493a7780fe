//! The byte stream without tokio: echo of every size from 1 B to 16 MiB on
//! `futures::executor::block_on` in plain threads, through the `futures_io` traits.
use futures::executor::block_on;
use futures::{AsyncReadExt, AsyncWriteExt};
use transport::stream::Stream;

use crate::stream::{stream_endpoints, SIZES};
use crate::support::*;

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn echo_on_a_minimal_executor_in_plain_threads() {
    let (listener, client) = stream_endpoints();
    let addr = listener.local_addr().unwrap();
    let server = std::thread::spawn(move || {
        block_on(async {
            let (s, _) = listener.accept().await.expect("accept");
            let (mut r, mut w) = s.into_split();
            let mut buf = vec![0u8; 100_000];
            loop {
                let n = r.read(&mut buf).await.expect("server read");
                if n == 0 {
                    w.close().await.unwrap();
                    return;
                }
                w.write_all(&buf[..n]).await.expect("server write");
            }
        })
    });
    let s = block_on(Stream::connect_on(&client, addr)).expect("connect");
    let (mut r, mut w) = s.into_split();
    let writer = std::thread::spawn(move || {
        block_on(async {
            for (i, &len) in SIZES.iter().enumerate() {
                w.write_all(&pattern(i as u64, len)).await.unwrap();
            }
            w.close().await.unwrap();
        })
    });
    block_on(async {
        for (i, &len) in SIZES.iter().enumerate() {
            let mut back = vec![0u8; len];
            r.read_exact(&mut back).await.expect("read the echo");
            assert!(
                back == pattern(i as u64, len),
                "echo of {len} bytes differs"
            );
        }
        let mut rest = Vec::new();
        assert_eq!(r.read_to_end(&mut rest).await.unwrap(), 0, "end of stream");
    });
    writer.join().unwrap();
    server.join().unwrap();
}
