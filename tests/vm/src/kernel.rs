//! The guest kernel: by default the newest Debian bookworm `linux-image-6.1.0-*-cloud-amd64`,
//! fetched with `apt-get download` (the only source the VM tier downloads from), unpacked
//! with `dpkg -x` and given a `modules.dep` with `depmod -b`, all cached under
//! `~/.cache/pktrace/vm/` and reused. `--kernel` takes a version, a `.deb`, a vmlinuz,
//! a bookworm-backports version (`6.12.74+deb12-cloud-amd64`) or [`BACKPORTS`]: the newest
//! cloud kernel of Debian's bookworm-backports (6.12 in 2026), the line where BPF netfilter
//! programs exist (6.4+), a bullseye version (`5.10.0-32-cloud-amd64`) or [`BULLSEYE`]: the
//! newest 5.10 cloud kernel, the oldest line pktrace supports. Those two suites are fetched
//! through apt configurations of the VM tier's own ([`super::apt`]; the machine's apt
//! sources stay as they are), as are the arm64 kernels ([`resolve_for`]: bookworm's
//! `linux-image-6.1.0-<N>-cloud-arm64`, whose vmlinuz is an `Image` qemu boots as is).

use std::{
    fmt::Write as _,
    fs,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context as _, Result, bail};
use xtask_common::cmd::{describe, find_program, is_root, output, run};

use super::{apt, arch::Arch, cache_dir};

/// The package family the default kernel comes from (Debian bookworm's cloud flavour).
const DEFAULT_PREFIX: &str = "linux-image-6.1.0-";
const DEFAULT_SUFFIX: &str = "-cloud-amd64";
/// `--kernel` value for the newest cloud kernel of bookworm-backports.
pub const BACKPORTS: &str = "backports";
/// The package names of bookworm-backports' cloud kernels: `linux-image-<X.Y.Z>+deb12-cloud-amd64`.
const BACKPORTS_SUFFIX: &str = "+deb12-cloud-amd64";
/// `--kernel` value for the newest cloud kernel of Debian bullseye (5.10).
pub const BULLSEYE: &str = "bullseye";
/// The package family of bullseye's cloud kernels: `linux-image-5.10.0-<N>-cloud-amd64`.
const BULLSEYE_PREFIX: &str = "linux-image-5.10.0-";
/// Marks a kernel directory whose unpacking and depmod finished.
const COMPLETE: &str = ".complete";

/// A kernel ready to boot, with its modules.
#[derive(Debug, Clone)]
pub struct Kernel {
    /// `uname -r` of the guest, e.g. `6.1.0-41-cloud-amd64`.
    pub version: String,
    pub vmlinuz: PathBuf,
    /// The tree holding `lib/modules/<version>` (`depmod -b`, `modprobe -d`).
    pub root: PathBuf,
    /// `config-<version>` when the package has it.
    pub config: Option<PathBuf>,
}

impl Kernel {
    /// `lib/modules/<version>` on the host.
    #[must_use]
    pub fn modules_dir(&self) -> PathBuf {
        self.root.join("lib/modules").join(&self.version)
    }

    /// Whether the kernel config sets `option` to `y` (unknown config: `None`).
    #[must_use]
    pub fn config_enabled(&self, option: &str) -> Option<bool> {
        let text = fs::read_to_string(self.config.as_ref()?).ok()?;
        let wanted = format!("{option}=y");
        Some(text.lines().any(|l| l.trim() == wanted))
    }
}

/// The package names of bookworm's arm64 cloud kernels end so.
const ARM64_SUFFIX: &str = "-cloud-arm64";

