//! `cargo xtask dist`: pktrace (and kubectl-pktrace) as static musl binaries with the eBPF
//! object embedded, in `target/dist/`:
//!
//! - `pktrace-<arch>-linux-musl`, `kubectl-pktrace-<arch>-linux-musl` (`x86_64`, aarch64);
//! - `image/linux-<amd64|arm64>/pktrace`: the layout `deploy/Dockerfile` copies from;
//! - `man/pktrace.1`, `man/pktrace-merge.1`, `completions/{pktrace.bash,_pktrace,pktrace.fish}`
//!   (from the binary's hidden `--generate`);
//! - `SHA256SUMS`.
//!
//! The `ship` profile (workspace Cargo.toml) is release, stripped, with thin LTO.

use std::{
    fs,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context as _, Result, bail};

use crate::{
    cmd::{find_program, output, run},
    target_dir, workspace_root,
};

/// A target `dist` builds for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DistTarget {
    /// Rust's target triple.
    pub triple: &'static str,
    /// The suffix of the file names: `x86_64-linux-musl`.
    pub suffix: &'static str,
    /// The platform's architecture as container images name it.
    pub image_arch: &'static str,
    /// C compiler (ring, in kubectl-pktrace) and linker, from Debian's packages.
    pub cc: &'static str,
    pub linker: Option<&'static str>,
}

/// `x86_64`: Debian's musl-gcc compiles C; rustc links with its own musl (self-contained).
pub const X86_64: DistTarget = DistTarget {
    triple: "x86_64-unknown-linux-musl",
    suffix: "x86_64-linux-musl",
    image_arch: "amd64",
    cc: "musl-gcc",
    linker: None,
};

/// aarch64: Debian's cross gcc compiles ring's C and links (rustc brings musl's crt and libc).
pub const AARCH64: DistTarget = DistTarget {
    triple: "aarch64-unknown-linux-musl",
    suffix: "aarch64-linux-musl",
    image_arch: "arm64",
    cc: "aarch64-linux-gnu-gcc",
    linker: Some("aarch64-linux-gnu-gcc"),
};

/// Every target `cargo xtask dist` builds by default.
pub const TARGETS: [DistTarget; 2] = [X86_64, AARCH64];

/// The cargo profile of the shipped binaries.
const PROFILE: &str = "ship";

/// The binaries shipped.
pub const BINARIES: [&str; 2] = ["pktrace", "kubectl-pktrace"];

/// `target/dist`.
#[must_use]
pub fn dist_dir() -> PathBuf {
    target_dir().join("dist")
}

/// Where `dist` puts `bin` for `target`.
#[must_use]
pub fn dist_path(bin: &str, target: &DistTarget) -> PathBuf {
    dist_dir().join(format!("{bin}-{}", target.suffix))
}

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

/// Builds both binaries for `target` with the `ship` profile, checks they are static and
/// copies them to `target/dist`; returns the pktrace path.
///
/// # Errors
/// As [`dist`].
pub fn build(target: &DistTarget) -> Result<PathBuf> {
    if find_program(target.cc).is_none() {
        bail!(
            "{} not found (needed to build for {}): run `cargo xtask setup`",
            target.cc,
            target.triple
        );
    }
    let mut cargo = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    cargo
        .current_dir(workspace_root())
        .args([
            "build",
            "--profile",
            PROFILE,
            "--target",
            target.triple,
            "-p",
            "tracer-user",
        ])
        .args(BINARIES.iter().flat_map(|b| ["--bin", b]));
    cross_env(&mut cargo, target);
    run(&mut cargo).with_context(|| {
        format!(
            "building for {}; if rustc lacks the target, run `cargo xtask setup`",
            target.triple
        )
    })?;
    let built = target_dir().join(target.triple).join(PROFILE);
    for bin in BINARIES {
        let from = built.join(bin);
        let bytes = fs::read(&from).with_context(|| format!("reading {}", from.display()))?;
        if !is_static_elf(&bytes)? {
            bail!(
                "{} needs a dynamic loader: it must be static",
                from.display()
            );
        }
        let to = dist_path(bin, target);
        copy(&from, &to)?;
    }
    let image = dist_dir().join(format!("image/linux-{}/pktrace", target.image_arch));
    copy(&built.join("pktrace"), &image)?;
    Ok(dist_path("pktrace", target))
}

