//! The lab's background servers: started detached (`setsid`) inside their namespaces as
//! `ip netns exec <ns> <xtask> lab serve …`, tracked by pid files, stopped with SIGTERM then
//! SIGKILL, and every process in a lab namespace killed on teardown.

use std::{
    fs,
    os::unix::process::CommandExt as _,
    path::PathBuf,
    process::Stdio,
    thread,
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result, bail};
use xtask_common::{cmd::is_root, xtask_exe};

use super::{
    netns::{self, in_ns},
    topology::{LAB_DIR, Server},
};

/// How long `lab up` waits for a server to bind its sockets.
const READY_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a process gets between SIGTERM and SIGKILL.
const STOP_GRACE: Duration = Duration::from_secs(2);

/// The server log of namespace `ns` (`tcp client=…` / `udp client=…` lines).
#[must_use]
pub fn log_path(ns: &str) -> PathBuf {
    PathBuf::from(format!("{LAB_DIR}/logs/{ns}.log"))
}

fn pid_path(key: &str) -> PathBuf {
    PathBuf::from(format!("{LAB_DIR}/pids/{key}.pid"))
}

fn ready_path(key: &str) -> PathBuf {
    PathBuf::from(format!("{LAB_DIR}/pids/{key}.ready"))
}

/// Starts the server of `ns` in the background and waits until its sockets are bound.
///
/// # Errors
/// If `ns` has no server, or it does not start (as [`spawn`]).
pub fn start(ns: &str, server: Server) -> Result<i32> {
    let mut args: Vec<String> = vec!["lab".into(), "serve".into()];
    match server {
        Server::Tcp(port) => args.extend(["--tcp".into(), port.to_string()]),
        Server::Udp(port) => args.extend(["--udp".into(), port.to_string()]),
        Server::None => bail!("{ns} has no server"),
    }
    args.extend(["--log".into(), log_path(ns).display().to_string()]);
    spawn(ns, ns, args)
}

/// Starts `xtask ARGS --ready-file …` detached in namespace `ns`, its pid, ready file and
/// stderr recorded under `key` (the namespace for pod and host servers), and waits until it
/// has created the ready file.
///
/// # Errors
/// If the process cannot be started, or exits or times out before creating the ready file.
pub fn spawn(key: &str, ns: &str, mut args: Vec<String>) -> Result<i32> {
    let ready = ready_path(key);
    args.extend(["--ready-file".into(), ready.display().to_string()]);
    let errors_path = format!("{LAB_DIR}/logs/{key}.err");
    let errors = fs::File::create(&errors_path)?;
    let mut cmd = in_ns(ns, xtask_exe()?, &args);
    cmd.stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(errors);
    // SAFETY: setsid and close_range are async-signal-safe syscalls. setsid detaches the
    // server from our session and terminal so it outlives this process and ignores the
    // terminal's Ctrl-C. close_range marks every inherited descriptor close-on-exec: a lock
    // held by whoever ran `lab up` (`flock /run/pktrace-integration.lock cargo xtask lab up`
    // passes its descriptor down) must not live on in the servers and block every later lab
    // run until they are killed. Kernels before 5.11 lack the flag: then nothing changes.
    unsafe {
        cmd.pre_exec(|| {
            if libc::setsid() < 0 {
                return Err(std::io::Error::last_os_error());
            }
            libc::syscall(
                libc::SYS_close_range,
                3_u32,
                u32::MAX,
                libc::CLOSE_RANGE_CLOEXEC,
            );
            Ok(())
        });
    }
    let child = cmd
        .spawn()
        .with_context(|| format!("starting the server {key} in {ns}"))?;
    let pid = i32::try_from(child.id()).context("pid out of range")?;
    fs::write(pid_path(key), format!("{pid}\n"))?;
    let deadline = Instant::now() + READY_TIMEOUT;
    while !ready.exists() {
        if !is_alive(pid) || Instant::now() > deadline {
            reap(pid);
            let err = fs::read_to_string(&errors_path).unwrap_or_default();
            bail!("the server {key} in {ns} did not start: {}", err.trim());
        }
        thread::sleep(Duration::from_millis(20));
    }
    Ok(pid)
}

/// The recorded pid of the server `key` (its namespace, for pod and host servers), if any.
#[must_use]
pub fn recorded_pid(key: &str) -> Option<i32> {
    fs::read_to_string(pid_path(key)).ok()?.trim().parse().ok()
}

/// Whether the server of `ns` runs (its recorded pid is alive and in `ns`).
#[must_use]
pub fn is_running(ns: &str) -> bool {
    is_running_as(ns, ns)
}

/// Whether server `key` runs (its recorded pid is alive and in namespace `ns`).
#[must_use]
pub fn is_running_as(key: &str, ns: &str) -> bool {
    recorded_pid(key).is_some_and(|pid| {
        // Without root the namespace's pids cannot be listed: the pid's liveness must do.
        is_alive(pid) && (!is_root() || netns::pids(ns).is_ok_and(|pids| pids.contains(&pid)))
    })
}

/// Whether process `pid` exists and is not a zombie.
#[must_use]
pub fn is_alive(pid: i32) -> bool {
    let Ok(stat) = fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    // Format: `pid (comm) state …`; comm may hold spaces and parentheses.
    stat.rsplit_once(')')
        .and_then(|(_, rest)| rest.split_whitespace().next())
        != Some("Z")
}

/// Kills every process in namespace `ns`: SIGTERM, then SIGKILL after a grace period.
/// Returns how many there were.
///
/// # Errors
/// If the pids in `ns` cannot be listed.
pub fn kill_all_in(ns: &str) -> Result<usize> {
    let pids = netns::pids(ns)?;
    signal_all(&pids, libc::SIGTERM);
    let deadline = Instant::now() + STOP_GRACE;
    while pids.iter().any(|&pid| is_alive(pid)) && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(20));
    }
    let left: Vec<i32> = pids.iter().copied().filter(|&pid| is_alive(pid)).collect();
    signal_all(&left, libc::SIGKILL);
    for _ in 0..50 {
        if !left.iter().any(|&pid| is_alive(pid)) {
            break;
        }
        thread::sleep(Duration::from_millis(20));
    }
    // Our own server children (a test's lab guard started them) would stay zombies.
    for &pid in pids.iter().chain(recorded_pid(ns).as_ref()) {
        reap(pid);
    }
    Ok(pids.len())
}

fn signal_all(pids: &[i32], signal: libc::c_int) {
    for &pid in pids {
        // SAFETY: plain syscall; these pids were just listed in a lab namespace.
        unsafe { libc::kill(pid, signal) };
    }
}

/// Collects `pid` if it is our exited child; a no-op otherwise.
fn reap(pid: i32) {
    let mut status = 0;
    // SAFETY: WNOHANG never blocks; waitpid on a non-child only returns ECHILD.
    unsafe { libc::waitpid(pid, &raw mut status, libc::WNOHANG) };
}
