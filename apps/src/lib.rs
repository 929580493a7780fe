//! Reusable pieces of the reference programs.
#![forbid(unsafe_code)]

pub mod devinfo;
pub mod echo;
pub mod live_stats;
pub mod perftest;
pub mod pingpong;
pub mod report;
pub mod rping;

/// Installs the programs' `tracing` subscriber: the events of the RDMA crates (targets `verbs`,
/// `cm`, `memory`, `transport`) as lines on stderr, filtered by `RUST_LOG` as tokio programs
/// do (`RUST_LOG=cm=debug`, `RUST_LOG=warn,transport=debug`, ...). Without `RUST_LOG` nothing
/// is shown, so a program's output is what it is without tracing. Call it first in `main`.
pub fn init_tracing() {
    use std::io::IsTerminal as _;
    use tracing_subscriber::filter::{EnvFilter, LevelFilter};
    let filter = EnvFilter::builder()
        .with_default_directive(LevelFilter::OFF.into())
        .from_env_lossy();
    // A second call (or another subscriber installed first) keeps the first.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .try_init();
}