/// [`resolve`] for a guest of `arch`: arm64 takes its kernel from bookworm's arm64 cloud
/// kernels (`spec`: a version like `6.1.0-56-cloud-arm64`, a `.deb` or a vmlinuz; `None`:
/// the newest).
///
/// # Errors
/// As [`resolve`].
pub fn resolve_for(spec: Option<&str>, arch: Arch) -> Result<Kernel> {
    match (arch, spec) {
        (Arch::X86_64, _) => resolve(spec),
        (Arch::Arm64, None) => from_suite(&apt::BOOKWORM_ARM64, None, |listing| {
            newest_abi_of(listing, DEFAULT_PREFIX, ARM64_SUFFIX)
        }),
        (Arch::Arm64, Some(v)) if v.ends_with(ARM64_SUFFIX) && !v.contains('/') => {
            from_suite(&apt::BOOKWORM_ARM64, Some(v), |_| None)
        }
        (Arch::Arm64, Some(v)) if Path::new(v).is_file() => resolve(spec),
        (Arch::Arm64, Some(v)) => {
            bail!(
                "--arch arm64 --kernel {v}: give an arm64 cloud kernel like 6.1.0-56{ARM64_SUFFIX}, a .deb or a vmlinuz"
            )
        }
    }
}

/// Finds or fetches the kernel `spec` names (`None`: the newest bookworm cloud kernel).
///
/// # Errors
/// If the kernel cannot be found in the cache or fetched and unpacked.
#[expect(
    clippy::case_sensitive_file_extension_comparisons,
    reason = "Debian packages end in lowercase .deb"
)]
pub fn resolve(spec: Option<&str>) -> Result<Kernel> {
    let Some(spec) = spec else {
        return from_apt(&newest_cloud_kernel()?);
    };
    if spec == BACKPORTS {
        return backports(None);
    }
    if spec == BULLSEYE {
        return bullseye(None);
    }
    if spec.starts_with(&BULLSEYE_PREFIX["linux-image-".len()..]) && spec.ends_with(DEFAULT_SUFFIX)
    {
        return bullseye(Some(spec));
    }
    if spec.ends_with(BACKPORTS_SUFFIX) {
        return backports(Some(spec));
    }
    let path = Path::new(spec);
    if spec.ends_with(".deb") {
        let name = path.file_stem().context("--kernel: .deb without a name")?;
        let dir = cache_dir().join("kernels").join(name);
        return unpacked(path, &dir);
    }
    if path.is_file() {
        return from_vmlinuz(path);
    }
    if spec.contains('/') || !spec.starts_with(|c: char| c.is_ascii_digit()) {
        bail!("--kernel {spec}: not a file, and not a kernel version like 6.1.0-41-cloud-amd64");
    }
    from_apt(spec)
}

/// The newest `linux-image-6.1.0-<N>-cloud-amd64` apt knows of, after an `apt-get update`
/// when it knows none; else the newest one already in the cache.
fn newest_cloud_kernel() -> Result<String> {
    if let Some(version) = newest_in(&apt_search()?) {
        return Ok(version);
    }
    if is_root() {
        eprintln!(
            "vm-test: apt knows no {DEFAULT_PREFIX}N{DEFAULT_SUFFIX}; running apt-get update"
        );
        run(Command::new("apt-get").args(["update", "-qq"])).context("apt-get update")?;
        if let Some(version) = newest_in(&apt_search()?) {
            return Ok(version);
        }
    }
    newest_in(&cached_listing()).with_context(|| {
        format!(
            "no {DEFAULT_PREFIX}N{DEFAULT_SUFFIX} known to apt (Debian bookworm main) nor cached \
             in {}: run `apt-get update` as root, or pass --kernel",
            cache_dir().display()
        )
    })
}

/// The kernels unpacked in the cache, as the package names `linux-image-<version>`, a line
/// each (the form [`newest_in`] and [`newest_backport`] read).
fn cached_listing() -> String {
    fs::read_dir(cache_dir().join("kernels"))
        .map(|entries| {
            entries
                .filter_map(|e| e.ok()?.file_name().into_string().ok())
                .fold(String::new(), |mut out, name| {
                    let _ = writeln!(out, "linux-image-{name}");
                    out
                })
        })
        .unwrap_or_default()
}

/// The package names that start the lines of `apt-cache search` output.
fn package_names(listing: &str) -> impl Iterator<Item = &str> {
    listing
        .lines()
        .filter_map(|line| line.split_whitespace().next())
}

