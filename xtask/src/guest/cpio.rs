//! A writer for the cpio "newc" format, the one the kernel unpacks as an initramfs.
use std::io::{self, Write};

/// Builds a newc archive in memory.
#[derive(Debug, Default)]
pub struct Archive {
    buf: Vec<u8>,
    ino: u32,
}

const S_IFDIR: u32 = 0o040_000;
const S_IFREG: u32 = 0o100_000;
const S_IFLNK: u32 = 0o120_000;
const S_IFCHR: u32 = 0o020_000;

impl Archive {
    pub fn dir(&mut self, path: &str) {
        self.entry(path, S_IFDIR | 0o755, (0, 0), &[]);
    }

    pub fn file(&mut self, path: &str, mode: u32, data: &[u8]) {
        self.entry(path, S_IFREG | (mode & 0o7777), (0, 0), data);
    }

    pub fn symlink(&mut self, path: &str, target: &str) {
        self.entry(path, S_IFLNK | 0o777, (0, 0), target.as_bytes());
    }

    pub fn char_dev(&mut self, path: &str, mode: u32, major: u32, minor: u32) {
        self.entry(path, S_IFCHR | (mode & 0o7777), (major, minor), &[]);
    }

    fn entry(&mut self, path: &str, mode: u32, rdev: (u32, u32), data: &[u8]) {
        let name = path.trim_start_matches('/');
        self.ino += 1;
        let nlink = if mode & 0o170_000 == S_IFDIR { 2 } else { 1 };
        let fields = [
            self.ino,
            mode,
            0, // uid
            0, // gid
            nlink,
            0, // mtime
            data.len() as u32,
            0, // dev major
            0, // dev minor
            rdev.0,
            rdev.1,
            name.len() as u32 + 1,
            0, // check
        ];
        self.buf.extend_from_slice(b"070701");
        for f in fields {
            self.buf.extend_from_slice(format!("{f:08x}").as_bytes());
        }
        self.buf.extend_from_slice(name.as_bytes());
        self.buf.push(0);
        self.pad();
        self.buf.extend_from_slice(data);
        self.pad();
    }

    fn pad(&mut self) {
        while self.buf.len() % 4 != 0 {
            self.buf.push(0);
        }
    }

    /// Ends the archive and writes it out.
    pub fn finish(mut self, out: &mut impl Write) -> io::Result<()> {
        self.entry("TRAILER!!!", 0, (0, 0), &[]);
        out.write_all(&self.buf)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn newc_layout() {
        let mut a = Archive::default();
        a.file("/init", 0o755, b"#!/bb/sh\n");
        let mut out = Vec::new();
        a.finish(&mut out).unwrap();
        assert!(out.starts_with(b"070701"));
        // header (110) + "init\0" padded to 116, then 9 bytes of data padded to 12
        assert_eq!(&out[110..114], b"init");
        assert_eq!(&out[116..125], b"#!/bb/sh\n");
        assert_eq!(out.len() % 4, 0);
        assert!(out.windows(10).any(|w| w == b"TRAILER!!!"));
    }
}
