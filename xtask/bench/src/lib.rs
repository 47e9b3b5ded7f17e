//! The bench behind `cargo xtask bench [--short] [--runs N]` (xtask parses the command line
//! and calls [`bench()`]; its test tier calls [`short`]): what tracing costs the packets and the
//! node.
//!
//! Builds pktrace, then on a simulated node of its own (`net`, namespaces `pkt-b*`) measures
//! `throughput` retention under five conditions (and, with less of the machine's noise, TCP
//! retention against an untraced stream beside it: `paired`), the `hooks`' cost per packet from
//! BPF run-time statistics, the tc program's own cost by `BPF_PROG_TEST_RUN` (`micro`; these two
//! side by side with a `--baseline` binary when given), the `collector`'s capacity on one CPU
//! (also side by side),
//! and pktrace's memory and `startup` time. Traffic runs on CPU 0, the tracer's user space on
//! CPU 1; the `unpinned` phase also runs the traced pod's TCP streams with everything free on
//! every CPU, beside the same streams pinned (side by side too). Every pktrace's peak memory is noted by phase. Prints the tables and (full runs) updates `BENCHMARKS.md` and writes the raw samples
//! to `target/bench/`.
//! `--short` runs everything once with 1 s streams: a check that the bench still works.

mod bpf;
mod collector;
mod doc;
mod droprule;
mod floor;
mod hooks;
mod iperf;
mod micro;
mod net;
mod paired;
mod proc;
mod report;
pub mod soak;
mod startup;
mod stats;
mod synthetic;
mod targets;
mod throughput;
mod tracer;
mod unpinned;
mod variants;

use std::{
    env, fs,
    os::fd::AsRawFd as _,
    path::{Path, PathBuf},
    time::Instant,
};

use anyhow::{Context as _, Result, bail, ensure};
pub use variants::Variant;
use xtask_common::{cmd::require_root, target_dir, workspace_root};

/// Options of `cargo xtask bench`.
#[derive(Clone, Debug, Default)]
pub struct BenchOptions {
    /// One run per condition, 1 s streams, nothing written.
    pub short: bool,
    /// Runs per condition (default 5; `--short`: 1).
    pub runs: Option<usize>,
    /// Seconds per stream (default 3; `--short`: 1).
    pub seconds: Option<u64>,
    /// Do not update `BENCHMARKS.md`.
    pub no_write: bool,
    /// Measure only these phases (none: all); implies `no_write`.
    pub only: Option<Phases>,
    /// Another pktrace that the `paired`, `hooks`, `micro` and `collector` phases measure
    /// alongside, round by round (and the `soak` beside the measured one, at the same time).
    pub baseline: Option<PathBuf>,
    /// Builds of pktrace that each leave one part of the traced path out, for the `variants`
    /// phase.
    pub variants: Vec<Variant>,
    /// The soak's length and activities (`--only soak`).
    pub soak: soak::SoakOptions,
}

/// Which phases to measure (`--only hooks,collector`): for before/after comparisons of one
/// cost without the whole bench's ten minutes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[expect(clippy::struct_excessive_bools, reason = "one switch per phase")]
pub struct Phases {
    pub throughput: bool,
    pub paired: bool,
    pub hooks: bool,
    pub micro: bool,
    pub collector: bool,
    pub startup: bool,
    pub unpinned: bool,
    /// Not in [`Phases::ALL`]: it needs `--variant` builds.
    pub variants: bool,
    /// Never part of a default run: it takes an hour and the lab.
    pub soak: bool,
}

impl Phases {
    /// Every phase.
    pub const ALL: Self = Self {
        throughput: true,
        paired: true,
        hooks: true,
        micro: true,
        collector: true,
        startup: true,
        unpinned: true,
        variants: false,
        soak: false,
    };

    /// Parses a comma-separated list of phase names.
    ///
    /// # Errors
    /// On an unknown phase name, or a list naming none.
    pub fn parse(list: &str) -> Result<Self> {
        let mut p = Self::default();
        for name in list.split(',').map(str::trim).filter(|n| !n.is_empty()) {
            match name {
                "throughput" => p.throughput = true,
                "paired" => p.paired = true,
                "hooks" => p.hooks = true,
                "micro" => p.micro = true,
                "collector" => p.collector = true,
                "startup" => p.startup = true,
                "unpinned" => p.unpinned = true,
                "variants" => p.variants = true,
                "soak" => p.soak = true,
                other => bail!(
                    "unknown bench phase {other:?}: use throughput, paired, hooks, micro, \
                     collector, startup, unpinned, variants or soak"
                ),
            }
        }
        ensure!(p != Self::default(), "--only needs at least one phase");
        Ok(p)
    }
}

/// What every phase needs.
pub struct Ctx {
    pub pktrace: PathBuf,
    /// Scratch files (tmpfs): tracer output, iperf3 JSON, ready files.
    pub dir: PathBuf,
    pub runs: usize,
    pub seconds: u64,
}

