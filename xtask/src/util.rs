//! Small shared pieces: the error type, running commands, shell quoting, paths.
use std::fmt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, ExitStatus, Stdio};

/// A one-line cause, printed as `error: <cause>`.
#[derive(Debug)]
pub struct Error(String);

impl Error {
    pub fn new(msg: impl Into<String>) -> Self {
        Self(msg.into())
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Self {
        Self(e.to_string())
    }
}

pub type Result<T> = std::result::Result<T, Error>;

/// Adds context to an error: `context: cause`.
pub trait Context<T> {
    fn context(self, what: impl fmt::Display) -> Result<T>;
}

impl<T, E: fmt::Display> Context<T> for std::result::Result<T, E> {
    fn context(self, what: impl fmt::Display) -> Result<T> {
        self.map_err(|e| Error(format!("{what}: {e}")))
    }
}

/// The workspace root (the parent of the xtask crate).
pub fn workspace_root() -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest.parent().unwrap_or(manifest).to_path_buf()
}

/// The published crates of the workspace: folder (and import) name, package name. The names
/// alone are taken on crates.io, so the packages are `rdma-*`; each library keeps the folder's
/// name (`[lib] name`). The other members' packages are named as their folders.
pub const PACKAGES: [(&str, &str); 5] = [
    ("verbs-sys", "rdma-verbs-sys"),
    ("verbs", "rdma-verbs"),
    ("cm", "rdma-cm"),
    ("memory", "rdma-memory"),
    ("transport", "rdma-transport"),
];

/// The package of a crate named by its folder or import name (`transport`, `verbs_sys`), as
/// cargo's `-p` wants it (`rdma-transport`); a package name or any other name as it is.
pub fn package_name(name: &str) -> &str {
    PACKAGES
        .iter()
        .find(|(folder, _)| *folder == name || folder.replace('-', "_") == name)
        .map_or(name, |(_, package)| package)
}

/// The cargo target directory (`CARGO_TARGET_DIR` or `<workspace>/target`).
pub fn target_dir() -> PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(d) if !d.is_empty() => {
            let d = PathBuf::from(d);
            if d.is_absolute() {
                d
            } else {
                workspace_root().join(d)
            }
        }
        _ => workspace_root().join("target"),
    }
}

/// The program that runs cargo (the one that started us).
pub fn cargo() -> Command {
    Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
}

/// An executable that a `cargo ... --no-run --message-format=json` build produced.
#[derive(Debug)]
pub struct Executable {
    pub exe: PathBuf,
    /// The crate's manifest directory: cargo runs tests and benches there.
    pub dir: PathBuf,
}

/// Runs a cargo build command with `--message-format=json` and returns the executables of the
/// `compiler-artifact` messages that `wanted` accepts (it sees each message), without repeats.
pub fn built_executables(
    mut cmd: Command,
    what: &str,
    wanted: impl Fn(&serde_json::Value) -> bool,
) -> Result<Vec<Executable>> {
    cmd.arg("--message-format=json")
        .stdin(Stdio::null())
        .stderr(Stdio::inherit());
    let out = cmd.output().context("cannot run cargo")?;
    if !out.status.success() {
        return Err(Error::new(format!("`{what}` failed (see above)")));
    }
    let mut found: Vec<Executable> = Vec::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let Ok(msg) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        if msg["reason"] != "compiler-artifact" || !wanted(&msg) {
            continue;
        }
        let (Some(exe), Some(manifest)) =
            (msg["executable"].as_str(), msg["manifest_path"].as_str())
        else {
            continue;
        };
        let exe = PathBuf::from(exe);
        if found.iter().any(|e| e.exe == exe) {
            continue;
        }
        let dir = Path::new(manifest)
            .parent()
            .unwrap_or(Path::new("/"))
            .to_path_buf();
        found.push(Executable { exe, dir });
    }
    Ok(found)
}

/// Runs `cmd`, capturing its output; fails with `what` and its stderr unless it succeeds.
pub fn output(mut cmd: Command, what: &str) -> Result<String> {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .context(format_args!("{what}: cannot run {:?}", cmd.get_program()))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        let err = err.trim().lines().last().unwrap_or("").to_owned();
        return Err(Error(format!("{what} failed ({}): {err}", out.status)));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// [`output`], bounded: `cmd` is killed, and this fails, if it has not finished within
/// `limit` (a download that hangs, a build that never ends).
pub fn output_within(mut cmd: Command, what: &str, limit: std::time::Duration) -> Result<String> {
    use std::io::Read;
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .context(format_args!("{what}: cannot run {:?}", cmd.get_program()))?;
    // Both pipes are drained while the command runs, so a full pipe never stalls it.
    let drain = |pipe: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            if let Some(mut p) = pipe {
                let _ = p.read_to_end(&mut bytes);
            }
            bytes
        })
    };
    let stdout = drain(child.stdout.take().map(|p| Box::new(p) as _));
    let stderr = drain(child.stderr.take().map(|p| Box::new(p) as _));
    let deadline = std::time::Instant::now() + limit;
    let status = loop {
        if let Some(st) = child.try_wait()? {
            break st;
        }
        if std::time::Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Err(Error(format!(
                "{what} did not finish within {} s: killed",
                limit.as_secs()
            )));
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    let out = stdout.join().unwrap_or_default();
    if !status.success() {
        let err = stderr.join().unwrap_or_default();
        let err = String::from_utf8_lossy(&err);
        let err = err.trim().lines().last().unwrap_or("").to_owned();
        return Err(Error(format!("{what} failed ({status}): {err}")));
    }
    Ok(String::from_utf8_lossy(&out).into_owned())
}

