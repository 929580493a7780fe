//! `cargo xtask bench [NAME...]`: benchmarks on a real RDMA device, from the same ladder as the
//! device tests (a device that exists -> rxe on this host -> the qemu guest, one boot for all).
//! Each benchmark prints its own table, with the C baseline measured in the same run, and writes
//! JSON to `target/bench/<name>.json`.
use std::process::{Command, ExitCode};
use std::time::Duration;

use crate::test::{acquire, stream, Target};
use crate::util::{self, Error, Result};
use crate::{apt, guest};

/// A benchmark: a cargo bench target (`harness = false`) that takes `--bench` like libtest.
struct Bench {
    name: &'static str,
    package: &'static str,
    target: &'static str,
    /// Environment variable through which the benchmark takes its JSON output path.
    json_env: &'static str,
    about: &'static str,
}

const BENCHES: &[Bench] = &[Bench {
    name: "memory",
    package: "memory",
    target: "registration",
    json_env: "MEMORY_BENCH_JSON",
    about: "pool alloc+free vs ibv_reg_mr+ibv_dereg_mr, 64 B / 4 KiB / 1 MiB, 1 and 2 threads",
}];

fn usage() -> String {
    let mut s = String::from("usage: cargo xtask bench [NAME...]   (all when none is named)\n");
    for b in BENCHES {
        s.push_str(&format!("  {:<10} {}\n", b.name, b.about));
    }
    s
}

pub fn main(args: &[String]) -> Result<ExitCode> {
    let mut chosen: Vec<&Bench> = Vec::new();
    for a in args {
        if a == "--help" || a == "-h" {
            print!("{}", usage());
            return Ok(ExitCode::SUCCESS);
        }
        let b = BENCHES
            .iter()
            .find(|b| b.name == a)
            .ok_or_else(|| Error::new(format!("unknown benchmark {a:?}\n{}", usage())))?;
        chosen.push(b);
    }
    if chosen.is_empty() {
        chosen = BENCHES.iter().collect();
    }
    apt::ensure(apt::BASE)?;

    // Build every chosen benchmark on the host first; the device runs only what was built.
    let mut runs: Vec<(&Bench, util::Executable)> = Vec::new();
    for b in &chosen {
        let mut cmd = util::cargo();
        cmd.args(["bench", "-p", b.package, "--bench", b.target, "--no-run"]);
        let what = format!("cargo bench -p {} --bench {} --no-run", b.package, b.target);
        let exe = util::built_executables(cmd, &what, |msg| {
            msg["target"]["name"] == b.target
                && msg["target"]["kind"]
                    .as_array()
                    .is_some_and(|k| k.iter().any(|k| k == "bench"))
        })?
        .into_iter()
        .next()
        .ok_or_else(|| Error::new(format!("`{what}` built no executable")))?;
        runs.push((b, exe));
    }
    let out_dir = util::target_dir().join("bench");
    std::fs::create_dir_all(&out_dir)?;
    let json = |b: &Bench| out_dir.join(format!("{}.json", b.name));

    let mut all_ok = true;
    let device_line = match acquire()? {
        Target::Host(dev, origin) => {
            for (b, e) in &runs {
                eprintln!("xtask: bench {} on {}", b.name, dev.name);
                let mut cmd = Command::new(&e.exe);
                cmd.arg("--bench")
                    .current_dir(&e.dir)
                    .env("RDMA_TEST_DEVICE", &dev.name)
                    .env("RDMA_TEST_GID_INDEX", dev.gid_index.to_string())
                    .env("RDMA_TEST_ADDR", dev.addr.to_string())
                    .env(b.json_env, json(b));
                all_ok &= stream(cmd, &mut |line| println!("{line}"))?;
            }
            format!("device: {} ({origin})", dev.name)
        }
        Target::Guest => {
            let mut script = String::from("fail=0\n");
            for (b, e) in &runs {
                script.push_str(&format!(
                    "echo 'xtask: bench {name}'\n(cd {dir} && {env}={json} exec {exe} --bench) || fail=1\n",
                    name = b.name,
                    dir = util::shell_quote(&e.dir.to_string_lossy()),
                    env = b.json_env,
                    json = util::shell_quote(&json(b).to_string_lossy()),
                    exe = util::shell_quote(&e.exe.to_string_lossy()),
                ));
            }
            script.push_str("exit $fail\n");
            let outcome = guest::run(&mut guest::Options {
                two_hosts: true,
                timeout: Duration::from_secs(1800),
                script,
                on_line: &mut |line: &str| println!("{line}"),
            })?;
            all_ok &= outcome.status.success();
            format!("device: {}", outcome.device())
        }
    };
    println!("{device_line}");
    for (b, _) in &runs {
        println!("bench {}: JSON in {}", b.name, json(b).display());
    }
    if all_ok {
        Ok(ExitCode::SUCCESS)
    } else {
        Err(Error::new("a benchmark failed (see above)"))
    }
}
