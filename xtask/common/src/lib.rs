//! What the crates behind `cargo xtask` share (xtask itself, the lab, the VM runner, the
//! bench): [`cmd`] runs commands, [`musl`] builds the static pktrace that ships, and this
//! root knows the workspace's paths, the xtask executable and the environment variables the
//! tiers pass to the tests.

pub mod cmd;
pub mod musl;
pub mod needs;

use std::{
    env,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context as _, Result};

/// Environment variable naming the xtask binary (set by `cargo xtask integration-test` for
/// the tests, whose own executable is not xtask).
pub const XTASK_BIN_ENV: &str = "PKTRACE_XTASK_BIN";
/// Environment variable naming the pktrace binary to run (tests, demo).
pub const PKTRACE_BIN_ENV: &str = "PKTRACE_BIN";
/// Environment variable naming the static musl pktrace of `cargo xtask dist` (tests).
pub const PKTRACE_DIST_BIN_ENV: &str = "PKTRACE_DIST_BIN";

/// Held for the whole of an integration run, and by the bench's soak (outside the lab's own
/// directory).
pub const INTEGRATION_LOCK: &str = "/run/pktrace-integration.lock";

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

/// The workspace root (two levels above this crate, `xtask/common`).
#[must_use]
pub fn workspace_root() -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest
        .ancestors()
        .nth(2)
        .map_or_else(|| manifest.to_path_buf(), Path::to_path_buf)
}

/// Cargo's target directory: `$CARGO_TARGET_DIR`, else `<workspace>/target`.
#[must_use]
pub fn target_dir() -> PathBuf {
    env::var_os("CARGO_TARGET_DIR").map_or_else(|| workspace_root().join("target"), PathBuf::from)
}

/// `cargo ARGS` (the cargo running xtask, if any) in the workspace root.
#[must_use]
pub fn cargo_command(args: &[&str]) -> Command {
    let mut cmd = Command::new(env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    cmd.args(args).current_dir(workspace_root());
    cmd
}

/// `$PKTRACE_BIN` if set (`who` says so on stderr), else a fresh release build of pktrace;
/// with where it came from, for reports.
///
/// # Errors
/// If the build fails.
pub fn pktrace_binary(who: &str) -> Result<(PathBuf, String)> {
    if let Some(path) = env::var_os(PKTRACE_BIN_ENV).filter(|p| !p.is_empty()) {
        let path = PathBuf::from(path);
        eprintln!(
            "{who}: using {} from {PKTRACE_BIN_ENV} (not building)",
            path.display()
        );
        let origin = format!("{} (from {PKTRACE_BIN_ENV})", path.display());
        return Ok((path, origin));
    }
    cmd::run(&mut cargo_command(&[
        "build",
        "--release",
        "-p",
        "tracer-user",
    ]))
    .context("building pktrace failed (see the compiler output above)")?;
    let origin = "built from the working tree (cargo build --release -p tracer-user)".to_owned();
    Ok((target_dir().join("release/pktrace"), origin))
}

#[cfg(test)]
mod exe_tests {
    use std::{fs, path::PathBuf};

    use tempfile::TempDir;

    use super::{replaced, workspace_root};

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

    #[test]
    fn the_workspace_root_holds_the_workspace_manifest() {
        let manifest = fs::read_to_string(workspace_root().join("Cargo.toml")).unwrap();
        assert!(manifest.contains("[workspace]"), "{manifest}");
    }
}