fn apt_search() -> Result<String> {
    let pattern = format!("^{}[0-9]+{}$", regex_escape(DEFAULT_PREFIX), DEFAULT_SUFFIX);
    output(Command::new("apt-cache").args(["search", "--names-only", &pattern]))
        .context("apt-cache search (the VM tier needs Debian's apt)")
}

/// The highest ABI number among `linux-image-6.1.0-<N>-cloud-amd64` names starting lines of
/// `listing` (`apt-cache search` output), as a kernel version.
#[must_use]
pub fn newest_in(listing: &str) -> Option<String> {
    newest_abi(listing, DEFAULT_PREFIX)
}

/// The highest ABI number among `<prefix><N>-cloud-amd64` package names starting lines of
/// `listing`, as a kernel version.
fn newest_abi(listing: &str, prefix: &str) -> Option<String> {
    newest_abi_of(listing, prefix, DEFAULT_SUFFIX)
}

/// [`newest_abi`] of the package names ending in `suffix` (`-cloud-arm64`).
fn newest_abi_of(listing: &str, prefix: &str, suffix: &str) -> Option<String> {
    package_names(listing)
        .filter_map(|name| {
            let abi = name.strip_prefix(prefix)?.strip_suffix(suffix)?;
            abi.parse::<u32>().ok()
        })
        .max()
        .map(|abi| format!("{}{abi}{suffix}", &prefix["linux-image-".len()..]))
}

/// A bookworm-backports cloud kernel, `version` (`6.12.74+deb12-cloud-amd64`) or the newest:
/// its index fetched once a day into the private apt configuration ([`BACKPORTS`]), the
/// package downloaded once and cached; offline, the newest one already unpacked.
fn backports(version: Option<&str>) -> Result<Kernel> {
    from_suite(&apt::BOOKWORM_BACKPORTS, version, newest_backport)
}

/// A bullseye cloud kernel, `version` (`5.10.0-32-cloud-amd64`) or the newest, fetched as
/// [`backports`] fetches its kernels: 5.10, the oldest kernel pktrace supports (no tcx, no
/// BPF netfilter links, no fentry on modules, no drop reasons).
fn bullseye(version: Option<&str>) -> Result<Kernel> {
    from_suite(&apt::BULLSEYE, version, |listing| {
        newest_abi(listing, BULLSEYE_PREFIX)
    })
}

/// A kernel of `suite`: `version`, else the newest `newest` finds in its index, else in the
/// cache; from the cache when unpacked before, else downloaded through the suite's own apt
/// configuration.
fn from_suite(
    suite: &apt::Suite,
    version: Option<&str>,
    newest: impl Fn(&str) -> Option<String>,
) -> Result<Kernel> {
    if let Some(v) = version
        && cache_dir().join("kernels").join(v).join(COMPLETE).exists()
    {
        return from_apt_with(v, &[]);
    }
    let options = suite.options()?;
    let version = match version {
        Some(v) => v.to_owned(),
        None => newest(&suite.listing(&options))
            .or_else(|| newest(&cached_listing()))
            .with_context(|| {
                format!(
                    "no {} cloud kernel known (apt-get update of it failed?)",
                    suite.name
                )
            })?,
    };
    from_apt_with(&version, &options)
}

/// `text` with the characters an extended regular expression gives a meaning escaped.
fn regex_escape(text: &str) -> String {
    text.chars()
        .flat_map(|c| {
            let special = ".+*?()[]{}|^$\\".contains(c);
            special.then_some('\\').into_iter().chain([c])
        })
        .collect()
}

