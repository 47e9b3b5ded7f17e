//! A writer for the cpio "newc" format the kernel unpacks as an initramfs
//! (`Documentation/driver-api/early-userspace/buffer-format.rst`, v6.1): a 110-byte ASCII
//! header per entry, the name, the data, each padded to 4 bytes, then `TRAILER!!!`.
//!
//! Entries carry uid/gid 0 and mtime 0, so the same tree always gives the same bytes.

use std::{
    fmt::Write as _,
    io::{self, Write},
};

/// `S_IFDIR`, `S_IFREG`, `S_IFLNK` and `S_IFCHR` (include/uapi/linux/stat.h, v6.1).
const S_IFDIR: u32 = 0o040_000;
const S_IFREG: u32 = 0o100_000;
const S_IFLNK: u32 = 0o120_000;
const S_IFCHR: u32 = 0o020_000;
const TRAILER: &str = "TRAILER!!!";

/// Writes entries to `out` in order; a parent directory must come before its children.
pub struct CpioWriter<W: Write> {
    out: W,
    next_ino: u32,
    written: u64,
}

impl<W: Write> CpioWriter<W> {
    /// A writer appending to `out`.
    pub fn new(out: W) -> Self {
        Self {
            out,
            next_ino: 1,
            written: 0,
        }
    }

    /// A directory; `path` is relative to the root, e.g. `usr/bin`.
    ///
    /// # Errors
    /// If writing to the output fails.
    pub fn dir(&mut self, path: &str, perm: u32) -> io::Result<()> {
        self.entry(path, S_IFDIR | (perm & 0o7777), 2, (0, 0), &[])
    }

    /// A regular file holding `data`.
    ///
    /// # Errors
    /// If writing to the output fails.
    pub fn file(&mut self, path: &str, perm: u32, data: &[u8]) -> io::Result<()> {
        self.entry(path, S_IFREG | (perm & 0o7777), 1, (0, 0), data)
    }

    /// A symbolic link to `target`.
    ///
    /// # Errors
    /// If writing to the output fails.
    pub fn symlink(&mut self, path: &str, target: &str) -> io::Result<()> {
        self.entry(path, S_IFLNK | 0o777, 1, (0, 0), target.as_bytes())
    }

    /// A character device node (e.g. `dev/console`, 5:1).
    ///
    /// # Errors
    /// If writing to the output fails.
    pub fn char_device(&mut self, path: &str, perm: u32, major: u32, minor: u32) -> io::Result<()> {
        self.entry(path, S_IFCHR | (perm & 0o7777), 1, (major, minor), &[])
    }

    /// Writes the trailer and returns the output and the number of bytes written.
    ///
    /// # Errors
    /// If writing or flushing the output fails.
    pub fn finish(mut self) -> io::Result<(W, u64)> {
        self.header(TRAILER, 0, 1, (0, 0), 0, 0)?;
        self.out.flush()?;
        Ok((self.out, self.written))
    }

    fn entry(
        &mut self,
        path: &str,
        mode: u32,
        nlink: u32,
        rdev: (u32, u32),
        data: &[u8],
    ) -> io::Result<()> {
        let name = path.trim_start_matches('/');
        if name.is_empty() || name.contains('\0') {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("bad cpio name {path:?}"),
            ));
        }
        let size = u32::try_from(data.len())
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "file over 4 GiB"))?;
        let ino = self.next_ino;
        self.next_ino += 1;
        self.header(name, mode, nlink, rdev, size, ino)?;
        self.put(data)?;
        self.pad()
    }

    fn header(
        &mut self,
        name: &str,
        mode: u32,
        nlink: u32,
        (rdev_major, rdev_minor): (u32, u32),
        size: u32,
        ino: u32,
    ) -> io::Result<()> {
        let name_size = u32::try_from(name.len() + 1)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "name too long"))?;
        // ino mode uid gid nlink mtime filesize devmajor devminor rdevmajor rdevminor namesize check
        let fields = [
            ino, mode, 0, 0, nlink, 0, size, 0, 0, rdev_major, rdev_minor, name_size, 0,
        ];
        let mut header = String::with_capacity(110);
        header.push_str("070701");
        for field in fields {
            let _ = write!(header, "{field:08X}");
        }
        self.put(header.as_bytes())?;
        self.put(name.as_bytes())?;
        self.put(&[0])?;
        self.pad()
    }

    fn put(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.out.write_all(bytes)?;
        self.written += bytes.len() as u64;
        Ok(())
    }

    fn pad(&mut self) -> io::Result<()> {
        let padding = (4 - self.written % 4) % 4;
        for _ in 0..padding {
            self.put(&[0])?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field(entry: &[u8], index: usize) -> u32 {
        let start = 6 + index * 8;
        let text = std::str::from_utf8(&entry[start..start + 8]).unwrap();
        u32::from_str_radix(text, 16).unwrap()
    }

    #[test]
    fn writes_aligned_newc_entries_and_the_trailer() {
        let mut cpio = CpioWriter::new(Vec::new());
        cpio.dir("usr", 0o755).unwrap();
        cpio.file("/usr/init", 0o755, b"#!/bin/sh\n").unwrap();
        cpio.symlink("bin", "usr/bin").unwrap();
        cpio.char_device("console", 0o600, 5, 1).unwrap();
        let (bytes, len) = cpio.finish().unwrap();
        assert_eq!(len, bytes.len() as u64);
        assert_eq!(bytes.len() % 4, 0);

        // "usr": header 110 + name 4 = 114, padded to 116.
        assert_eq!(&bytes[..6], b"070701");
        assert_eq!(field(&bytes, 1), 0o040_755);
        assert_eq!(field(&bytes, 11), 4);
        assert_eq!(&bytes[110..114], b"usr\0");
        // "usr/init": the leading slash is dropped; data follows the padded name.
        let file = &bytes[116..];
        assert_eq!(field(file, 1), 0o100_755);
        assert_eq!(field(file, 6), 10);
        assert_eq!(&file[110..119], b"usr/init\0");
        assert_eq!(&file[120..130], b"#!/bin/sh\n");
        // The symlink's data is its target.
        let link = &file[132..];
        assert_eq!(field(link, 1), 0o120_777);
        assert_eq!(&link[116..123], b"usr/bin");
        let dev = &link[124..];
        assert_eq!(
            (field(dev, 1), field(dev, 9), field(dev, 10)),
            (0o020_600, 5, 1)
        );
        let text = String::from_utf8_lossy(&bytes);
        assert!(text.ends_with("TRAILER!!!\0\0\0\0") || text.contains("TRAILER!!!\0"));
        // Inode numbers are distinct.
        assert_ne!(field(&bytes, 0), field(file, 0));
    }

    #[test]
    fn refuses_an_empty_name() {
        let mut cpio = CpioWriter::new(Vec::new());
        assert!(cpio.file("/", 0o644, b"").is_err());
    }
}
