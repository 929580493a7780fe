//! The qemu guest for hosts whose kernel cannot do rxe: Debian's stock kernel (downloaded and
//! unpacked, never installed), an initramfs with our init (`xtask/guest/init.sh`), the workspace
//! and the host's `/usr` shared over 9p at the same paths, rxe brought up inside.
//!
//! Everything is cached under `target/xtask/guest/`.
use std::collections::{BTreeMap, VecDeque};
use std::fs;
use std::io::{BufRead, BufReader, Read};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::apt;
use crate::cpio::Archive;
use crate::util::{self, Context, Error, Result};

/// Our init, a busybox sh script.
const INIT: &str = include_str!("../guest/init.sh");

/// Modules loaded in the guest, in this order (each after its dependencies). crc32_generic is
/// explicit: rxe asks the crypto layer for crc32 and the initramfs has no module autoload.
const MODULES: &[&str] = &[
    "virtio_pci",
    "9pnet_virtio",
    "9p",
    "virtio_net",
    "crc32_generic",
    "ib_core",
    "ib_uverbs",
    "rdma_rxe",
    "ib_cm",
    "iw_cm",
    "rdma_cm",
    "rdma_ucm",
    "ib_umad",
    "dummy",
    "veth",
];

/// Devices of the two-hosts guest (see init.sh).
pub const TWO_HOSTS: &str = "two hosts: rxe0 on veth-a 10.77.0.1 <-> rxe1 on veth-b 10.77.0.2";

/// What to run in the guest.
pub struct Options<'a> {
    /// Two network namespaces joined by a veth pair, one rxe device on each side; the command
    /// runs in the first (`rdma-a`). Otherwise one rxe device on a dummy netdev.
    pub two_hosts: bool,
    /// Limit for the whole guest, boot included.
    pub timeout: Duration,
    /// sh script run in the guest with the `RDMA_TEST_*` environment set; its status is the
    /// guest's.
    pub script: String,
    /// Receives each line the script prints (stdout and stderr), as it comes.
    pub on_line: &'a mut dyn FnMut(&str),
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
}

impl Outcome {
    pub fn describe(&self) -> String {
        match self.status.code() {
            Some(0) => "command succeeded".into(),
            Some(c) => format!("command failed with exit status {c}"),
            None => format!("command ended by {}", self.status),
        }
    }

    /// E.g. `rxe0 (rxe in qemu guest, Debian kernel 6.1.0-xx-amd64, two hosts rdma-a/rdma-b)`.
    pub fn device(&self) -> String {
        let get = |k: &str| self.env.get(k).map_or("?", String::as_str);
        let mut s = format!(
            "{} (rxe in qemu guest, Debian kernel {}",
            get("RDMA_TEST_DEVICE"),
            get("kernel")
        );
        if self.two_hosts {
            s.push_str(&format!(", {TWO_HOSTS}"));
        }
        s.push(')');
        s
    }
}

/// The prepared kernel and initramfs.
#[derive(Debug)]
pub struct Prepared {
    pub vmlinux: PathBuf,
    pub initramfs: PathBuf,
}

fn cache_dir() -> PathBuf {
    util::target_dir().join("xtask").join("guest")
}

/// Packages, kernel, vmlinux and initramfs, each done once and cached.
pub fn prepare() -> Result<Prepared> {
    apt::ensure(apt::GUEST)?;
    let cache = cache_dir();
    fs::create_dir_all(&cache).context(format_args!("cannot create {}", cache.display()))?;
    let kpkg = kernel_package()?;
    let kver = kpkg
        .strip_prefix("linux-image-")
        .unwrap_or(&kpkg)
        .to_owned();
    let kdir = cache.join("kernel").join(&kpkg);
    let vmlinuz = kdir.join("root/boot").join(format!("vmlinuz-{kver}"));
    if !vmlinuz.exists() {
        fetch_kernel(&cache, &kpkg, &kdir)?;
    }
    let root = kdir.join("root");
    if !root
        .join("lib/modules")
        .join(&kver)
        .join("modules.dep")
        .exists()
    {
        let mut cmd = Command::new("depmod");
        cmd.arg("-b").arg(&root).arg(&kver);
        util::output(cmd, "depmod")?;
    }
    let vmlinux = kdir.join("vmlinux");
    if !vmlinux.exists() {
        extract_vmlinux(&vmlinuz, &vmlinux)?;
    }
    let modules = module_closure(&root, &kver)?;
    let initramfs = build_initramfs(&cache, &kver, &modules)?;
    Ok(Prepared { vmlinux, initramfs })
}

