//! `write-lat`: perftest's `ib_write_lat` on our verbs layer, compatible with it in either role.
#![forbid(unsafe_code)]

fn main() -> std::process::ExitCode {
    apps::init_tracing();
    apps::perftest::main(apps::perftest::Test::WriteLat)
}
