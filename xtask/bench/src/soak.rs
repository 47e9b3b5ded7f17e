//! `cargo xtask bench --only soak`: pktrace `--follow` for a long while in the lab (not the
//! bench's own node: pods come and go there), under periodic traffic of the traced pod and pod
//! churn, with its memory, descriptors, threads and mappings sampled every few seconds. Says
//! how fast each grows (least squares after a warm-up, KiB per minute) and the peak. Each kind
//! of activity can be run alone, and faster, to find which one makes memory grow.
//!
//! Holds the lab's lock (`/run/pktrace-integration.lock`) for the whole soak; brings the lab up
//! when it is down and takes it down again, and deletes the pods it added, on every exit path.

mod fit;
mod report;

use std::{
    fs,
    path::{Path, PathBuf},
    process::Stdio,
    thread,
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result, bail};
use pktrace_lab::{
    self as lab, NODE_NS, STATE_FILE, client_tcp, client_udp,
    netns::in_ns,
    pods,
    topology::{DNS_CLUSTER_IP, INET_HOST, UBUNTU, WHEREAMI_CLUSTER_IP},
};

use self::fit::Sample;
pub use self::report::{raw, report};
use super::{
    micro::Binary,
    proc::Bg,
    tracer::{JsonTotals, json_totals},
};

/// How long pktrace may take to be ready.
const READY_TIMEOUT: Duration = Duration::from_mins(1);
/// The first samples the slope leaves out: start-up, and the tables filling to their working
/// size (connections without an answer are remembered two minutes).
const WARMUP_S: f64 = 150.0;

/// One kind of request from the traced pod, each a new connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// TCP to the whereami ClusterIP (DNAT).
    Dnat,
    /// UDP to the DNS ClusterIP (DNAT), from a new port each time.
    Dns,
    /// TCP to the internet host (ip-masq-agent's MASQUERADE).
    Masq,
}

impl Kind {
    pub const ALL: [Self; 3] = [Self::Dnat, Self::Dns, Self::Masq];

    /// Parses `dnat,dns,masq`.
    ///
    /// # Errors
    /// On an unknown kind, or none.
    pub fn parse_list(list: &str) -> Result<Vec<Self>> {
        let mut out = Vec::new();
        for name in list.split(',').map(str::trim).filter(|n| !n.is_empty()) {
            out.push(match name {
                "dnat" => Self::Dnat,
                "dns" => Self::Dns,
                "masq" => Self::Masq,
                other => bail!("unknown soak traffic {other:?}: use dnat, dns or masq"),
            });
        }
        anyhow::ensure!(!out.is_empty(), "--soak-traffic needs at least one kind");
        Ok(out)
    }

    const fn key(self) -> &'static str {
        match self {
            Self::Dnat => "dnat",
            Self::Dns => "dns",
            Self::Masq => "masq",
        }
    }

    fn request(self) -> Result<String> {
        let ns = UBUNTU.netns();
        match self {
            Self::Dnat => client_tcp(&ns, WHEREAMI_CLUSTER_IP),
            Self::Dns => client_udp(&ns, DNS_CLUSTER_IP),
            Self::Masq => client_tcp(&ns, INET_HOST.addr()),
        }
    }
}

/// What a soak does.
#[derive(Clone, Debug)]
pub struct SoakOptions {
    pub minutes: u64,
    /// A round of `kinds` every this many milliseconds (0: no traffic).
    pub traffic_ms: u64,
    pub kinds: Vec<Kind>,
    /// A pod added every this many seconds (0: no churn), the oldest deleted past `pods_at_once`.
    pub pod_every_s: u64,
    pub pods_at_once: usize,
    /// A sample every this many seconds.
    pub sample_s: u64,
}

impl Default for SoakOptions {
    fn default() -> Self {
        Self {
            minutes: 60,
            traffic_ms: 2_000,
            kinds: Kind::ALL.to_vec(),
            pod_every_s: 20,
            pods_at_once: 5,
            sample_s: 5,
        }
    }
}

/// The soak's options on the command line (`cargo xtask bench --only soak …`).
#[derive(Clone, Debug, clap::Args)]
pub struct SoakArgs {
    /// Soak: minutes pktrace runs.
    #[arg(long, value_name = "N", default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..=1440))]
    pub minutes: u64,
    /// Soak: a round of requests from pod ubuntu every MS milliseconds (0: none).
    #[arg(long, value_name = "MS", default_value_t = 2_000)]
    pub soak_traffic_ms: u64,
    /// Soak: the requests of a round, comma-separated: dnat (TCP to a ClusterIP), dns (UDP to
    /// the DNS ClusterIP), masq (TCP to the internet host).
    #[arg(long, value_name = "KINDS", default_value = "dnat,dns,masq")]
    pub soak_traffic: String,
    /// Soak: a pod added every S seconds (0: none), the oldest deleted past --soak-pods.
    #[arg(long, value_name = "S", default_value_t = 20)]
    pub soak_pod_every_s: u64,
    /// Soak: most added pods at once.
    #[arg(long, value_name = "N", default_value_t = 5)]
    pub soak_pods: usize,
}