/// The versioned package `linux-image-amd64` depends on (e.g. `linux-image-6.1.0-xx-amd64`).
fn kernel_package() -> Result<String> {
    let query = || -> Option<String> {
        let out = Command::new("apt-cache")
            .args(["depends", "linux-image-amd64"])
            .stderr(Stdio::null())
            .output()
            .ok()?;
        String::from_utf8_lossy(&out.stdout).lines().find_map(|l| {
            let dep = l.trim().strip_prefix("Depends:")?.trim();
            (dep.starts_with("linux-image-") && dep.ends_with("-amd64")).then(|| dep.to_owned())
        })
    };
    if !util::have("apt-cache") {
        return Err(Error::new(
            "no apt-cache: cannot find Debian's kernel package (linux-image-amd64)",
        ));
    }
    if let Some(p) = query() {
        return Ok(p);
    }
    apt::update()?;
    query().ok_or_else(|| {
        Error::new(
            "missing kernel package: apt knows no linux-image-amd64 (check /etc/apt/sources.list)",
        )
    })
}

/// `apt-get download` the kernel package and unpack it with `dpkg -x` (never installed).
fn fetch_kernel(cache: &Path, kpkg: &str, kdir: &Path) -> Result<()> {
    let debs = cache.join("debs");
    fs::create_dir_all(&debs)?;
    eprintln!("xtask: downloading Debian kernel {kpkg} (unpacked, not installed)");
    let download = || {
        let mut cmd = Command::new("apt-get");
        cmd.args(["download", "-q", kpkg]).current_dir(&debs);
        util::output(cmd, &format!("apt-get download {kpkg}"))
    };
    if let Err(e) = download() {
        if !util::is_root() {
            return Err(e);
        }
        apt::update()?;
        download().context("missing kernel package")?;
    }
    let deb = fs::read_dir(&debs)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(&format!("{kpkg}_")) && n.ends_with(".deb"))
        })
        .ok_or_else(|| {
            Error::new(format!(
                "missing kernel package: no {kpkg}_*.deb after apt-get download"
            ))
        })?;
    let tmp = kdir.with_extension(format!("tmp{}", std::process::id()));
    let _ = fs::remove_dir_all(&tmp);
    fs::create_dir_all(&tmp)?;
    let mut cmd = Command::new("dpkg");
    cmd.arg("-x").arg(&deb).arg(tmp.join("root"));
    util::output(cmd, "dpkg -x")?;
    let _ = fs::remove_dir_all(kdir);
    fs::rename(&tmp, kdir)?;
    Ok(())
}

/// The uncompressed ELF kernel: the xz payload of the bzImage. qemu boots it through the PVH
/// entry point, which skips the firmware's bzImage path and decompression under TCG.
fn extract_vmlinux(vmlinuz: &Path, vmlinux: &Path) -> Result<()> {
    let data = fs::read(vmlinuz).context(format_args!("cannot read {}", vmlinuz.display()))?;
    let start = data
        .windows(6)
        .position(|w| w == b"\xfd7zXZ\x00")
        .ok_or_else(|| Error::new(format!("{}: no xz payload", vmlinuz.display())))?;
    // One xz stream; the bytes after it belong to the bzImage, not to the payload.
    let mut stream = xz2::stream::Stream::new_stream_decoder(u64::MAX, 0)
        .context("cannot start an xz decoder")?;
    let mut input = &data[start..];
    let mut elf: Vec<u8> = Vec::with_capacity(input.len() * 5);
    loop {
        if elf.len() == elf.capacity() {
            elf.reserve(elf.capacity());
        }
        let before = stream.total_in();
        let status = stream
            .process_vec(input, &mut elf, xz2::stream::Action::Finish)
            .context(format_args!(
                "{}: cannot decompress the xz payload",
                vmlinuz.display()
            ))?;
        input = &input[(stream.total_in() - before) as usize..];
        if status == xz2::stream::Status::StreamEnd {
            break;
        }
    }
    if !elf.starts_with(b"\x7fELF") {
        return Err(Error::new(format!(
            "{}: payload is not an ELF image",
            vmlinuz.display()
        )));
    }
    let tmp = vmlinux.with_extension(format!("tmp{}", std::process::id()));
    fs::write(&tmp, &elf)?;
    fs::rename(&tmp, vmlinux)?;
    Ok(())
}

/// Module files to insmod, dependencies first, resolved with `modprobe --show-depends`.
fn module_closure(root: &Path, kver: &str) -> Result<Vec<PathBuf>> {
    let mut files: Vec<PathBuf> = Vec::new();
    for m in MODULES {
        let mut cmd = Command::new("modprobe");
        cmd.arg("-d")
            .arg(root)
            .args(["-S", kver, "--show-depends", m]);
        let out = util::output(cmd, &format!("modprobe --show-depends {m} (kernel {kver})"))?;
        for l in out.lines() {
            // "insmod PATH [options from the host's modprobe.d]": the options are the host's
            if let Some(f) = l
                .strip_prefix("insmod ")
                .and_then(|r| r.split_whitespace().next())
            {
                let f = PathBuf::from(f);
                if !files.contains(&f) {
                    files.push(f);
                }
            }
        }
    }
    Ok(files)
}

