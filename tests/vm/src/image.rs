//! The guest's file tree before it is packed: host files copied at their host paths (with
//! every symlink on the way, so `/sbin/modprobe -> /bin/kmod` and the `/etc/alternatives`
//! chains of iptables work as on the host), generated files, links and device nodes.

use std::{
    collections::{BTreeMap, VecDeque},
    fs,
    io::Write,
    os::unix::fs::PermissionsExt as _,
    path::{Component, Path, PathBuf},
};

use anyhow::{Context as _, Result, bail};

use super::cpio::CpioWriter;

/// The most symlinks followed while resolving one path.
const MAX_LINKS: usize = 40;

/// One node of the tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Node {
    Dir,
    /// A copy of a host file.
    HostFile {
        source: PathBuf,
        perm: u32,
    },
    /// Generated contents.
    Data {
        bytes: Vec<u8>,
        perm: u32,
    },
    Symlink {
        target: String,
    },
    CharDevice {
        major: u32,
        minor: u32,
    },
}

/// A file tree keyed by absolute guest path (`/usr/bin/ip`).
#[derive(Debug, Default)]
pub struct Image {
    nodes: BTreeMap<PathBuf, Node>,
}

impl Image {
    /// How many nodes the tree has.
    #[must_use]
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Whether the tree is empty.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// The node at `path`, if any.
    #[must_use]
    pub fn get(&self, path: &Path) -> Option<&Node> {
        self.nodes.get(path)
    }

    /// Adds `node` at absolute `path` (and its parent directories); replaces what was there.
    /// A directory link of the tree on the way is followed (`/bin/x` lands in `/usr/bin/x`
    /// when `/bin -> usr/bin`), as the archive must not create files below a link.
    pub fn insert(&mut self, path: impl AsRef<Path>, node: Node) {
        let path = self.resolve(path.as_ref());
        for parent in path.ancestors().skip(1) {
            if parent == Path::new("/") {
                break;
            }
            self.nodes.entry(parent.to_path_buf()).or_insert(Node::Dir);
        }
        self.nodes.insert(path, node);
    }

    /// Adds generated contents at `path`.
    pub fn data(&mut self, path: impl AsRef<Path>, bytes: impl Into<Vec<u8>>, perm: u32) {
        let bytes = bytes.into();
        self.insert(path, Node::Data { bytes, perm });
    }

    /// Adds a symlink at `path` pointing at `target`.
    pub fn symlink(&mut self, path: impl AsRef<Path>, target: &str) {
        self.insert(
            path,
            Node::Symlink {
                target: target.to_owned(),
            },
        );
    }

    /// Copies host file `source` to guest `path`, keeping its permissions.
    ///
    /// # Errors
    /// If `source` cannot be read or is not a file.
    pub fn host_file_at(&mut self, path: impl AsRef<Path>, source: &Path) -> Result<()> {
        let meta = fs::metadata(source).with_context(|| format!("reading {}", source.display()))?;
        if !meta.is_file() {
            bail!("{} is not a file", source.display());
        }
        let perm = meta.permissions().mode() & 0o7777;
        let source = source.to_path_buf();
        self.insert(path, Node::HostFile { source, perm });
        Ok(())
    }

    /// Mirrors host path `path` into the tree at the same place: every symlink met while
    /// resolving it (`/lib -> usr/lib`, `/usr/sbin/iptables -> /etc/alternatives/iptables`)
    /// and the file or directory it ends at. Returns the resolved host path.
    ///
    /// # Errors
    /// If `path` is not absolute, cannot be resolved (or too many symlinks), or what it ends at
    /// cannot be read.
    pub fn mirror(&mut self, path: &Path) -> Result<PathBuf> {
        self.mirror_in(Path::new("/"), path)
    }