/// Everything measured.
#[derive(Default)]
pub struct Results {
    pub runs: usize,
    pub seconds: u64,
    pub throughput: throughput::Throughput,
    pub paired: Vec<paired::PairSample>,
    pub hooks: hooks::Hooks,
    pub micro: micro::Micro,
    pub collector: Vec<collector::CollectorSample>,
    pub startup: startup::Startup,
    pub unpinned: Vec<unpinned::Sample>,
    /// The largest `VmHWM` (KiB) of the measured pktrace in each phase that ran one.
    pub peaks: Vec<(String, u64)>,
}

/// Programs the bench runs, with their Debian package (all in `cargo xtask setup`'s list).
const NEEDED: [(&str, &str); 7] = [
    ("iperf3", "iperf3"),
    ("tcpdump", "tcpdump"),
    ("bpftool", "bpftool"),
    ("ping", "iputils-ping"),
    ("ip", "iproute2"),
    ("bridge", "iproute2"),
    ("iptables-restore", "iptables"),
];
/// Held for a whole bench run: two benches would measure each other.
const LOCK_FILE: &str = "/run/pktrace-bench.lock";
/// Runs per condition and seconds per stream of a full run.
const DEFAULT_RUNS: usize = 5;
const DEFAULT_SECONDS: u64 = 3;

/// The bench tier of `cargo xtask test`: `cargo xtask bench --short`.
///
/// # Errors
/// As [`bench()`].
pub fn short() -> Result<()> {
    bench(&BenchOptions {
        short: true,
        ..BenchOptions::default()
    })
}

/// Runs the bench.
///
/// # Errors
/// If not root, the preflight finds something missing, `--baseline` names no file, or a
/// phase fails or is interrupted.
pub fn bench(opts: &BenchOptions) -> Result<()> {
    require_root("`cargo xtask bench` (network namespaces, eBPF)")?;
    preflight()?;
    let runs = opts
        .runs
        .unwrap_or(if opts.short { 1 } else { DEFAULT_RUNS });
    let seconds = opts
        .seconds
        .unwrap_or(if opts.short { 1 } else { DEFAULT_SECONDS });
    ensure!(
        runs >= 1 && (1..=60).contains(&seconds),
        "--runs must be ≥ 1 and --seconds 1..=60"
    );
    if let Some(b) = &opts.baseline {
        ensure!(b.is_file(), "--baseline {}: no such file", b.display());
    }
    ensure!(
        opts.only.is_none_or(|p| !p.variants) || !opts.variants.is_empty(),
        "--only variants needs at least one --variant NAME=PKTRACE"
    );
    let (pktrace, origin) = xtask_common::pktrace_binary("bench")?;
    let phases = opts.only.unwrap_or(Phases::ALL);
    let scratch = Scratch::new()?;
    let ctx = Ctx {
        pktrace,
        dir: scratch.0.clone(),
        runs,
        seconds,
    };
    if phases.soak {
        // In the lab, under the lab's lock, and measuring memory, not time: it neither needs
        // the bench's lock nor its node.
        soak_phase(&ctx, &opts.soak, opts.baseline.as_deref())?;
    }
    let phases = Phases {
        soak: false,
        ..phases
    };
    if phases == Phases::default() {
        return Ok(());
    }
    let _lock = lock()?;
    let stale = net::remove_stale()?;
    if stale > 0 {
        eprintln!("bench: removed {stale} namespace(s) left by an earlier bench");
    }
    let mut machine = doc::Machine::now(&workspace_root());
    machine.pktrace = origin;
    let start = Instant::now();
    let results = xtask_common::cmd::with_sigint_flag(|| measure(&ctx, phases, opts));
    let results = results?;
    eprintln!("bench: measured in {:.0} s", start.elapsed().as_secs_f64());
    if phases
        == (Phases {
            variants: true,
            ..Phases::default()
        })
    {
        // The variants phase printed its own table; the results block would be empty.
        return Ok(());
    }
    report(&machine, opts, &results)
}

impl Results {
    /// The collector samples of the measured binary (not `--baseline`'s).
    pub fn measured_collector(&self) -> impl Iterator<Item = &collector::CollectorSample> {
        self.collector
            .iter()
            .filter(|s| s.binary == micro::Binary::Measured)
    }

    /// [`Self::measured_collector`] under one load.
    pub fn collector_of(
        &self,
        scenario: collector::Scenario,
    ) -> impl Iterator<Item = &collector::CollectorSample> {
        self.measured_collector()
            .filter(move |s| s.scenario == scenario)
    }
}

