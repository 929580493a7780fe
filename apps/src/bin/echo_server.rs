//! `echo-server ADDR:PORT [--polling MODE] [--busy-read US] [--ack-timeout MS] [--stats SECS]`:
//! echoes every byte stream over RDMA, a task per connection, until killed; with `--stats`,
//! prints the endpoint's statistics and device counters every SECS seconds.
#![forbid(unsafe_code)]

use std::net::SocketAddr;
use std::process::ExitCode;

use apps::echo::{endpoint, EndpointArgs};
use apps::report::error_chain;
use clap::Parser;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use transport::stream::StreamListener;

/// Echo server over the transport's byte stream.
#[derive(Parser, Debug)]
#[command(name = "echo-server")]
struct Args {
    /// Address of an RDMA netdev and port to listen on (port 0: any).
    addr: SocketAddr,
    #[command(flatten)]
    endpoint: EndpointArgs,
}

#[tokio::main]
async fn main() -> ExitCode {
    apps::init_tracing();
    let args = Args::parse();
    let listener = match endpoint(args.addr.ip(), &args.endpoint)
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
