//! The eBPF build's toolchain: a nightly rustc on LLVM 22 with `rust-src` (tracer-user's build
//! script runs `rustup run nightly`), and bpf-linker 0.13.0 built against that same libLLVM, found
//! through symlinks in `~/.local/share/pktrace/llvm-22/lib` (its run path).

use std::{
    env, fs,
    os::unix::fs::symlink,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context as _, Result, bail};
use xtask_common::cmd::{find_program, output, run};

/// The LLVM major version bpf-linker is built for.
const LLVM_MAJOR: u32 = 22;
/// The nightly installed when there is none (its LLVM is 22).
const PINNED_NIGHTLY: &str = "nightly-2026-05-20";
/// The bpf-linker release, and how `--version` prints it.
const BPF_LINKER_VERSION: &str = "0.13.0";

/// Makes sure `rustup run nightly` is a nightly on LLVM 22 with `rust-src`; returns its sysroot.
pub fn ensure_nightly() -> Result<PathBuf> {
    if find_program("rustup").is_none() {
        bail!("rustup not found: install Rust with rustup (https://rustup.rs), then rerun setup");
    }
    let verbose = if let Ok(verbose) = nightly_version() {
        verbose
    } else {
        install_pinned_nightly()?;
        nightly_version().context("the nightly toolchain still does not run")?
    };
    match llvm_major(&verbose) {
        Some(LLVM_MAJOR) => {}
        Some(other) => bail!(
            "the nightly toolchain uses LLVM {other}, bpf-linker needs {LLVM_MAJOR}: run \
             `rustup toolchain uninstall nightly` and rerun setup (it installs {PINNED_NIGHTLY})"
        ),
        None => bail!("cannot find the LLVM version in `rustc --version --verbose`:\n{verbose}"),
    }
    let release = verbose
        .lines()
        .find_map(|l| l.strip_prefix("release: "))
        .unwrap_or("?");
    eprintln!("setup: nightly toolchain present (rustc {release}, LLVM {LLVM_MAJOR})");
    output(&mut rustup(&[
        "component",
        "add",
        "rust-src",
        "--toolchain",
        "nightly",
    ]))
    .context("adding rust-src to the nightly toolchain")?;
    eprintln!("setup: rust-src component present on nightly");
    let sysroot = output(&mut rustup(&[
        "run", "nightly", "rustc", "--print", "sysroot",
    ]))?;
    Ok(PathBuf::from(sysroot.trim()))
}

fn rustup(args: &[&str]) -> Command {
    let mut cmd = Command::new("rustup");
    cmd.args(args);
    cmd
}

fn nightly_version() -> Result<String> {
    output(&mut rustup(&[
        "run",
        "nightly",
        "rustc",
        "--version",
        "--verbose",
    ]))
}

/// Installs `PINNED_NIGHTLY` and makes it answer to `nightly` (the toolchain the eBPF build
/// runs) with a symlink, as `rustup toolchain link` refuses channel names.
fn install_pinned_nightly() -> Result<()> {
    eprintln!("setup: no usable nightly toolchain; installing {PINNED_NIGHTLY}");
    run(&mut rustup(&[
        "toolchain",
        "install",
        PINNED_NIGHTLY,
        "--profile",
        "minimal",
        "--component",
        "rust-src",
    ]))
    .with_context(|| {
        format!("installing {PINNED_NIGHTLY}: check network access to static.rust-lang.org")
    })?;
    let verbose = output(&mut rustup(&[
        "run",
        PINNED_NIGHTLY,
        "rustc",
        "--version",
        "--verbose",
    ]))?;
    let host = verbose
        .lines()
        .find_map(|l| l.strip_prefix("host: "))
        .context("rustc has no host")?;
    let home = env::var_os("RUSTUP_HOME").map_or_else(|| home_dir().join(".rustup"), PathBuf::from);
    let toolchains = home.join("toolchains");
    let alias = toolchains.join(format!("nightly-{host}"));
    if alias.symlink_metadata().is_err() {
        symlink(toolchains.join(format!("{PINNED_NIGHTLY}-{host}")), &alias)
            .with_context(|| format!("linking {} to {PINNED_NIGHTLY}", alias.display()))?;
        eprintln!(
            "setup: `nightly` now runs {PINNED_NIGHTLY} ({})",
            alias.display()
        );
    }
    Ok(())
}

/// Adds the musl targets of `cargo xtask dist` to the toolchain cargo uses in the workspace.
pub fn ensure_dist_targets() -> Result<()> {
    let root = xtask_common::workspace_root();
    let installed = output(rustup(&["target", "list", "--installed"]).current_dir(&root))?;
    let wanted: Vec<&str> = xtask_common::musl::TARGETS
        .iter()
        .map(|t| t.triple)
        .collect();
    let missing: Vec<&str> = wanted
        .iter()
        .copied()
        .filter(|t| !installed.lines().any(|l| l.trim() == *t))
        .collect();
    if missing.is_empty() {
        eprintln!(
            "setup: rust targets already installed: {}",
            wanted.join(" ")
        );
        return Ok(());
    }
    eprintln!("setup: adding rust targets {}", missing.join(" "));
    run(rustup(&["target", "add"]).args(&missing).current_dir(&root))
        .context("adding the musl targets: check network access to static.rust-lang.org")
}

