//! Boots the guest in qemu under TCG (the only accelerator that runs stock kernels here; see
//! VM-NOTES.md), with the serial console on stdout: every line goes to a log file and to the
//! terminal as it comes, stamped with the host time since qemu started. A time-out kills it:
//! it runs from the boot marker and starts again at every step marker (one per test run), so a
//! VM that is dealt many runs (one CPU: all of them) is not killed for being long, only for one
//! run that hangs; a shorter one applies until the guest has printed its boot marker.

use std::{
    fs::File,
    io::{BufRead as _, BufReader, Read, Write as _},
    os::unix::process::{CommandExt as _, ExitStatusExt as _},
    path::PathBuf,
    process::{Child, Command, ExitStatus, Stdio},
    sync::mpsc,
    thread,
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result};
use xtask_common::cmd::{describe, find_program};

use super::arch::Arch;

/// How a VM is started.
#[derive(Debug, Clone)]
pub struct QemuConfig {
    /// The guest's architecture: which qemu, machine and console.
    pub arch: Arch,
    pub vmlinuz: PathBuf,
    pub initrd: PathBuf,
    pub memory_mb: u32,
    /// How long the guest may go from its boot marker, or from its latest step marker, to the
    /// next step marker or its end.
    pub timeout: Duration,
    /// The guest must have printed a line holding `boot_marker` by then.
    pub boot_timeout: Duration,
    pub boot_marker: String,
    /// A line holding this starts the time-out again (a run of tests begins).
    pub step_marker: String,
    /// The console log written as the VM runs.
    pub log: PathBuf,
    /// `name=value` words added to the kernel command line (the kernel passes them to
    /// `/init` as environment variables).
    pub init_env: Vec<String>,
}

/// How the VM ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ending {
    /// qemu exited (the guest powered off, or rebooted after a panic: `-no-reboot`).
    Exited(ExitStatus),
    /// Killed after the time-out: one step (or the time before the first) took too long.
    TimedOut,
    /// Killed: no boot marker before the boot time-out.
    BootTimedOut,
}

/// The console, line by line, with the host time each line arrived.
#[derive(Debug, Clone)]
pub struct Console {
    pub lines: Vec<(Duration, String)>,
    pub ending: Ending,
    pub elapsed: Duration,
    /// CPU time qemu used (user + system): with `elapsed`, how much of a CPU it got.
    pub cpu: Duration,
}

/// The qemu command line for `config` (`-nic none`: the guest's only network is the lab's).
///
/// # Errors
/// If the architecture's qemu (`qemu-system-x86_64`, `qemu-system-aarch64`) is not on `PATH`.
pub fn command(config: &QemuConfig) -> Result<Command> {
    let (program, package) = config.arch.qemu();
    let qemu = find_program(program).with_context(|| {
        format!("{program} not found: install {package} (`cargo xtask setup` does)")
    })?;
    let mut cmd = Command::new(qemu);
    cmd.args(config.arch.machine())
        .args(["-m", &config.memory_mb.to_string(), "-smp", "1"])
        .args(["-nographic", "-no-reboot", "-nic", "none"])
        .arg("-kernel")
        .arg(&config.vmlinuz)
        .arg("-initrd")
        .arg(&config.initrd)
        .arg("-append")
        .arg(
            // no_timer_check (x86): a starved TCG vCPU (two guests on two busy cores) can miss
            // the IO-APIC timer check and panic at boot ("IO-APIC + timer doesn't work").
            [config.arch.console(), "panic=-1", "quiet"]
                .into_iter()
                .chain((config.arch == Arch::X86_64).then_some("no_timer_check"))
                .chain(config.init_env.iter().map(String::as_str))
                .collect::<Vec<_>>()
                .join(" "),
        );
    Ok(cmd)
}

/// Runs the VM to its end or the time-out; `echo` sees every console line as it arrives.
///
/// # Errors
/// If qemu is missing or cannot be started, or the log cannot be written.
pub fn run(config: &QemuConfig, echo: impl FnMut(&str)) -> Result<Console> {
    let cmd = command(config)?;
    eprintln!("vm-test: {}", describe(&cmd));
    watch(cmd, config, echo)
}