/// Runs `cmd` with inherited output; fails unless it succeeds.
pub fn status(mut cmd: Command, what: &str) -> Result<()> {
    let st = cmd
        .stdin(Stdio::null())
        .status()
        .context(format_args!("{what}: cannot run {:?}", cmd.get_program()))?;
    if !st.success() {
        return Err(Error(format!("{what} failed ({st})")));
    }
    Ok(())
}

/// Whether `program` is on PATH (or is an existing path).
pub fn have(program: &str) -> bool {
    if program.contains('/') {
        return Path::new(program).exists();
    }
    std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).any(|d| d.join(program).is_file()))
        .unwrap_or(false)
}

/// Whether we run as root (effective uid 0).
pub fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .and_then(|l| l.split_whitespace().nth(2).map(|e| e == "0"))
        })
        .unwrap_or(false)
}

/// Quotes one word for sh.
pub fn shell_quote(s: &str) -> String {
    if !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_./=:,+@%".contains(&b))
    {
        s.to_owned()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

/// Quotes words for sh, joined by spaces.
pub fn shell_words(words: &[String]) -> String {
    words
        .iter()
        .map(|w| shell_quote(w))
        .collect::<Vec<_>>()
        .join(" ")
}

/// 64-bit FNV-1a, for cache keys.
pub fn fnv1a(parts: &[&[u8]]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for p in parts {
        for &b in p.iter().chain(&[0xffu8]) {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    }
    h
}

/// The process exit code for a child's status (signals become 128 + n, as in sh).
pub fn exit_code(st: ExitStatus) -> ExitCode {
    ExitCode::from(code_of(st).clamp(0, 255) as u8)
}

/// A child's status as a number (signals become 128 + n, as in sh).
pub fn code_of(st: ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    st.code().unwrap_or_else(|| 128 + st.signal().unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crates_are_named_by_folder_import_or_package() {
        assert_eq!(package_name("transport"), "rdma-transport");
        assert_eq!(package_name("verbs-sys"), "rdma-verbs-sys");
        assert_eq!(package_name("verbs_sys"), "rdma-verbs-sys");
        assert_eq!(package_name("rdma-cm"), "rdma-cm");
        assert_eq!(package_name("apps"), "apps");
        assert_eq!(package_name("xtask"), "xtask");
        // The table is the manifests': each member's package and library names.
        let root = workspace_root();
        let manifest = std::fs::read_to_string(root.join("Cargo.toml")).unwrap();
        let members = manifest
            .lines()
            .find_map(|l| l.strip_prefix("members = "))
            .expect("workspace members");
        let members: Vec<&str> = members
            .trim_matches(['[', ']'])
            .split(',')
            .map(|m| m.trim().trim_matches('"'))
            .collect();
        assert!(members.len() > PACKAGES.len(), "{members:?}");
        let value = |text: &str, section: &str| -> Option<String> {
            let body = text.split(section).nth(1)?;
            let body = body.split("\n[").next()?;
            let line = body.lines().find(|l| l.starts_with("name = "))?;
            Some(line["name = ".len()..].trim_matches('"').to_owned())
        };
        for folder in members {
            let text = std::fs::read_to_string(root.join(folder).join("Cargo.toml")).unwrap();
            let package = value(&text, "[package]").expect("a package name");
            assert_eq!(package_name(folder), package, "{folder}/Cargo.toml");
            // A package renamed keeps the folder's name for its library: `use transport::...`.
            if package != folder {
                let lib = value(&text, "[lib]");
                assert_eq!(lib, Some(folder.replace('-', "_")), "{folder}/Cargo.toml");
            }
        }
    }

    #[test]
    fn a_bounded_command_gives_its_output_or_is_killed_at_its_limit() {
        let mut echo = Command::new("sh");
        echo.args(["-c", "echo out; echo err >&2"]);
        let out = output_within(echo, "echo", std::time::Duration::from_secs(60)).unwrap();
        assert_eq!(out, "out\n");

        let mut fail = Command::new("sh");
        fail.args(["-c", "echo why >&2; exit 3"]);
        let e = output_within(fail, "fail", std::time::Duration::from_secs(60)).unwrap_err();
        assert!(e.to_string().contains("why"), "{e}");

        let started = std::time::Instant::now();
        let mut sleep = Command::new("sleep");
        sleep.arg("600");
        let e = output_within(sleep, "sleep", std::time::Duration::from_millis(200)).unwrap_err();
        assert!(e.to_string().contains("did not finish within"), "{e}");
        // Killed, not waited out.
        assert!(started.elapsed() < std::time::Duration::from_secs(300));
    }

    #[test]
    fn quoting() {
        assert_eq!(shell_quote("ibv_devinfo"), "ibv_devinfo");
        assert_eq!(shell_quote("a b"), "'a b'");
        assert_eq!(shell_quote("it's"), r"'it'\''s'");
        assert_eq!(shell_quote(""), "''");
    }
}
