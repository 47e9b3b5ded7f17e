//! One tracing session: resolve → attach → collect → join → explain → output → summary.

use std::{
    io::{self, Write},
    net::IpAddr,
    time::Duration,
};

use tokio::{
    io::{Interest, unix::AsyncFd},
    signal::unix::{Signal, SignalKind, signal},
    time::{Instant, MissedTickBehavior, interval, sleep_until},
};

use crate::{
    attach::{self, Globals, tc},
    caps,
    collect::{Collector, Counters},
    config::{Config, Target},
    explain::Explainer,
    journey::{
        Journey,
        correlate::{Correlator, Limits},
    },
    nat::{self, NatAttachment},
    output::{self, Sink},
    resolve,
    summary::Summary,
};


/// How often the collector drains the ring buffer when the kernel did not wake it.
const DRAIN_EVERY: Duration = Duration::from_millis(20);
/// How often kernel counters are read (loss reports) and idle journeys closed.
const HOUSEKEEPING_EVERY: Duration = Duration::from_millis(250);

/// Failures of a session; `main` turns them into messages and exit codes.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error(transparent)]
    Resolve(#[from] resolve::ResolveError),
    #[error(transparent)]
    Privilege(#[from] caps::PrivilegeError),
    #[error(transparent)]
    Load(#[from] attach::LoadError),
    #[error(transparent)]
    Tc(#[from] tc::TcAttachError),
    #[error(transparent)]
    Nat(#[from] nat::NatError),
    #[error(transparent)]
    Collect(#[from] crate::collect::CollectError),
    #[error("writing --ready-file {path}")]
    ReadyFile {
        path: String,
        #[source]
        source: io::Error,
    },
    #[error("setting up the event loop")]
    Runtime(#[source] io::Error),
    #[error("writing the output")]
    Output(#[source] io::Error),
}

impl RunError {
    /// True when the user asked for something that cannot exist (exit code 2).
    #[must_use]
    pub fn is_usage(&self) -> bool {
        match self {
            Self::Resolve(e) => e.is_usage(),
            _ => false,
        }
    }
}

/// What is traced, resolved.
struct Subject {
    label: String,
    addrs: Vec<IpAddr>,
}

fn subject(cfg: &Config) -> Result<Subject, RunError> {
    Ok(match &cfg.target {
        Target::Pod { namespace, name } => {
            let sources = resolve::Sources::for_node(&cfg.state_file, cfg.kubeconfig.as_deref());
            let found = resolve::resolve(&sources, namespace, name)?;
            for line in &found.fallbacks {
                eprintln!("pktrace: {line}");
            }
            if !found.fallbacks.is_empty() || cfg.verbose > 0 {
                eprintln!("pktrace: pod {} found through {}", output::safe(&found.pod.label()), found.via);
            }
            Subject { label: found.pod.label(), addrs: found.pod.ips }
        }
        Target::Ips(ips) => Subject {
            label: ips.iter().map(ToString::to_string).collect::<Vec<_>>().join(","),
            addrs: ips.clone(),
        },
        Target::All => Subject { label: "*".into(), addrs: Vec::new() },
    })
}

/// Runs a session to its end; the summary is written before returning.
pub fn run(cfg: &Config) -> Result<(), RunError> {
    let subject = subject(cfg)?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(RunError::Runtime)?;
    rt.block_on(trace(cfg, subject))
}

async fn trace(cfg: &Config, subject: Subject) -> Result<(), RunError> {
    caps::preflight()?;
    let offsets = nat::kernel_offsets_or_default(cfg.verbose);
    let globals = Globals::new(cfg.trace_all || cfg.target == Target::All, offsets);
    // Declared before `ebpf` so that it drops after it, once our filters are gone.
    let mut created_qdiscs = attach::clsact::CreatedQdiscs::default();
    let mut ebpf = attach::load(&globals).map_err(|e| {
        match (&e, caps::explain_eperm(caps::read_lockdown().as_deref())) {
            (attach::LoadError::Permission(_), Some(lockdown)) => RunError::Privilege(lockdown),
            _ => e.into(),
        }
    })?;
    attach::track_addrs(&mut ebpf, &subject.addrs)?;

    let all = tc::list_ifaces();
    let ifaces: Vec<tc::Iface> =
        all.iter().filter(|i| crate::config::iface_matches(&cfg.interfaces, &i.name)).cloned().collect();
    if ifaces.is_empty() {
        return Err(tc::TcAttachError::NoInterface {
            patterns: cfg.interfaces.join(","),
            present: all.iter().map(|i| output::safe(&i.name)).collect::<Vec<_>>().join(" "),
        }
        .into());
    }
    let (mode, swept) = tc::attach(&mut ebpf, &ifaces, &mut created_qdiscs)?;
    if swept > 0 {
        eprintln!("pktrace: removed {swept} tc filters left by a pktrace that did not exit cleanly");
    }
    let nat_attachment: NatAttachment = nat::attach(cfg.nat_hook, &mut ebpf, &globals, cfg.verbose)?;
    let mut collector = Collector::new(&mut ebpf)?;
    // Everything is loaded and attached: keep only what the rest of the session uses.
    let dropped = caps::drop_unneeded()?;
    if cfg.verbose > 0 {
        for line in dropped.report() {
            eprintln!("pktrace: {line}");
        }
    }

    announce(&subject, &ifaces, mode, &nat_attachment);
    // Before the ready file: a SIGINT right after it must still end with the summary.
    let signals = (
        signal(SignalKind::interrupt()).map_err(RunError::Runtime)?,
        signal(SignalKind::terminate()).map_err(RunError::Runtime)?,
    );
    if let Some(path) = &cfg.ready_file {
        std::fs::write(path, format!("{}\n", std::process::id()))
            .map_err(|source| RunError::ReadyFile { path: path.display().to_string(), source })?;
    }

    let stdout: Box<dyn Write + Send> = Box::new(io::stdout());
    let mut sink = output::sink(cfg.format, cfg.color, subject.label.clone(), stdout);
    let mut session = Session {
        correlator: Correlator::new(tc::host_ifs(&ifaces), join_limits()),
        summary: Summary::new(),
        explainer: Explainer::start(nat::local_addrs(), subject.addrs.clone()),
        journeys: 0,
        limit: cfg.limits.count,
        lost_reported: 0,
        evicted_reported: 0,
        counters: Counters::default(),
    };
    let result = session.event_loop(cfg, &mut collector, sink.as_mut(), signals).await;
    // Whatever stopped the loop, report what is left.
    let mut done = Vec::new();
    collector.drain(|ev| session.correlator.push(ev, &mut done));
    session.correlator.flush(&mut done);
    let end = session.output(done, sink.as_mut()).and_then(|()| session.housekeeping(&collector, sink.as_mut()));
    session.summary.set_lost(session.counters.ringbuf_full);
    session.summary.set_evicted(session.correlator.evicted());
    let end = end.and_then(|()| sink.summary(&session.summary));
    drop(nat_attachment);
    result.and(end.or_else(ignore_broken_pipe)).or_else(ignore_broken_pipe).map_err(RunError::Output)
}

/// Hidden knob: the most journeys the join table keeps open (tests of its eviction).
const JOIN_MAX_ENV: &str = "PKTRACE_JOIN_MAX";

/// The join table's limits: the defaults, or a smaller table for tests.
fn join_limits() -> Limits {
    let mut limits = Limits::default();
    if let Some(n) = std::env::var(JOIN_MAX_ENV).ok().and_then(|v| v.parse::<usize>().ok()) {
        limits.max_open = n.max(1);
    }
    limits
}

fn ignore_broken_pipe(e: io::Error) -> io::Result<()> {
    if e.kind() == io::ErrorKind::BrokenPipe { Ok(()) } else { Err(e) }
}

fn announce(subject: &Subject, ifaces: &[tc::Iface], mode: tc::TcMode, nat: &NatAttachment) {
    let names: Vec<String> = ifaces.iter().map(|i| output::safe(&i.name)).collect();
    let addrs: Vec<String> = subject.addrs.iter().map(ToString::to_string).collect();
    eprintln!(
        "pktrace: tracing {} ({}) on {} interfaces ({}): {}",
        output::safe(&subject.label),
        if addrs.is_empty() { "every packet".into() } else { addrs.join(", ") },
        ifaces.len(),
        mode.as_str(),
        names.join(" ")
    );
    for line in nat.report() {
        eprintln!("pktrace: {line}");
    }
}

struct Session {
    correlator: Correlator,
    summary: Summary,
    /// Names the rule of each NAT step (rules re-read when they change).
    explainer: Explainer,
    journeys: u64,
    limit: Option<u64>,
    lost_reported: u64,
    evicted_reported: u64,
    counters: Counters,
}

impl Session {
    async fn event_loop(
        &mut self,
        cfg: &Config,
        collector: &mut Collector,
        sink: &mut (dyn Sink + Send),
        (mut sigint, mut sigterm): (Signal, Signal),
    ) -> io::Result<()> {
        // SAFETY: the ring buffer's fd stays open and the same for as long as `collector`,
        // which outlives this AsyncFd.
        let mut ring = unsafe { AsyncFd::register_with_interest(RawRing(collector), Interest::READABLE) }
            .map_err(io::Error::from)?;
        let mut drain = interval(DRAIN_EVERY);
        drain.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let mut chores = interval(HOUSEKEEPING_EVERY);
        chores.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let deadline = cfg.limits.duration.map(|d| Instant::now() + d);
        let stop_at = sleep_until(deadline.unwrap_or_else(|| Instant::now() + Duration::from_secs(86_400 * 365)));
        tokio::pin!(stop_at);
        loop {
            tokio::select! {
                guard = ring.readable_mut() => {
                    let mut guard = guard?;
                    let done = self.drain(guard.get_inner_mut().0);
                    guard.clear_ready();
                    self.output(done, sink)?;
                }
                _ = drain.tick() => {
                    let done = self.drain(ring.get_mut().0);
                    self.output(done, sink)?;
                }
                _ = chores.tick() => self.housekeeping(ring.get_ref().0, sink)?,
                _ = sigint.recv() => break,
                _ = sigterm.recv() => break,
                () = &mut stop_at, if deadline.is_some() => break,
            }
            if self.limit.is_some_and(|n| self.journeys >= n) {
                break;
            }
        }
        Ok(())
    }

    fn drain(&mut self, collector: &mut Collector) -> Vec<Journey> {
        let mut done = Vec::new();
        let correlator = &mut self.correlator;
        let (n, _) = collector.drain(|ev| correlator.push(ev, &mut done));
        self.summary.add_events(n);
        done
    }

    /// Explains, counts and prints completed journeys (up to the `-c` limit).
    fn output(&mut self, done: Vec<Journey>, sink: &mut (dyn Sink + Send)) -> io::Result<()> {
        for mut j in done {
            if j.steps.is_empty() || self.limit.is_some_and(|n| self.journeys >= n) {
                continue;
            }
            self.explainer.explain(&mut j);
            self.journeys += 1;
            self.summary.record(&j);
            sink.journey(&j)?;
        }
        Ok(())
    }

    /// Reports new losses and evictions and closes idle journeys.
    fn housekeeping(&mut self, collector: &Collector, sink: &mut (dyn Sink + Send)) -> io::Result<()> {
        if let Ok(c) = collector.counters() {
            self.counters = c;
        }
        if let Some(update) = self.explainer.refresh() {
            eprintln!(
                "pktrace: nat rules changed: re-read in {} ms, in use {} ms after the poller saw it ({})",
                update.read_cost.as_millis(),
                update.in_use_after.as_millis(),
                update.rules.describe()
            );
        }
        let lost = self.counters.ringbuf_full;
        if lost > self.lost_reported {
            sink.loss(lost - self.lost_reported, lost)?;
            self.lost_reported = lost;
        }
        self.summary.set_lost(lost);
        let mut done = Vec::new();
        self.correlator.expire(nat::monotonic_ns(), &mut done);
        self.output(done, sink)?;
        let evicted = self.correlator.evicted();
        if evicted > self.evicted_reported {
            sink.evicted(evicted - self.evicted_reported, evicted)?;
            self.evicted_reported = evicted;
        }
        self.summary.set_evicted(evicted);
        Ok(())
    }
}

/// The collector as a raw fd for tokio's readiness.
struct RawRing<'a>(&'a mut Collector);

impl std::os::fd::AsRawFd for RawRing<'_> {
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        self.0.as_raw_fd()
    }
}