/// The initramfs: busybox in /bb (it survives the host-/usr mount), the modules, the files
/// /etc needs, and our init. Rebuilt when any input changes (its hash is in the file name).
fn build_initramfs(cache: &Path, kver: &str, modules: &[PathBuf]) -> Result<PathBuf> {
    let busybox = ["/bin/busybox", "/usr/bin/busybox"]
        .into_iter()
        .map(Path::new)
        .find(|p| p.exists())
        .ok_or_else(|| Error::new("no busybox (package busybox-static)"))?;
    let bb_meta = fs::metadata(busybox)?;
    let mut drivers: Vec<PathBuf> = fs::read_dir("/etc/libibverbs.d")
        .context("no /etc/libibverbs.d (package ibverbs-providers)")?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    drivers.sort();
    let mod_list: String = modules
        .iter()
        .map(|m| format!("{}\n", m.display()))
        .collect();
    let drv_list: String = drivers
        .iter()
        .map(|d| format!("{}\n", d.display()))
        .collect();
    let hash = util::fnv1a(&[
        INIT.as_bytes(),
        kver.as_bytes(),
        mod_list.as_bytes(),
        drv_list.as_bytes(),
        format!("{} {:?}", bb_meta.len(), bb_meta.modified().ok()).as_bytes(),
    ]);
    let out = cache.join(format!("initramfs-{kver}-{hash:016x}.cpio"));
    if out.exists() {
        return Ok(out);
    }
    let mut a = Archive::default();
    for d in [
        "bb",
        "etc",
        "etc/xtask",
        "etc/libibverbs.d",
        "proc",
        "sys",
        "dev",
        "tmp",
        "run",
        "root",
        "mnt",
        "modules",
        "usr",
        "usr/bin",
        "usr/sbin",
        "usr/lib",
        "usr/lib64",
    ] {
        a.dir(d);
    }
    // merged-/usr layout like Debian 12's, so the host's /usr mounted over /usr serves them all
    for (l, t) in [
        ("bin", "usr/bin"),
        ("sbin", "usr/sbin"),
        ("lib", "usr/lib"),
        ("lib64", "usr/lib64"),
    ] {
        a.symlink(l, t);
    }
    a.char_dev("dev/console", 0o600, 5, 1);
    a.file("bb/busybox", 0o755, &fs::read(busybox)?);
    let applets = util::output(
        {
            let mut c = Command::new(busybox);
            c.arg("--list");
            c
        },
        "busybox --list",
    )?;
    for applet in applets
        .lines()
        .map(str::trim)
        .filter(|a| !a.is_empty() && *a != "busybox")
    {
        a.symlink(&format!("bb/{applet}"), "busybox");
    }
    let mut order = String::new();
    for m in modules {
        let name = m
            .file_name()
            .and_then(|n| n.to_str())
            .ok_or_else(|| Error::new(format!("bad module path {}", m.display())))?;
        a.file(
            &format!("modules/{name}"),
            0o644,
            &fs::read(m).context(format_args!("cannot read {}", m.display()))?,
        );
        order.push_str(&format!("/modules/{name}\n"));
    }
    a.file("etc/xtask/modules", 0o644, order.as_bytes());
    for d in &drivers {
        if let Some(name) = d.file_name().and_then(|n| n.to_str()) {
            a.file(&format!("etc/libibverbs.d/{name}"), 0o644, &fs::read(d)?);
        }
    }
    a.file("etc/passwd", 0o644, b"root:x:0:0:root:/root:/bb/sh\n");
    a.file("etc/group", 0o644, b"root:x:0:\n");
    a.file("etc/hosts", 0o644, b"127.0.0.1 localhost\n");
    a.file("init", 0o755, INIT.as_bytes());
    // old initramfs images of this cache are stale now
    if let Ok(entries) = fs::read_dir(cache) {
        for e in entries.flatten() {
            let n = e.file_name();
            if n.to_string_lossy().starts_with("initramfs-") {
                let _ = fs::remove_file(e.path());
            }
        }
    }
    let tmp = out.with_extension(format!("tmp{}", std::process::id()));
    let mut f = fs::File::create(&tmp)?;
    a.finish(&mut f)?;
    drop(f);
    fs::rename(&tmp, &out)?;
    Ok(out)
}

enum Msg {
    Out(String),
    Err(String),
    Eof,
}

/// Boots the guest, runs `opts.script` in it and returns its status. Output of the script goes
/// to `opts.on_line`; boot noise is kept back and shown only when the guest fails.
pub fn run(opts: &mut Options<'_>) -> Result<Outcome> {
    let prep = prepare()?;
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
    let run_dir = runs.join(std::process::id().to_string());
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
        "console=ttyS0 quiet loglevel=1 panic=-1 xtask.ws={ws_str} xtask.run={} xtask.rc={} xtask.hosts={}",
        script.display(),
        rc_file.display(),
        if opts.two_hosts { 2 } else { 1 }
    );
    if let Some(b) = std::env::var("XTASK_GUEST_BREAK")
        .ok()
        .filter(|b| !b.is_empty())
    {
        append.push_str(&format!(" xtask.break={b}"));
    }
    let verbose = std::env::var_os("XTASK_GUEST_VERBOSE").is_some_and(|v| !v.is_empty());

    let mut cmd = Command::new("qemu-system-x86_64");
    cmd.args(["-machine", "q35", "-m", "2G", "-smp", "2"])
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
