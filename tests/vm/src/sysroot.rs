//! The userland of a guest whose architecture is not the host's (arm64): Debian bookworm's
//! arm64 packages of the tools the guest runs ([`PACKAGES`]) and the libraries they depend
//! on, fetched with `apt-get download` through the private arm64 apt configuration
//! ([`super::apt::BOOKWORM_ARM64`]), unpacked with `dpkg -x` into one tree under the VM
//! tier's cache and reused. The guest's programs, libraries and loader are copied from that
//! tree; the libraries a program needs are found from the `DT_NEEDED` entries of its ELF
//! file, resolved in the tree as the dynamic loader resolves them ([`LIBRARY_DIRS`]).

use std::{
    collections::BTreeSet,
    fs,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context as _, Result, bail};
use object::{
    LittleEndian,
    elf::{DT_NEEDED, FileHeader64},
    read::elf::{FileHeader as _, ProgramHeader as _},
};
use xtask_common::cmd::{describe, output, run};

use super::{
    apt::{self, Suite},
    cache_dir,
    image::Image,
};

/// The packages of the guest's tools; the library packages they depend on come with them.
pub const PACKAGES: [&str; 11] = [
    "busybox-static",
    "iproute2",
    "iptables",
    "nftables",
    "conntrack",
    "ipset",
    "procps",
    "iputils-ping",
    "util-linux",
    "bpftool",
    "kmod",
];

/// Where the arm64 loader looks for libraries (Debian's multiarch directories first).
pub const LIBRARY_DIRS: [&str; 4] = [
    "/lib/aarch64-linux-gnu",
    "/usr/lib/aarch64-linux-gnu",
    "/lib",
    "/usr/lib",
];

/// Where iptables looks for its arm64 extensions (`libxt_*.so`), loaded with dlopen.
pub const XTABLES_DIR: &str = "/usr/lib/aarch64-linux-gnu/xtables";

/// The links Debian's `update-alternatives` makes when iptables is installed (`dpkg -x`
/// does not run it): the nft variant, as on the host.
const ALTERNATIVES: [(&str, &str); 6] = [
    ("usr/sbin/iptables", "iptables-nft"),
    ("usr/sbin/iptables-save", "iptables-nft-save"),
    ("usr/sbin/iptables-restore", "iptables-nft-restore"),
    ("usr/sbin/ip6tables", "ip6tables-nft"),
    ("usr/sbin/ip6tables-save", "ip6tables-nft-save"),
    ("usr/sbin/ip6tables-restore", "ip6tables-nft-restore"),
];

/// Marks a tree whose unpacking finished; it holds the packages' names (another list: the
/// tree is made again).
const COMPLETE: &str = ".complete";

/// The unpacked arm64 userland: from the cache, else fetched and unpacked (once).
///
/// # Errors
/// If apt cannot list or download the packages, or `dpkg -x` fails.
pub fn arm64() -> Result<PathBuf> {
    let root = cache_dir().join("sysroot-arm64");
    let suite = apt::BOOKWORM_ARM64;
    let options = suite.options()?;
    let packages = dependencies(&suite, &options)?;
    let stamp = packages.join("\n");
    if fs::read_to_string(root.join(COMPLETE)).is_ok_and(|s| s == stamp) {
        return Ok(root);
    }
    let debs = cache_dir().join("debs-arm64");
    fs::create_dir_all(&debs).with_context(|| format!("creating {}", debs.display()))?;
    eprintln!(
        "vm-test: apt-get download of {} arm64 packages (into {})",
        packages.len(),
        debs.display()
    );
    let mut download = apt::apt_get(&options);
    download
        .args(["download", "-q"])
        .args(&packages)
        .current_dir(&debs);
    run(&mut download).with_context(|| format!("`{}` failed", describe(&download)))?;
    let partial = root.with_extension("partial");
    let _ = fs::remove_dir_all(&partial);
    fs::create_dir_all(&partial).with_context(|| format!("creating {}", partial.display()))?;
    for entry in fs::read_dir(&debs)?.filter_map(Result::ok) {
        let deb = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        let wanted = packages.iter().any(|p| name.starts_with(&format!("{p}_")));
        if wanted && deb.extension().is_some_and(|e| e == "deb") {
            run(Command::new("dpkg").arg("-x").arg(&deb).arg(&partial))
                .with_context(|| format!("dpkg -x {}", deb.display()))?;
        }
    }
    for (link, target) in ALTERNATIVES {
        let path = partial.join(link);
        if fs::symlink_metadata(&path).is_err()
            && partial.join(link).with_file_name(target).exists()
        {
            std::os::unix::fs::symlink(target, &path)
                .with_context(|| format!("linking {}", path.display()))?;
        }
    }
    fs::write(partial.join(COMPLETE), stamp)?;
    let _ = fs::remove_dir_all(&root);
    fs::rename(&partial, &root).with_context(|| format!("moving {}", root.display()))?;
    Ok(root)
}

