//! What the guest's initramfs holds: busybox (as `/init`'s shell, its applets in `/busybox`,
//! last on PATH so they never shadow the real tools), the host's iproute2, iptables and
//! ip6tables (nft and legacy, with their xtables extensions), conntrack, procps, iputils, util-linux `setpriv`,
//! bpftool and kmod with their shared libraries, the kernel modules, and the test payload.

use std::{
    collections::BTreeSet,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context as _, Result, bail};
use xtask_common::cmd::capture;

use super::{
    image::{Image, Node},
    kernel::{Kernel, find_sbin},
    modules::ModuleSet,
    sysroot,
};

/// Host programs copied into the guest; `true`: required.
pub const PROGRAMS: [(&str, bool); 30] = [
    ("ip", true),
    // The drop tests read the kernel's SNMP counters with it (iproute2, as `ip` is).
    ("nstat", true),
    ("bridge", true),
    ("tc", true),
    ("iptables", true),
    ("iptables-save", true),
    ("iptables-restore", true),
    ("iptables-nft", false),
    ("iptables-nft-save", false),
    ("iptables-nft-restore", false),
    ("iptables-legacy", false),
    ("iptables-legacy-save", false),
    ("iptables-legacy-restore", false),
    // The dual-stack lab's IPv6 nat table (tests/tests/ipv6.rs).
    ("ip6tables", true),
    ("ip6tables-save", true),
    ("ip6tables-restore", true),
    ("ip6tables-nft", false),
    ("ip6tables-nft-save", false),
    ("ip6tables-nft-restore", false),
    ("nft", false),
    ("conntrack", true),
    // The lab's calico variant (its tests fail without it, the others do not need it).
    ("ipset", false),
    ("sysctl", true),
    ("ping", true),
    ("setpriv", true),
    ("bpftool", true),
    ("modprobe", true),
    ("insmod", false),
    ("lsmod", false),
    ("kmod", true),
];

/// Where iptables looks for its extensions (`libxt_*.so`), loaded with dlopen.
const XTABLES_DIRS: [&str; 3] = [
    "/usr/lib/x86_64-linux-gnu/xtables",
    "/usr/lib64/xtables",
    "/usr/lib/xtables",
];

/// Guest paths of the payload's pktrace, xtask and static pktrace.
const PKTRACE: &str = "/bin/pktrace";
const XTASK: &str = "/bin/xtask";
const DIST: &str = "/bin/pktrace-dist";

/// The guest directory of busybox and its applet links.
pub const BUSYBOX_DIR: &str = "/busybox";

/// The test payload: binaries built on the host.
#[derive(Debug, Clone)]
pub struct Payload {
    pub pktrace: PathBuf,
    pub xtask: PathBuf,
    /// The static pktrace of `cargo xtask dist` (tests/tests/dist.rs runs it).
    pub dist: Option<PathBuf>,
    /// Integration test binaries as (target name, host path).
    pub tests: Vec<(String, PathBuf)>,
    /// The tree the guest's tools and libraries come from ([`sysroot::arm64`]; `None`: the
    /// host's own).
    pub sysroot: Option<PathBuf>,
}

/// Guest paths `/init` uses.
#[derive(Debug, Clone)]
pub struct GuestPaths {
    pub modprobe: String,
    pub ip: String,
    pub pktrace: String,
    pub xtask: String,
    pub dist: Option<String>,
    /// (target name, guest path) of each test binary.
    pub tests: Vec<(String, String)>,
}

