//! Support for device-tier tests: the RDMA device (and two-host peer) that `cargo xtask test`
//! provides through the environment, capability skips, and child processes that cannot hang.
//!
//! The environment contract (set by the xtask; set it by hand to use a device of your own):
//!
//! | variable | meaning |
//! |---|---|
//! | `RDMA_TEST_DEVICE` | device name, e.g. `rxe0` |
//! | `RDMA_TEST_GID_INDEX` | index of the device's RoCE v2 IPv4-mapped GID |
//! | `RDMA_TEST_ADDR` | IPv4 address of the device's netdev |
//! | `RDMA_TEST_PEER_DEVICE`, `RDMA_TEST_PEER_GID_INDEX`, `RDMA_TEST_PEER_ADDR` | the same for the other "host" |
//! | `RDMA_TEST_PEER_EXEC` | command prefix that runs a program on the other host (e.g. `ip netns exec rdma-b`); empty or unset when the peer is this host (as in the rxe guest, whose two devices share one network namespace) |
//! | `RDMA_TEST_SKIP_LOG` | file to which skipped tests append a line |
//!
//! A device test never passes vacuously: when the environment names no device, [`device`] panics
//! with a message saying how to get one.
#![forbid(unsafe_code)]

#[cfg(feature = "tracing")]
pub mod tracing_capture;

use std::fs::OpenOptions;
use std::io::Write;
use std::net::Ipv4Addr;
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::time::{Duration, Instant};

/// How to get a device, printed when none is configured.
pub const NO_DEVICE_HINT: &str =
    "no RDMA test device: run device tests with `cargo xtask test` (or set RDMA_TEST_DEVICE, RDMA_TEST_GID_INDEX, RDMA_TEST_ADDR)";

/// One RDMA device as the tests see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TestDevice {
    /// Device name (`ibv_get_device_name`), e.g. `rxe0`.
    pub name: String,
    /// GID index of the device's RoCE v2 IPv4-mapped GID.
    pub gid_index: u8,
    /// IPv4 address of the netdev under the device.
    pub addr: Ipv4Addr,
}

impl TestDevice {
    /// The network interface holding the device's address (`RDMA_TEST_ADDR`): the netdev
    /// under the device, found the same way for RoCE and iWARP (from `ip -o -4 addr`).
    /// Panics when no interface holds it.
    pub fn netdev(&self) -> String {
        let out = Command::new("ip")
            .args(["-o", "-4", "addr", "show"])
            .output()
            .unwrap_or_else(|e| panic!("ip -o -4 addr show: {e}"));
        let text = String::from_utf8_lossy(&out.stdout);
        let want = format!("{}/", self.addr);
        text.lines()
            .find_map(|line| {
                let mut words = line.split_whitespace();
                let name = words.nth(1)?;
                words
                    .any(|w| w.starts_with(&want))
                    .then(|| name.trim_end_matches(':').to_owned())
            })
            .unwrap_or_else(|| {
                panic!(
                    "no interface holds {} (device {}):\n{text}",
                    self.addr, self.name
                )
            })
    }
}

/// The other "host" of two-host tests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TestPeer {
    /// The peer's device, as seen from the peer's host.
    pub device: TestDevice,
    /// Command prefix that runs a program on the peer's host; empty when it is this host.
    pub exec_prefix: Vec<String>,
}