/// The highest `X.Y.Z` among `linux-image-X.Y.Z+deb12-cloud-amd64` names starting lines of
/// `listing`, as a kernel version (`6.12.74+deb12-cloud-amd64`).
#[must_use]
pub fn newest_backport(listing: &str) -> Option<String> {
    package_names(listing)
        .filter_map(|name| {
            let release = name
                .strip_prefix("linux-image-")?
                .strip_suffix(BACKPORTS_SUFFIX)?;
            let parts: Option<Vec<u32>> = release.split('.').map(|p| p.parse().ok()).collect();
            parts
                .filter(|p| !p.is_empty())
                .map(|p| (p, release.to_owned()))
        })
        .max()
        .map(|(_, release)| format!("{release}{BACKPORTS_SUFFIX}"))
}

/// The kernel `version` from package `linux-image-<version>`: cached, else downloaded.
fn from_apt(version: &str) -> Result<Kernel> {
    from_apt_with(version, &[])
}

/// [`from_apt`] with apt `options` (`-o` values: another apt configuration's sources).
fn from_apt_with(version: &str, options: &[String]) -> Result<Kernel> {
    let dir = cache_dir().join("kernels").join(version);
    if dir.join(COMPLETE).exists() {
        return from_tree(&dir);
    }
    let package = format!("linux-image-{version}");
    let debs = cache_dir().join("debs");
    let deb = match cached_deb(&debs, &package) {
        Some(deb) => deb,
        None => download(&debs, &package, options)?,
    };
    unpacked(&deb, &dir)
}

#[expect(
    clippy::case_sensitive_file_extension_comparisons,
    reason = "Debian packages end in lowercase .deb"
)]
fn cached_deb(debs: &Path, package: &str) -> Option<PathBuf> {
    let Ok(entries) = fs::read_dir(debs) else {
        return None;
    };
    let prefix = format!("{package}_");
    let mut found: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(&prefix) && n.ends_with(".deb"))
        })
        .collect();
    found.sort();
    found.pop()
}

fn download(debs: &Path, package: &str, options: &[String]) -> Result<PathBuf> {
    fs::create_dir_all(debs).with_context(|| format!("creating {}", debs.display()))?;
    eprintln!(
        "vm-test: apt-get download {package} (into {})",
        debs.display()
    );
    let mut cmd = apt::apt_get(options);
    cmd.args(["download", "-q", package]).current_dir(debs);
    run(&mut cmd).with_context(|| {
        format!(
            "`{}` failed: is {package} in Debian's apt sources (apt-get update)?",
            describe(&cmd)
        )
    })?;
    cached_deb(debs, package).with_context(|| format!("apt-get download left no {package}_*.deb"))
}

/// `deb` unpacked into `dir` with modules.dep, reusing a complete earlier unpacking.
fn unpacked(deb: &Path, dir: &Path) -> Result<Kernel> {
    if dir.join(COMPLETE).exists() {
        return from_tree(dir);
    }
    if !deb.is_file() {
        bail!("--kernel {}: no such file", deb.display());
    }
    let partial = dir.with_extension("partial");
    let _ = fs::remove_dir_all(&partial);
    let _ = fs::remove_dir_all(dir);
    fs::create_dir_all(&partial).with_context(|| format!("creating {}", partial.display()))?;
    eprintln!("vm-test: unpacking {}", deb.display());
    run(Command::new("dpkg").arg("-x").arg(deb).arg(&partial)).context("dpkg -x")?;
    let kernel = from_tree_unchecked(&partial)?;
    depmod(&partial, &kernel.version)?;
    fs::write(partial.join(COMPLETE), "")?;
    fs::rename(&partial, dir).with_context(|| format!("moving the kernel to {}", dir.display()))?;
    from_tree(dir)
}

fn depmod(root: &Path, version: &str) -> Result<()> {
    let depmod = find_sbin("depmod").context(
        "depmod not found: install kmod (`cargo xtask setup` does) to index the modules",
    )?;
    run(Command::new(depmod).arg("-b").arg(root).arg(version)).context("depmod")
}

/// `program` on PATH or in the sbin directories (not always on a user's PATH).
#[must_use]
pub fn find_sbin(program: &str) -> Option<PathBuf> {
    find_program(program).or_else(|| {
        ["/usr/sbin", "/sbin", "/usr/bin", "/bin"]
            .iter()
            .map(|dir| Path::new(dir).join(program))
            .find(|p| p.is_file())
    })
}