/// Builds the guest tree (without `/init`, which needs `GuestPaths`).
///
/// # Errors
/// If a host path cannot be mirrored, or a required program is missing.
pub fn assemble(
    kernel: &Kernel,
    modules: &ModuleSet,
    payload: &Payload,
) -> Result<(Image, GuestPaths)> {
    let mut image = Image::default();
    let mut elves: Vec<PathBuf> = Vec::new();
    let root = payload.sysroot.as_deref();
    let found = add_programs(&mut image, root, &mut elves)?;
    let xtables: Vec<PathBuf> = match root {
        Some(_) => vec![PathBuf::from(sysroot::XTABLES_DIR)],
        None => XTABLES_DIRS.iter().map(PathBuf::from).collect(),
    };
    let host_root = root.unwrap_or(Path::new("/"));
    for dir in xtables {
        let Ok(entries) = std::fs::read_dir(host_root.join(dir.strip_prefix("/")?)) else {
            continue;
        };
        for entry in entries.filter_map(Result::ok) {
            if Path::new(&entry.file_name())
                .extension()
                .is_some_and(|e| e == "so")
            {
                elves.push(image.mirror_in(host_root, &dir.join(entry.file_name()))?);
            }
        }
    }
    add_busybox(&mut image, root)?;

    // At `/bin/…` as the tests are told, wherever `/bin` leads (`usr/bin` on merged hosts).
    let guest_pktrace = image.resolve(Path::new(PKTRACE));
    let guest_xtask = image.resolve(Path::new(XTASK));
    image.host_file_at(&guest_pktrace, &payload.pktrace)?;
    image.host_file_at(&guest_xtask, &payload.xtask)?;
    elves.extend([payload.pktrace.clone(), payload.xtask.clone()]);
    if let Some(dist) = &payload.dist {
        image.host_file_at(Path::new(DIST), dist)?;
    }
    let mut tests = Vec::new();
    for (name, host) in &payload.tests {
        let guest = PathBuf::from("/tests").join(name);
        image.host_file_at(&guest, host)?;
        elves.push(host.clone());
        tests.push((name.clone(), guest.display().to_string()));
    }
    if let Some(root) = root {
        sysroot::add_libraries(&mut image, root, &elves)?;
    } else {
        for library in shared_libraries(&elves)? {
            image.mirror(&library)?;
        }
        add_loader_cache(&mut image)?;
    }
    add_modules(&mut image, kernel, modules)?;
    add_skeleton(&mut image);
    add_protocols(&mut image)?;

    let host_path = |name: &str| {
        found
            .iter()
            .find(|(n, _)| *n == name)
            .map_or_else(|| format!("/sbin/{name}"), |(_, p)| p.display().to_string())
    };
    let paths = GuestPaths {
        modprobe: host_path("modprobe"),
        ip: host_path("ip"),
        pktrace: PKTRACE.into(),
        xtask: XTASK.into(),
        dist: payload.dist.as_ref().map(|_| DIST.to_owned()),
        tests,
    };
    Ok((image, paths))
}

/// The [`PROGRAMS`] found on the host (`root`: in that tree instead), mirrored into `image`,
/// their real files added to `elves`; returns (name, path) of each.
fn add_programs(
    image: &mut Image,
    root: Option<&Path>,
    elves: &mut Vec<PathBuf>,
) -> Result<Vec<(&'static str, PathBuf)>> {
    let mut found = Vec::new();
    for (name, required) in PROGRAMS {
        let path = match root {
            Some(root) => sysroot::find(root, name),
            None => find_sbin(name),
        };
        match path {
            Some(path) => {
                elves.push(image.mirror_in(root.unwrap_or(Path::new("/")), &path)?);
                found.push((name, path));
            }
            None if required => bail!(
                "{name} not found on this host: the VM tier copies it into the guest; run \
                 `cargo xtask setup`"
            ),
            None => {}
        }
    }
    Ok(found)
}

/// busybox at `/busybox/busybox` with a link per applet next to it, and `/bin/sh` when the
/// host's shell is not packed. From the tree at `root` when given (its applets named by the
/// host's busybox-static, the same Debian build for another architecture).
fn add_busybox(image: &mut Image, root: Option<&Path>) -> Result<()> {
    let host = find_sbin("busybox")
        .context("busybox not found: install busybox-static (`cargo xtask setup` does)")?;
    let out = capture(Command::new(&host).arg("--list"))?;
    if !out.status.success() {
        bail!("`{} --list` failed", host.display());
    }
    let dir = Path::new(BUSYBOX_DIR);
    let binary = match root {
        Some(root) => sysroot::busybox(root)?,
        None => host,
    };
    image.host_file_at(dir.join("busybox"), &binary)?;
    for applet in String::from_utf8_lossy(&out.stdout).split_whitespace() {
        if applet != "busybox" && !applet.contains('/') {
            image.symlink(dir.join(applet), "busybox");
        }
    }
    let sh = image.resolve(Path::new("/bin/sh"));
    if image.get(&sh).is_none() {
        image.symlink(sh, &format!("{BUSYBOX_DIR}/busybox"));
    }
    Ok(())
}

/// The modules and the `modules.*` index files at `/lib/modules/<version>` of the guest.
fn add_modules(image: &mut Image, kernel: &Kernel, modules: &ModuleSet) -> Result<()> {
    let host_dir = kernel.modules_dir();
    let guest_dir = image.resolve(&Path::new("/lib/modules").join(&kernel.version));
    for entry in std::fs::read_dir(&host_dir)?.filter_map(Result::ok) {
        let path = entry.path();
        let is_index = path
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with("modules."));
        if is_index && path.is_file() {
            image.host_file_at(guest_dir.join(entry.file_name()), &path)?;
        }
    }
    for file in &modules.files {
        let relative = file
            .strip_prefix(&host_dir)
            .with_context(|| format!("{} is outside {}", file.display(), host_dir.display()))?;
        image.host_file_at(guest_dir.join(relative), file)?;
    }
    if let Some(config) = &kernel.config {
        let guest = image.resolve(&Path::new("/boot").join(format!("config-{}", kernel.version)));
        image.host_file_at(guest, config)?;
    }
    Ok(())
}

