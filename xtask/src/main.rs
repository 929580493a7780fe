//! `cargo xtask`: the project's tasks (tests and benchmarks on a real RDMA device, the rxe
//! guest, the demo).
#![forbid(unsafe_code)]

mod apt;
mod bench;
mod chart;
mod compare;
mod cost_bench;
mod demo;
mod faults;
mod guest;
mod perftest_bench;
mod pingpong_bench;
mod progress;
mod rxe;
mod test;
mod util;

use std::process::ExitCode;
use std::time::Duration;

use util::{Error, Result};

const USAGE: &str = "\
usage: cargo xtask <task>

  test [--device rxe|siw] [--timeout S] [-p CRATE]... [FILTER]
                                        host-tier tests, then device-tier tests on a real RDMA
                                        device (existing device -> host rxe -> qemu guest, on
                                        rxe and then siw; --device: only that one);
                                        -p: only these crates' tests (repeatable; by folder
                                        or package name: transport or rdma-transport)
  bench [NAME...]                       benchmarks on a real RDMA device, beside the C baseline
  chart [NAME...]                       a benchmark's chart again from its last run's JSON
                                        (target/bench/NAME.json -> NAME.svg), running nothing
  demo                                  bring up a device and run the reference programs
  faults [--device rxe|siw]             the transport's fault suite on a real device (in the
                                        guest: rxe unless named): one table and
                                        target/faults/report.json
  guest [--two-hosts] [--device rxe|siw] [--timeout S] -- CMD...
                                        run CMD in a qemu guest with rxe (or siw) up
                                        (Debian kernel)
  rxe up|down|status                    Soft-RoCE on this host (kernel with rdma_rxe, root)
";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match run(&args) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: &[String]) -> Result<ExitCode> {
    let Some((task, rest)) = args.split_first() else {
        eprint!("{USAGE}");
        return Ok(ExitCode::from(2));
    };
    match task.as_str() {
        "test" => test::main(rest),
        "bench" => bench::main(rest),
        "chart" => bench::chart_main(rest),
        "demo" => demo::main(rest),
        "faults" => faults::main(rest),
        "guest" => guest_main(rest),
        "rxe" => rxe::main(rest),
        "help" | "--help" | "-h" => {
            print!("{USAGE}");
            Ok(ExitCode::SUCCESS)
        }
        other => Err(Error::new(format!("unknown task {other:?}\n{USAGE}"))),
    }
}

/// `cargo xtask guest [--two-hosts] [--device rxe|siw] [--timeout S] -- CMD...`
fn guest_main(args: &[String]) -> Result<ExitCode> {
    let mut two_hosts = false;
    let mut device = guest::Device::Rxe;
    let mut timeout = Duration::from_secs(600);
    let mut it = args.iter();
    let mut cmd = Vec::new();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--two-hosts" => two_hosts = true,
            "--device" => {
                let v = it
                    .next()
                    .ok_or_else(|| Error::new("--device needs rxe or siw"))?;
                device = guest::Device::parse(v)?;
            }
            "--timeout" => {
                let v = it
                    .next()
                    .ok_or_else(|| Error::new("--timeout needs a number of seconds"))?;
                timeout = Duration::from_secs(
                    v.parse()
                        .map_err(|_| Error::new(format!("--timeout {v:?} is not a number of seconds")))?,
                );
            }
            "--" => {
                cmd.extend(it.by_ref().cloned());
            }
            s if s.starts_with('-') && cmd.is_empty() => {
                return Err(Error::new(format!(
                    "unknown option {s:?}; usage: cargo xtask guest [--two-hosts] [--device rxe|siw] [--timeout S] -- CMD..."
                )))
            }
            _ => {
                cmd.push(a.clone());
                cmd.extend(it.by_ref().cloned());
            }
        }
    }
    if cmd.is_empty() {
        return Err(Error::new(
            "no command; usage: cargo xtask guest [--two-hosts] [--device rxe|siw] [--timeout S] -- CMD...",
        ));
    }
    apt::ensure(apt::BASE)?;
    let script = format!("exec {}\n", util::shell_words(&cmd));
    let outcome = guest::run(&mut guest::Options {
        two_hosts,
        device,
        timeout,
        script,
        on_line: &mut |line: &str| println!("{line}"),
        yields_cpu: false,
    })?;
    eprintln!(
        "guest: {} ({:.1} s)",
        outcome.describe(),
        outcome.elapsed.as_secs_f64()
    );
    Ok(util::exit_code(outcome.status))
}
