//! Soft-iWARP for the guest: Debian's kernel has no siw (`CONFIG_RDMA_SIW` is not set), so
//! `siw.ko` is built out of tree from Debian's packages of the guest kernel's exact version
//! (the headers, the kbuild tools of the same upstream release, and the `siw` directory of
//! the kernel's source), each downloaded with `apt-get download` and unpacked, never
//! installed. Built once per kernel and cached under `target/xtask/guest/siw/`.
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::apt;
use crate::util::{self, Context, Error, Result};

/// What the build needs on the host beyond the guest's packages.
const BUILD: &[&str] = &["gcc", "make", "xz-utils", "dpkg"];

/// How long one package download may take (the source package is about 140 MB).
const DOWNLOAD_LIMIT: Duration = Duration::from_secs(600);
/// How long unpacking one package, or siw's files from the source tarball, may take.
const UNPACK_LIMIT: Duration = Duration::from_secs(300);
/// How long building the module may take (about 16 s on two cores).
const BUILD_LIMIT: Duration = Duration::from_secs(600);

/// Kernel modules siw needs before it, resolved without soft dependencies: its crc32c comes
/// through the crypto layer, which the initramfs cannot autoload, and libcrc32c's soft
/// dependency would bring crc32c-intel, which the guest's CPU (qemu64, no SSE4.2) refuses.
pub const DEPENDENCIES: &[&str] = &["crc32c_generic", "libcrc32c"];

/// `siw.ko` for kernel package `kpkg` (`linux-image-KVER`), built once and cached in `cache`.
pub fn module(cache: &Path, kpkg: &str, kver: &str) -> Result<PathBuf> {
    let dir = cache.join("siw").join(kver);
    let ko = dir.join("siw.ko");
    if ko.exists() {
        return Ok(ko);
    }
    apt::ensure(BUILD)?;
    eprintln!(
        "xtask: building siw.ko for kernel {kver} (once; cached in {})",
        dir.display()
    );
    let _ = fs::remove_dir_all(&dir);
    let debs = dir.join("debs");
    let root = dir.join("root");
    fs::create_dir_all(&debs).context(format_args!("cannot create {}", debs.display()))?;
    let version = package_version(kpkg)?;
    let upstream = version.split('-').next().unwrap_or(&version).to_owned();
    // 6.1.0-56-amd64 -> series 6.1, common headers 6.1.0-56-common
    let series: String = kver.split('.').take(2).collect::<Vec<_>>().join(".");
    let abi = kver
        .strip_suffix("-amd64")
        .ok_or_else(|| Error::new(format!("kernel {kver} is not an amd64 flavour")))?;
    // The headers must match the kernel exactly; the source and the kbuild tools come from
    // the same upstream release (the mirror may keep only a later Debian revision).
    let wanted = [
        (format!("linux-headers-{kver}"), true),
        (format!("linux-headers-{abi}-common"), true),
        (format!("linux-source-{series}"), false),
        (format!("linux-kbuild-{series}"), false),
    ];
    for (pkg, exact) in &wanted {
        let ver = if *exact {
            version.clone()
        } else {
            closest_version(pkg, &version, &upstream)?
        };
        let mut cmd = Command::new("apt-get");
        cmd.current_dir(&debs)
            .args(["download", "-q"])
            .arg(format!("{pkg}={ver}"));
        util::output_within(
            cmd,
            &format!("apt-get download {pkg}={ver}"),
            DOWNLOAD_LIMIT,
        )?;
    }
    for deb in fs::read_dir(&debs)?.flatten() {
        let mut cmd = Command::new("dpkg-deb");
        cmd.arg("-x").arg(deb.path()).arg(&root);
        util::output_within(
            cmd,
            &format!("dpkg-deb -x {}", deb.path().display()),
            UNPACK_LIMIT,
        )?;
    }
    let src = root.join("usr/src");
    // The flavour's Makefile includes the common headers by absolute path: point it at ours.
    let headers = src.join(format!("linux-headers-{kver}"));
    let makefile = headers.join("Makefile");
    let text = fs::read_to_string(&makefile)
        .context(format_args!("cannot read {}", makefile.display()))?;
    let src_str = src.to_string_lossy();
    fs::write(
        &makefile,
        text.replace("include /usr/src/", &format!("include {src_str}/")),
    )?;
    let tarball = src.join(format!("linux-source-{series}.tar.xz"));
    let mut cmd = Command::new("tar");
    cmd.arg("-xf")
        .arg(&tarball)
        .arg("-C")
        .arg(&src)
        .args(["--wildcards", "*/drivers/infiniband/sw/siw/*"]);
    util::output_within(
        cmd,
        &format!("tar -xf {} (siw)", tarball.display()),
        UNPACK_LIMIT,
    )?;
    let siw_src = src.join(format!("linux-source-{series}/drivers/infiniband/sw/siw"));
    let mut cmd = Command::new("make");
    cmd.arg("-C")
        .arg(&headers)
        .arg(format!("M={}", siw_src.display()))
        .args(["CONFIG_RDMA_SIW=m", "modules"]);
    util::output_within(cmd, "make siw.ko", BUILD_LIMIT)?;
    fs::copy(siw_src.join("siw.ko"), &ko).context("the build made no siw.ko")?;
    // Only the module is kept.
    let _ = fs::remove_dir_all(&debs);
    let _ = fs::remove_dir_all(&root);
    Ok(ko)
}

