//! The VM runner behind `cargo xtask vm-test` (xtask parses the command line and calls
//! [`vm_test`] or [`matrix::run`]): the integration tests inside a qemu guest running a Debian
//! kernel, once per NAT hook (`--nat-hook kprobe`, `fentry`, …), because this host's kernel refuses
//! those hooks (DESIGN.md "Tests", VM-NOTES.md).
//!
//! Steps: [`kernel`] (apt-get download, cached) → [`payload`] (pktrace, xtask, the test
//! binaries) → [`initramfs`] (tools, libraries, [`modules`], payload, [`init`] script, laid
//! out as an [`image`]; for an arm64 guest ([`arch`]) the tools and libraries come from
//! Debian's arm64 packages, [`sysroot`]) → [`pack`] ([`cpio`], lz4) → [`qemu`] (TCG, time-out, console
//! streamed and logged) → [`report`] (markers and libtest lines, summary, verdict).
//!
//! One more boot of the same image runs the lockdown tests ([`payload::LOCKDOWN_TEST`]) under
//! `lockdown=confidentiality`, after the VM with the least to do.

pub mod apt;
pub mod arch;
pub mod cpio;
pub mod image;
pub mod init;
pub mod initramfs;
pub mod kernel;
pub mod matrix;
pub mod modules;
pub mod pack;
pub mod payload;
pub mod plan;
pub mod qemu;
pub mod report;
mod summary;
pub mod sysroot;

use std::{
    env, fs,
    io::{self, Write as _},
    path::{Path, PathBuf},
    thread,
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result, bail};
use xtask_common::target_dir;

use self::{arch::Arch, init::AUTO, qemu::QemuConfig};

/// The hooks `vm-test` runs by default.
pub const DEFAULT_HOOKS: [&str; 2] = ["kprobe", "fentry"];
/// Values `--hook` accepts: pktrace's `--nat-hook` values.
pub const HOOKS: [&str; 5] = ["kprobe", "fentry", "netfilter", "conntrack", AUTO];
/// Default time-out of one (hook, test binary) run in a VM (and of the time from `/init` to the
/// first): a VM is killed only when one run takes longer, however many it was dealt. One VM
/// holding all twelve runs on a machine busy with two builds took 405 s for its longest run
/// (fentry:lifecycle; 120–150 s on a quiet machine).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_mins(15);
/// How long a guest may take to start `/init` (it takes 3–10 s here) before it is booted
/// again, once: a boot that fails is no test result.
const BOOT_TIMEOUT: Duration = Duration::from_mins(2);
/// Guest memory (MiB).
const MEMORY_MB: u32 = 1536;
/// Kernel command-line words of the lockdown boot: the lockdown mode, and `--include-ignored`
/// for its test binary (its tests are `#[ignore]`d elsewhere; they fail when the kernel is
/// not in that mode).
const LOCKDOWN_CMDLINE: [&str; 2] = [
    "lockdown=confidentiality",
    "vmtest_harness=--include-ignored",
];