fn measure(ctx: &Ctx, phases: Phases, opts: &BenchOptions) -> Result<Results> {
    let baseline = opts.baseline.as_deref();
    let mut net = net::BenchNet::build()?;
    let servers = iperf::Servers::start(&ctx.dir)?;
    eprintln!("bench: warming up (1 s per stream, untraced)");
    for stream in iperf::Stream::ALL {
        iperf::run(stream, None, 1, &ctx.dir, || {})?;
    }
    proc::set_phase("throughput");
    let throughput = if phases.throughput {
        throughput::run(ctx)?
    } else {
        throughput::Throughput::default()
    };
    proc::set_phase("paired");
    let paired = if phases.paired {
        paired::run(ctx, baseline)?
    } else {
        Vec::new()
    };
    proc::set_phase("hooks");
    let hooks = if phases.hooks {
        hooks::run(ctx, baseline)?
    } else {
        hooks::Hooks::default()
    };
    proc::set_phase("micro");
    let micro = if phases.micro {
        micro::run(ctx, baseline)?
    } else {
        micro::Micro::default()
    };
    proc::set_phase("collector");
    let collector = if phases.collector {
        collector::run(ctx, baseline)?
    } else {
        Vec::new()
    };
    proc::set_phase("startup");
    let startup = if phases.startup {
        startup::run(ctx, &mut net)?
    } else {
        startup::Startup::default()
    };
    proc::set_phase("unpinned");
    let unpinned = if phases.unpinned {
        unpinned::run(ctx, &servers, baseline)?
    } else {
        Vec::new()
    };
    proc::set_phase("variants");
    if phases.variants {
        variants::run(ctx, &opts.variants)?;
    }
    Ok(Results {
        runs: ctx.runs,
        seconds: ctx.seconds,
        throughput,
        paired,
        hooks,
        micro,
        collector,
        startup,
        unpinned,
        peaks: proc::peaks(&ctx.pktrace),
    })
}

/// The soak: printed, its samples written to `target/bench/`.
fn soak_phase(ctx: &Ctx, opts: &soak::SoakOptions, baseline: Option<&Path>) -> Result<()> {
    let measured =
        xtask_common::cmd::with_sigint_flag(|| soak::run(&ctx.pktrace, baseline, &ctx.dir, opts));
    let measured = measured?;
    println!("{}", soak::report(opts, &measured));
    let raw_dir = target_dir().join("bench");
    fs::create_dir_all(&raw_dir)?;
    let stamp = doc::Machine::now(&workspace_root())
        .date
        .replace([' ', ':'], "-");
    let raw = raw_dir.join(format!("soak-{stamp}.json"));
    fs::write(
        &raw,
        serde_json::to_string_pretty(&soak::raw(opts, &measured))?,
    )?;
    eprintln!("bench: soak samples in {}", raw.display());
    Ok(())
}

fn report(machine: &doc::Machine, opts: &BenchOptions, results: &Results) -> Result<()> {
    let command = if opts.short {
        "cargo xtask bench --short".to_owned()
    } else {
        let baseline = opts
            .baseline
            .as_ref()
            .map(|b| format!(" --baseline {}", b.display()))
            .unwrap_or_default();
        format!(
            "cargo xtask bench --runs {} --seconds {}{baseline}",
            results.runs, results.seconds
        )
    };
    let block = doc::block(machine, &command, results, &report::tables(results));
    println!("{block}");
    if opts.short || opts.no_write || opts.only.is_some() {
        eprintln!(
            "bench: BENCHMARKS.md left as it is ({})",
            if opts.short {
                "--short"
            } else if opts.only.is_some() {
                "--only"
            } else {
                "--no-write"
            }
        );
        return Ok(());
    }
    let path = workspace_root().join("BENCHMARKS.md");
    doc::write_block(&path, &block)?;
    let raw_dir = target_dir().join("bench");
    fs::create_dir_all(&raw_dir)?;
    let stamp = machine.date.replace([' ', ':'], "-");
    let raw = raw_dir.join(format!("bench-{stamp}.json"));
    fs::write(
        &raw,
        serde_json::to_string_pretty(&doc::raw(machine, results))?,
    )?;
    eprintln!("bench: wrote {} and {}", path.display(), raw.display());
    Ok(())
}

fn preflight() -> Result<()> {
    xtask_common::cmd::require_programs(&NEEDED, "the bench")?;
    let cpus = std::thread::available_parallelism().map_or(1, usize::from);
    ensure!(
        cpus > proc::TRACER_CPU,
        "the bench pins the traffic and the tracer to different CPUs: it needs at least 2 (found {cpus})"
    );
    Ok(())
}

/// An exclusive lock on [`LOCK_FILE`], held until dropped.
fn lock() -> Result<fs::File> {
    let file = fs::File::create(LOCK_FILE).with_context(|| format!("creating {LOCK_FILE}"))?;
    // SAFETY: the descriptor is valid for the call.
    if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        eprintln!("bench: waiting for another bench to finish ({LOCK_FILE})");
        // SAFETY: as above; blocks until the lock is ours.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) } != 0 {
            return Err(std::io::Error::last_os_error()).context("locking the bench");
        }
    }
    Ok(file)
}

/// A scratch directory on tmpfs, removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new() -> Result<Self> {
        let base = if fs::metadata("/dev/shm").is_ok_and(|m| m.is_dir()) {
            "/dev/shm".into()
        } else {
            env::temp_dir()
        };
        let dir = base.join(format!("pktrace-bench-{}", std::process::id()));
        fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        Ok(Self(dir))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// Fails once Ctrl-C was pressed.
///
/// # Errors
/// Once Ctrl-C was pressed.
pub fn check_interrupted() -> Result<()> {
    if xtask_common::cmd::interrupted() {
        bail!("interrupted");
    }
    Ok(())
}

#[cfg(test)]
mod tests;
