//! `rping`: the RDMA ping-pong of rdma-core's `rping` (librdmacm/examples), on the `cm` and
//! `verbs` crates. Same options, same wire protocol and output: it interoperates with the C
//! program in either role.
#![forbid(unsafe_code)]

use std::net::{IpAddr, ToSocketAddrs};
use std::process::ExitCode;

use apps::rping::{self, Config, BUFSIZE, DEFAULT_PORT, MIN_SIZE};
use clap::Parser;

/// RDMA ping-pong over rdma_cm connections (compatible with rdma-core's rping).
#[derive(Parser, Debug)]
#[command(name = "rping", disable_version_flag = true)]
struct Args {
    /// Server side.
    #[arg(short = 's', conflicts_with = "client")]
    server: bool,
    /// Client side.
    #[arg(short = 'c')]
    client: bool,
    /// Address (server: to bind to; client: of the server).
    #[arg(short = 'a')]
    addr: Option<String>,
    /// Source address to bind to for the client.
    #[arg(short = 'I')]
    src: Option<String>,
    /// Port.
    #[arg(short = 'p', default_value_t = DEFAULT_PORT)]
    port: u16,
    /// Ping count (0: forever).
    #[arg(short = 'C', default_value_t = 0)]
    count: u32,
    /// Ping data size.
    #[arg(short = 'S', default_value_t = 64)]
    size: usize,
    /// Display ping data to stdout.
    #[arg(short = 'v', action = clap::ArgAction::Count)]
    verbose: u8,
    /// Validate ping data.
    #[arg(short = 'V', action = clap::ArgAction::Count)]
    validate: u8,
    /// Debug printfs.
    #[arg(short = 'd', action = clap::ArgAction::Count)]
    debug: u8,
    /// Persistent server mode allowing multiple connections.
    #[arg(short = 'P')]
    persistent: bool,
    /// Use a self-created, self-modified QP (always the case here; accepted for
    /// compatibility).
    #[arg(short = 'q')]
    self_create_qp: bool,
    /// Type of service (accepted for compatibility, ignored).
    #[arg(short = 't')]
    tos: Option<u8>,
}

fn resolve(host: &str) -> Result<IpAddr, String> {
    if let Ok(ip) = host.parse() {
        return Ok(ip);
    }
    (host, 0)
        .to_socket_addrs()
        .ok()
        .and_then(|mut a| a.next())
        .map(|a| a.ip())
        .ok_or_else(|| format!("getaddrinfo failed ({host}) - invalid hostname or IP address"))
}

fn main() -> ExitCode {
    apps::init_tracing();
    let args = Args::parse();
    if !args.server && !args.client {
        eprintln!("rping: give -s (server) or -c (client)");
        return ExitCode::from(22);
    }
    if args.size < MIN_SIZE || args.size > BUFSIZE - 1 {
        eprintln!(
            "Invalid size {} (valid range is {MIN_SIZE} to {BUFSIZE})",
            args.size
        );
        return ExitCode::from(22);
    }
    let addr = match args.addr.as_deref().map(resolve).transpose() {
        Ok(Some(a)) => a,
        Ok(None) if args.server => IpAddr::from([0, 0, 0, 0]),
        Ok(None) => {
            eprintln!("rping: the client needs -a <server address>");
            return ExitCode::from(22);
        }
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(22);
        }
    };
    let src = match args.src.as_deref().map(resolve).transpose() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(22);
        }
    };
    let cfg = Config {
        server: args.server,
        addr,
        src,
        port: args.port,
        count: args.count,
        size: args.size,
        verbose: args.verbose > 0,
        validate: args.validate > 0,
        debug: args.debug > 0,
        persistent: args.persistent,
    };
    let mut out = std::io::stdout();
    let result = if cfg.server {
        rping::run_server(&cfg, &mut out)
    } else {
        rping::run_client(&cfg, &mut out)
    };
    match result {
        Ok(n) => {
            if cfg.debug {
                eprintln!("{} iterations", n);
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!(
                "rping {} failed: {}",
                if cfg.server { "server" } else { "client" },
                apps::report::error_chain(&e)
            );
            ExitCode::FAILURE
        }
    }
}
