//! `cargo xtask dist`: pktrace (and kubectl-pktrace) as static musl binaries with the eBPF
//! object embedded, in `target/dist/` (built by [`xtask_common::musl`]):
//!
//! - `pktrace-<arch>-linux-musl`, `kubectl-pktrace-<arch>-linux-musl` (`x86_64`, aarch64);
//! - `image/linux-<amd64|arm64>/pktrace`: the layout `deploy/Dockerfile` copies from;
//! - `man/pktrace.1`, `man/pktrace-merge.1`, `completions/{pktrace.bash,_pktrace,pktrace.fish}`
//!   (from the binary's hidden `--generate`);
//! - `SHA256SUMS`.

use std::{fs, path::Path, process::Command};

use anyhow::{Context as _, Result};
use xtask_common::cmd::output;
pub use xtask_common::musl::{
    AARCH64, BINARIES, DistTarget, TARGETS, X86_64, build, dist_dir, dist_path, is_static_elf,
};

/// Builds `targets`, then the man pages, completions and checksums.
///
/// # Errors
/// A tool is missing (run `cargo xtask setup`), a build failed, or a binary is not static.
pub fn dist(targets: &[DistTarget]) -> Result<()> {
    let dir = dist_dir();
    fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    for target in targets {
        build(target)?;
    }
    if targets.contains(&X86_64) && cfg!(target_arch = "x86_64") {
        docs(&dist_path("pktrace", &X86_64))?;
    }
    checksums(&dir)?;
    for target in targets {
        for bin in BINARIES {
            let path = dist_path(bin, target);
            let size = fs::metadata(&path).map_or(0, |m| m.len());
            eprintln!("dist: {} ({:.1} MiB, static)", path.display(), mib(size));
        }
    }
    if cfg!(target_arch = "x86_64") && targets.contains(&X86_64) {
        let version = output(Command::new(dist_path("pktrace", &X86_64)).arg("--version"))?;
        eprintln!("dist: {}", version.trim());
    }
    Ok(())
}

fn mib(bytes: u64) -> f64 {
    #[expect(clippy::cast_precision_loss, reason = "sizes of a few MiB")]
    let b = bytes as f64;
    b / f64::from(1 << 20)
}

/// Man pages and completions from `pktrace --generate`.
fn docs(pktrace: &Path) -> Result<()> {
    let dir = dist_dir();
    let outputs = [
        ("man", "man/pktrace.1"),
        ("man-merge", "man/pktrace-merge.1"),
        ("bash", "completions/pktrace.bash"),
        ("zsh", "completions/_pktrace"),
        ("fish", "completions/pktrace.fish"),
    ];
    for (what, file) in outputs {
        let text = output(Command::new(pktrace).args(["--generate", what]))?;
        let path = dir.join(file);
        if let Some(parent) = path.parent() {
            fs::create_dir_all(parent)?;
        }
        fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
    }
    eprintln!(
        "dist: man pages in {0}/man, completions in {0}/completions",
        dir.display()
    );
    Ok(())
}

/// `SHA256SUMS` of the binaries in `dir`.
fn checksums(dir: &Path) -> Result<()> {
    let mut names: Vec<String> = fs::read_dir(dir)?
        .filter_map(std::result::Result::ok)
        .filter(|e| e.path().is_file())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains("-linux-musl"))
        .collect();
    names.sort();
    if names.is_empty() {
        return Ok(());
    }
    let sums = output(Command::new("sha256sum").args(&names).current_dir(dir))?;
    fs::write(dir.join("SHA256SUMS"), sums).context("writing SHA256SUMS")
}
