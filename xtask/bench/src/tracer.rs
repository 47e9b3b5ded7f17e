//! The conditions compared: no tracer, pktrace in its three filter situations, tcpdump. A
//! tracer runs in the bench node, its user space pinned to [`TRACER_CPU`].

use std::{
    collections::BTreeSet,
    fs,
    io::{BufRead as _, BufReader},
    path::{Path, PathBuf},
    process::{ChildStdout, Stdio},
    sync::{Arc, OnceLock},
    thread,
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result, bail};

use super::{
    bpf::{self, KernelCounters},
    net::{BenchPod, CLIENT, INTERFACES, NODE_NS, OTHER, send_masqueraded},
    proc::{Bg, Memory, TRACER_CPU, cpu_seconds, memory_kib, note_peak, pinned, tail},
};

/// How long a tracer may take to attach.
const READY_TIMEOUT: Duration = Duration::from_mins(1);

/// What traces the node while the traffic flows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Condition {
    /// Nothing.
    Untraced,
    /// `pktrace --pod-ip <client>`: every packet of the stream is emitted.
    ClientPod,
    /// `pktrace --pod-ip <another pod>`: the stream's packets are outside the filter. That pod
    /// sends one datagram through the node's MASQUERADE once pktrace is ready, so that a flow
    /// is followed, as on a node whose traced pod talks to the outside: the packets of the
    /// stream to the outside host then go past the filter's address check (the node's address
    /// and the outside host are in the followed flow) to the followed-flow check.
    OtherPod,
    /// `pktrace --trace-all`: every packet on the hooks is emitted.
    TraceAll,
    /// `tcpdump -i any -w /dev/null` in the node namespace.
    Tcpdump,
    /// No tracer: the bench's own empty programs on every hook pktrace attaches to (tcx
    /// ingress and egress of each interface, two netfilter programs on each of the four IPv4
    /// hooks, as pktrace's NAT brackets), so the column shows what calling programs there at
    /// all costs the stream, whatever they do.
    EmptyPrograms,
}

impl Condition {
    /// In the order each round runs them.
    pub const ALL: [Self; 6] = [
        Self::Untraced,
        Self::ClientPod,
        Self::OtherPod,
        Self::TraceAll,
        Self::Tcpdump,
        Self::EmptyPrograms,
    ];

    #[must_use]
    pub const fn is_pktrace(self) -> bool {
        matches!(self, Self::ClientPod | Self::OtherPod | Self::TraceAll)
    }

    /// Whether a tracer process runs (pktrace or tcpdump), whose CPU and memory are sampled.
    #[must_use]
    pub const fn has_tracer(self) -> bool {
        self.is_pktrace() || matches!(self, Self::Tcpdump)
    }

    /// A short key for raw data.
    #[must_use]
    pub const fn key(self) -> &'static str {
        match self {
            Self::Untraced => "untraced",
            Self::ClientPod => "pktrace_pod",
            Self::OtherPod => "pktrace_other_pod",
            Self::TraceAll => "pktrace_trace_all",
            Self::Tcpdump => "tcpdump",
            Self::EmptyPrograms => "empty_programs",
        }
    }

    /// The column heading.
    #[must_use]
    pub const fn label(self) -> &'static str {
        match self {
            Self::Untraced => "untraced",
            Self::ClientPod => "pktrace --pod-ip (this pod)",
            Self::OtherPod => "pktrace --pod-ip (other pod)",
            Self::TraceAll => "pktrace --trace-all",
            Self::Tcpdump => "tcpdump -i any",
            Self::EmptyPrograms => "empty programs on pktrace's hooks",
        }
    }

    /// pktrace's arguments for this condition (before the common ones).
    fn pktrace_args(self) -> Vec<String> {
        match self {
            Self::ClientPod => vec!["--pod-ip".into(), CLIENT.ip.to_string()],
            Self::OtherPod => vec!["--pod-ip".into(), OTHER.ip.to_string()],
            _ => vec!["--trace-all".into()],
        }
    }
}

/// A running tracer.
pub struct Tracer {
    bg: Bg,
    condition: Condition,
    /// The program (pktrace: the measured binary or the baseline).
    binary: PathBuf,
    /// From spawn to the ready file (pktrace) or "listening" (tcpdump).
    pub ready_after: Duration,
    /// pktrace's `COUNTERS` map and programs.
    counters_map: Option<u32>,
    pub prog_ids: BTreeSet<u32>,
    /// With [`Output::Pipe`]: when the first journey line arrived, measured from the spawn.
    first_journey: Option<Arc<OnceLock<Duration>>>,
}

/// Where a tracer's stdout goes.
#[derive(Default)]
pub enum Output<'a> {
    #[default]
    Null,
    File(&'a Path),
    Pipe,
}

