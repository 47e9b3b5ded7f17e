//! Running external commands: checked status, captured output, and errors that show the
//! command line and its stderr.

use std::{
    env,
    ffi::OsStr,
    path::{Path, PathBuf},
    process::{Command, Output, Stdio},
    sync::atomic::{AtomicBool, Ordering},
};

use anyhow::{Context as _, Result, bail};

/// The command line of `cmd`, for messages.
#[must_use]
pub fn describe(cmd: &Command) -> String {
    let mut line = cmd.get_program().to_string_lossy().into_owned();
    for arg in cmd.get_args() {
        line.push(' ');
        line.push_str(&arg.to_string_lossy());
    }
    line
}

/// Runs `cmd` with inherited stdio; fails unless it exits 0.
///
/// # Errors
/// If `cmd` cannot be started or does not exit 0.
pub fn run(cmd: &mut Command) -> Result<()> {
    let status = cmd
        .status()
        .with_context(|| format!("starting `{}`", describe(cmd)))?;
    if !status.success() {
        bail!("`{}` failed ({status})", describe(cmd));
    }
    Ok(())
}

/// Runs `cmd` capturing its output, whatever its exit status.
///
/// # Errors
/// If `cmd` cannot be started.
pub fn capture(cmd: &mut Command) -> Result<Output> {
    cmd.stdin(Stdio::null())
        .output()
        .with_context(|| format!("starting `{}`", describe(cmd)))
}

/// Runs `cmd` quietly and returns its stdout; on failure the error holds its stderr.
///
/// # Errors
/// If `cmd` cannot be started or does not exit 0 (the error holds its stderr).
pub fn output(cmd: &mut Command) -> Result<String> {
    let out = capture(cmd)?;
    if !out.status.success() {
        bail!(
            "`{}` failed ({}): {}",
            describe(cmd),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Runs `cmd` quietly with `input` on its stdin and returns its stdout (like [`output`]).
///
/// # Errors
/// If `cmd` cannot be started, fed or waited for, or does not exit 0.
pub fn output_with_input(cmd: &mut Command, input: &str) -> Result<String> {
    use std::io::Write as _;
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("starting `{}`", describe(cmd)))?;
    let written = child
        .stdin
        .take()
        .map(|mut stdin| stdin.write_all(input.as_bytes()));
    let out = child.wait_with_output()?;
    if !out.status.success() {
        bail!(
            "`{}` failed ({}): {}",
            describe(cmd),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    written
        .transpose()
        .with_context(|| format!("writing to `{}`", describe(cmd)))?;
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Builds `program args…`.
pub fn command<I, S>(program: impl AsRef<OsStr>, args: I) -> Command
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let mut cmd = Command::new(program);
    cmd.args(args);
    cmd
}

/// Where `program` is on `PATH`, if anywhere.
#[must_use]
pub fn find_program(program: &str) -> Option<PathBuf> {
    let path = env::var_os("PATH").unwrap_or_default();
    env::split_paths(&path)
        .map(|dir| dir.join(program))
        .find(|candidate| is_executable(candidate))
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt as _;
    path.metadata()
        .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// Whether this process runs as root (effective uid 0).
#[must_use]
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// Fails with a message telling the user to run as root, naming `what` needs it.
///
/// # Errors
/// When not running as root.
pub fn require_root(what: &str) -> Result<()> {
    if !is_root() {
        bail!("{what} needs root: run it as root (e.g. `sudo -E cargo xtask …`)");
    }
    Ok(())
}

/// Fails naming the programs (and their Debian packages) missing from PATH; `who` says what
/// needs them.
///
/// # Errors
/// When any of `needed` is not on `PATH`.
pub fn require_programs(needed: &[(&str, &str)], who: &str) -> Result<()> {
    let missing: Vec<String> = needed
        .iter()
        .filter(|(program, _)| find_program(program).is_none())
        .map(|(program, package)| format!("{program} ({package})"))
        .collect();
    if !missing.is_empty() {
        bail!(
            "{who} needs {} on PATH: run `cargo xtask setup` (as root, PATH must hold /usr/sbin)",
            missing.join(", ")
        );
    }
    Ok(())
}

/// Blocks until this process holds an exclusive lock on `path`; released when the file drops.
///
/// # Errors
/// If `path` cannot be created or locked.
pub fn exclusive_lock(path: &str) -> Result<std::fs::File> {
    use std::os::fd::AsRawFd as _;
    let file = std::fs::File::create(path).with_context(|| format!("creating {path}"))?;
    // SAFETY: the descriptor is valid for the call; flock blocks until the lock is ours.
    if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) } != 0 {
        return Err(std::io::Error::last_os_error()).with_context(|| format!("locking {path}"));
    }
    Ok(file)
}

/// Set by SIGINT while [`with_sigint_flag`] runs: long tasks (demo, bench) stop at their next
/// check and clean up instead of dying with the lab half torn down.
static INTERRUPTED: AtomicBool = AtomicBool::new(false);

/// Whether Ctrl-C was pressed inside [`with_sigint_flag`].
#[must_use]
pub fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::SeqCst)
}

/// Runs `f` with SIGINT turned into the [`interrupted`] flag, then restores the default.
pub fn with_sigint_flag<T>(f: impl FnOnce() -> T) -> T {
    // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
    unsafe { libc::signal(libc::SIGINT, on_sigint as *const () as libc::sighandler_t) };
    let result = f();
    // SAFETY: restores the default disposition.
    unsafe { libc::signal(libc::SIGINT, libc::SIG_DFL) };
    result
}

extern "C" fn on_sigint(_: libc::c_int) {
    INTERRUPTED.store(true, Ordering::SeqCst);
}
