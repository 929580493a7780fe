//! The qemu guest for hosts whose kernel cannot do rxe: Debian's stock kernel (downloaded and
//! unpacked, never installed), an initramfs with our init (`xtask/guest/init.sh`), the workspace
//! and the host's `/usr` shared over 9p at the same paths, rxe (or siw, built for the kernel:
//! `siw.rs`) brought up inside.
//!
//! Everything is cached under `target/xtask/guest/`.
use std::collections::{BTreeMap, VecDeque};
use std::fs;
use std::io::{BufRead, BufReader, Read};
use std::os::unix::process::ExitStatusExt;
use std::process::{Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::util::{self, Context, Error, Result};

mod cpio;
mod image;
mod siw;

use image::cache_dir;
pub use image::prepare;

/// Guest memory: room for what a test process registers and holds (the largest message test
/// keeps 64 MiB at both ends, beside pools of up to 256 MiB) with margin; the two guests of
/// `cargo xtask test` take twice this at once.
const GUEST_MEMORY: &str = "4G";

/// The software RDMA device the guest brings up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Device {
    /// Soft-RoCE (`rdma_rxe`, in Debian's kernel): RoCE v2, devices rxe0 and rxe1.
    Rxe,
    /// Soft-iWARP (`siw`, built for the kernel, see `siw.rs`): iWARP over TCP, devices siw0
    /// and siw1.
    Siw,
}

impl Device {
    /// The link type `rdma link add` takes, which also names the devices.
    pub fn name(self) -> &'static str {
        match self {
            Device::Rxe => "rxe",
            Device::Siw => "siw",
        }
    }

    /// `rxe` or `siw`, as `--device` takes it.
    pub fn parse(s: &str) -> Result<Device> {
        match s {
            "rxe" => Ok(Device::Rxe),
            "siw" => Ok(Device::Siw),
            other => Err(Error::new(format!(
                "unknown device {other:?}: rxe (Soft-RoCE) or siw (Soft-iWARP)"
            ))),
        }
    }
}

/// What to run in the guest.
pub struct Options<'a> {
    /// Two "hosts": a veth pair with one rxe device on each end (both in the initial network
    /// namespace, where Debian 12's rxe receives RoCE). Otherwise one rxe device on a dummy
    /// netdev.
    pub two_hosts: bool,
    /// The device brought up (on each host).
    pub device: Device,
    /// Limit for the whole guest, boot included.
    pub timeout: Duration,
    /// sh script run in the guest with the `RDMA_TEST_*` environment set; its status is the
    /// guest's.
    pub script: String,
    /// Receives each line the script prints (stdout and stderr), as it comes.
    pub on_line: &'a mut dyn FnMut(&str),
    /// Runs the guest at a slightly lower CPU priority (`nice -n 3`, about half the weight):
    /// beside another guest, the one whose device tolerates starvation least gets more of the
    /// cores when both want them. Slightly: beside other load (`nice -n 10` left the rxe guest
    /// a tenth of a core beside two busy loops) it must still get its share.
    pub yields_cpu: bool,
}

/// How a guest run ended.
#[derive(Debug)]
pub struct Outcome {
    /// The script's exit status.
    pub status: ExitStatus,
    /// What the guest reported: `RDMA_TEST_*` variables, `kernel`, `uptime` (boot time).
    pub env: BTreeMap<String, String>,
    /// Wall time, boot included.
    pub elapsed: Duration,
    pub two_hosts: bool,
    pub device: Device,
}

impl Outcome {
    pub fn describe(&self) -> String {
        match self.status.code() {
            Some(0) => "command succeeded".into(),
            Some(c) => format!("command failed with exit status {c}"),
            None => format!("command ended by {}", self.status),
        }
    }

    /// E.g. `rxe0 (rxe in qemu guest, Debian kernel 6.1.0-xx-amd64, two hosts: ...)`.
    pub fn device(&self) -> String {
        let get = |k: &str| self.env.get(k).map_or("?", String::as_str);
        let mut s = format!(
            "{} ({} in qemu guest, Debian kernel {}",
            get("RDMA_TEST_DEVICE"),
            self.device.name(),
            get("kernel")
        );
        if self.two_hosts {
            // The devices of the two-hosts guest (see init.sh).
            let d = self.device.name();
            s.push_str(&format!(
                ", two hosts: {d}0 on veth-a 10.77.0.1 <-> {d}1 on veth-b 10.77.0.2"
            ));
        }
        s.push(')');
        s
    }
}

