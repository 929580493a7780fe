//! The guest's boot files, each made once and cached under `target/xtask/guest/`: Debian's
//! kernel (downloaded and unpacked, never installed), its uncompressed `vmlinux`, and the
//! initramfs with our init and the RDMA modules.
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use super::cpio::Archive;
use super::{siw, Device};
use crate::apt;
use crate::util::{self, Context, Error, Result};

/// Our init, a busybox sh script.
const INIT: &str = include_str!("../../guest/init.sh");

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
    // for network-tier tests: delay and loss on the veth pair (`tc qdisc ... netem`)
    "sch_netem",
];

/// The prepared kernel and initramfs.
#[derive(Debug)]
pub struct Prepared {
    pub vmlinux: PathBuf,
    pub initramfs: PathBuf,
}

/// `target/xtask/guest/`.
pub(super) fn cache_dir() -> PathBuf {
    util::target_dir().join("xtask").join("guest")
}

/// Packages, kernel, vmlinux and initramfs (with siw's module for `Device::Siw`), each done
/// once and cached.
pub fn prepare(device: Device) -> Result<Prepared> {
    apt::ensure(apt::GUEST)?;
    let cache = cache_dir();
    fs::create_dir_all(&cache).context(format_args!("cannot create {}", cache.display()))?;
    // The versioned kernel package is looked up in apt's lists. Lists left from an earlier
    // install may name a build the mirror no longer serves, so refresh them first whenever the
    // kernel has to be downloaded (cheap next to the download itself).
    if util::is_root() && !kernel_cached(&cache) {
        apt::update()?;
    }
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
    let mut modules = module_closure(&root, &kver, MODULES, true)?;
    if device == Device::Siw {
        for m in module_closure(&root, &kver, siw::DEPENDENCIES, false)? {
            if !modules.contains(&m) {
                modules.push(m);
            }
        }
        modules.push(siw::module(&cache, &kpkg, &kver)?);
    }
    let initramfs = build_initramfs(&cache, &kver, device.name(), &modules)?;
    Ok(Prepared { vmlinux, initramfs })
}

/// Whether some Debian kernel is already unpacked in the cache (then its package name is taken
/// from the lists as they are, and only an upgrade of the lists would make us fetch another).
fn kernel_cached(cache: &Path) -> bool {
    fs::read_dir(cache.join("kernel")).is_ok_and(|mut d| d.next().is_some())
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
    download().context("missing kernel package")?;
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

/// Module files to insmod for `names`, dependencies first, resolved with `modprobe
/// --show-depends`; with their soft dependencies if `softdeps`.
fn module_closure(root: &Path, kver: &str, names: &[&str], softdeps: bool) -> Result<Vec<PathBuf>> {
    let mut files: Vec<PathBuf> = Vec::new();
    for m in names {
        let mut cmd = Command::new("modprobe");
        cmd.arg("-d")
            .arg(root)
            .args(["-S", kver, "--show-depends", m]);
        if !softdeps {
            cmd.arg("--ignore-install");
        }
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
fn build_initramfs(cache: &Path, kver: &str, device: &str, modules: &[PathBuf]) -> Result<PathBuf> {
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
    // One image per device (its modules differ): the guests of both may run at once.
    let prefix = format!("initramfs-{device}-");
    let out = cache.join(format!("{prefix}{kver}-{hash:016x}.cpio"));
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
    // Older images of this device are stale now (and those named before images were per
    // device, `initramfs-KVER-...`).
    if let Ok(entries) = fs::read_dir(cache) {
        for e in entries.flatten() {
            let n = e.file_name();
            let n = n.to_string_lossy();
            let unnamed =
                n.starts_with("initramfs-") && n.as_bytes().get(10).is_some_and(u8::is_ascii_digit);
            if n.starts_with(&prefix) || unnamed {
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