/// The version of `pkg` apt would install (the guest kernel's package).
fn package_version(pkg: &str) -> Result<String> {
    let mut cmd = Command::new("apt-cache");
    cmd.args(["show", "--no-all-versions", pkg]);
    let out = util::output(cmd, &format!("apt-cache show {pkg}"))?;
    out.lines()
        .find_map(|l| l.strip_prefix("Version: "))
        .map(|v| v.trim().to_owned())
        .ok_or_else(|| Error::new(format!("apt-cache show {pkg} names no version")))
}

/// `want` if apt knows it for `pkg`, else its newest version of upstream release `upstream`.
fn closest_version(pkg: &str, want: &str, upstream: &str) -> Result<String> {
    let mut cmd = Command::new("apt-cache");
    cmd.args(["madison", pkg]);
    let out = util::output(cmd, &format!("apt-cache madison {pkg}"))?;
    let versions: Vec<&str> = out
        .lines()
        .filter_map(|l| l.split('|').nth(1).map(str::trim))
        .collect();
    pick_version(&versions, want, upstream).ok_or_else(|| {
        Error::new(format!(
            "apt knows no {pkg} of kernel release {upstream} (versions: {})",
            versions.join(", ")
        ))
    })
}

/// Of `versions` (newest first, as apt-cache madison lists them): `want`, else the newest of
/// upstream release `upstream`.
fn pick_version(versions: &[&str], want: &str, upstream: &str) -> Option<String> {
    if versions.contains(&want) {
        return Some(want.to_owned());
    }
    versions
        .iter()
        .find(|v| v.split('-').next() == Some(upstream))
        .map(|v| (*v).to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kernels_own_version_is_taken_else_the_newest_of_its_release() {
        let listed = ["6.1.192-3", "6.1.192-2", "6.1.190-1", "6.1.176-1"];
        assert_eq!(
            pick_version(&listed, "6.1.192-2", "6.1.192").as_deref(),
            Some("6.1.192-2")
        );
        let later_only = ["6.1.192-3", "6.1.176-1"];
        assert_eq!(
            pick_version(&later_only, "6.1.192-2", "6.1.192").as_deref(),
            Some("6.1.192-3")
        );
        assert_eq!(pick_version(&["6.1.176-1"], "6.1.192-2", "6.1.192"), None);
    }
}
