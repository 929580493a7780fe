//! A port's counters as the kernel names them in sysfs (`counters/` and `hw_counters/` under
//! `/sys/class/infiniband/DEV/ports/N/`): [`Context::port_counters`], [`PortCounters`].
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::Context;
use crate::{Error, Result};

/// Where the kernel shows RDMA devices.
const SYSFS_ROOT: &str = "/sys/class/infiniband";

/// The file of `hw_counters/` that is a setting, not a counter: how many milliseconds the
/// kernel keeps the values it read from the driver before it reads them again.
const LIFESPAN: &str = "lifespan";

/// The sysfs directory a counter comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum CounterGroup {
    /// `counters/`: the InfiniBand port counters (the performance-management agent's, read
    /// through MADs), on devices that have one.
    Counters,
    /// `hw_counters/`: the driver's own counters, those `rdma statistic show link` shows.
    HwCounters,
}

impl CounterGroup {
    /// The directory's name under `ports/N/`.
    pub fn dir_name(self) -> &'static str {
        match self {
            CounterGroup::Counters => "counters",
            CounterGroup::HwCounters => "hw_counters",
        }
    }
}

impl fmt::Display for CounterGroup {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.dir_name())
    }
}

/// One counter of a [`PortCounters`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Counter<'a> {
    /// Its name, the kernel's file name (e.g. `rcvd_seq_err`).
    pub name: &'a str,
    /// The directory it comes from.
    pub group: CounterGroup,
    /// Its value (for a difference, [`PortCounters::since`], how much it grew).
    pub value: u64,
}

/// The counters of one port, read at one moment: every file of its `counters/` and
/// `hw_counters/` directories that holds a number, named as the kernel names them, sorted by
/// name (then group: a name in both comes from `counters/` first).
///
/// What is left out: `hw_counters/lifespan`, which is numeric and writable but a setting, the
/// time the kernel caches the driver's values (see [`lifespan`](Self::lifespan)); and any file
/// that cannot be read or does not hold one unsigned decimal number (a driver may refuse to
/// read a counter it lists). A device or port without the directories (siw has neither, rxe
/// has `hw_counters/` only) gives an empty set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortCounters {
    device: String,
    port: u8,
    /// Sorted by (name, group), each pair once.
    entries: Vec<(String, CounterGroup, u64)>,
    lifespan: Option<Duration>,
}

impl Context {
    /// The counters of `port` (numbered from 1), read from sysfs now: see [`PortCounters`].
    /// Reading them needs no privilege. A port the device does not have is
    /// [`Error::NoSuchPort`]; a counters directory that exists but cannot be listed is
    /// [`Error::ReadCounters`].
    ///
    /// ```no_run
    /// use verbs::{Context, CounterGroup};
    ///
    /// # fn main() -> verbs::Result<()> {
    /// let ctx = Context::open("rxe0")?;
    /// let before = ctx.port_counters(1)?;
    /// // ... traffic ...
    /// let grew = ctx.port_counters(1)?.since(&before);
    /// println!("retransmitted after a NAK: {:?}", grew.get("rcvd_seq_err"));
    /// for (name, value) in grew.group(CounterGroup::HwCounters).filter(|(_, v)| *v > 0) {
    ///     println!("{name} +{value}");
    /// }
    /// # Ok(())
    /// # }
    /// ```
    #[doc(alias = "hw_counters")]
    #[doc(alias = "rdma statistic")]
    pub fn port_counters(&self, port: u8) -> Result<PortCounters> {
        let ports = self.query_device()?.phys_port_cnt();
        if port == 0 || port > ports {
            return Err(Error::NoSuchPort {
                device: self.name().to_owned(),
                port,
                ports,
            });
        }
        PortCounters::read(Path::new(SYSFS_ROOT), self.name(), port)
    }
}

impl PortCounters {
    /// Reads `<root>/<device>/ports/<port>/{counters,hw_counters}/*` (the root is sysfs's
    /// `class/infiniband`, another directory in tests).
    fn read(root: &Path, device: &str, port: u8) -> Result<PortCounters> {
        let port_dir = root.join(device).join("ports").join(port.to_string());
        let mut entries = Vec::new();
        let mut lifespan = None;
        for group in [CounterGroup::Counters, CounterGroup::HwCounters] {
            let dir = port_dir.join(group.dir_name());
            let list = match std::fs::read_dir(&dir) {
                Ok(list) => list,
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(source) => return Err(read_error(device, port, dir, source)),
            };
            for entry in list {
                let entry =
                    entry.map_err(|source| read_error(device, port, dir.clone(), source))?;
                let Ok(name) = entry.file_name().into_string() else {
                    continue;
                };
                let Some(value) = read_number(&entry.path()) else {
                    continue;
                };
                if group == CounterGroup::HwCounters && name == LIFESPAN {
                    lifespan = Some(Duration::from_millis(value));
                } else {
                    entries.push((name, group, value));
                }
            }
        }
        entries.sort_unstable_by(|a, b| (&a.0, a.1).cmp(&(&b.0, b.1)));
        Ok(PortCounters {
            device: device.to_owned(),
            port,
            entries,
            lifespan,
        })
    }