/// Runs `cmd` (qemu, or a stand-in in the tests) under `config`'s time-outs, its output going to
/// `config.log` and `echo`.
fn watch(mut cmd: Command, config: &QemuConfig, mut echo: impl FnMut(&str)) -> Result<Console> {
    let mut log =
        File::create(&config.log).with_context(|| format!("creating {}", config.log.display()))?;
    let start = Instant::now();
    // SAFETY: prctl is async-signal-safe; nothing else runs between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            // qemu dies with the thread that started it, even if xtask is killed.
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            Ok(())
        });
    }
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("starting `{}`", describe(&cmd)))?;
    let (tx, rx) = mpsc::channel();
    let readers = [
        forward(
            child
                .stdout
                .take()
                .map(|s| Box::new(s) as Box<dyn Read + Send>),
            "",
            &tx,
            start,
        ),
        forward(
            child
                .stderr
                .take()
                .map(|s| Box::new(s) as Box<dyn Read + Send>),
            "qemu: ",
            &tx,
            start,
        ),
    ];
    drop(tx);
    let mut lines = Vec::new();
    let mut booted = false;
    // Where the current time-out runs from: qemu's start, then the boot marker, then each step
    // marker.
    let mut since = start;
    let (ending, cpu) = loop {
        let limit = if booted {
            config.timeout
        } else {
            config.boot_timeout.min(config.timeout)
        };
        let left = (since + limit).saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok((at, text)) => {
                if !booted && text.contains(&config.boot_marker) {
                    booted = true;
                    since = Instant::now();
                } else if booted && text.contains(&config.step_marker) {
                    since = Instant::now();
                }
                let _ = writeln!(log, "{text}");
                echo(&text);
                lines.push((at, text));
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                let (status, cpu) = reap(&child)?;
                break (Ending::Exited(status), cpu);
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {
                let _ = child.kill();
                let cpu = reap(&child).map(|(_, cpu)| cpu).unwrap_or_default();
                let (ending, what) = if booted {
                    (Ending::TimedOut, "time-out")
                } else {
                    (Ending::BootTimedOut, "boot time-out")
                };
                let note = if booted {
                    format!(
                        "vm-test: killed qemu: {} s without a new run ({what})",
                        limit.as_secs()
                    )
                } else {
                    format!(
                        "vm-test: killed qemu after the {} s {what}",
                        limit.as_secs()
                    )
                };
                let _ = writeln!(log, "{note}");
                echo(&note);
                break (ending, cpu);
            }
        }
    };
    for reader in readers.into_iter().flatten() {
        let _ = reader.join();
    }
    Ok(Console {
        lines,
        ending,
        elapsed: start.elapsed(),
        cpu,
    })
}

/// Waits for `child` like `Child::wait`, also returning the CPU time it used (`wait4`).
fn reap(child: &Child) -> Result<(ExitStatus, Duration)> {
    let pid = i32::try_from(child.id()).context("pid out of range")?;
    let mut status = 0;
    // SAFETY: an all-zero rusage is a valid value for wait4 to fill in.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    loop {
        // SAFETY: `pid` is our own unreaped child; both pointers are valid for the call.
        let got = unsafe { libc::wait4(pid, &raw mut status, 0, &raw mut usage) };
        if got == pid {
            break;
        }
        let err = std::io::Error::last_os_error();
        if err.kind() != std::io::ErrorKind::Interrupted {
            return Err(err).context("waiting for qemu");
        }
    }
    let time = |t: libc::timeval| {
        Duration::from_secs(u64::try_from(t.tv_sec).unwrap_or(0))
            + Duration::from_micros(u64::try_from(t.tv_usec).unwrap_or(0))
    };
    Ok((
        ExitStatus::from_raw(status),
        time(usage.ru_utime) + time(usage.ru_stime),
    ))
}