enum Msg {
    Out(String),
    Err(String),
    Eof,
}

/// Boots the guest, runs `opts.script` in it and returns its status. Output of the script goes
/// to `opts.on_line`; boot noise is held back (a failure quotes its last line;
/// `XTASK_GUEST_VERBOSE=1` shows it all).
pub fn run(opts: &mut Options<'_>) -> Result<Outcome> {
    let prep = prepare(opts.device)?;
    if !util::have("qemu-system-x86_64") {
        return Err(Error::new(
            "no qemu-system-x86_64 (package qemu-system-x86)",
        ));
    }
    let ws = util::workspace_root();
    let ws_str = ws
        .to_str()
        .filter(|s| !s.chars().any(char::is_whitespace))
        .ok_or_else(|| {
            Error::new(format!(
                "workspace path {} must be UTF-8 without spaces",
                ws.display()
            ))
        })?;
    let runs = cache_dir().join("runs");
    if !runs.starts_with(&ws) {
        return Err(Error::new(format!(
            "the target directory {} must be inside the workspace {ws_str} (it is shared with the guest)",
            util::target_dir().display()
        )));
    }
    // One per guest: a process may run two at once (the test tiers).
    let run_dir = runs.join(format!("{}-{}", std::process::id(), opts.device.name()));
    fs::create_dir_all(&run_dir)?;
    let script = run_dir.join("cmd.sh");
    let rc_file = run_dir.join("rc");
    let _ = fs::remove_file(&rc_file);
    // The command starts where we are when that is on the share (the workspace), as on the host.
    let cwd = std::env::current_dir()
        .ok()
        .filter(|d| d.starts_with(&ws))
        .unwrap_or_else(|| ws.clone());
    fs::write(
        &script,
        format!(
            "#!/bb/sh\ncd {} || exit 126\n{}",
            util::shell_quote(&cwd.to_string_lossy()),
            opts.script
        ),
    )?;

    let mut append = format!(
        "console=ttyS0 quiet loglevel=1 panic=-1 tsc=reliable clocksource=tsc xtask.ws={ws_str} xtask.run={} xtask.rc={} xtask.hosts={} xtask.device={}",
        script.display(),
        rc_file.display(),
        if opts.two_hosts { 2 } else { 1 },
        opts.device.name()
    );
    if let Some(b) = std::env::var("XTASK_GUEST_BREAK")
        .ok()
        .filter(|b| !b.is_empty())
    {
        append.push_str(&format!(" xtask.break={b}"));
    }
    let verbose = std::env::var_os("XTASK_GUEST_VERBOSE").is_some_and(|v| !v.is_empty());

    let mut cmd = if opts.yields_cpu {
        let mut nice = Command::new("nice");
        nice.args(["-n", "3", "qemu-system-x86_64"]);
        nice
    } else {
        Command::new("qemu-system-x86_64")
    };
    cmd.args(["-machine", "q35", "-m", GUEST_MEMORY, "-smp", "2"])
        .args(["-accel", "tcg,thread=multi", "-cpu", "qemu64"])
        .args(["-nographic", "-no-reboot", "-nic", "none"])
        .arg("-kernel")
        .arg(&prep.vmlinux)
        .arg("-initrd")
        .arg(&prep.initramfs)
        .args(["-append", &append])
        .args(["-device", "isa-debug-exit,iobase=0xf4,iosize=0x04"])
        .arg("-virtfs")
        .arg(format!(
            "local,path={ws_str},mount_tag=ws,security_model=none,id=ws"
        ))
        .arg("-virtfs")
        .arg("local,path=/usr,mount_tag=hostusr,security_model=none,readonly=on,id=hostusr")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let started = Instant::now();
    let mut child = cmd.spawn().context("cannot start qemu-system-x86_64")?;
    let (tx, rx) = mpsc::channel();
    let stdout = child.stdout.take().expect("piped stdout");
    let stderr = child.stderr.take().expect("piped stderr");
    let tx2 = tx.clone();
    std::thread::spawn(move || pump(stdout, &tx, Msg::Out));
    std::thread::spawn(move || pump(stderr, &tx2, Msg::Err));

    let mut env = BTreeMap::new();
    let mut recent: VecDeque<String> = VecDeque::new();
    let mut qemu_err = String::new();
    let mut cause: Option<String> = None;
    let mut rc: Option<i32> = None;
    let mut running = false;
    let mut open_streams = 2;
    let deadline = started + opts.timeout;
    while open_streams > 0 {
        let left = deadline.saturating_duration_since(Instant::now());
        let msg = match rx.recv_timeout(left) {
            Ok(m) => m,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                let _ = child.kill();
                let _ = child.wait();
                let _ = fs::remove_dir_all(&run_dir);
                let last = recent.back().cloned().unwrap_or_else(|| "none".into());
                return Err(Error::new(format!(
                    "guest timed out after {} s (last output: {last})",
                    opts.timeout.as_secs()
                )));
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        };
        let line = match msg {
            Msg::Eof => {
                open_streams -= 1;
                continue;
            }
            Msg::Err(l) => {
                qemu_err.push_str(&l);
                qemu_err.push('\n');
                continue;
            }
            Msg::Out(l) => l,
        };
        if verbose {
            eprintln!("guest| {line}");
        }
        // The command's last line may lack its newline: the marker then ends that line.
        if let Some(at) = line.find("XTASK-END ").filter(|_| running || rc.is_none()) {
            if running && at > 0 {
                (opts.on_line)(&line[..at]);
            }
            rc = line[at + "XTASK-END ".len()..].trim().parse().ok();
            running = false;
        } else if running {
            (opts.on_line)(&line);
        } else if line == "XTASK-BEGIN" {
            running = true;
        } else if let Some(c) = line.strip_prefix("XTASK-ERROR ") {
            cause = Some(c.to_owned());
        } else if let Some(kv) = line.strip_prefix("XTASK-ENV ") {
            if let Some((k, v)) = kv.split_once('=') {
                env.insert(k.to_owned(), v.to_owned());
            }
        } else if let Some(note) = line.strip_prefix("XTASK-NOTE ") {
            eprintln!("guest: {note}");
        }
        if !line.trim().is_empty() && !line.starts_with("XTASK-") {
            recent.push_back(line);
            if recent.len() > 20 {
                recent.pop_front();
            }
        }
    }
    let qemu_status = wait_bounded(&mut child, Duration::from_secs(10));
    let elapsed = started.elapsed();
    let rc = rc.or_else(|| fs::read_to_string(&rc_file).ok()?.trim().parse().ok());
    let _ = fs::remove_dir_all(&run_dir);
    if let Some(c) = cause {
        return Err(Error::new(format!("guest: {c}")));
    }
    match rc {
        Some(code) => Ok(Outcome {
            status: ExitStatus::from_raw((code & 0xff) << 8),
            env,
            elapsed,
            two_hosts: opts.two_hosts,
            device: opts.device,
        }),
        None => {
            let why = qemu_err
                .lines()
                .rev()
                .find(|l| !l.trim().is_empty())
                .map(str::to_owned)
                .or_else(|| recent.back().cloned())
                .unwrap_or_else(|| "no output".into());
            Err(Error::new(format!(
                "guest ended without a result (qemu {}; last output: {why})",
                qemu_status.map_or("did not exit".into(), |s| s.to_string())
            )))
        }
    }
}

