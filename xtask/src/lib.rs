//! pktrace's task runner: toolchain and package setup, the lab (a simulated AKS node in
//! network namespaces), the demo, and the test tiers. The binary (`cargo xtask …`) is a thin
//! CLI over this library; the integration tests use the lab through it too.

pub mod bench;
pub mod cmd;
pub mod demo;
pub mod deploy;
pub mod dist;
pub mod fuzz;
pub mod lab;
pub mod layers;
pub mod runner;
pub mod setup;
pub mod vm;

use std::{env, path::PathBuf};

use anyhow::{Context as _, Result};

pub use self::setup::setup;

/// Environment variable naming the xtask binary (set by `cargo xtask integration-test` for
/// the tests, whose own executable is not xtask).
pub const XTASK_BIN_ENV: &str = "PKTRACE_XTASK_BIN";
/// Environment variable naming the pktrace binary to run (tests, demo).
pub const PKTRACE_BIN_ENV: &str = "PKTRACE_BIN";
/// Environment variable naming the static musl pktrace of `cargo xtask dist` (tests).
pub const PKTRACE_DIST_BIN_ENV: &str = "PKTRACE_DIST_BIN";

/// The xtask executable, which runs the lab's servers and clients: `$PKTRACE_XTASK_BIN` if
/// set, else the current executable.
///
/// # Errors
/// If neither is set and the current executable cannot be found.
pub fn xtask_exe() -> Result<PathBuf> {
    match env::var_os(XTASK_BIN_ENV) {
        Some(path) if !path.is_empty() => Ok(PathBuf::from(path)),
        _ => env::current_exe().context("finding the xtask executable"),
    }
}

/// The workspace root (the parent of the xtask crate).
#[must_use]
pub fn workspace_root() -> PathBuf {
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    manifest.parent().map_or(manifest.clone(), PathBuf::from)
}

/// Cargo's target directory: `$CARGO_TARGET_DIR`, else `<workspace>/target`.
#[must_use]
pub fn target_dir() -> PathBuf {
    env::var_os("CARGO_TARGET_DIR").map_or_else(|| workspace_root().join("target"), PathBuf::from)
}
