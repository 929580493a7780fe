//! Debian packages the tasks need: checked with dpkg-query, the missing ones installed with
//! apt-get when we are root (otherwise the exact command is printed and we fail).
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::util::{self, Error, Result};

/// Building the workspace (rdma-sys runs bindgen against libibverbs-dev with libclang) and
/// running device tests and rdma-core's programs.
pub const BASE: &[&str] = &[
    "libibverbs1",
    "ibverbs-providers",
    "librdmacm1",
    "ibverbs-utils",
    "rdmacm-utils",
    "perftest",
    "libibverbs-dev",
    "librdmacm-dev",
    "libclang-dev",
    "pkg-config",
    "iproute2",
    "kmod",
];

/// `bench cost`: callgrind (and callgrind_annotate) and strace, run in the guest from the
/// host's `/usr`; objcopy, which copies our measured programs without their debug info
/// (valgrind reads it at every start, slowly under emulation).
pub const COST: &[&str] = &["valgrind", "strace", "binutils"];

/// The qemu guest: emulator, busybox for its init, cpio/kmod/dpkg tools for the kernel.
pub const GUEST: &[&str] = &["qemu-system-x86", "busybox-static", "kmod", "cpio"];

static UPDATED: AtomicBool = AtomicBool::new(false);

/// Packages of `wanted` that are not installed.
pub fn missing(wanted: &[&str]) -> Result<Vec<String>> {
    if !util::have("dpkg-query") {
        return Err(Error::new(format!(
            "no dpkg-query: this is not a Debian-like system; install the equivalents of: {}",
            wanted.join(" ")
        )));
    }
    let out = Command::new("dpkg-query")
        .args(["-W", "-f=${Package} ${db:Status-Status}\\n"])
        .args(wanted)
        .output()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let installed: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_suffix(" installed"))
        .collect();
    Ok(wanted
        .iter()
        .filter(|p| !installed.contains(p))
        .map(|p| (*p).to_owned())
        .collect())
}

/// Installs the packages of `wanted` that are missing.
pub fn ensure(wanted: &[&str]) -> Result<()> {
    let missing = missing(wanted)?;
    if missing.is_empty() {
        return Ok(());
    }
    let list = missing.join(" ");
    if !util::is_root() {
        return Err(Error::new(format!(
            "missing Debian packages; run: sudo apt-get update && sudo apt-get install -y --no-install-recommends {list}"
        )));
    }
    if !util::have("apt-get") {
        return Err(Error::new(format!(
            "missing Debian packages ({list}) and no apt-get to install them"
        )));
    }
    eprintln!("xtask: installing Debian packages: {list}");
    update()?;
    let mut cmd = Command::new("apt-get");
    cmd.args(["install", "-y", "-q", "--no-install-recommends"])
        .args(&missing)
        .env("DEBIAN_FRONTEND", "noninteractive");
    util::status(cmd, &format!("apt-get install {list}"))?;
    let still = self::missing(wanted)?;
    if !still.is_empty() {
        return Err(Error::new(format!(
            "apt-get install did not install: {}",
            still.join(" ")
        )));
    }
    Ok(())
}

/// `apt-get update`, once per run.
pub fn update() -> Result<()> {
    if UPDATED.swap(true, Ordering::SeqCst) {
        return Ok(());
    }
    if !util::is_root() {
        return Err(Error::new(
            "the package lists are needed; run: sudo apt-get update",
        ));
    }
    let mut cmd = Command::new("apt-get");
    cmd.args(["update", "-q"])
        .env("DEBIAN_FRONTEND", "noninteractive");
    util::status(cmd, "apt-get update")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reports_only_missing_packages() {
        if !util::have("dpkg-query") {
            return; // not a Debian-like host: nothing to check against
        }
        let m = missing(&["dpkg", "no-such-package-for-xtask"]).unwrap();
        assert_eq!(m, ["no-such-package-for-xtask"]);
    }
}
