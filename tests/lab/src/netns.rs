//! Network namespace primitives over iproute2: create, delete, list, run a command inside,
//! and set a namespace's sysctls. Every name passed here starts with `pkt-`; nothing touches
//! the root namespace.

use std::{ffi::OsStr, fs, process::Command};

use anyhow::{Result, ensure};
use xtask_common::cmd::{command, output};

use super::topology::NS_PREFIX;

/// A command that runs `program args…` inside network namespace `ns` (`ip netns exec`).
pub fn in_ns<I, S>(ns: &str, program: impl AsRef<OsStr>, args: I) -> Command
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let mut cmd = Command::new("ip");
    cmd.args(["netns", "exec", ns]).arg(program).args(args);
    cmd
}

/// Moves the calling thread (only it: `setns` is per thread) into network namespace `ns`, for
/// work that needs a socket or a BPF link there. Run it on a thread of its own that ends with
/// that work.
///
/// # Errors
/// If `ns` is not a lab namespace, cannot be opened, or `setns` fails.
pub fn enter_on_this_thread(ns: &str) -> Result<()> {
    use std::os::fd::AsRawFd as _;
    guard(ns)?;
    let file = fs::File::open(format!("/run/netns/{ns}"))
        .map_err(|e| anyhow::anyhow!("opening namespace {ns}: {e}"))?;
    // SAFETY: setns on a namespace fd we hold; it affects the calling thread only.
    if unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
        anyhow::bail!("setns into {ns}: {}", std::io::Error::last_os_error());
    }
    Ok(())
}

/// Runs `ip -n <ns> <line>`, `line` being split at whitespace (e.g. `link set lo up`);
/// fails on error.
///
/// # Errors
/// If `ns` is not a lab namespace or `ip` fails.
pub fn ip(ns: &str, line: &str) -> Result<()> {
    guard(ns)?;
    output(&mut command(
        "ip",
        ["-n", ns].into_iter().chain(line.split_whitespace()),
    ))?;
    Ok(())
}

/// Sets sysctl `key` (e.g. `net.ipv4.ip_forward`) to `value` inside `ns`.
///
/// # Errors
/// If `ns` is not a lab namespace or the sysctl cannot be set.
pub fn sysctl(ns: &str, key: &str, value: &str) -> Result<()> {
    guard(ns)?;
    output(&mut in_ns(
        ns,
        "sysctl",
        ["-q", "-w", &format!("{key}={value}")],
    ))?;
    Ok(())
}

/// Creates namespace `ns` with `lo` up.
///
/// # Errors
/// If `ns` is not a lab namespace, or it cannot be created or `lo` set up.
pub fn create(ns: &str) -> Result<()> {
    guard(ns)?;
    output(&mut command("ip", ["netns", "add", ns]))?;
    ip(ns, "link set lo up")
}

/// The named network namespaces that exist now.
///
/// # Errors
/// If the namespaces' directory cannot be read.
pub fn list() -> Result<Vec<String>> {
    // `/run/netns` is what `ip netns list` reads; absent until the first `ip netns add`.
    let Ok(entries) = fs::read_dir("/run/netns") else {
        return Ok(Vec::new());
    };
    let mut names: Vec<String> = entries
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .collect();
    names.sort();
    Ok(names)
}

/// Whether namespace `ns` exists.
#[must_use]
pub fn exists(ns: &str) -> bool {
    fs::metadata(format!("/run/netns/{ns}")).is_ok()
}

/// The pids of the processes living in `ns` (`ip netns pids`).
///
/// # Errors
/// If `ns` is not a lab namespace or `ip netns pids` fails.
pub fn pids(ns: &str) -> Result<Vec<i32>> {
    guard(ns)?;
    let out = output(&mut command("ip", ["netns", "pids", ns]))?;
    Ok(out
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect())
}

/// Deletes namespace `ns` (its interfaces go with it).
///
/// # Errors
/// If `ns` is not a lab namespace or `ip netns del` fails.
pub fn delete(ns: &str) -> Result<()> {
    guard(ns)?;
    output(&mut command("ip", ["netns", "del", ns]))?;
    Ok(())
}

/// Refuses any namespace that is not the lab's.
fn guard(ns: &str) -> Result<()> {
    ensure!(
        ns.starts_with(NS_PREFIX),
        "refusing to touch namespace {ns:?}: not a lab namespace"
    );
    Ok(())
}
