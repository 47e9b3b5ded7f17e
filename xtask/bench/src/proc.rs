//! Background processes of the bench (tracers, iperf3 servers, ping): started inside a bench
//! namespace, pinned to one CPU, killed with the bench (`PR_SET_PDEATHSIG`), stopped with SIGINT
//! then SIGKILL, and always reaped. Also what `/proc` says about them (CPU time, memory).

use std::{
    collections::BTreeMap,
    ffi::OsStr,
    fs,
    os::unix::process::CommandExt as _,
    path::{Path, PathBuf},
    process::{Child, Command, ExitStatus, Stdio},
    sync::{
        Mutex,
        atomic::{AtomicBool, Ordering},
    },
    thread,
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result, bail};
use pktrace_lab::netns::in_ns;

/// The CPU that runs the traffic (iperf3 client and servers, so the whole packet path).
pub const TRAFFIC_CPU: usize = 0;
/// The CPU that runs the tracer's user space (pktrace or tcpdump).
pub const TRACER_CPU: usize = 1;
/// How long a process gets to exit after SIGINT before SIGKILL.
const STOP_GRACE: Duration = Duration::from_secs(30);
/// Poll interval of every wait.
pub const POLL: Duration = Duration::from_millis(10);

/// Nice value of every bench process (and of the scheduler autogroup each gets).
pub const BENCH_NICE: i32 = -10;

/// Set while the bench runs its processes free on every CPU ([`set_free`]).
static FREE: AtomicBool = AtomicBool::new(false);

/// From now on, processes started by [`pinned`] run on every CPU (`true`), the way
/// `sudo pktrace` runs on a node, or on the CPU each is given (`false`, the default).
pub fn set_free(free: bool) {
    FREE.store(free, Ordering::SeqCst);
}

/// The CPUs a process given `cpu` runs on: that one, or every CPU while [`set_free`] holds.
fn cpu_set(cpu: usize) -> libc::cpu_set_t {
    // SAFETY: an all-zero cpu_set_t is the empty set; CPU_SET only writes into it.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    let cpus = if FREE.load(Ordering::SeqCst) {
        0..thread::available_parallelism().map_or(cpu + 1, usize::from)
    } else {
        cpu..cpu + 1
    };
    for c in cpus {
        // SAFETY: as above; `c` is below CPU_SETSIZE (a machine's CPU count, or the bench's
        // two CPUs).
        unsafe { libc::CPU_SET(c, &mut set) };
    }
    set
}

/// Moves the running process `pid` (every thread of it) to the CPUs [`cpu_set`] gives `cpu`
/// now: the iperf3 servers, started once for the whole bench, follow [`set_free`] this way.
pub fn place(pid: i32, cpu: usize) -> Result<()> {
    let set = cpu_set(cpu);
    for task in fs::read_dir(format!("/proc/{pid}/task"))? {
        let Some(tid) = task?
            .file_name()
            .to_str()
            .and_then(|t| t.parse::<i32>().ok())
        else {
            continue;
        };
        // SAFETY: a valid cpu_set_t of the size given.
        if unsafe { libc::sched_setaffinity(tid, size_of::<libc::cpu_set_t>(), &raw const set) }
            != 0
        {
            return Err(std::io::Error::last_os_error())
                .with_context(|| format!("moving thread {tid} of {pid} to other CPUs"));
        }
    }
    Ok(())
}

/// The phase whose pktraces [`note_peak`] notes now.
static PHASE: Mutex<&str> = Mutex::new("");
/// The largest `VmHWM` (KiB) of each phase's pktraces, by phase and binary.
static PEAKS: Mutex<BTreeMap<(&str, PathBuf), u64>> = Mutex::new(BTreeMap::new());

/// The pktraces started from now on belong to `phase` (for [`peaks`]).
pub fn set_phase(phase: &'static str) {
    *PHASE
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner) = phase;
}

/// Notes a pktrace's peak resident memory, read just before it is stopped.
pub fn note_peak(binary: &Path, hwm_kib: u64) {
    let phase = *PHASE
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let mut peaks = PEAKS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let peak = peaks.entry((phase, binary.to_owned())).or_default();
    *peak = (*peak).max(hwm_kib);
}

/// The largest `VmHWM` (KiB) of any run of `binary` in each phase, by phase name.
#[must_use]
pub fn peaks(binary: &Path) -> Vec<(String, u64)> {
    let peaks = PEAKS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    peaks
        .iter()
        .filter(|((_, b), _)| b == binary)
        .map(|((phase, _), kib)| ((*phase).to_owned(), *kib))
        .collect()
}

/// `program args…` inside `ns`, pinned to `cpu` (or free on every CPU while [`set_free`]
/// holds), killed if the bench dies, in a session (so a scheduler autogroup) of its own at
/// nice [`BENCH_NICE`]: the compile jobs that share the machine then take little of the
/// bench's CPUs, for the traffic and the tracer alike.
pub fn pinned<I, S>(ns: &str, cpu: usize, program: impl AsRef<OsStr>, args: I) -> Command
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let mut cmd = in_ns(ns, program, args);
    let set = cpu_set(cpu);
    let nice = BENCH_NICE.to_string();
    // SAFETY: only async-signal-safe syscalls (prctl, sched_setaffinity, setsid, open, write,
    // close, setpriority) on data built before the fork. `ip netns exec` execs the program in
    // place, so all of it survives into the program.
    unsafe {
        cmd.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0
                || libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), &raw const set) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            // A new session is a new autogroup; without autogroups the nice value does it.
            libc::setsid();
            let fd = libc::open(c"/proc/self/autogroup".as_ptr(), libc::O_WRONLY);
            if fd >= 0 {
                libc::write(fd, nice.as_ptr().cast(), nice.len());
                libc::close(fd);
            }
            libc::setpriority(libc::PRIO_PROCESS, 0, BENCH_NICE);
            Ok(())
        });
    }
    cmd
}