/// Mount points, `/var/run -> /run`, `/dev/console` (the kernel opens it for `/init` before
/// devtmpfs is mounted) and the users `setpriv` and `ps` may look up.
fn add_skeleton(image: &mut Image) {
    for dir in ["/proc", "/sys", "/dev", "/run", "/tmp", "/root", "/var"] {
        if image.get(Path::new(dir)).is_none() {
            image.insert(dir, Node::Dir);
        }
    }
    image.symlink("/var/run", "../run");
    image.insert("/dev/console", Node::CharDevice { major: 5, minor: 1 });
    image.data(
        "/etc/passwd",
        "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n",
        0o644,
    );
    image.data("/etc/group", "root:x:0:\nnogroup:x:65534:\n", 0o644);
}

/// The host's `/etc/protocols`: `iptables-restore` resolves protocol names in rules with it
/// (Calico's `-p ipencap`), as on a node.
fn add_protocols(image: &mut Image) -> Result<()> {
    let protocols = Path::new("/etc/protocols");
    if protocols.is_file() {
        image.host_file_at(protocols, protocols)?;
    }
    Ok(())
}

/// The host's `/etc/ld.so.cache`, so that the dynamic loader finds each library at once
/// instead of probing every directory (each failed probe costs under TCG); entries for
/// libraries not packed fall back to the search.
fn add_loader_cache(image: &mut Image) -> Result<()> {
    let cache = Path::new("/etc/ld.so.cache");
    if cache.is_file() {
        image.host_file_at(cache, cache)?;
    }
    Ok(())
}

/// The shared libraries (and the dynamic loader) of `elves`, from one `ldd` run.
///
/// # Errors
/// If `ldd` cannot be run, or names a library it did not find.
pub fn shared_libraries(elves: &[PathBuf]) -> Result<BTreeSet<PathBuf>> {
    let unique: BTreeSet<&PathBuf> = elves.iter().collect();
    let out = capture(Command::new("ldd").args(unique))
        .context("running ldd (libc-bin) to find the shared libraries to copy")?;
    parse_ldd(&String::from_utf8_lossy(&out.stdout))
}

/// The library paths in `ldd` output (`libx.so.1 => /lib/.../libx.so.1 (0x…)` and the
/// loader `/lib64/ld-linux-x86-64.so.2 (0x…)`); an error names any library not found.
///
/// # Errors
/// If a library is not found.
pub fn parse_ldd(text: &str) -> Result<BTreeSet<PathBuf>> {
    let mut libraries = BTreeSet::new();
    let mut owner = "";
    for line in text.lines() {
        if !line.starts_with(char::is_whitespace) {
            owner = line.trim_end_matches(':');
            continue;
        }
        let line = line.trim();
        if let Some((name, rest)) = line.split_once("=>") {
            let rest = rest.trim();
            if rest.starts_with("not found") {
                bail!("{owner}: shared library {} not found", name.trim());
            }
            if let Some(path) = rest
                .split_whitespace()
                .next()
                .filter(|p| p.starts_with('/'))
            {
                libraries.insert(PathBuf::from(path));
            }
        } else if let Some(path) = line
            .split_whitespace()
            .next()
            .filter(|p| p.starts_with('/'))
        {
            libraries.insert(PathBuf::from(path));
        }
    }
    Ok(libraries)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ldd_output_gives_libraries_and_the_loader() {
        let text = "/usr/sbin/tc:\n\
                    \tlinux-vdso.so.1 (0x00007ffd)\n\
                    \tlibbpf.so.1 => /lib/x86_64-linux-gnu/libbpf.so.1 (0x00007f90)\n\
                    \t/lib64/ld-linux-x86-64.so.2 (0x00007f91)\n\
                    /usr/bin/busybox:\n\
                    \tnot a dynamic executable\n";
        let libraries = parse_ldd(text).unwrap();
        let want: BTreeSet<PathBuf> = [
            "/lib/x86_64-linux-gnu/libbpf.so.1",
            "/lib64/ld-linux-x86-64.so.2",
        ]
        .into_iter()
        .map(PathBuf::from)
        .collect();
        assert_eq!(libraries, want);
    }

    #[test]
    fn a_missing_library_is_an_error_naming_its_user() {
        let text = "/usr/sbin/x:\n\tlibgone.so.3 => not found\n";
        let err = parse_ldd(text).unwrap_err().to_string();
        assert!(
            err.contains("/usr/sbin/x") && err.contains("libgone.so.3"),
            "{err}"
        );
    }
}