impl SoakArgs {
    /// The checked options.
    ///
    /// # Errors
    /// On an unknown kind of traffic.
    pub fn options(&self) -> Result<SoakOptions> {
        Ok(SoakOptions {
            minutes: self.minutes,
            traffic_ms: self.soak_traffic_ms,
            kinds: Kind::parse_list(&self.soak_traffic)?,
            pod_every_s: self.soak_pod_every_s,
            pods_at_once: self.soak_pods,
            ..SoakOptions::default()
        })
    }
}

/// One pktrace's figures over a soak.
#[derive(Clone, Debug)]
pub struct Run {
    pub binary: Binary,
    pub samples: Vec<Sample>,
    /// Lines it wrote on stderr, and its summary.
    pub stderr_lines: usize,
    pub totals: JsonTotals,
}

/// What a soak measured: each pktrace's figures, and what was done.
#[derive(Clone, Debug, Default)]
pub struct Soak {
    pub runs: Vec<Run>,
    /// Traffic rounds made, and requests that failed.
    pub rounds: u64,
    pub failed: u64,
    pub pods_added: u64,
}

/// A pktrace of the soak.
struct Tracer {
    binary: Binary,
    bg: Bg,
    out: PathBuf,
}

/// Runs a soak of `pktrace`, and of `baseline` beside it (the same node, traffic and churn at
/// the same time); scratch files in `dir`.
///
/// # Errors
/// If the lab cannot be brought up, a pktrace does not start or dies, or a pod cannot be added
/// or deleted. Ctrl-C cuts the soak short: it is reported up to then.
pub fn run(
    pktrace: &Path,
    baseline: Option<&Path>,
    dir: &Path,
    opts: &SoakOptions,
) -> Result<Soak> {
    eprintln!(
        "bench: soak: waiting for the lab ({})",
        xtask_common::INTEGRATION_LOCK
    );
    let _turn = xtask_common::cmd::exclusive_lock(xtask_common::INTEGRATION_LOCK)?;
    let mut lab = LabGuard {
        was_up: lab::status()?.up,
        pods: Vec::new(),
    };
    lab::up()?;
    let mut tracers = Vec::new();
    for (binary, path) in [
        (Binary::Measured, Some(pktrace)),
        (Binary::Baseline, baseline),
    ] {
        if let Some(path) = path {
            tracers.push(start_tracer(binary, path, dir)?);
        }
    }
    let mut soak = Soak {
        runs: tracers
            .iter()
            .map(|t| Run {
                binary: t.binary,
                samples: Vec::new(),
                stderr_lines: 0,
                totals: JsonTotals::default(),
            })
            .collect(),
        ..Soak::default()
    };
    let result = soak_loop(&mut tracers, &mut lab, opts, &mut soak);
    lab.delete_pods();
    for (t, run) in tracers.iter_mut().zip(&mut soak.runs) {
        t.bg.stop()?;
        run.stderr_lines = t.bg.stderr().lines().count();
        run.totals = json_totals(&t.out).unwrap_or_default();
        let _ = fs::remove_file(&t.out);
    }
    result.map(|()| soak)
}

/// Starts `pktrace --pod ubuntu --follow -o json` in the node and waits until it is ready.
fn start_tracer(binary: Binary, pktrace: &Path, dir: &Path) -> Result<Tracer> {
    let out = dir.join(format!("soak-{}.json", binary.key()));
    let ready = dir.join(format!("soak-{}.ready", binary.key()));
    let ready_arg = ready.display().to_string();
    let args = [
        "--pod",
        UBUNTU.name,
        "--state-file",
        STATE_FILE,
        "--follow",
        "-o",
        "json",
        "--ready-file",
        &ready_arg,
    ];
    let stdout = Stdio::from(fs::File::create(&out)?);
    let mut bg = Bg::spawn(
        "pktrace",
        in_ns(NODE_NS, pktrace, args),
        stdout,
        &dir.join(format!("soak-{}.err", binary.key())),
    )?;
    bg.wait_until(READY_TIMEOUT, || ready.exists())?;
    Ok(Tracer { binary, bg, out })
}