/// [`PACKAGES`] and the library packages they depend on, recursively (`apt-cache depends`):
/// the packages named `lib…` (not Perl's) and `zlib1g`, which hold the shared libraries.
fn dependencies(suite: &Suite, options: &[String]) -> Result<Vec<String>> {
    let mut cmd = apt::with_options(Command::new("apt-cache"), options);
    cmd.args(["depends", "--recurse", "--no-recommends", "--no-suggests"])
        .args([
            "--no-conflicts",
            "--no-breaks",
            "--no-replaces",
            "--no-enhances",
        ])
        .args(PACKAGES);
    let listing = output(&mut cmd).with_context(|| {
        format!(
            "`{}` failed: is the {} apt index fetched?",
            describe(&cmd),
            suite.name
        )
    })?;
    Ok(library_packages(&listing))
}

/// The package names of `apt-cache depends --recurse` output worth unpacking: the tools'
/// packages and the libraries.
#[must_use]
pub fn library_packages(listing: &str) -> Vec<String> {
    let names: BTreeSet<&str> = listing
        .lines()
        .filter(|l| !l.starts_with(char::is_whitespace) && !l.starts_with('<'))
        .map(str::trim)
        .filter(|n| {
            PACKAGES.contains(n)
                || *n == "zlib1g"
                || (n.starts_with("lib") && !n.ends_with("-perl") && !n.ends_with("-common"))
        })
        .collect();
    names.into_iter().map(str::to_owned).collect()
}

/// `program` in the tree at `root`, as a guest path (`/usr/sbin/ip`).
#[must_use]
pub fn find(root: &Path, program: &str) -> Option<PathBuf> {
    ["/usr/sbin", "/sbin", "/usr/bin", "/bin"]
        .iter()
        .map(|dir| Path::new(dir).join(program))
        .find(|p| fs::symlink_metadata(root.join(p.strip_prefix("/").unwrap_or(p))).is_ok())
}

/// Copies the loader and the shared libraries `elves` (host paths of files in the tree or
/// static payload binaries) need, recursively, from the tree at `root` into `image`.
///
/// # Errors
/// If an ELF file cannot be read, or a library it needs is not in the tree.
pub fn add_libraries(image: &mut Image, root: &Path, elves: &[PathBuf]) -> Result<()> {
    let mut pending: Vec<PathBuf> = elves.to_vec();
    let mut seen: BTreeSet<PathBuf> = BTreeSet::new();
    let mut copied: BTreeSet<String> = BTreeSet::new();
    while let Some(elf) = pending.pop() {
        if !seen.insert(elf.clone()) {
            continue;
        }
        let bytes = fs::read(&elf).with_context(|| format!("reading {}", elf.display()))?;
        let (interpreter, needed) = dynamic_needs(&bytes)
            .with_context(|| format!("{}: not a 64-bit little-endian ELF file", elf.display()))?;
        if let Some(loader) = interpreter {
            pending.push(image.mirror_in(root, Path::new(&loader))?);
        }
        for soname in needed {
            if !copied.insert(soname.clone()) {
                continue;
            }
            let guest = LIBRARY_DIRS
                .iter()
                .map(|d| Path::new(d).join(&soname))
                .find(|p| fs::symlink_metadata(root.join(p.strip_prefix("/").unwrap_or(p))).is_ok())
                .with_context(|| {
                    format!(
                        "{}: shared library {soname} not in {} (add its package to the arm64 \
                         userland)",
                        elf.display(),
                        root.display()
                    )
                })?;
            pending.push(image.mirror_in(root, &guest)?);
        }
    }
    Ok(())
}

