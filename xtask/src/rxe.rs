//! `cargo xtask rxe up|down|status`: Soft-RoCE on this host, for kernels that have `rdma_rxe`
//! (as a module or built in). Also the host's RDMA devices as the test ladder sees them.
use std::fs;
use std::net::Ipv4Addr;
use std::path::Path;
use std::process::{Command, ExitCode};
use std::time::{Duration, Instant};

use crate::util::{self, Error, Result};

/// Our device and the dummy netdev under it, with an address in a private /24.
pub const DEVICE: &str = "rxe0";
const NETDEV: &str = "rxe-dummy0";
const ADDR: &str = "10.77.2.1";

/// An RDMA device usable for RoCE v2 over IPv4.
#[derive(Debug, Clone)]
pub struct Device {
    pub name: String,
    pub gid_index: u32,
    pub addr: Ipv4Addr,
}

pub fn main(args: &[String]) -> Result<ExitCode> {
    match args.first().map(String::as_str) {
        Some("up") => {
            let d = up()?;
            println!(
                "{} gid_index={} addr={} netdev={NETDEV}",
                d.name, d.gid_index, d.addr
            );
        }
        Some("down") => down()?,
        Some("status") => status(),
        _ => return Err(Error::new("usage: cargo xtask rxe up|down|status")),
    }
    Ok(ExitCode::SUCCESS)
}