/// The cache of the VM tier: `$XDG_CACHE_HOME/pktrace/vm`, else `~/.cache/pktrace/vm`.
#[must_use]
pub fn cache_dir() -> PathBuf {
    let base = env::var_os("XDG_CACHE_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(|| PathBuf::from("/root/.cache"));
    base.join("pktrace/vm")
}

/// Options of `cargo xtask vm-test`.
#[derive(Debug, Clone)]
pub struct VmOptions {
    /// A kernel version (`6.1.0-41-cloud-amd64`), a `.deb` or a vmlinuz; default: the newest
    /// bookworm cloud kernel.
    pub kernel: Option<String>,
    /// `--nat-hook` values, one round of tests each (`auto`: pktrace chooses).
    pub hooks: Vec<String>,
    /// VMs run side by side, sharing the (hook, test binary) runs (0: one per CPU, as many as
    /// the memory holds). Each is single-threaded TCG: this is what uses a second CPU.
    pub jobs: usize,
    /// Time-out of each (hook, test binary) run in a VM.
    pub timeout: Duration,
    /// Arguments for every test binary (e.g. a name filter); empty: the suite's own.
    pub test_args: Vec<String>,
    /// The smoke set (CI) or the full set (`--full`).
    pub suite: payload::Suite,
    /// The guest's architecture (arm64: Debian's arm64 kernel and tools, the aarch64 musl
    /// binaries, `qemu-system-aarch64`).
    pub arch: Arch,
}

impl Default for VmOptions {
    fn default() -> Self {
        Self {
            kernel: None,
            hooks: DEFAULT_HOOKS.map(str::to_owned).to_vec(),
            jobs: 0,
            timeout: DEFAULT_TIMEOUT,
            test_args: Vec::new(),
            suite: payload::Suite::default(),
            arch: Arch::default(),
        }
    }
}

impl VmOptions {
    /// The harness arguments of every run: the caller's, else the suite's.
    #[must_use]
    pub fn harness_args(&self) -> Vec<String> {
        if self.test_args.is_empty() {
            self.suite.harness_args()
        } else {
            self.test_args.clone()
        }
    }
}

/// One VM: its share of the runs and what its console said.
struct Vm {
    tag: String,
    runs: Vec<plan::Run>,
    log: PathBuf,
    console: Result<qemu::Console>,
    report: report::Report,
}

/// What one `vm-test` run found: its kernel, every run's results, pktrace's start-up lines
/// in the guest, what failed, and how long it all took.
#[derive(Debug, Clone, Default)]
pub struct Outcome {
    /// `uname -r` of the guest.
    pub kernel: String,
    /// Every (hook, test binary) run of every boot.
    pub report: report::Report,
    /// pktrace's start-up lines in the first guest ([`init::PROBE`]).
    pub probe: Vec<String>,
    /// One line per problem (a failed run, a guest that never got to the end).
    pub failures: Vec<String>,
    /// From the start to the summary, builds included.
    pub elapsed: Duration,
    /// The guests' time: qemu's wall-clock time of every boot, one after the other.
    pub guest: Duration,
    /// Where the console logs are.
    pub out_dir: PathBuf,
}

impl Outcome {
    /// `Ok` when nothing failed; else the failures, said on stderr.
    ///
    /// # Errors
    /// When a run failed or a guest never got to the end.
    pub fn verdict(&self) -> Result<()> {
        if self.failures.is_empty() {
            eprintln!("vm-test: every run passed");
            return Ok(());
        }
        for failure in &self.failures {
            eprintln!("vm-test: FAILED {failure}");
        }
        bail!(
            "vm-test failed ({} problem(s); console logs in {})",
            self.failures.len(),
            self.out_dir.display()
        )
    }
}

/// Builds everything, boots the guests, runs the tests per hook and prints the summary;
/// fails if any run failed, or a guest never got to the end.
///
/// # Errors
/// On an unknown hook, if anything cannot be built or written, or if a run failed or a guest
/// never got to the end.
pub fn vm_test(options: &VmOptions) -> Result<()> {
    run(options)?.verdict()
}

/// [`vm_test`] without the verdict: what happened, failures included.
///
/// # Errors
/// On an unknown hook, or if anything cannot be built or written.
pub fn run(options: &VmOptions) -> Result<Outcome> {
    let start = Instant::now();
    check_hooks(&options.hooks)?;
    let kernel = kernel::resolve_for(options.kernel.as_deref(), options.arch)?;
    eprintln!(
        "vm-test: kernel {} ({})",
        kernel.version,
        kernel.vmlinuz.display()
    );
    let prepared = Instant::now();
    let payload = payload::build(options.arch, options.suite)?;
    let mut test_args = options.harness_args();
    test_args.extend(xtask_common::needs::skip_args("vm-test", &kernel.version));
    let built = Instant::now();
    let out_dir = target_dir().join("vm-test");
    fs::create_dir_all(&out_dir).with_context(|| format!("creating {}", out_dir.display()))?;
    remove_old_logs(&out_dir);
    let binaries: Vec<String> = payload
        .tests
        .iter()
        .map(|(n, _)| n.clone())
        .filter(|n| n != payload::LOCKDOWN_TEST)
        .collect();
    let runs = plan::runs(&options.hooks, &binaries);
    let initrd = pack::pack(&kernel, &payload, &runs, &test_args, &out_dir)?;
    let packed = Instant::now();

    let weights: Vec<(String, usize)> = payload
        .tests
        .iter()
        .map(|(name, path)| {
            // Another architecture's binaries cannot be listed here: taken as selecting one
            // test each (dealt evenly; the lockdown boot runs).
            let weight = if options.arch.is_host() {
                plan::weight_of(path, &test_args)
            } else {
                2
            };
            (name.clone(), weight)
        })
        .collect();
    let weight = |binary: &str| weights.iter().find(|(n, _)| n == binary).map_or(1, |w| w.1);
    // The lockdown tests need their own boot; skipped when the filter selects none of them.
    let lockdown = weights
        .iter()
        .any(|(n, w)| n == payload::LOCKDOWN_TEST && *w > 1)
        .then(|| plan::Run {
            hook: AUTO.to_owned(),
            binary: payload::LOCKDOWN_TEST.to_owned(),
        });
    let jobs = plan::jobs(options.jobs, runs.len(), MEMORY_MB);
    let base = QemuConfig {
        arch: options.arch,
        vmlinuz: kernel.vmlinuz.clone(),
        initrd,
        memory_mb: MEMORY_MB,
        timeout: options.timeout,
        boot_timeout: BOOT_TIMEOUT,
        boot_marker: format!("{} init ", init::MARKER),
        step_marker: format!("{} begin ", init::MARKER),
        log: PathBuf::new(),
        init_env: Vec::new(),
    };
    let mut lanes: Vec<Vec<Boot>> = plan::deal(&runs, jobs, weight)
        .into_iter()
        .map(|runs| {
            vec![Boot {
                tag: String::new(),
                runs,
                cmdline: Vec::new(),
            }]
        })
        .collect();
    let mut order = runs.clone();
    if let Some(run) = lockdown {
        order.push(run.clone());
        let boot = Boot {
            tag: "vm-lockdown".to_owned(),
            runs: vec![run],
            cmdline: LOCKDOWN_CMDLINE.map(str::to_owned).to_vec(),
        };
        let load = |lane: &Vec<Boot>| -> usize {
            lane.iter()
                .flat_map(|b| &b.runs)
                .map(|r| weight(&r.binary))
                .sum()
        };
        match lanes.iter_mut().min_by_key(|lane| load(lane)) {
            Some(lane) => lane.push(boot),
            None => lanes.push(vec![boot]),
        }
    }
    let vms = run_vms(lanes, &base, &out_dir);
    Ok(summary::summarize(
        &vms,
        &order,
        &kernel.version,
        options,
        [start, prepared, built, packed],
        &out_dir,
    ))
}

/// One boot of the image: its runs and the words it adds to the kernel command line; `tag`
/// names it in the output (empty: numbered by its lane).
struct Boot {
    tag: String,
    runs: Vec<plan::Run>,
    cmdline: Vec<String>,
}

/// Boots the VMs: the lanes side by side, the boots of a lane one after the other, each with
/// `base`'s settings, its own console log and its runs on the kernel command line; returns
/// when all have ended.
fn run_vms(lanes: Vec<Vec<Boot>>, base: &QemuConfig, out_dir: &Path) -> Vec<Vm> {
    let count = lanes.len();
    let tagged = lanes.iter().map(Vec::len).sum::<usize>() > 1;
    thread::scope(|scope| {
        let handles: Vec<_> = lanes
            .into_iter()
            .enumerate()
            .map(|(i, lane)| {
                let boots: Vec<(String, Vec<plan::Run>, QemuConfig)> = lane
                    .into_iter()
                    .map(|boot| {
                        let tag = if !boot.tag.is_empty() {
                            boot.tag
                        } else if count > 1 {
                            format!("vm{}", i + 1)
                        } else {
                            "vm".to_owned()
                        };
                        let specs: Vec<String> = boot.runs.iter().map(plan::Run::spec).collect();
                        let mut init_env = boot.cmdline;
                        init_env.push(format!("{}={}", init::RUNS_VAR, specs.join(",")));
                        eprintln!(
                            "vm-test: {tag} runs {} {}",
                            specs.join(" "),
                            init_env.join(" ")
                        );
                        let config = QemuConfig {
                            log: out_dir.join(format!("console-{tag}.log")),
                            init_env,
                            ..base.clone()
                        };
                        (tag, boot.runs, config)
                    })
                    .collect();
                scope.spawn(move || {
                    boots
                        .into_iter()
                        .map(|(tag, runs, config)| boot(tag, runs, config, tagged))
                        .collect::<Vec<Vm>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().expect("a VM thread panicked"))
            .collect()
    })
}

/// Runs one VM to its end, echoing its console (tagged when there are several); boots it a
/// second time when the first boot never reached `/init` (its console is kept aside).
fn boot(tag: String, runs: Vec<plan::Run>, config: QemuConfig, tagged: bool) -> Vm {
    let echo = |line: &str| {
        // A closed stdout (`| head`) must not stop the VM.
        let mut out = io::stdout().lock();
        let _ = if tagged {
            writeln!(out, "[{tag}] {line}")
        } else {
            writeln!(out, "{line}")
        };
    };
    let mut console = qemu::run(&config, echo);
    let mut report = parse(&console);
    if console.is_ok() && report.init.is_none() {
        let kept = config.log.with_extension("failed-boot.log");
        let _ = fs::rename(&config.log, &kept);
        eprintln!(
            "vm-test: {tag} did not reach /init (console {}); booting it again",
            kept.display()
        );
        console = qemu::run(&config, echo);
        report = parse(&console);
    }
    Vm {
        tag,
        runs,
        log: config.log,
        console,
        report,
    }
}

fn parse(console: &Result<qemu::Console>) -> report::Report {
    console
        .as_ref()
        .map(|c| report::parse(&c.lines))
        .unwrap_or_default()
}

/// Removes the console logs of an earlier run (it may have had more VMs).
fn remove_old_logs(dir: &Path) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries.filter_map(Result::ok) {
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if name.starts_with("console-") && name.ends_with(".log") {
            let _ = fs::remove_file(entry.path());
        }
    }
}

fn check_hooks(hooks: &[String]) -> Result<()> {
    if hooks.is_empty() {
        bail!("--hook: give at least one of {}", HOOKS.join(", "));
    }
    for hook in hooks {
        if !HOOKS.contains(&hook.as_str()) {
            bail!("--hook {hook}: not one of {}", HOOKS.join(", "));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hooks_are_checked() {
        assert!(check_hooks(&["kprobe".into(), "auto".into()]).is_ok());
        assert!(check_hooks(&["kprobes".into()]).is_err());
        assert!(check_hooks(&[]).is_err());
    }
}
