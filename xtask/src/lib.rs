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

use std::{
    env,
    path::{Path, PathBuf},
};

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
/// set, else the current executable, or the file now at its path when a build replaced it
/// while it ran (an hour's soak outlives a `cargo build`).
///
/// # Errors
/// If neither is set and the current executable cannot be found.
pub fn xtask_exe() -> Result<PathBuf> {
    match env::var_os(XTASK_BIN_ENV) {
        Some(path) if !path.is_empty() => Ok(PathBuf::from(path)),
        _ => env::current_exe()
            .map(replaced)
            .context("finding the xtask executable"),
    }
}

/// The path a replaced executable had: Linux names a running executable whose file was
/// replaced or removed `<path> (deleted)`; the file at `<path>`, if there is one, is what a
/// build put there.
fn replaced(exe: PathBuf) -> PathBuf {
    let Some(path) = exe.to_str().and_then(|s| s.strip_suffix(" (deleted)")) else {
        return exe;
    };
    if exe.exists() || !Path::new(path).is_file() {
        return exe;
    }
    PathBuf::from(path)
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

#[cfg(test)]
mod exe_tests {
    use std::{fs, path::PathBuf};

    use tempfile::TempDir;

    use super::replaced;

    #[test]
    fn a_replaced_executable_is_found_at_its_path() {
        let tmp = TempDir::new().unwrap();
        let dir = tmp.path();
        let exe = dir.join("xtask");
        fs::write(&exe, b"new build").unwrap();
        let deleted = PathBuf::from(format!("{} (deleted)", exe.display()));
        assert_eq!(replaced(deleted), exe);
        // Not replaced by anything: the name is kept as the kernel gave it.
        let gone = dir.join("gone (deleted)");
        assert_eq!(replaced(gone.clone()), gone);
        // A plain path is left alone.
        assert_eq!(replaced(exe.clone()), exe);
    }
}