/// The `PT_INTERP` and the `DT_NEEDED` names of an ELF64 little-endian file (a static one:
/// none).
///
/// # Errors
/// If `elf` is not such a file or its tables are cut short.
pub fn dynamic_needs(elf: &[u8]) -> Result<(Option<String>, Vec<String>)> {
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    let header = FileHeader64::<LittleEndian>::parse(elf)
        .ok()
        .filter(|h| h.endian().is_ok())
        .context("not a 64-bit little-endian ELF file")?;
    let endian = LittleEndian;
    let headers = header
        .program_headers(endian, elf)
        .map_err(|e| anyhow::anyhow!("reading the program headers: {e}"))?;
    let mut interpreter = None;
    for ph in headers {
        if let Ok(Some(path)) = ph.interpreter(endian, elf) {
            interpreter = Some(text(path));
        }
    }
    let sections = header
        .sections(endian, elf)
        .map_err(|e| anyhow::anyhow!("reading the sections: {e}"))?;
    let table = sections
        .dynamic_table(endian, elf)
        .map_err(|e| anyhow::anyhow!("reading the dynamic section: {e}"))?;
    let mut needed = Vec::new();
    for entry in &table {
        if entry.tag == DT_NEEDED {
            let name = table
                .string(entry)
                .map_err(|e| anyhow::anyhow!("reading a DT_NEEDED name: {e}"))?;
            needed.push(text(name));
        }
    }
    Ok((interpreter, needed))
}

/// Fails unless `root` holds an arm64 busybox at `/bin/busybox` (the guest's `/init` shell).
///
/// # Errors
/// When it is missing.
pub fn busybox(root: &Path) -> Result<PathBuf> {
    let path = root.join("bin/busybox");
    if !path.is_file() {
        bail!(
            "{} is missing: remove {} to fetch the arm64 userland again",
            path.display(),
            root.display()
        );
    }
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_tools_and_their_libraries_of_a_depends_listing() {
        let listing = "iproute2\n  Depends: libbpf1\n  Depends: <debconf-2.0>\n    cdebconf\n\
                       libbpf1\n  Depends: libc6\nlibc6\n  Depends: libgcc-s1\nlibgcc-s1\n\
                       <debconf-2.0>\ncdebconf\ndebconf\nperl-base\nlibfile-find-rule-perl\n\
                       libtirpc-common\nzlib1g\n";
        assert_eq!(
            library_packages(listing),
            ["iproute2", "libbpf1", "libc6", "libgcc-s1", "zlib1g"]
        );
    }

    #[test]
    fn reads_the_needed_libraries_of_this_test_binary() {
        // The test binary itself: dynamically linked against libc on the host (gnu target).
        let me = fs::read(std::env::current_exe().unwrap()).unwrap();
        let (interpreter, needed) = dynamic_needs(&me).unwrap();
        if cfg!(target_env = "gnu") {
            assert!(interpreter.is_some_and(|i| i.starts_with('/')));
            assert!(
                needed.iter().any(|n| n.starts_with("libc.so")),
                "{needed:?}"
            );
        }
        assert!(dynamic_needs(b"not an elf").is_err());
    }
}