/// Points cargo's C compiler and linker for `target` at Debian's (`CC_<triple>`,
/// `CARGO_TARGET_<TRIPLE>_LINKER`), as every cross build of the workspace needs.
pub fn cross_env(cargo: &mut Command, target: &DistTarget) {
    let env_triple = target.triple.replace('-', "_");
    cargo.env(format!("CC_{env_triple}"), target.cc);
    if let Some(linker) = target.linker {
        cargo.env(
            format!("CARGO_TARGET_{}_LINKER", env_triple.to_uppercase()),
            linker,
        );
    }
}

fn copy(from: &Path, to: &Path) -> Result<()> {
    if let Some(dir) = to.parent() {
        fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    // Replace rather than overwrite: a running copy of the old file stays intact.
    let _ = fs::remove_file(to);
    fs::copy(from, to)
        .with_context(|| format!("copying {} to {}", from.display(), to.display()))?;
    Ok(())
}

/// True when `elf` (an ELF64 little-endian executable) has no `PT_INTERP`: it needs no
/// dynamic loader (`file` says "statically linked" or "static-pie linked").
///
/// # Errors
/// `elf` is not a 64-bit little-endian ELF file, or its program headers are cut short.
pub fn is_static_elf(elf: &[u8]) -> Result<bool> {
    use object::{
        LittleEndian,
        elf::{FileHeader64, PT_INTERP},
        read::elf::{FileHeader as _, ProgramHeader as _},
    };
    let header = FileHeader64::<LittleEndian>::parse(elf)
        .ok()
        .filter(|h| h.endian().is_ok_and(|e| e == LittleEndian))
        .context("not a 64-bit little-endian ELF file")?;
    let headers = header
        .program_headers(LittleEndian, elf)
        .map_err(|e| anyhow::anyhow!("reading the program headers: {e}"))?;
    Ok(!headers.iter().any(|h| h.p_type(LittleEndian) == PT_INTERP))
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

#[cfg(test)]
mod tests {
    use super::*;

    fn elf(headers: &[u32]) -> Vec<u8> {
        let mut e = vec![0u8; 64 + headers.len() * 56];
        // Magic, ELFCLASS64, ELFDATA2LSB, EV_CURRENT.
        e[..7].copy_from_slice(b"\x7fELF\x02\x01\x01");
        e[0x20..0x28].copy_from_slice(&64u64.to_le_bytes());
        e[0x36..0x38].copy_from_slice(&56u16.to_le_bytes());
        e[0x38..0x3a].copy_from_slice(&u16::try_from(headers.len()).unwrap().to_le_bytes());
        for (i, &t) in headers.iter().enumerate() {
            e[64 + i * 56..68 + i * 56].copy_from_slice(&t.to_le_bytes());
        }
        e
    }

    #[test]
    fn static_means_no_interpreter() {
        // PT_PHDR, PT_LOAD, PT_DYNAMIC (static-pie has one), PT_GNU_STACK.
        assert!(is_static_elf(&elf(&[6, 1, 2, 0x6474_e551])).unwrap());
        assert!(
            !is_static_elf(&elf(&[6, 3, 1, 2])).unwrap(),
            "PT_INTERP: dynamic"
        );
        assert!(is_static_elf(b"#!/bin/sh\n").is_err());
        let mut big_endian = elf(&[1]);
        big_endian[5] = 2;
        assert!(is_static_elf(&big_endian).is_err());
        let mut truncated = elf(&[1, 3]);
        truncated.truncate(80);
        assert!(is_static_elf(&truncated).is_err());
        // This test binary itself is dynamic (glibc host build).
        let me = fs::read(std::env::current_exe().unwrap()).unwrap();
        assert!(!is_static_elf(&me).unwrap());
    }

    #[test]
    fn names() {
        assert_eq!(
            dist_path("pktrace", &X86_64).file_name().unwrap(),
            "pktrace-x86_64-linux-musl"
        );
        assert_eq!(
            dist_path("kubectl-pktrace", &AARCH64).file_name().unwrap(),
            "kubectl-pktrace-aarch64-linux-musl"
        );
    }
}
