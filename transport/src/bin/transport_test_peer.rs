//! Peer program of the transport's device tests, run as a separate process so tests can kill
//! it mid-transfer.
//!
//! `transport-test-peer server --addr IP:PORT`: accepts one connection, prints `accepted`,
//! then echoes every message until the connection ends.
//! `transport-test-peer client --src IP --addr IP:PORT [--size BYTES]`: connects, prints
//! `connected`, then sends messages of `--size` bytes (default 1 MiB) until killed. Message `n`
//! starts with `n` (8 bytes, little-endian) and goes on with byte `i` equal to `n + i` (mod
//! 256), so the receiver can check each one and its order.
use std::net::SocketAddr;
use std::time::Duration;

use transport::{Endpoint, EndpointConfig};

fn config() -> EndpointConfig {
    EndpointConfig {
        pool_bytes: 64 << 20,
        max_connections: 4,
        ..EndpointConfig::default()
    }
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
    let addr: SocketAddr = value("--addr")?.parse()?;
    match args.first().map(String::as_str) {
        Some("server") => {
            let ep = Endpoint::with_config(addr.ip(), config())?;
            let listener = ep.listen(addr.port())?;
            println!("listening");
            let conn = listener.accept(Duration::from_secs(30))?;
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
        _ => Err("usage: transport-test-peer server|client --addr IP:PORT [--src IP]".into()),
    }
}

/// Message `n` of `len` bytes (at least 8), as the module docs describe.
fn numbered(n: u64, len: usize) -> Vec<u8> {
    let mut v: Vec<u8> = (0..len.max(8))
        .map(|i| (n as u8).wrapping_add(i as u8))
        .collect();
    v[..8].copy_from_slice(&n.to_le_bytes());
    v
}

fn main() {
    if let Err(e) = run() {
        eprintln!("transport-test-peer: {e}");
        std::process::exit(1);
    }
}
