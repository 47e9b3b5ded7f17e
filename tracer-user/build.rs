//! Builds the eBPF object (tracer-ebpf, for the BPF target) so the binary can embed it.
use std::{env, fs, path::PathBuf};

use anyhow::{Context as _, anyhow};
use aya_build::{Package, Toolchain};

fn main() -> anyhow::Result<()> {
    // aya-build watches only the eBPF crate; the event layout lives in tracer-common.
    println!("cargo:rerun-if-changed=../tracer-common/src");
    println!("cargo:rerun-if-env-changed=AYA_BUILD_SKIP");
    let out_dir = PathBuf::from(env::var_os("OUT_DIR").ok_or_else(|| anyhow!("OUT_DIR not set"))?);
    if env::var_os("AYA_BUILD_SKIP").is_some_and(|v| v == "1" || v.eq_ignore_ascii_case("true")) {
        // Host-only work (unit tests of the pure logic): embed an empty object; loading it
        // fails with a clear error at run time.
        fs::write(out_dir.join("tracer"), b"").context("writing the placeholder eBPF object")?;
        return Ok(());
    }
    let metadata = cargo_metadata_root()?;
    let ebpf = Package {
        name: "tracer-ebpf",
        root_dir: &metadata,
        ..Package::default()
    };
    aya_build::build_ebpf([ebpf], Toolchain::default())
}

fn cargo_metadata_root() -> anyhow::Result<String> {
    let manifest = PathBuf::from(env::var("CARGO_MANIFEST_DIR")?);
    let root = manifest
        .parent()
        .ok_or_else(|| anyhow!("tracer-user has no parent directory"))?
        .join("tracer-ebpf");
    root.to_str()
        .map(str::to_owned)
        .ok_or_else(|| anyhow!("non-UTF-8 path {}", root.display()))
}