/// A thread sending each line of `stream` (carriage returns dropped) to `tx`.
fn forward(
    stream: Option<Box<dyn Read + Send>>,
    prefix: &'static str,
    tx: &mpsc::Sender<(Duration, String)>,
    start: Instant,
) -> Option<thread::JoinHandle<()>> {
    let stream = stream?;
    let tx = tx.clone();
    Some(thread::spawn(move || {
        let mut reader = BufReader::new(stream);
        let mut buf = Vec::new();
        loop {
            buf.clear();
            match reader.read_until(b'\n', &mut buf) {
                Ok(0) | Err(_) => break,
                Ok(_) => {
                    let text = printable(&String::from_utf8_lossy(&buf));
                    if tx
                        .send((start.elapsed(), format!("{prefix}{text}")))
                        .is_err()
                    {
                        break;
                    }
                }
            }
        }
    }))
}

/// `text` without terminal escape sequences (the firmware clears the screen) and other
/// control characters but tabs.
#[must_use]
pub fn printable(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        match c {
            '\x1b' => {
                if chars.next() == Some('[') {
                    for c in chars.by_ref() {
                        if c.is_ascii_alphabetic() {
                            break;
                        }
                    }
                }
            }
            '\t' => out.push(c),
            c if c.is_control() => {}
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `script` run by sh under time-outs of 600 ms (1 s to boot), markers `@@ init ` and
    /// `@@ begin `.
    fn watch_script(script: &str) -> Console {
        let dir = std::env::temp_dir().join(format!("pktrace-qemu-watch-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let config = QemuConfig {
            arch: Arch::X86_64,
            vmlinuz: PathBuf::new(),
            initrd: PathBuf::new(),
            memory_mb: 0,
            timeout: Duration::from_millis(600),
            boot_timeout: Duration::from_secs(1),
            boot_marker: "@@ init ".to_owned(),
            step_marker: "@@ begin ".to_owned(),
            log: dir.join(format!("{}.log", script.len())),
            init_env: Vec::new(),
        };
        let mut cmd = Command::new("sh");
        cmd.args(["-c", script]);
        let console = watch(cmd, &config, |_| {}).unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        console
    }

    #[test]
    fn the_time_out_starts_again_at_each_run() {
        // 1.2 s in all, twice the time-out, but no run takes more than 0.4 s.
        let console = watch_script(
            "echo '@@ init x'; sleep 0.3; echo '@@ begin a'; sleep 0.4; \
             echo '@@ begin b'; sleep 0.4; echo 'done'",
        );
        assert!(
            matches!(console.ending, Ending::Exited(s) if s.success()),
            "{:?}",
            console.ending
        );
        assert!(console.elapsed >= Duration::from_millis(1100));
        assert_eq!(console.lines.last().unwrap().1, "done");
    }

    #[test]
    fn one_run_that_hangs_is_killed() {
        let console = watch_script(
            "echo '@@ init x'; echo '@@ begin a'; sleep 0.2; echo '@@ begin b'; exec sleep 5",
        );
        assert_eq!(console.ending, Ending::TimedOut);
        assert!(
            console.elapsed < Duration::from_secs(3),
            "{:?}",
            console.elapsed
        );
        assert_eq!(console.lines.last().unwrap().1, "@@ begin b");
    }

    #[test]
    fn a_guest_that_never_boots_gets_the_boot_time_out() {
        // Lines that are not the boot marker (a begin marker included) do not count.
        let console = watch_script("echo '@@ begin a'; exec sleep 5");
        assert_eq!(console.ending, Ending::BootTimedOut);
        assert!(
            console.elapsed < Duration::from_secs(3),
            "{:?}",
            console.elapsed
        );
    }

    #[test]
    fn drops_escape_sequences_and_carriage_returns() {
        assert_eq!(printable("\x1bc\x1b[?7l\x1b[2JSeaBIOS\r\n"), "SeaBIOS");
        assert_eq!(printable("test a ... ok\r"), "test a ... ok");
        assert_eq!(printable("a\tb"), "a\tb");
    }
}
