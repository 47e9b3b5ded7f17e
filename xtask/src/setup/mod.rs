//! `cargo xtask setup`: installs what building and testing pktrace needs, idempotently,
//! saying what it did and what was already there: Debian packages for the lab, the nightly
//! toolchain with LLVM 22 for the eBPF crate, and bpf-linker linked to that LLVM.

mod apt;
mod toolchain;

use anyhow::Result;

pub use self::{
    apt::PACKAGES,
    toolchain::{llvm_major, soname_of},
};

/// Runs every setup step; fails on the first that cannot be completed.
pub fn setup() -> Result<()> {
    apt::ensure_packages()?;
    let sysroot = toolchain::ensure_nightly()?;
    toolchain::ensure_bpf_linker(&sysroot)?;
    eprintln!("setup: done");
    Ok(())
}