    /// [`Self::mirror`] from the tree at host directory `root` (an unpacked arm64 userland):
    /// guest path `path` is read at `root` + `path`, absolute links resolve inside `root`.
    /// Returns the host path of what it ends at.
    ///
    /// # Errors
    /// As [`Self::mirror`].
    pub fn mirror_in(&mut self, root: &Path, path: &Path) -> Result<PathBuf> {
        let host = |guest: &Path| root.join(guest.strip_prefix("/").unwrap_or(guest));
        if !path.is_absolute() {
            bail!("{} is not an absolute path", path.display());
        }
        let mut pending = components(path);
        let mut current = PathBuf::from("/");
        let mut links = 0;
        while let Some(name) = pending.pop_front() {
            if name == Path::new("..") {
                current.pop();
                continue;
            }
            let next = current.join(&name);
            let meta = fs::symlink_metadata(host(&next)).with_context(|| {
                format!("{} (resolving {})", host(&next).display(), path.display())
            })?;
            if !meta.file_type().is_symlink() {
                current = next;
                continue;
            }
            links += 1;
            if links > MAX_LINKS {
                bail!("too many symlinks resolving {}", path.display());
            }
            let target = fs::read_link(host(&next))?;
            self.symlink(&next, &target.to_string_lossy());
            if target.is_absolute() {
                current = PathBuf::from("/");
            }
            for part in components(&target).into_iter().rev() {
                pending.push_front(part);
            }
        }
        let real = host(&current);
        let meta = fs::metadata(&real)?;
        if meta.is_dir() {
            self.insert(&current, Node::Dir);
        } else {
            self.host_file_at(&current, &real)?;
        }
        Ok(real)
    }

    /// Where `path` lands in the guest once the tree's own directory symlinks are followed
    /// (`/lib/modules` → `/usr/lib/modules` when `/lib -> usr/lib`).
    #[must_use]
    pub fn resolve(&self, path: &Path) -> PathBuf {
        let mut current = PathBuf::from("/");
        let mut pending = components(path);
        let mut links = 0;
        while let Some(name) = pending.pop_front() {
            if name == Path::new("..") {
                current.pop();
                continue;
            }
            let next = current.join(&name);
            match self.nodes.get(&next) {
                Some(Node::Symlink { target }) if !pending.is_empty() && links < MAX_LINKS => {
                    links += 1;
                    let target = Path::new(target);
                    if target.is_absolute() {
                        current = PathBuf::from("/");
                    }
                    for part in components(target).into_iter().rev() {
                        pending.push_front(part);
                    }
                }
                _ => current = next,
            }
        }
        current
    }

    /// Writes the tree as a newc cpio archive; returns the bytes written.
    ///
    /// # Errors
    /// If a host file cannot be read or writing to `out` fails.
    pub fn write_cpio(&self, out: impl Write) -> Result<u64> {
        let mut cpio = CpioWriter::new(out);
        for (path, node) in &self.nodes {
            let name = path.to_string_lossy();
            let name = name.trim_start_matches('/');
            match node {
                Node::Dir => cpio.dir(name, 0o755)?,
                Node::HostFile { source, perm } => {
                    let bytes = fs::read(source)
                        .with_context(|| format!("reading {}", source.display()))?;
                    cpio.file(name, *perm, &bytes)?;
                }
                Node::Data { bytes, perm } => cpio.file(name, *perm, bytes)?,
                Node::Symlink { target } => cpio.symlink(name, target)?,
                Node::CharDevice { major, minor } => {
                    cpio.char_device(name, 0o600, *major, *minor)?;
                }
            }
        }
        let (_, written) = cpio.finish()?;
        Ok(written)
    }
}

