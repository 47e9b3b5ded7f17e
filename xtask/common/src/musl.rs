//! The static musl pktrace (and kubectl-pktrace) with the eBPF object embedded, as
//! `cargo xtask dist` ships it and the integration and VM tiers test it: built with the
//! `ship` profile (workspace Cargo.toml: release, stripped, thin LTO), checked static and
//! copied to `target/dist/` (`pktrace-<arch>-linux-musl`, `kubectl-pktrace-<arch>-linux-musl`
//! and `image/linux-<amd64|arm64>/pktrace`, the layout `deploy/Dockerfile` copies from).

use std::{
    fs,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context as _, Result, bail};

use crate::{
    cargo_command,
    cmd::{find_program, run},
    target_dir,
};

/// A target the static build is for.
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

/// Where the build puts `bin` for `target`.
#[must_use]
pub fn dist_path(bin: &str, target: &DistTarget) -> PathBuf {
    dist_dir().join(format!("{bin}-{}", target.suffix))
}

/// Builds both binaries for `target` with the `ship` profile, checks they are static and
/// copies them to `target/dist`; returns the pktrace path.
///
/// # Errors
/// A tool is missing (run `cargo xtask setup`), the build failed, or a binary is not static.
pub fn build(target: &DistTarget) -> Result<PathBuf> {
    if find_program(target.cc).is_none() {
        bail!(
            "{} not found (needed to build for {}): run `cargo xtask setup`",
            target.cc,
            target.triple
        );
    }
    let mut cargo = cargo_command(&[
        "build",
        "--profile",
        PROFILE,
        "--target",
        target.triple,
        "-p",
        "tracer-user",
    ]);
    cargo.args(BINARIES.iter().flat_map(|b| ["--bin", b]));
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