    /// The device's name.
    pub fn device(&self) -> &str {
        &self.device
    }

    /// The port's number.
    pub fn port(&self) -> u8 {
        self.port
    }

    /// The value of counter `name` (its `hw_counters/` value if both groups have it; see
    /// [`get_in`](Self::get_in)).
    pub fn get(&self, name: &str) -> Option<u64> {
        self.get_in(CounterGroup::HwCounters, name)
            .or_else(|| self.get_in(CounterGroup::Counters, name))
    }

    /// The value of counter `name` of `group`.
    pub fn get_in(&self, group: CounterGroup, name: &str) -> Option<u64> {
        self.entries
            .binary_search_by(|e| (e.0.as_str(), e.1).cmp(&(name, group)))
            .ok()
            .map(|i| self.entries[i].2)
    }

    /// Every counter, sorted by name.
    pub fn iter(&self) -> CounterIter<'_> {
        CounterIter(self.entries.iter())
    }

    /// The (name, value) pairs of one group, sorted by name. The `hw_counters/` group is what
    /// `rdma statistic show link DEV/PORT` shows (in the driver's order, not by name).
    pub fn group(&self, group: CounterGroup) -> impl Iterator<Item = (&str, u64)> + '_ {
        self.iter()
            .filter(move |c| c.group == group)
            .map(|c| (c.name, c.value))
    }

    /// How many counters there are.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the port has no counters (the device shows none in sysfs).
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// How long the kernel keeps the `hw_counters/` values it read from the driver
    /// (`hw_counters/lifespan`, 10 ms by default): a reading within that time of the previous
    /// one may show the previous values. `None` without `hw_counters/`.
    pub fn lifespan(&self) -> Option<Duration> {
        self.lifespan
    }

    /// How much each counter grew from `earlier` (a reading of the same port) to this
    /// reading: counters of both, each `self - earlier`, 0 where it went down (a counter that
    /// was reset, or one that saturates and was rewritten). Counters of only one reading are
    /// left out.
    #[doc(alias = "delta")]
    pub fn since(&self, earlier: &PortCounters) -> PortCounters {
        let entries = self
            .entries
            .iter()
            .filter_map(|(name, group, value)| {
                let before = earlier.get_in(*group, name)?;
                Some((name.clone(), *group, value.saturating_sub(before)))
            })
            .collect();
        PortCounters {
            device: self.device.clone(),
            port: self.port,
            entries,
            lifespan: self.lifespan,
        }
    }
}

/// The counters of a [`PortCounters`], sorted by name: [`PortCounters::iter`].
#[derive(Debug, Clone)]
pub struct CounterIter<'a>(std::slice::Iter<'a, (String, CounterGroup, u64)>);

impl<'a> Iterator for CounterIter<'a> {
    type Item = Counter<'a>;

    fn next(&mut self) -> Option<Counter<'a>> {
        self.0.next().map(|(name, group, value)| Counter {
            name,
            group: *group,
            value: *value,
        })
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.0.size_hint()
    }
}

impl ExactSizeIterator for CounterIter<'_> {}

impl<'a> IntoIterator for &'a PortCounters {
    type Item = Counter<'a>;
    type IntoIter = CounterIter<'a>;

    fn into_iter(self) -> CounterIter<'a> {
        self.iter()
    }
}

/// The file's content as one unsigned decimal number (surrounding whitespace allowed), or
/// `None` if it cannot be read or holds something else.
fn read_number(path: &Path) -> Option<u64> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

fn read_error(device: &str, port: u8, dir: PathBuf, source: io::Error) -> Error {
    Error::ReadCounters {
        device: device.to_owned(),
        port,
        dir,
        source,
    }
}

#[cfg(test)]
mod tests {
    use std::fs;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    /// A directory of its own under the system's temporary directory, removed on drop.
    struct TempDir(PathBuf);

    impl TempDir {
        fn new() -> TempDir {
            static NEXT: AtomicUsize = AtomicUsize::new(0);
            let dir = std::env::temp_dir().join(format!(
                "verbs-counters-{}-{}",
                std::process::id(),
                NEXT.fetch_add(1, Ordering::Relaxed)
            ));
            fs::create_dir_all(&dir).unwrap();
            TempDir(dir)
        }

        /// Writes `files` (name, content) into `DEV/ports/PORT/GROUP/`.
        fn port(&self, dev: &str, port: u8, group: &str, files: &[(&str, &str)]) {
            let dir = self.0.join(dev).join("ports").join(port.to_string());
            let dir = dir.join(group);
            fs::create_dir_all(&dir).unwrap();
            for (name, content) in files {
                fs::write(dir.join(name), content).unwrap();
            }
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }

    #[test]
    fn counters_are_read_by_name_and_group_lifespan_and_non_numbers_left_out() {
        let root = TempDir::new();
        root.port(
            "rxe0",
            1,
            "hw_counters",
            &[
                ("sent_pkts", "10\n"),
                ("rcvd_pkts", "7\n"),
                ("rcvd_seq_err", "0\n"),
                ("lifespan", "10\n"),
                ("notes", "not a number\n"),
                ("negative", "-1\n"),
                ("empty", ""),
            ],
        );
        root.port(
            "rxe0",
            1,
            "counters",
            &[("port_xmit_packets", "3\n"), ("sent_pkts", "99\n")],
        );
        let c = PortCounters::read(&root.0, "rxe0", 1).unwrap();
        assert_eq!((c.device(), c.port()), ("rxe0", 1));
        assert_eq!(c.lifespan(), Some(Duration::from_millis(10)));
        assert_eq!(c.len(), 5);
        assert!(!c.is_empty());
        let all: Vec<_> = c.iter().map(|c| (c.name, c.group, c.value)).collect();
        use CounterGroup::*;
        assert_eq!(
            all,
            [
                ("port_xmit_packets", Counters, 3),
                ("rcvd_pkts", HwCounters, 7),
                ("rcvd_seq_err", HwCounters, 0),
                ("sent_pkts", Counters, 99),
                ("sent_pkts", HwCounters, 10),
            ]
        );
        assert_eq!(c.get("sent_pkts"), Some(10), "hw_counters first");
        assert_eq!(c.get_in(Counters, "sent_pkts"), Some(99));
        assert_eq!(c.get("port_xmit_packets"), Some(3));
        assert_eq!(c.get("lifespan"), None);
        assert_eq!(c.get("notes"), None);
        assert_eq!(c.get("missing"), None);
        let hw: Vec<_> = c.group(HwCounters).collect();
        assert_eq!(
            hw,
            [("rcvd_pkts", 7), ("rcvd_seq_err", 0), ("sent_pkts", 10)]
        );
        assert_eq!((&c).into_iter().count(), 5);
    }

    #[test]
    fn a_port_without_counter_directories_has_none() {
        let root = TempDir::new();
        fs::create_dir_all(root.0.join("siw0/ports/1")).unwrap();
        let c = PortCounters::read(&root.0, "siw0", 1).unwrap();
        assert!(c.is_empty());
        assert_eq!(c.len(), 0);
        assert_eq!(c.lifespan(), None);
        assert_eq!(c.iter().count(), 0);
        // Nothing at all under the root (a device sysfs does not show) is no error either.
        assert!(PortCounters::read(&root.0, "gone0", 1).unwrap().is_empty());
    }

    #[cfg(unix)]
    #[test]
    fn a_counters_path_that_is_no_directory_is_an_error_naming_it() {
        let root = TempDir::new();
        fs::create_dir_all(root.0.join("rxe0/ports/1")).unwrap();
        fs::write(root.0.join("rxe0/ports/1/hw_counters"), "").unwrap();
        let e = PortCounters::read(&root.0, "rxe0", 1).unwrap_err();
        assert!(
            matches!(&e, Error::ReadCounters { device, port: 1, dir, .. }
                if device == "rxe0" && dir.ends_with("rxe0/ports/1/hw_counters")),
            "{e:?}"
        );
        assert!(e.to_string().contains("hw_counters"), "{e}");
    }

    #[test]
    fn since_gives_saturating_differences_of_the_counters_of_both() {
        let root = TempDir::new();
        root.port(
            "rxe0",
            1,
            "hw_counters",
            &[("sent_pkts", "10"), ("rcvd_pkts", "20"), ("send_err", "5")],
        );
        let before = PortCounters::read(&root.0, "rxe0", 1).unwrap();
        root.port(
            "rxe0",
            1,
            "hw_counters",
            &[("sent_pkts", "15"), ("rcvd_pkts", "20"), ("new_one", "4")],
        );
        fs::write(root.0.join("rxe0/ports/1/hw_counters/send_err"), "2").unwrap();
        let after = PortCounters::read(&root.0, "rxe0", 1).unwrap();
        let grew = after.since(&before);
        let all: Vec<_> = grew.group(CounterGroup::HwCounters).collect();
        assert_eq!(all, [("rcvd_pkts", 0), ("send_err", 0), ("sent_pkts", 5)]);
        assert_eq!(grew.get("new_one"), None, "only in the later reading");
        assert_eq!(grew.device(), "rxe0");
        assert!(before.since(&before).iter().all(|c| c.value == 0));
    }
}
