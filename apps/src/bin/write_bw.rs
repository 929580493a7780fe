//! `write-bw`: perftest's `ib_write_bw` on our verbs layer, compatible with it in either role.
#![forbid(unsafe_code)]

fn main() -> std::process::ExitCode {
    apps::init_tracing();
    apps::perftest::main(apps::perftest::Test::WriteBw)
}