fn var(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

fn device_from(prefix: &str) -> Option<TestDevice> {
    let name = var(&format!("{prefix}DEVICE"))?;
    let gid_index = var(&format!("{prefix}GID_INDEX"))
        .map(|v| {
            v.parse()
                .unwrap_or_else(|_| panic!("{prefix}GID_INDEX={v:?} is not a number"))
        })
        .unwrap_or(0);
    let addr = var(&format!("{prefix}ADDR"))
        .map(|v| {
            v.parse()
                .unwrap_or_else(|_| panic!("{prefix}ADDR={v:?} is not an IPv4 address"))
        })
        .unwrap_or(Ipv4Addr::LOCALHOST);
    Some(TestDevice {
        name,
        gid_index,
        addr,
    })
}

/// The device under test. Panics (failing the test) when none is configured.
pub fn device() -> TestDevice {
    device_from("RDMA_TEST_").unwrap_or_else(|| panic!("{NO_DEVICE_HINT}"))
}

/// The peer host for two-host tests. Without a configured peer, the peer is this host and its
/// device (loopback), so the same test still exercises a real device.
pub fn peer() -> TestPeer {
    match device_from("RDMA_TEST_PEER_") {
        Some(device) => TestPeer {
            device,
            exec_prefix: var("RDMA_TEST_PEER_EXEC")
                .map(|p| p.split_whitespace().map(str::to_owned).collect())
                .unwrap_or_default(),
        },
        None => TestPeer {
            device: device(),
            exec_prefix: Vec::new(),
        },
    }
}

impl TestPeer {
    /// Whether the peer is a separate host (network namespace) rather than this one.
    pub fn is_remote(&self) -> bool {
        !self.exec_prefix.is_empty()
    }

    /// A command that runs `program` on the peer's host.
    pub fn command(&self, program: &str) -> Command {
        match self.exec_prefix.split_first() {
            None => Command::new(program),
            Some((first, rest)) => {
                let mut cmd = Command::new(first);
                cmd.args(rest).arg(program);
                cmd
            }
        }
    }
}

/// Records that `test` was skipped because the device lacks a capability, and says so on stderr.
/// `cargo xtask test` counts these lines in its summary. Skip only for a capability the device
/// truly lacks (the verb returned EOPNOTSUPP), never for a missing device.
pub fn skip(test: &str, reason: &str) {
    eprintln!("SKIPPED {test}: {reason}");
    log_skip(&format!("{test}: {reason}"));
}

/// Appends `line` to the skip log `cargo xtask test` reads (`RDMA_TEST_SKIP_LOG`), if set.
fn log_skip(line: &str) {
    if let Some(path) = var("RDMA_TEST_SKIP_LOG") {
        if let Ok(mut f) = OpenOptions::new().create(true).append(true).open(path) {
            let _ = writeln!(f, "{line}");
        }
    }
}

/// Records that the running test skipped `part` of itself because the device lacks a
/// capability, and says so on stderr; the rest of the test runs and decides its outcome.
/// `cargo xtask test` counts such tests as "partly skipped". The test is named by its thread
/// (libtest names each test's thread after it).
pub fn skip_part(part: &str, reason: &str) {
    let thread = std::thread::current();
    let test = thread.name().unwrap_or("a test");
    eprintln!("SKIPPED {part} (in {test}): {reason}");
    log_skip(&format!("part of {test}: {part}: {reason}"));
}

/// Skips `test` when the device lacks what it needs, and returns whether it did. `has` is the
/// device's own answer, e.g. `verbs::Capabilities::require`: `Err(reason)` when the device
/// reports that it lacks the capability (its transport or attributes say so), never a guess
/// from its name. Use as `if testkit::skip_unless(TEST, caps.require(..)) { return; }`.
pub fn skip_unless<E: std::fmt::Display>(test: &str, has: Result<(), E>) -> bool {
    match has {
        Ok(()) => false,
        Err(reason) => {
            skip(test, &reason.to_string());
            true
        }
    }
}

/// The path of the function it is called in (e.g. `it::rc::rdma_read`), for
/// [`skip`] and [`skip_unless`].
#[macro_export]
macro_rules! test_name {
    () => {{
        fn f() {}
        fn name_of<T>(_: T) -> &'static str {
            ::std::any::type_name::<T>()
        }
        let name = name_of(f);
        name.strip_suffix("::f").unwrap_or(name)
    }};
}

/// A child process that is killed (and reaped) when dropped, so a failing test never leaves a
/// peer program behind.
#[derive(Debug)]
pub struct ChildGuard {
    child: Option<Child>,
    what: String,
}

impl ChildGuard {
    /// Spawns `cmd` with stdout and stderr captured.
    pub fn spawn(mut cmd: Command) -> std::io::Result<Self> {
        let what = format!("{cmd:?}");
        let child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()?;
        Ok(Self {
            child: Some(child),
            what,
        })
    }

