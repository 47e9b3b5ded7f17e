//! Builds the eBPF object (tracer-ebpf, for the BPF target) so the binary can embed it, and
//! stamps the build for `--version`: `PKTRACE_GIT_COMMIT` (the workspace's commit) and
//! `PKTRACE_EBPF_SHA256` (SHA-256 of the embedded object).
//!
//! Cross-compiling (e.g. `--target aarch64-unknown-linux-musl`) works as is: the BPF
//! target's endianness and `bpf_target_arch` come from the target's `CARGO_CFG_TARGET_*`.
//!
//! The object is built as aya-build builds it (nightly, `-Z build-std=core`, BTF), but in one
//! cargo target folder per BPF target and architecture shared by every build of the workspace
//! (`<target>/ebpf/`): aya-build keeps its folder in `OUT_DIR`, which differs per profile
//! and target, so each of them (test, doc, release, the static and the arm64 builds) compiled
//! `core` and the programs again from nothing, about 1.5 min each.
use std::{
    env,
    fmt::Write as _,
    fs,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context as _, anyhow};
use sha2::{Digest as _, Sha256};

fn main() -> anyhow::Result<()> {
    // aya-build watches only the eBPF crate; the event layout lives in tracer-common.
    println!("cargo:rerun-if-changed=../tracer-common/src");
    println!("cargo:rerun-if-env-changed=AYA_BUILD_SKIP");
    // Tests that need the kernel object are ignored, not passed, in a build without it.
    println!("cargo::rustc-check-cfg=cfg(no_ebpf_object)");
    let out_dir = PathBuf::from(env::var_os("OUT_DIR").ok_or_else(|| anyhow!("OUT_DIR not set"))?);
    let manifest = PathBuf::from(env::var("CARGO_MANIFEST_DIR")?);
    let workspace = manifest
        .parent()
        .ok_or_else(|| anyhow!("tracer-user has no parent directory"))?;
    stamp_commit(workspace);
    if env::var_os("AYA_BUILD_SKIP").is_some_and(|v| v == "1" || v.eq_ignore_ascii_case("true")) {
        // Host-only work (unit tests of the pure logic): embed an empty object; loading it
        // fails with a clear error at run time.
        println!("cargo:rustc-cfg=no_ebpf_object");
        fs::write(out_dir.join("tracer"), b"").context("writing the placeholder eBPF object")?;
    } else {
        build_ebpf(workspace, &out_dir)?;
    }
    let object = fs::read(out_dir.join("tracer")).context("reading the built eBPF object")?;
    let digest = Sha256::digest(&object);
    let hex = digest.iter().fold(String::new(), |mut hex, b| {
        let _ = write!(hex, "{b:02x}");
        hex
    });
    println!("cargo:rustc-env=PKTRACE_EBPF_SHA256={hex}");
    Ok(())
}

/// Builds tracer-ebpf's `tracer` binary for the BPF target of the target being built and copies
/// it to `out_dir/tracer`: `rustup run nightly cargo build --release -Z build-std=core` with
/// BTF, in `<target dir>/ebpf/<bpf target>-<arch>` (kept between builds; see the crate doc).
fn build_ebpf(workspace: &Path, out_dir: &Path) -> anyhow::Result<()> {
    let root = workspace.join("tracer-ebpf");
    println!("cargo:rerun-if-changed={}", root.display());
    let endian = env::var("CARGO_CFG_TARGET_ENDIAN")?;
    let bpf = if endian == "big" { "bpfeb" } else { "bpfel" };
    // aya-ebpf reads `pt_regs` the way of this architecture (`bpf_target_arch`).
    let arch = env::var("CARGO_CFG_TARGET_ARCH")?;
    let target = format!("{bpf}-unknown-none");
    let targets =
        env::var_os("CARGO_TARGET_DIR").map_or_else(|| workspace.join("target"), PathBuf::from);
    let target_dir = targets.join("ebpf").join(format!("{target}-{arch}"));
    let rustflags = [
        format!("--cfg=bpf_target_arch=\"{arch}\""),
        "-Cdebuginfo=2".to_owned(),
        "-Clink-arg=--btf".to_owned(),
    ]
    .join("\x1f");
    let status = Command::new("rustup")
        .args([
            "run",
            "nightly",
            "cargo",
            "build",
            "--package",
            "tracer-ebpf",
            "--bins",
        ])
        .args(["--release", "--target", &target, "-Z", "build-std=core"])
        .arg("--target-dir")
        .arg(&target_dir)
        .current_dir(workspace)
        .env("CARGO_ENCODED_RUSTFLAGS", rustflags)
        // The outer build's compiler and wrappers are not nightly's.
        .env_remove("RUSTC")
        .env_remove("RUSTC_WORKSPACE_WRAPPER")
        .env_remove("RUSTFLAGS")
        .env_remove("CARGO_BUILD_TARGET")
        .status()
        .context("starting `rustup run nightly cargo build` for tracer-ebpf")?;
    anyhow::ensure!(status.success(), "building tracer-ebpf failed ({status})");
    let built = target_dir.join(&target).join("release").join("tracer");
    fs::copy(&built, out_dir.join("tracer"))
        .with_context(|| format!("copying {}", built.display()))?;
    Ok(())
}

/// Sets `PKTRACE_GIT_COMMIT`: `$PKTRACE_GIT_COMMIT` if set (builds from a tarball), else
/// `git rev-parse` of the workspace (12 hex digits), else `unknown`. Reruns when HEAD moves.
fn stamp_commit(workspace: &Path) {
    println!("cargo:rerun-if-env-changed=PKTRACE_GIT_COMMIT");
    let commit = env::var("PKTRACE_GIT_COMMIT")
        .ok()
        .filter(|c| !c.is_empty())
        .or_else(|| {
            let head = git(workspace, &["rev-parse", "--short=12", "HEAD"])?;
            // HEAD itself (branch switches), the branch's ref, and packed refs: each only
            // when the file exists (cargo takes a missing one as changed on every build, which
            // rebuilt tracer-user and all that depends on it each time).
            for name in ["HEAD", "packed-refs"] {
                if let Some(path) = git(workspace, &["rev-parse", "--git-path", name])
                    .map(|p| workspace.join(p))
                    .filter(|p| p.exists())
                {
                    println!("cargo:rerun-if-changed={}", path.display());
                }
            }
            if let Some(branch) = git(workspace, &["symbolic-ref", "-q", "HEAD"])
                && let Some(path) = git(workspace, &["rev-parse", "--git-path", &branch])
            {
                // A packed branch has no file of its own: its folder shows a new commit.
                let path = workspace.join(path);
                let watched = if path.exists() {
                    Some(path.as_path())
                } else {
                    path.parent().filter(|d| d.exists())
                };
                if let Some(watched) = watched {
                    println!("cargo:rerun-if-changed={}", watched.display());
                }
            }
            Some(head)
        })
        .unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=PKTRACE_GIT_COMMIT={commit}");
}

/// `git ARGS` in `dir`, trimmed stdout; `None` when git is missing or fails.
fn git(dir: &Path, args: &[&str]) -> Option<String> {
    let out = Command::new("git")
        .args(args)
        .current_dir(dir)
        .output()
        .ok()?;
    let text = String::from_utf8(out.stdout).ok()?;
    (out.status.success() && !text.trim().is_empty()).then(|| text.trim().to_owned())
}
