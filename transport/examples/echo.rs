//! Echo over RDMA with tokio: the server binds, accepts in a loop and spawns a task per
//! connection that echoes what it reads; the client connects, writes a message and reads the
//! echo.
//!
//! ```text
//! cargo run -p rdma-transport --features tokio --example echo -- server 10.77.0.2:7471
//! cargo run -p rdma-transport --features tokio --example echo -- client 10.77.0.1 10.77.0.2:7471
//! ```
use std::io;
use std::net::{IpAddr, SocketAddr};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use transport::stream::{Stream, StreamListener};

async fn server(addr: SocketAddr) -> io::Result<()> {
    let listener = StreamListener::bind(addr).await?;
    println!("listening on {}", listener.local_addr()?);
    loop {
        let (mut socket, peer) = listener.accept().await?;
        tokio::spawn(async move {
            let mut buf = vec![0; 1024];
            loop {
                let n = match socket.read(&mut buf).await {
                    Ok(0) => return, // the peer is done
                    Ok(n) => n,
                    Err(e) => {
                        eprintln!("{peer}: read failed: {e}");
                        return;
                    }
                };
                if let Err(e) = socket.write_all(&buf[..n]).await {
                    eprintln!("{peer}: write failed: {e}");
                    return;
                }
            }
        });
    }
}

async fn client(src: IpAddr, addr: SocketAddr) -> io::Result<()> {
    let mut stream = Stream::connect_from(src, addr).await?;
    stream.write_all(b"hello world!").await?;
    let mut buf = [0; 12];
    stream.read_exact(&mut buf).await?;
    println!("echoed: {}", String::from_utf8_lossy(&buf));
    Ok(())
}

#[tokio::main]
async fn main() -> io::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let parse = |s: &str| {
        s.parse()
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))
    };
    match args.iter().map(String::as_str).collect::<Vec<_>>()[..] {
        ["server", addr] => server(parse(addr)?).await,
        ["client", src, addr] => {
            let src: IpAddr = src
                .parse()
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
            client(src, parse(addr)?).await
        }
        _ => {
            eprintln!("usage: echo server ADDR:PORT | echo client SRC-IP ADDR:PORT");
            std::process::exit(2);
        }
    }
}