    /// Process id of the child.
    pub fn id(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    /// Takes the child's standard output, to read it line by line while it runs (e.g. to
    /// wait for a peer to say it is ready).
    pub fn take_stdout(&mut self) -> Option<std::process::ChildStdout> {
        self.child.as_mut().and_then(|c| c.stdout.take())
    }

    /// Kills the child now (e.g. to simulate a peer that dies mid-connection).
    pub fn kill(&mut self) {
        if let Some(child) = self.child.as_mut() {
            let _ = child.kill();
        }
    }

    /// Waits up to `timeout` for the child to exit and returns its output. Panics (failing the
    /// test) on timeout, after killing the child and including what it printed.
    pub fn wait_output(mut self, timeout: Duration) -> Output {
        let mut child = self.child.take().expect("child already taken");
        let deadline = Instant::now() + timeout;
        loop {
            match child.try_wait().expect("try_wait") {
                Some(_) => return child.wait_with_output().expect("wait_with_output"),
                None if Instant::now() >= deadline => {
                    let _ = child.kill();
                    let out = child.wait_with_output().expect("wait_with_output");
                    panic!(
                        "{} did not exit within {timeout:?}\nstdout:\n{}\nstderr:\n{}",
                        self.what,
                        String::from_utf8_lossy(&out.stdout),
                        String::from_utf8_lossy(&out.stderr)
                    );
                }
                None => std::thread::sleep(Duration::from_millis(20)),
            }
        }
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Where a bench writes its JSON: `$<env>` if set and not empty, else
/// `<target dir>/bench/<file>`, the target directory found from the running executable
/// (`<target>/<profile>/deps/<bench>-<hash>`), or `target/` when it is not there.
pub fn bench_json_path(env: &str, file: &str) -> std::path::PathBuf {
    use std::path::PathBuf;
    if let Some(path) = std::env::var_os(env).filter(|p| !p.is_empty()) {
        return path.into();
    }
    let target = std::env::current_exe().ok().and_then(|exe| {
        let deps = exe.parent()?;
        (deps.file_name()? == "deps").then(|| deps.parent()?.parent().map(PathBuf::from))?
    });
    target
        .unwrap_or_else(|| PathBuf::from("target"))
        .join("bench")
        .join(file)
}

/// While alive, a panic on this thread prints its message only, without a backtrace: for a
/// test whose panic is expected (`#[should_panic]`), since symbolizing a backtrace of an
/// unoptimized binary takes seconds under emulation. The first one installs, once for the
/// process, a hook that does so for the threads holding one and calls the default hook for
/// every other panic, so later failures still show their backtraces. (The hook itself cannot
/// be swapped back while the panic unwinds.)
#[derive(Debug)]
pub struct QuietPanics(());

thread_local! {
    static QUIET: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

impl QuietPanics {
    /// Makes this thread's panics quiet until the guard drops.
    #[allow(clippy::new_without_default)]
    pub fn new() -> QuietPanics {
        static HOOK: std::sync::Once = std::sync::Once::new();
        HOOK.call_once(|| {
            let default = std::panic::take_hook();
            std::panic::set_hook(Box::new(move |info| {
                if QUIET.with(|q| q.get()) {
                    eprintln!("{info}");
                } else {
                    default(info);
                }
            }));
        });
        QUIET.with(|q| q.set(true));
        QuietPanics(())
    }
}

impl Drop for QuietPanics {
    fn drop(&mut self) {
        QUIET.with(|q| q.set(false));
    }
}

/// Runs `cmd` to completion within `timeout` (killing it otherwise) and returns its output.
pub fn run_with_timeout(cmd: Command, timeout: Duration) -> Output {
    ChildGuard::spawn(cmd)
        .unwrap_or_else(|e| panic!("cannot start command: {e}"))
        .wait_output(timeout)
}

/// Asserts that an [`Output`] shows success, printing both streams otherwise.
pub fn assert_success(what: &str, out: &Output) {
    assert!(
        out.status.success(),
        "{what} failed with {}\nstdout:\n{}\nstderr:\n{}",
        describe(out.status),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn describe(status: ExitStatus) -> String {
    match status.code() {
        Some(code) => format!("exit status {code}"),
        None => format!("{status}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peer_command_uses_prefix() {
        let peer = TestPeer {
            device: TestDevice {
                name: "rxe1".into(),
                gid_index: 1,
                addr: Ipv4Addr::new(10, 0, 0, 2),
            },
            exec_prefix: vec!["ip".into(), "netns".into(), "exec".into(), "b".into()],
        };
        let cmd = peer.command("rping");
        assert_eq!(cmd.get_program(), "ip");
        let args: Vec<_> = cmd.get_args().collect();
        assert_eq!(args, ["netns", "exec", "b", "rping"]);
        assert!(peer.is_remote());
    }

    #[test]
    fn timeout_kills_a_hanging_child() {
        let started = Instant::now();
        let result = std::panic::catch_unwind(|| {
            let mut cmd = Command::new("sleep");
            cmd.arg("30");
            run_with_timeout(cmd, Duration::from_millis(200))
        });
        assert!(result.is_err(), "a hanging child must fail the wait");
        assert!(started.elapsed() < Duration::from_secs(10));
    }
}