fn from_tree(dir: &Path) -> Result<Kernel> {
    let kernel = from_tree_unchecked(dir)?;
    if !kernel.modules_dir().join("modules.dep").exists() {
        bail!("{} has no modules.dep", kernel.modules_dir().display());
    }
    Ok(kernel)
}

/// The kernel of an unpacked package: the only `lib/modules/<version>` and its vmlinuz.
fn from_tree_unchecked(dir: &Path) -> Result<Kernel> {
    let modules = dir.join("lib/modules");
    let mut versions: Vec<String> = fs::read_dir(&modules)
        .with_context(|| {
            format!(
                "{} has no lib/modules: not a kernel image package?",
                dir.display()
            )
        })?
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .collect();
    let version = match versions.len() {
        1 => versions.remove(0),
        _ => bail!(
            "expected one kernel in {}, found {versions:?}",
            modules.display()
        ),
    };
    let vmlinuz = dir.join("boot").join(format!("vmlinuz-{version}"));
    if !vmlinuz.is_file() {
        bail!("{} is missing", vmlinuz.display());
    }
    let config = Some(dir.join("boot").join(format!("config-{version}"))).filter(|p| p.is_file());
    Ok(Kernel {
        version,
        vmlinuz,
        root: dir.to_path_buf(),
        config,
    })
}

/// A kernel given as its vmlinuz; the modules are looked for next to it (`X/boot/vmlinuz-V`
/// with `X/lib/modules/V`), then in the host's `/lib/modules/V`.
fn from_vmlinuz(path: &Path) -> Result<Kernel> {
    let bytes = fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    let from_name = path
        .file_name()
        .and_then(|n| n.to_str())
        .and_then(|n| n.strip_prefix("vmlinuz-"))
        .map(str::to_owned);
    let version = from_name
        .or_else(|| bzimage_version(&bytes))
        .with_context(|| format!("{}: not a bzImage with a version string", path.display()))?;
    let path = fs::canonicalize(path)?;
    let beside = path.parent().and_then(Path::parent).map(Path::to_path_buf);
    let root = beside
        .filter(|r| r.join("lib/modules").join(&version).is_dir())
        .or_else(|| {
            Some(PathBuf::from("/")).filter(|r| r.join("lib/modules").join(&version).is_dir())
        })
        .with_context(|| {
            format!(
                "no lib/modules/{version} next to {} nor on this host",
                path.display()
            )
        })?;
    let config = [
        path.with_file_name(format!("config-{version}")),
        root.join("boot").join(format!("config-{version}")),
    ]
    .into_iter()
    .find(|p| p.is_file());
    let kernel = Kernel {
        version,
        vmlinuz: path,
        root,
        config,
    };
    if !kernel.modules_dir().join("modules.dep").exists() {
        if kernel.root == Path::new("/") {
            bail!(
                "/lib/modules/{} has no modules.dep: run depmod",
                kernel.version
            );
        }
        depmod(&kernel.root, &kernel.version)?;
    }
    Ok(kernel)
}

/// The version in a bzImage's header (`kernel_version` at 0x20e points at a string 0x200
/// further; Documentation/arch/x86/boot.rst), e.g. `6.1.0-41-cloud-amd64`.
#[must_use]
pub fn bzimage_version(image: &[u8]) -> Option<String> {
    if image.get(0x202..0x206)? != b"HdrS" {
        return None;
    }
    let pointer = u16::from_le_bytes([*image.get(0x20e)?, *image.get(0x20f)?]);
    let start = usize::from(pointer) + 0x200;
    let text = image.get(start..(start + 256).min(image.len()))?;
    let end = text.iter().position(|&b| b == 0 || b == b' ')?;
    let version = std::str::from_utf8(&text[..end]).ok()?;
    (!version.is_empty()).then(|| version.to_owned())
}

#[cfg(test)]
mod tests;