/// Makes sure bpf-linker 0.13.0 is installed, linked to the nightly's libLLVM in `sysroot`.
pub fn ensure_bpf_linker(sysroot: &Path) -> Result<()> {
    let prefix = home_dir().join(".local/share/pktrace/llvm-22");
    let lib_dir = prefix.join("lib");
    let real = soname_of(&sysroot.join("lib"))?;
    let created = ensure_llvm_links(&real, &lib_dir)?;
    if created.is_empty() {
        eprintln!(
            "setup: libLLVM links already present in {}",
            lib_dir.display()
        );
    } else {
        eprintln!(
            "setup: linked {} in {} to {}",
            created.join(", "),
            lib_dir.display(),
            real.display()
        );
    }
    let linker = find_program("bpf-linker").unwrap_or_else(|| cargo_home().join("bin/bpf-linker"));
    let version = Command::new(&linker).arg("--version").output();
    let wanted = format!("bpf-linker {BPF_LINKER_VERSION}");
    if version.is_ok_and(|out| String::from_utf8_lossy(&out.stdout).trim() == wanted) {
        eprintln!("setup: {wanted} already installed ({})", linker.display());
        return Ok(());
    }
    eprintln!("setup: installing {wanted} against LLVM {LLVM_MAJOR} (takes a few minutes)");
    run(Command::new("cargo")
        .env("LLVM_PREFIX", &prefix)
        .args([
            "install",
            "bpf-linker",
            "--version",
            BPF_LINKER_VERSION,
            "--locked",
        ])
        .args(["--no-default-features", "--features", "llvm-22"]))
    .context("installing bpf-linker")
}

/// The real libLLVM shared object in a toolchain's `lib` directory (`libLLVM.so.<ver>`).
///
/// # Errors
/// If `lib_dir` cannot be read or holds no `libLLVM.so.*`.
pub fn soname_of(lib_dir: &Path) -> Result<PathBuf> {
    let entries =
        fs::read_dir(lib_dir).with_context(|| format!("reading {}", lib_dir.display()))?;
    let mut found: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("libLLVM.so."))
        })
        .collect();
    found.sort();
    found
        .pop()
        .with_context(|| format!("no libLLVM.so.* in {}", lib_dir.display()))
}

/// Points `libLLVM.so` and `<real's file name>` in `dir` at `real`; returns the links it
/// created or fixed.
pub fn ensure_llvm_links(real: &Path, dir: &Path) -> Result<Vec<String>> {
    fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let soname = real.file_name().context("libLLVM path has no file name")?;
    let mut created = Vec::new();
    for name in [Path::new("libLLVM.so").as_os_str(), soname] {
        let link = dir.join(name);
        if fs::read_link(&link).is_ok_and(|target| target == real) {
            continue;
        }
        if link.symlink_metadata().is_ok() {
            fs::remove_file(&link).with_context(|| format!("replacing {}", link.display()))?;
        }
        symlink(real, &link).with_context(|| format!("linking {}", link.display()))?;
        created.push(name.to_string_lossy().into_owned());
    }
    Ok(created)
}

/// The LLVM major version in `rustc --version --verbose` output (`LLVM version: 22.1.4`).
#[must_use]
pub fn llvm_major(verbose: &str) -> Option<u32> {
    let version = verbose
        .lines()
        .find_map(|l| l.trim().strip_prefix("LLVM version: "))?;
    version.split('.').next()?.trim().parse().ok()
}

fn home_dir() -> PathBuf {
    env::var_os("HOME").map_or_else(|| PathBuf::from("/root"), PathBuf::from)
}

fn cargo_home() -> PathBuf {
    env::var_os("CARGO_HOME").map_or_else(|| home_dir().join(".cargo"), PathBuf::from)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_llvm_major() {
        let verbose = "rustc 1.97.0-nightly (e50aa6fba 2026-05-19)\nbinary: rustc\nhost: x86_64-unknown-linux-gnu\nrelease: 1.97.0-nightly\nLLVM version: 22.1.4\n";
        assert_eq!(llvm_major(verbose), Some(22));
        assert_eq!(llvm_major("rustc 1.95.0"), None);
    }

    #[test]
    fn links_libllvm_idempotently() {
        let root = env::temp_dir().join(format!("xtask-llvm-{}", std::process::id()));
        let sysroot_lib = root.join("sysroot/lib");
        fs::create_dir_all(&sysroot_lib).unwrap();
        fs::write(
            sysroot_lib.join("libLLVM-22-rust-1.97.0-nightly.so"),
            "INPUT(...)",
        )
        .unwrap();
        fs::write(
            sysroot_lib.join("libLLVM.so.22.1-rust-1.97.0-nightly"),
            "elf",
        )
        .unwrap();
        let real = soname_of(&sysroot_lib).unwrap();
        assert!(real.ends_with("libLLVM.so.22.1-rust-1.97.0-nightly"));
        let dir = root.join("llvm-22/lib");
        let created = ensure_llvm_links(&real, &dir).unwrap();
        assert_eq!(
            created,
            ["libLLVM.so", "libLLVM.so.22.1-rust-1.97.0-nightly"]
        );
        assert_eq!(fs::read_link(dir.join("libLLVM.so")).unwrap(), real);
        assert_eq!(
            fs::read_to_string(dir.join("libLLVM.so.22.1-rust-1.97.0-nightly")).unwrap(),
            "elf"
        );
        assert!(ensure_llvm_links(&real, &dir).unwrap().is_empty());
        fs::remove_file(dir.join("libLLVM.so")).unwrap();
        symlink("/nonexistent", dir.join("libLLVM.so")).unwrap();
        assert_eq!(ensure_llvm_links(&real, &dir).unwrap(), ["libLLVM.so"]);
        fs::remove_dir_all(&root).unwrap();
    }
}