/// Forwards the lines of a stream (serial console: `\r\n` endings) as messages.
fn pump(r: impl Read, tx: &mpsc::Sender<Msg>, wrap: fn(String) -> Msg) {
    let mut r = BufReader::new(r);
    let mut buf = Vec::new();
    loop {
        buf.clear();
        match r.read_until(b'\n', &mut buf) {
            Ok(0) | Err(_) => break,
            Ok(_) => {
                let s = String::from_utf8_lossy(&buf);
                let s = s.trim_end_matches(['\n', '\r']).replace('\r', "");
                if tx.send(wrap(s)).is_err() {
                    return;
                }
            }
        }
    }
    let _ = tx.send(Msg::Eof);
}

fn wait_bounded(child: &mut std::process::Child, limit: Duration) -> Option<ExitStatus> {
    let end = Instant::now() + limit;
    loop {
        if let Ok(Some(st)) = child.try_wait() {
            return Some(st);
        }
        if Instant::now() >= end {
            let _ = child.kill();
            return child.wait().ok();
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_device_is_rxe_or_siw_and_anything_else_is_refused_naming_both() {
        assert_eq!(Device::parse("rxe").unwrap(), Device::Rxe);
        assert_eq!(Device::parse("siw").unwrap(), Device::Siw);
        let e = Device::parse("mlx5").unwrap_err().to_string();
        assert!(
            e.contains("\"mlx5\"") && e.contains("rxe") && e.contains("siw"),
            "{e}"
        );
        assert_eq!(Device::Siw.name(), "siw");
    }
}
