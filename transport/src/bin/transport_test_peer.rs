//! Peer program of the transport's device tests, run as a separate process so tests can kill
//! it mid-transfer.
//!
//! `transport-test-peer server --addr IP:PORT`: accepts one connection, prints `accepted`,
//! then echoes every message until the connection ends.
//! `transport-test-peer client --src IP --addr IP:PORT [--size BYTES]`: connects, prints
//! `connected`, then sends messages of `--size` bytes (default 1 MiB) until killed. Message `n`
//! starts with `n` (8 bytes, little-endian) and goes on with byte `i` equal to `n + i` (mod
//! 256), so the receiver can check each one and its order.
//! `transport-test-peer stream-writer --src IP --addr IP:PORT --size BYTES [--shutdown]
//! [--max-write BYTES] [--pause-ms MS]`: connects a byte stream on the process's shared
//! endpoint (writes of at most `--max-write` bytes), writes `--size` bytes (byte `i`
//! is as [`peer_patterns::stream_bytes`] makes them), shuts the stream down (awaiting it) or drops it and waits
//! `--pause-ms` (default 0), prints `done` and exits at once.
//! `transport-test-peer message-writer --src IP --addr IP:PORT --count N --size BYTES
//! [--close] [--pause-ms MS]`: connects, sends `--count` numbered messages of `--size` bytes,
//! closes the connection (awaiting it) or drops it and waits `--pause-ms`, prints `done` and
//! exits at once, its endpoint never dropped.
use std::io::Write;
use std::net::SocketAddr;
use std::time::Duration;

use transport::{Endpoint, EndpointConfig};

// What the peer writes, made as the tests that check it make it.
#[allow(dead_code)]
#[path = "../../tests/it/peer_patterns.rs"]
mod peer_patterns;
use peer_patterns::{numbered, stream_bytes};

fn config() -> EndpointConfig {
    EndpointConfig::default()
        .with_pool_bytes(64 << 20)
        .with_max_connections(4)
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let value = |flag: &str| -> Result<String, String> {
        let i = args
            .iter()
            .position(|a| a == flag)
            .ok_or(format!("{flag} is required"))?;
        args.get(i + 1)
            .cloned()
            .ok_or(format!("{flag} needs a value"))
    };
    let flag = |flag: &str| args.iter().any(|a| a == flag);
    // What a program does between dropping its connection and its end.
    let pause = || -> Result<(), Box<dyn std::error::Error>> {
        if let Ok(ms) = value("--pause-ms") {
            std::thread::sleep(Duration::from_millis(ms.parse()?));
        }
        Ok(())
    };
    let addr: SocketAddr = value("--addr")?.parse()?;
    match args.first().map(String::as_str) {
        Some("server") => {
            let ep = Endpoint::with_config(addr.ip(), config())?;
            let listener = ep.listen(addr.port())?;
            println!("listening");
            let conn = listener.accept_timeout(Duration::from_secs(30))?;
            println!("accepted");
            loop {
                let msg = match conn.recv(Duration::from_secs(60)) {
                    Ok(m) => m,
                    Err(transport::Error::Closed { cause: None }) => return Ok(()),
                    Err(e) => return Err(e.into()),
                };
                conn.send(&msg.to_vec())?;
            }
        }
        Some("client") => {
            let src = value("--src")?.parse()?;
            let ep = Endpoint::with_config(src, config())?;
            let conn = ep.connect(addr)?;
            println!("connected");
            let size = match value("--size") {
                Ok(v) => v.parse::<usize>()?,
                Err(_) => 1 << 20,
            };
            for n in 0u64.. {
                conn.send(&numbered(n, size))?;
            }
            Ok(())
        }
        Some("stream-writer") => {
            let src = value("--src")?.parse()?;
            let size: usize = value("--size")?.parse()?;
            let ep = transport::stream::shared_endpoint(src)?;
            let mut stream = transport::stream::Stream::connect_blocking(&ep, addr)?;
            if let Ok(n) = value("--max-write") {
                stream.set_max_write(n.parse()?);
            }
            let bytes = stream_bytes(size);
            stream.write_all(&bytes)?;
            if flag("--shutdown") {
                stream.shutdown_blocking()?;
            } else {
                drop(stream);
                pause()?;
            }
            println!("done");
            std::process::exit(0);
        }
        Some("message-writer") => {
            let src = value("--src")?.parse()?;
            let count: u64 = value("--count")?.parse()?;
            let size: usize = value("--size")?.parse()?;
            let ep = Endpoint::with_config(src, config())?;
            let conn = ep.connect(addr)?;
            for n in 0..count {
                conn.send(&numbered(n, size))?;
            }
            if flag("--close") {
                conn.close(Duration::from_secs(60))?;
            } else {
                drop(conn);
                pause()?;
            }
            println!("done");
            // The endpoint is not dropped: it does not linger for the connection.
            std::process::exit(0);
        }
        _ => Err(
            "usage: transport-test-peer server|client|stream-writer|message-writer --addr IP:PORT [--src IP]"
                .into(),
        ),
    }
}

fn main() {
    if let Err(e) = run() {
        eprintln!("transport-test-peer: {e}");
        std::process::exit(1);
    }
}
