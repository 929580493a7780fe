//! `echo-server [ADDR:PORT] [--polling MODE] [--busy-read US] [--ack-timeout MS] [--stats SECS]`:
//! echoes every byte stream over RDMA, a task per connection, until killed: the plain tokio
//! echo server with `tokio::net`'s types swapped for the transport's byte stream. It listens
//! on every RDMA address (`0.0.0.0:7471`) unless told an address; with `--stats`, it prints
//! each endpoint's statistics and device counters every SECS seconds.
#![forbid(unsafe_code)]

use std::net::SocketAddr;
use std::process::ExitCode;

use apps::echo::{config, EndpointArgs};
use apps::report::error_chain;
use clap::Parser;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use transport::stream::StreamListener;

/// Echo server over the transport's byte stream.
#[derive(Parser, Debug)]
#[command(name = "echo-server")]
struct Args {
    /// Address of an RDMA netdev and port to listen on (0.0.0.0: every RDMA address; port 0:
    /// any free port).
    #[arg(default_value = "0.0.0.0:7471")]
    addr: SocketAddr,
    #[command(flatten)]
    endpoint: EndpointArgs,
}

#[tokio::main]
async fn main() -> ExitCode {
    apps::init_tracing();
    let args = Args::parse();
    let listener = match StreamListener::bind_with(args.addr, config(&args.endpoint)).await {
        Ok(l) => l,
        Err(e) => {
            let addr = args.addr;
            eprintln!("echo-server: cannot listen on {addr}: {}", error_chain(&e));
            return ExitCode::FAILURE;
        }
    };
    if let Some(every) = args.endpoint.stats {
        for ep in listener.endpoints() {
            apps::live_stats::spawn_reporter(ep, every);
        }
    }
    match listener.local_addr() {
        Ok(a) => println!("listening on {a}"),
        Err(e) => eprintln!("echo-server: {e}"),
    }
    loop {
        let (mut socket, peer) = match listener.accept().await {
            Ok(s) => s,
            Err(e) => {
                eprintln!("echo-server: accept: {}", error_chain(&e));
                continue;
            }
        };
        tokio::spawn(async move {
            let mut buf = vec![0u8; 64 << 10];
            loop {
                let n = match socket.read(&mut buf).await {
                    Ok(0) => {
                        let _ = socket.shutdown().await;
                        return;
                    }
                    Ok(n) => n,
                    Err(e) => {
                        eprintln!("echo-server: {peer}: read: {}", error_chain(&e));
                        return;
                    }
                };
                if let Err(e) = socket.write_all(&buf[..n]).await {
                    eprintln!("echo-server: {peer}: write: {}", error_chain(&e));
                    return;
                }
            }
        });
    }
}