/// Names of the RDMA devices this host has.
pub fn devices() -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir("/sys/class/infiniband")
        .map(|d| {
            d.filter_map(|e| e.ok()?.file_name().into_string().ok())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// The index and address of `dev`'s RoCE v2 IPv4-mapped GID on port 1, read from the GID table.
pub fn roce_v2_ipv4_gid(dev: &str) -> Option<(u32, Ipv4Addr)> {
    let port = Path::new("/sys/class/infiniband").join(dev).join("ports/1");
    let mut found: Vec<(u32, Ipv4Addr)> = fs::read_dir(port.join("gids"))
        .ok()?
        .filter_map(|e| {
            let name = e.ok()?.file_name().into_string().ok()?;
            let idx: u32 = name.parse().ok()?;
            let ty = fs::read_to_string(port.join("gid_attrs/types").join(&name)).ok()?;
            if ty.trim() != "RoCE v2" {
                return None;
            }
            let gid = fs::read_to_string(port.join("gids").join(&name)).ok()?;
            Some((idx, ipv4_of_gid(gid.trim())?))
        })
        .collect();
    found.sort();
    found.into_iter().next()
}

/// `0000:0000:0000:0000:0000:ffff:0a4d:0201` -> 10.77.2.1
fn ipv4_of_gid(gid: &str) -> Option<Ipv4Addr> {
    let rest = gid.strip_prefix("0000:0000:0000:0000:0000:ffff:")?;
    let (hi, lo) = rest.split_once(':')?;
    let hi = u16::from_str_radix(hi, 16).ok()?;
    let lo = u16::from_str_radix(lo, 16).ok()?;
    Some(Ipv4Addr::from((u32::from(hi) << 16) | u32::from(lo)))
}

fn port_active(dev: &str) -> bool {
    fs::read_to_string(format!("/sys/class/infiniband/{dev}/ports/1/state"))
        .is_ok_and(|s| s.contains("ACTIVE"))
}

/// `dev` as a test device, when it is ACTIVE and has a RoCE v2 IPv4 GID.
pub fn usable(dev: &str) -> Result<Device> {
    if !Path::new("/sys/class/infiniband").join(dev).exists() {
        let present = devices();
        return Err(Error::new(format!(
            "no RDMA device {dev:?} on this host (present: {})",
            if present.is_empty() {
                "none".into()
            } else {
                present.join(", ")
            }
        )));
    }
    if !port_active(dev) {
        return Err(Error::new(format!(
            "RDMA device {dev}: port 1 is not ACTIVE"
        )));
    }
    let (gid_index, addr) = roce_v2_ipv4_gid(dev).ok_or_else(|| {
        Error::new(format!(
            "RDMA device {dev}: no RoCE v2 IPv4-mapped GID on port 1"
        ))
    })?;
    Ok(Device {
        name: dev.to_owned(),
        gid_index,
        addr,
    })
}

/// Whether this kernel can do rxe; the reason when it cannot.
pub fn kernel_can_do_rxe() -> Result<()> {
    if Path::new("/sys/module/rdma_rxe").exists() || rxe_built_in() {
        return Ok(());
    }
    let no = |why: String| {
        Error::new(format!(
            "this kernel cannot do rxe ({why}); use `cargo xtask guest`"
        ))
    };
    if !Path::new("/proc/modules").exists() {
        return Err(no(
            "no rdma_rxe built in and no loadable module support".into()
        ));
    }
    if !util::have("modprobe") {
        return Err(no("no modprobe (package kmod)".into()));
    }
    let out = Command::new("modprobe").arg("rdma_rxe").output()?;
    if out.status.success() && Path::new("/sys/module/rdma_rxe").exists() {
        return Ok(());
    }
    let err = String::from_utf8_lossy(&out.stderr);
    Err(no(format!(
        "modprobe rdma_rxe: {}",
        err.trim().lines().last().unwrap_or("failed")
    )))
}

/// Whether rdma_rxe is built into the running kernel (it then need not show in /sys/module).
fn rxe_built_in() -> bool {
    let Ok(release) = fs::read_to_string("/proc/sys/kernel/osrelease") else {
        return false;
    };
    let release = release.trim();
    let listed = |path: String, needle: &str| {
        fs::read_to_string(path)
            .is_ok_and(|s| s.lines().any(|l| l.trim() == needle || l.ends_with(needle)))
    };
    listed(
        format!("/lib/modules/{release}/modules.builtin"),
        "/rdma_rxe.ko",
    ) || listed(format!("/boot/config-{release}"), "CONFIG_RDMA_RXE=y")
}

fn ip(args: &[&str]) -> Result<String> {
    let mut cmd = Command::new("ip");
    cmd.args(args);
    util::output(cmd, &format!("ip {}", args.join(" ")))
}

fn rdma(args: &[&str]) -> Result<String> {
    let mut cmd = Command::new("rdma");
    cmd.args(args);
    util::output(cmd, &format!("rdma {}", args.join(" ")))
}

/// Brings up rxe0 on a dummy netdev (idempotent) and returns it once usable.
pub fn up() -> Result<Device> {
    if !util::is_root() {
        return Err(Error::new(
            "`cargo xtask rxe up` needs root (modprobe, ip link, rdma link)",
        ));
    }
    kernel_can_do_rxe()?;
    for tool in ["ip", "rdma"] {
        if !util::have(tool) {
            return Err(Error::new(format!(
                "no `{tool}` command (package iproute2)"
            )));
        }
    }
    if !Path::new("/sys/class/net").join(NETDEV).exists() {
        ip(&["link", "add", NETDEV, "type", "dummy"])?;
    }
    let cidr = format!("{ADDR}/24");
    if !ip(&["-4", "addr", "show", "dev", NETDEV])?.contains(&cidr) {
        ip(&["addr", "add", &cidr, "dev", NETDEV])?;
    }
    ip(&["link", "set", NETDEV, "up"])?;
    let links = rdma(&["link", "show"])?;
    let ours = links
        .lines()
        .any(|l| l.contains(&format!("{DEVICE}/")) && l.contains(&format!("netdev {NETDEV}")));
    if !ours {
        if Path::new("/sys/class/infiniband").join(DEVICE).exists() {
            return Err(Error::new(format!(
                "an RDMA device named {DEVICE} exists but is not on {NETDEV}; remove it or use it via RDMA_TEST_DEVICE"
            )));
        }
        rdma(&["link", "add", DEVICE, "type", "rxe", "netdev", NETDEV])?;
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match usable(DEVICE) {
            Ok(d) => return Ok(d),
            Err(e) if Instant::now() >= deadline => {
                return Err(Error::new(format!("rxe did not come up within 10 s: {e}")))
            }
            Err(_) => std::thread::sleep(Duration::from_millis(100)),
        }
    }
}

/// Removes what `up` made.
pub fn down() -> Result<()> {
    if !util::is_root() {
        return Err(Error::new("`cargo xtask rxe down` needs root"));
    }
    if Path::new("/sys/class/infiniband").join(DEVICE).exists() {
        rdma(&["link", "delete", DEVICE])?;
    }
    if Path::new("/sys/class/net").join(NETDEV).exists() {
        ip(&["link", "delete", NETDEV])?;
    }
    println!("{DEVICE} and {NETDEV} removed");
    Ok(())
}

fn status() {
    let devs = devices();
    if devs.is_empty() {
        match kernel_can_do_rxe_quiet() {
            Some(why) => println!("no RDMA device; {why}"),
            None => println!("no RDMA device; `cargo xtask rxe up` makes {DEVICE}"),
        }
        return;
    }
    for d in devs {
        match usable(&d) {
            Ok(d) => println!("{} gid_index={} addr={}", d.name, d.gid_index, d.addr),
            Err(e) => println!("{d}: {e}"),
        }
    }
}

/// Why this kernel cannot do rxe, without trying to load anything.
fn kernel_can_do_rxe_quiet() -> Option<String> {
    if Path::new("/sys/module/rdma_rxe").exists() || rxe_built_in() {
        return None;
    }
    if !Path::new("/proc/modules").exists() {
        return Some(
            "this kernel cannot do rxe (no module support); use `cargo xtask guest`".into(),
        );
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gid_to_ipv4() {
        assert_eq!(
            ipv4_of_gid("0000:0000:0000:0000:0000:ffff:0a4d:0201"),
            Some(Ipv4Addr::new(10, 77, 2, 1))
        );
        assert_eq!(ipv4_of_gid("fe80:0000:0000:0000:540d:91ff:fe4e:b579"), None);
    }
}