/// How to start a tracer.
#[derive(Default)]
pub struct Launch<'a> {
    pub out: Output<'a>,
    /// pktrace's `--interfaces` (default [`INTERFACES`]).
    pub interfaces: Option<&'a str>,
    /// How pktrace chooses between tcx links and clsact filters.
    pub attach: Attach,
    /// A filter expression after the options (none: every packet of the condition).
    pub expression: Option<&'a str>,
}

/// pktrace's choice of tc mechanism: its own rule, or one of its switches that force one.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Attach {
    /// pktrace's default: tcx on named interfaces and few glob-matched ones, clsact beyond.
    #[default]
    Default,
    /// `PKTRACE_FORCE_CLSACT=1`: clsact filters everywhere.
    ForceClsact,
    /// `PKTRACE_FORCE_TCX=1`: tcx links everywhere.
    ForceTcx,
}

impl Attach {
    /// The environment variable that selects it, if any.
    #[must_use]
    pub const fn env(self) -> Option<&'static str> {
        match self {
            Self::Default => None,
            Self::ForceClsact => Some("PKTRACE_FORCE_CLSACT"),
            Self::ForceTcx => Some("PKTRACE_FORCE_TCX"),
        }
    }

    /// How the report names it.
    #[must_use]
    pub const fn label(self) -> &'static str {
        match self {
            Self::Default => "default",
            Self::ForceClsact => "forced clsact",
            Self::ForceTcx => "forced tcx",
        }
    }
}

impl Tracer {
    /// Starts the tracer of `condition` (none for [`Condition::Untraced`]) and waits until it
    /// has attached.
    pub fn start(
        condition: Condition,
        dir: &Path,
        pktrace: &Path,
        launch: &Launch<'_>,
    ) -> Result<Option<Self>> {
        let stdout = match launch.out {
            Output::Null => Stdio::null(),
            Output::File(path) => Stdio::from(fs::File::create(path)?),
            Output::Pipe => Stdio::piped(),
        };
        let err = dir.join(format!("{}.err", condition.key()));
        let started = Instant::now();
        let mut first_journey = None;
        let (bg, ready_after) = match condition {
            Condition::Untraced | Condition::EmptyPrograms => return Ok(None),
            Condition::Tcpdump => {
                let cmd = pinned(
                    NODE_NS,
                    TRACER_CPU,
                    "tcpdump",
                    ["-i", "any", "-n", "-w", "/dev/null"],
                );
                let mut bg = Bg::spawn("tcpdump", cmd, stdout, &err)?;
                let waited = bg.wait_until(READY_TIMEOUT, || {
                    fs::read_to_string(&err).is_ok_and(|s| s.contains("listening on"))
                })?;
                (bg, waited)
            }
            _ => {
                let ready = dir.join("pktrace.ready");
                let _ = fs::remove_file(&ready);
                let mut args = condition.pktrace_args();
                let ready_arg = ready.display().to_string();
                let ifaces = launch.interfaces.unwrap_or(INTERFACES);
                args.extend(
                    [
                        "--follow",
                        "-o",
                        "json",
                        "--interfaces",
                        ifaces,
                        "--ready-file",
                        &ready_arg,
                    ]
                    .map(String::from),
                );
                args.extend(launch.expression.map(String::from));
                let mut cmd = pinned(NODE_NS, TRACER_CPU, pktrace, &args);
                if let Some(var) = launch.attach.env() {
                    cmd.env(var, "1");
                }
                let mut bg = Bg::spawn("pktrace", cmd, stdout, &err)?;
                first_journey = bg
                    .child_mut()
                    .stdout
                    .take()
                    .map(|out| watch_first_journey(out, started));
                bg.wait_until(READY_TIMEOUT, || ready.exists())?;
                (bg, started.elapsed())
            }
        };
        let mut tracer = Self {
            bg,
            condition,
            binary: pktrace.to_owned(),
            ready_after,
            counters_map: None,
            prog_ids: BTreeSet::new(),
            first_journey,
        };
        if condition.is_pktrace() {
            let (progs, maps) = bpf::owned_ids(tracer.pid())?;
            tracer.counters_map = Some(bpf::counters_map(&maps)?);
            tracer.prog_ids = progs;
        }
        if condition == Condition::OtherPod {
            tracer.follow_a_flow(OTHER)?;
        }
        tracer.bg.check_alive()?;
        Ok(Some(tracer))
    }

    /// Makes pktrace follow a flow: `pod` (which it traces) sends a datagram through the node's
    /// MASQUERADE; fails unless its NAT programs count a new followed flow within a second.
    pub fn follow_a_flow(&self, pod: BenchPod) -> Result<()> {
        let before = self.counters()?.flows_added;
        send_masqueraded(pod)?;
        let deadline = Instant::now() + Duration::from_secs(1);
        while self.counters()?.flows_added == before {
            if Instant::now() > deadline {
                bail!(
                    "pktrace followed no flow after {}'s datagram through MASQUERADE",
                    pod.netns
                );
            }
            thread::sleep(Duration::from_millis(20));
        }
        Ok(())
    }