/// Activities and samples until the soak's time is up.
fn soak_loop(
    tracers: &mut [Tracer],
    lab: &mut LabGuard,
    opts: &SoakOptions,
    soak: &mut Soak,
) -> Result<()> {
    let start = Instant::now();
    let end = start + Duration::from_secs(opts.minutes * 60);
    let every = |ms: u64| (ms > 0).then(|| Duration::from_millis(ms));
    let traffic = every(opts.traffic_ms);
    let churn = every(opts.pod_every_s * 1_000);
    let sampling = Duration::from_secs(opts.sample_s.max(1));
    let (mut next_traffic, mut next_pod, mut next_sample) = (start, start, start);
    let mut next_note = start + Duration::from_mins(1);
    while Instant::now() < end {
        if xtask_common::cmd::interrupted() {
            eprintln!("bench: soak cut short by Ctrl-C: reporting what was sampled");
            break;
        }
        let now = Instant::now();
        if now >= next_sample {
            for (t, run) in tracers.iter_mut().zip(&mut soak.runs) {
                t.bg.check_alive()?;
                run.samples
                    .push(sample(t.bg.pid(), start.elapsed().as_secs_f64())?);
            }
            next_sample += sampling;
        }
        if let Some(period) = traffic.filter(|_| now >= next_traffic) {
            soak.rounds += 1;
            soak.failed += opts.kinds.iter().filter(|k| k.request().is_err()).count() as u64;
            next_traffic = (next_traffic + period).max(Instant::now());
        }
        if let Some(period) = churn.filter(|_| now >= next_pod) {
            lab.churn(soak.pods_added, opts.pods_at_once)?;
            soak.pods_added += 1;
            next_pod = (next_pod + period).max(Instant::now());
        }
        if now >= next_note {
            note(soak);
            next_note += Duration::from_mins(1);
        }
        let next = [
            Some(next_sample),
            traffic.map(|_| next_traffic),
            churn.map(|_| next_pod),
        ]
        .into_iter()
        .flatten()
        .min()
        .unwrap_or(end);
        thread::sleep(
            next.saturating_duration_since(Instant::now())
                .min(Duration::from_millis(500)),
        );
    }
    Ok(())
}

/// A progress line (each minute).
fn note(soak: &Soak) {
    #[expect(clippy::cast_precision_loss, reason = "KiB far below 2^52")]
    let mib = |kib: u64| kib as f64 / 1024.0;
    for run in &soak.runs {
        let (Some(first), Some(last)) = (run.samples.first(), run.samples.last()) else {
            continue;
        };
        eprintln!(
            "bench: soak {:.0} min, {}: VmRSS {:.1} MiB (from {:.1}), RssAnon {:.1}, fds {}, \
             threads {}, maps {}; {} rounds ({} failed), {} pods added",
            last.t_s / 60.0,
            run.binary.key(),
            mib(last.rss),
            mib(first.rss),
            mib(last.anon),
            last.fds,
            last.threads,
            last.maps,
            soak.rounds,
            soak.failed,
            soak.pods_added
        );
    }
}

/// Reads pktrace's `/proc/<pid>` now.
fn sample(pid: i32, t_s: f64) -> Result<Sample> {
    let status = fs::read_to_string(format!("/proc/{pid}/status"))
        .with_context(|| format!("reading /proc/{pid}/status"))?;
    let field = |name: &str| -> u64 {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .unwrap_or(0)
    };
    let fds = fs::read_dir(format!("/proc/{pid}/fd"))?.count() as u64;
    let maps = fs::read_to_string(format!("/proc/{pid}/maps"))?
        .lines()
        .count() as u64;
    Ok(Sample {
        t_s,
        rss: field("VmRSS"),
        hwm: field("VmHWM"),
        anon: field("RssAnon"),
        file: field("RssFile"),
        fds,
        threads: field("Threads"),
        maps,
    })
}

/// The lab as the soak found it, restored when dropped: the pods it added deleted, and the
/// lab taken down if it was down.
struct LabGuard {
    was_up: bool,
    /// Pods added and not deleted yet, oldest first.
    pods: Vec<String>,
}

impl LabGuard {
    /// Adds pod `soak-<n>` and deletes the oldest past `at_once`.
    fn churn(&mut self, n: u64, at_once: usize) -> Result<()> {
        let name = format!("soak-{n}");
        pods::add(&name)?;
        self.pods.push(name);
        while self.pods.len() > at_once.max(1) {
            let oldest = self.pods.remove(0);
            pods::del(&oldest)?;
        }
        Ok(())
    }

    fn delete_pods(&mut self) {
        for name in self.pods.drain(..) {
            if let Err(e) = pods::del(&name) {
                eprintln!("bench: soak: deleting pod {name}: {e:#}");
            }
        }
    }
}

impl Drop for LabGuard {
    fn drop(&mut self) {
        self.delete_pods();
        if !self.was_up
            && let Err(e) = lab::down()
        {
            eprintln!("bench: soak: taking the lab down: {e:#}");
        }
    }
}
