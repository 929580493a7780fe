//! `echo-server ADDR:PORT [--polling MODE] [--busy-read US]`: echoes every byte stream over RDMA, a task per connection, until
//! killed.
#![forbid(unsafe_code)]

use std::net::SocketAddr;
use std::process::ExitCode;

use apps::echo::{endpoint, parse_polling};
use apps::report::error_chain;
use clap::Parser;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use transport::stream::StreamListener;
use transport::Polling;

/// Echo server over the transport's byte stream.
#[derive(Parser, Debug)]
#[command(name = "echo-server")]
struct Args {
    /// Address of an RDMA netdev and port to listen on (port 0: any).
    addr: SocketAddr,
    /// How the endpoint polls: adaptive or adaptive:SPIN_US, busy, event, reactor or
    /// reactor:SPIN_US (tokio's reactor drives progress; with a spin for the lowest latency,
    /// e.g. reactor:1000).
    #[arg(long, default_value = "adaptive", value_parser = parse_polling)]
    polling: Polling,
    /// Microseconds a read polls the device itself before it waits (busy read; 0: none).
    /// With reactor:1000 and --busy-read 1000, the lowest latency on a quiet machine.
    #[arg(long, default_value_t = 0)]
    busy_read: u64,
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    let listener = match endpoint(
        args.addr.ip(),
        args.polling,
        std::time::Duration::from_micros(args.busy_read),
    )
    .map_err(std::io::Error::other)
    .and_then(|ep| StreamListener::bind_on(&ep, args.addr.port()))
    {
        Ok(l) => l,
        Err(e) => {
            eprintln!(
                "echo-server: cannot listen on {}: {}",
                args.addr,
                error_chain(&e)
            );
            return ExitCode::FAILURE;
        }
    };
    match listener.local_addr() {
        Ok(a) => println!("listening on {a}"),
        Err(e) => eprintln!("echo-server: {e}"),
    }
    loop {
        let (mut stream, peer) = match listener.accept().await {
            Ok(s) => s,
            Err(e) => {
                eprintln!("echo-server: accept: {}", error_chain(&e));
                continue;
            }
        };
        tokio::spawn(async move {
            let mut buf = vec![0u8; 64 << 10];
            loop {
                match stream.read(&mut buf).await {
                    Ok(0) => {
                        let _ = stream.shutdown().await;
                        return;
                    }
                    Ok(n) => {
                        if let Err(e) = stream.write_all(&buf[..n]).await {
                            eprintln!("echo-server: {peer}: write: {}", error_chain(&e));
                            return;
                        }
                    }
                    Err(e) => {
                        eprintln!("echo-server: {peer}: read: {}", error_chain(&e));
                        return;
                    }
                }
            }
        });
    }
}
