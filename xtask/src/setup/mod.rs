//! `cargo xtask setup`: installs what building and testing pktrace needs, idempotently,
//! saying what it did and what was already there: Debian packages for the lab, the nightly
//! toolchain with LLVM 22 for the eBPF crate, bpf-linker linked to that LLVM, the musl targets
//! of `cargo xtask dist`, kubernetes-validate for the manifests, and cargo-fuzz.

mod apt;
mod cargo_fuzz;
mod toolchain;
pub mod validator;

use anyhow::Result;

pub use self::{
    apt::PACKAGES,
    toolchain::{llvm_major, soname_of},
};

/// Runs every setup step; fails on the first that cannot be completed.
///
/// # Errors
/// On the first step that cannot be completed.
pub fn setup() -> Result<()> {
    apt::ensure_packages()?;
    let sysroot = toolchain::ensure_nightly()?;
    toolchain::ensure_bpf_linker(&sysroot)?;
    cargo_fuzz::ensure_cargo_fuzz()?;
    toolchain::ensure_dist_targets()?;
    validator::ensure()?;
    eprintln!("setup: done");
    Ok(())
}
