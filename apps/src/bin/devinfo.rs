//! `devinfo`: RDMA devices, ports and GIDs as our verbs layer sees them (like `ibv_devinfo`);
//! `--counters`: each port's counters (like `rdma statistic show link`).
#![forbid(unsafe_code)]

use clap::Parser;

fn main() -> std::process::ExitCode {
    apps::init_tracing();
    let args = apps::devinfo::Args::parse();
    match apps::devinfo::render(&args) {
        Ok(text) => {
            print!("{text}");
            std::process::ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("devinfo: error: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