    #[must_use]
    pub fn pid(&self) -> i32 {
        self.bg.pid()
    }

    pub fn bg_mut(&mut self) -> &mut Bg {
        &mut self.bg
    }

    /// Waits (up to `timeout`) for the first journey line on a piped stdout; returns the time
    /// from the spawn to it.
    pub fn first_journey(&mut self, timeout: Duration) -> Result<Duration> {
        let Some(cell) = self.first_journey.clone() else {
            bail!("pktrace's stdout is not piped")
        };
        self.bg.wait_until(timeout, || cell.get().is_some())?;
        cell.get().copied().context("no journey")
    }

    /// Its CPU time so far, seconds.
    pub fn cpu_seconds(&self) -> Result<f64> {
        cpu_seconds(self.pid())
    }

    /// Its memory now.
    pub fn memory(&self) -> Result<Memory> {
        memory_kib(self.pid())
    }

    /// pktrace's kernel counters (zero for tcpdump).
    pub fn counters(&self) -> Result<KernelCounters> {
        self.counters_map
            .map_or(Ok(KernelCounters::default()), bpf::counters)
    }

    /// Fails if the tracer died.
    pub fn check_alive(&mut self) -> Result<()> {
        self.bg.check_alive()
    }

    /// Stops it with SIGINT (pktrace prints its summary) and checks it exited cleanly;
    /// returns its stderr (tcpdump's capture statistics). A pktrace's `VmHWM` is noted first
    /// ([`note_peak`]).
    pub fn stop(mut self) -> Result<String> {
        let name = self.condition.label();
        if self.condition.is_pktrace()
            && let Ok(memory) = self.memory()
        {
            note_peak(&self.binary, memory.hwm);
        }
        let status = self.bg.stop()?;
        let stderr = self.bg.stderr();
        // tcpdump exits 0 on SIGINT; pktrace too.
        if !status.success() {
            bail!("{name} failed ({status}): {}", tail(&stderr));
        }
        Ok(stderr)
    }
}

/// Reads pktrace's stdout to its end on a thread of its own, noting when the first journey
/// line arrived (since `started`).
fn watch_first_journey(out: ChildStdout, started: Instant) -> Arc<OnceLock<Duration>> {
    let cell = Arc::new(OnceLock::new());
    let seen = Arc::clone(&cell);
    thread::spawn(move || {
        for line in BufReader::new(out).lines() {
            let Ok(line) = line else { break };
            if line.starts_with(r#"{"type":"journey""#) {
                let _ = seen.set(started.elapsed());
            }
        }
    });
    cell
}

/// Packets tcpdump's kernel side dropped, from its exit statistics (`N packets dropped by
/// kernel`).
#[must_use]
pub fn tcpdump_dropped(stderr: &str) -> Option<u64> {
    stderr
        .lines()
        .find(|l| l.contains("dropped by kernel"))
        .and_then(|l| l.split_whitespace().next())
        .and_then(|n| n.parse().ok())
}

/// The file a tracer's stdout went to, for phases that read pktrace's JSON lines.
#[must_use]
pub fn output_path(dir: &Path, name: &str) -> PathBuf {
    dir.join(format!("{name}.jsonl"))
}

/// What pktrace's JSON lines say: the summary's `journeys`, `events`, `lost_events` and
/// `evicted_journeys`, and the `loss` lines written live.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct JsonTotals {
    pub journeys: u64,
    pub events: u64,
    pub lost_events: u64,
    pub loss_lines: u64,
    pub evicted_journeys: u64,
}

/// Reads a pktrace JSON lines file.
pub fn json_totals(path: &Path) -> Result<JsonTotals> {
    let file = fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let mut totals = JsonTotals::default();
    let mut summary = None;
    for line in BufReader::new(file).lines() {
        let line = line?;
        if line.starts_with(r#"{"type":"loss""#) {
            totals.loss_lines += 1;
        } else if line.starts_with(r#"{"type":"summary""#) {
            summary = Some(line);
        }
    }
    let summary = summary.with_context(|| format!("no summary line in {}", path.display()))?;
    let json: serde_json::Value = serde_json::from_str(&summary)?;
    let num = |key: &str| {
        json.get(key)
            .and_then(serde_json::Value::as_u64)
            .unwrap_or(0)
    };
    totals.journeys = num("journeys");
    totals.events = num("events");
    totals.lost_events = num("lost_events");
    totals.evicted_journeys = num("evicted_journeys");
    Ok(totals)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_tcpdump_statistics() {
        let err = "tcpdump: listening on any\n12 packets captured\n14 packets received by filter\n\
                   3 packets dropped by kernel\n";
        assert_eq!(tcpdump_dropped(err), Some(3));
        assert_eq!(tcpdump_dropped("nothing"), None);
    }
}