/// A child process that is killed and reaped when dropped.
pub struct Bg {
    child: Child,
    name: String,
    stderr: PathBuf,
}

impl Bg {
    /// Starts `cmd` with stdin closed, `stdout` as given and stderr into file `stderr`.
    pub fn spawn(name: &str, mut cmd: Command, stdout: Stdio, stderr: &Path) -> Result<Self> {
        let errors =
            fs::File::create(stderr).with_context(|| format!("creating {}", stderr.display()))?;
        let child = cmd
            .stdin(Stdio::null())
            .stdout(stdout)
            .stderr(errors)
            .spawn()
            .with_context(|| format!("starting {name}"))?;
        Ok(Self {
            child,
            name: name.to_owned(),
            stderr: stderr.to_owned(),
        })
    }

    /// Its pid (the program's own: `ip netns exec` execs in place).
    #[must_use]
    pub fn pid(&self) -> i32 {
        i32::try_from(self.child.id()).unwrap_or(-1)
    }

    /// The child, for taking its pipes.
    pub fn child_mut(&mut self) -> &mut Child {
        &mut self.child
    }

    /// What it wrote to stderr so far.
    #[must_use]
    pub fn stderr(&self) -> String {
        fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    /// Fails (with its stderr) if it has exited.
    pub fn check_alive(&mut self) -> Result<()> {
        if let Some(status) = self.child.try_wait()? {
            bail!(
                "{} exited early ({status}): {}",
                self.name,
                tail(&self.stderr())
            );
        }
        Ok(())
    }

    /// Waits until `ready()` holds, failing if the process exits first or after `timeout`;
    /// returns the time waited.
    pub fn wait_until(
        &mut self,
        timeout: Duration,
        mut ready: impl FnMut() -> bool,
    ) -> Result<Duration> {
        let start = Instant::now();
        while !ready() {
            self.check_alive()?;
            super::check_interrupted()?;
            if start.elapsed() > timeout {
                bail!(
                    "{} was not ready after {} s: {}",
                    self.name,
                    timeout.as_secs(),
                    tail(&self.stderr())
                );
            }
            thread::sleep(POLL);
        }
        Ok(start.elapsed())
    }

    /// SIGINT, then SIGKILL after a grace period; returns the exit status.
    pub fn stop(&mut self) -> Result<ExitStatus> {
        if let Some(status) = self.child.try_wait()? {
            return Ok(status);
        }
        // SAFETY: plain syscall on our own, not yet reaped, child.
        unsafe { libc::kill(self.pid(), libc::SIGINT) };
        let deadline = Instant::now() + STOP_GRACE;
        while Instant::now() < deadline {
            if let Some(status) = self.child.try_wait()? {
                return Ok(status);
            }
            thread::sleep(POLL);
        }
        eprintln!(
            "bench: {} ignored SIGINT for {} s; killing it",
            self.name,
            STOP_GRACE.as_secs()
        );
        self.child.kill()?;
        Ok(self.child.wait()?)
    }
}

impl Drop for Bg {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }
}

/// The last lines of a process's stderr, for error messages.
#[must_use]
pub fn tail(text: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(8)..].join("\n")
}

/// CPU time process `pid` has used, in seconds: the scheduler's own nanosecond count
/// (`/proc/<pid>/task/*/schedstat`), else user + system ticks from `/proc/<pid>/stat`.
pub fn cpu_seconds(pid: i32) -> Result<f64> {
    if let Some(ns) = schedstat_ns(pid) {
        #[expect(
            clippy::cast_precision_loss,
            reason = "nanoseconds of a bench run, below 2^52"
        )]
        return Ok(ns as f64 / 1e9);
    }
    let stat = fs::read_to_string(format!("/proc/{pid}/stat"))
        .with_context(|| format!("reading /proc/{pid}/stat"))?;
    // Fields after `(comm)`: state is field 3, utime 14 and stime 15 (proc(5)).
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or_default();
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| -> u64 { fields.get(i).and_then(|f| f.parse().ok()).unwrap_or(0) };
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1);
    #[expect(clippy::cast_precision_loss, reason = "tick counts are far below 2^52")]
    Ok((ticks(11) + ticks(12)) as f64 / hz as f64)
}

/// Time on CPU of all threads of `pid`, ns (first field of each `schedstat`).
fn schedstat_ns(pid: i32) -> Option<u64> {
    let mut total = 0;
    for task in fs::read_dir(format!("/proc/{pid}/task")).ok()? {
        let task = task.ok()?;
        let text = fs::read_to_string(task.path().join("schedstat")).ok()?;
        total += text.split_whitespace().next()?.parse::<u64>().ok()?;
    }
    Some(total)
}

/// Resident memory of a process, KiB (`/proc/<pid>/status`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Memory {
    /// `VmRSS`: now.
    pub rss: u64,
    /// `VmHWM`: the peak.
    pub hwm: u64,
    /// `RssAnon`: heap and stacks (the rest is the binary, libraries and mapped BPF maps).
    pub anon: u64,
}

/// The memory of `pid` now.
pub fn memory_kib(pid: i32) -> Result<Memory> {
    let status = fs::read_to_string(format!("/proc/{pid}/status"))
        .with_context(|| format!("reading /proc/{pid}/status"))?;
    let field = |name: &str| -> u64 {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or(0)
    };
    Ok(Memory {
        rss: field("VmRSS:"),
        hwm: field("VmHWM:"),
        anon: field("RssAnon:"),
    })
}