/// The names and `..`s of `path`, without the root and `.`.
fn components(path: &Path) -> VecDeque<PathBuf> {
    path.components()
        .filter(|c| matches!(c, Component::Normal(_) | Component::ParentDir))
        .map(|c| PathBuf::from(c.as_os_str()))
        .collect()
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::symlink;

    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("xtask-image-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn mirror_keeps_every_link_on_the_way() {
        let root = scratch("mirror");
        fs::create_dir_all(root.join("usr/lib")).unwrap();
        fs::write(root.join("usr/lib/libx.so.1.2"), "elf").unwrap();
        symlink("usr/lib", root.join("lib")).unwrap();
        symlink("libx.so.1.2", root.join("usr/lib/libx.so.1")).unwrap();
        fs::create_dir_all(root.join("etc/alt")).unwrap();
        symlink(root.join("lib/libx.so.1"), root.join("etc/alt/x")).unwrap();

        let mut image = Image::default();
        let real = image.mirror(&root.join("etc/alt/x")).unwrap();
        assert_eq!(real, root.join("usr/lib/libx.so.1.2"));
        let link = |p: &str| image.get(&root.join(p)).cloned();
        assert!(matches!(link("etc/alt/x"), Some(Node::Symlink { .. })));
        assert_eq!(
            link("lib"),
            Some(Node::Symlink {
                target: "usr/lib".into()
            })
        );
        assert_eq!(
            link("usr/lib/libx.so.1"),
            Some(Node::Symlink {
                target: "libx.so.1.2".into()
            })
        );
        assert!(matches!(
            link("usr/lib/libx.so.1.2"),
            Some(Node::HostFile { .. })
        ));
        assert_eq!(link("usr/lib"), Some(Node::Dir));
        fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn mirror_in_a_tree_resolves_absolute_links_inside_it() {
        let root = scratch("mirror-in");
        fs::create_dir_all(root.join("usr/sbin")).unwrap();
        fs::write(root.join("usr/sbin/xtables-nft-multi"), "elf").unwrap();
        symlink(
            "/usr/sbin/xtables-nft-multi",
            root.join("usr/sbin/iptables"),
        )
        .unwrap();

        let mut image = Image::default();
        let real = image
            .mirror_in(&root, Path::new("/usr/sbin/iptables"))
            .unwrap();
        assert_eq!(real, root.join("usr/sbin/xtables-nft-multi"));
        assert!(matches!(
            image.get(Path::new("/usr/sbin/iptables")),
            Some(Node::Symlink { .. })
        ));
        assert!(matches!(
            image.get(Path::new("/usr/sbin/xtables-nft-multi")),
            Some(Node::HostFile { source, .. }) if *source == real
        ));
        fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn resolve_follows_directory_links_of_the_tree() {
        let mut image = Image::default();
        image.symlink("/lib", "usr/lib");
        image.symlink("/bin", "/usr/bin");
        image.insert("/usr/lib", Node::Dir);
        assert_eq!(
            image.resolve(Path::new("/lib/modules/6.1")),
            PathBuf::from("/usr/lib/modules/6.1")
        );
        assert_eq!(
            image.resolve(Path::new("/bin/pktrace")),
            PathBuf::from("/usr/bin/pktrace")
        );
        // Adding a file below a link puts it where the link leads.
        image.data("/bin/x", "x", 0o755);
        assert!(image.get(Path::new("/usr/bin/x")).is_some());
        // A link as the last component is the file itself.
        assert_eq!(image.resolve(Path::new("/lib")), PathBuf::from("/lib"));
        assert_eq!(
            image.resolve(Path::new("/tests/x")),
            PathBuf::from("/tests/x")
        );
    }

    #[test]
    fn parents_come_first_in_the_archive() {
        let mut image = Image::default();
        image.data("/usr/bin/a", "x", 0o755);
        image.symlink("/bin", "usr/bin/");
        let mut out = Vec::new();
        image.write_cpio(&mut out).unwrap();
        let text = String::from_utf8_lossy(&out);
        let pos = |s: &str| text.find(s).unwrap();
        assert!(pos("usr\0") < pos("usr/bin\0"));
        assert!(pos("usr/bin\0") < pos("usr/bin/a\0"));
        assert_eq!(image.len(), 4);
    }
}
