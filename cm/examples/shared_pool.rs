//! One protection domain and one registered-memory pool serving every connection.
//!
//! The server opens the device that serves its address, makes one PD and one pool on it, and
//! gives the PD to the listener: each accepted connection's QP and CQ are created on that PD,
//! so buffers from the one pool post on any connection. Each client connection receives an
//! echo of what it sends; clients share a PD and a pool the same way.
//!
//! ```text
//! cargo run -p rdma-cm --example shared_pool -- server 10.77.0.2:7471 4
//! cargo run -p rdma-cm --example shared_pool -- client 10.77.0.2:7471 10.77.0.1 4
//! ```
use std::error::Error;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use cm::{ConnOptions, Connector, Listener};
use memory::{Buffer, Pool, PoolConfig};
use verbs::{Context, Pd, RecvRequest, SendRequest, WcOpcode};

type Result<T> = std::result::Result<T, Box<dyn Error + Send + Sync>>;

/// Every wait is bounded by this.
pub const TIMEOUT: Duration = Duration::from_secs(10);

/// The PD and pool of the device that serves `ip`.
pub fn shared(ip: IpAddr) -> Result<(Pd, Pool)> {
    let (ctx, _) = Context::open_by_addr(ip)?;
    let pd = ctx.alloc_pd()?;
    let pool = Pool::on_pd(
        &pd,
        PoolConfig::new().class_sizes([64, 4096]).cap_bytes(8 << 20),
    )?;
    Ok((pd, pool))
}

/// A listener on `addr` whose connections all use one PD, with the pool on that PD.
pub fn listen(addr: SocketAddr) -> Result<(Listener, Pool)> {
    let (pd, pool) = shared(addr.ip())?;
    let listener = Listener::bind(addr, ConnOptions::new().pd(&pd))?;
    println!("listening on {addr} ({})", pd.context().name());
    Ok((listener, pool))
}

/// Serves `clients` connections of `listener`, each on its own thread, all on one PD and pool:
/// receives one message into a pool buffer and sends it back from the same buffer. Returns
/// once every client has disconnected.
pub fn serve(listener: Listener, pool: &Pool, clients: usize) -> Result<()> {
    let mut threads = Vec::new();
    for _ in 0..clients {
        let req = listener.get_request(TIMEOUT * 3)?;
        req.qp()
            .post_recv(RecvRequest::new(pool.try_alloc(4096)?, ..)?)
            // A failed post hands the request back in the error; here only the cause matters.
            .map_err(|e| e.error)?;
        let conn = req.accept(b"", TIMEOUT)?;
        threads.push(std::thread::spawn(move || -> Result<()> {
            let wc = conn.cq().wait_one(TIMEOUT)?;
            wc.status()?;
            let mut msg: Buffer = conn.qp().reclaim(&wc)[0].take()?;
            msg.set_len(wc.byte_len() as usize)?;
            let len = msg.len();
            conn.qp()
                .post_send(SendRequest::send(msg, ..len)?)
                .map_err(|e| e.error)?;
            let wc = conn.cq().wait_one(TIMEOUT)?;
            wc.status()?;
            drop(conn.qp().reclaim(&wc));
            conn.wait_disconnect(TIMEOUT)?;
            Ok(())
        }));
    }
    for t in threads {
        t.join().map_err(|_| "a connection thread panicked")??;
    }
    println!("served {clients}");
    Ok(())
}

/// Connects `clients` times to `server` from `src`, all on one PD and pool; each connection
/// sends a message and checks the echo. Returns the pool.
pub fn connect(server: SocketAddr, src: IpAddr, clients: usize) -> Result<Pool> {
    let (pd, pool) = shared(src)?;
    let threads: Vec<_> = (0..clients)
        .map(|i| {
            let (pd, pool) = (pd.clone(), pool.clone());
            std::thread::spawn(move || -> Result<()> {
                let pending = Connector::new(server)
                    .src(src)
                    .pd(&pd)
                    .timeout(TIMEOUT)
                    .resolve()?;
                pending
                    .qp()
                    .post_recv(RecvRequest::new(pool.try_alloc(4096)?, ..)?)
                    .map_err(|e| e.error)?;
                let conn = pending.connect()?;
                let text = format!("hello from connection {i}");
                let mut msg = pool.try_alloc(text.len())?;
                msg.copy_from_slice(text.as_bytes());
                conn.qp()
                    .post_send(SendRequest::send(msg, ..text.len())?)
                    .map_err(|e| e.error)?;
                let mut echo = None;
                for _ in 0..2 {
                    let wc = conn.cq().wait_one(TIMEOUT)?;
                    wc.status()?;
                    let mut back: Buffer = conn.qp().reclaim(&wc)[0].take()?;
                    if wc.opcode() == Some(WcOpcode::Recv) {
                        back.set_len(wc.byte_len() as usize)?;
                        echo = Some(back);
                    }
                }
                let echo = echo.ok_or("no echo")?;
                if echo[..] != *text.as_bytes() {
                    return Err(format!("connection {i}: echo {:?}", &echo[..]).into());
                }
                conn.disconnect(TIMEOUT)?;
                Ok(())
            })
        })
        .collect();
    for t in threads {
        t.join().map_err(|_| "a client thread panicked")??;
    }
    println!("{clients} connections echoed");
    Ok(pool)
}

#[allow(dead_code)] // the tests include this file for the functions above
fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let usage = "usage: shared_pool server IP:PORT [N] | shared_pool client IP:PORT SRC_IP [N]";
    match args.iter().map(String::as_str).collect::<Vec<_>>()[..] {
        ["server", addr, ref rest @ ..] => {
            let n = rest.first().map_or(Ok(1), |n| n.parse())?;
            let (listener, pool) = listen(addr.parse()?)?;
            serve(listener, &pool, n)?;
        }
        ["client", server, src, ref rest @ ..] => {
            let n = rest.first().map_or(Ok(1), |n| n.parse())?;
            connect(server.parse()?, src.parse()?, n)?;
        }
        _ => return Err(usage.into()),
    }
    Ok(())
}
