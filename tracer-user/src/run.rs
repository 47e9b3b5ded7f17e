//! One tracing session: resolve → attach → collect → join → explain → output → summary.

use std::{
    collections::HashSet,
    io::{self, Write},
    net::IpAddr,
    time::Duration,
};

use aya::Ebpf;
use tokio::{
    io::{Interest, unix::AsyncFd},
    signal::unix::{Signal, SignalKind, signal},
    time::{Instant, MissedTickBehavior, interval, sleep_until},
};

use crate::{
    attach::{
        self, Globals,
        clsact::CreatedQdiscs,
        links::{Batch, LinkEvent, LinkMonitor},
        policy::{self, Policy},
        tc,
    },
    collect::{self, Collector, Counters},
    config::{Config, Target},
    explain::Explainer,
    follow::{self, Action, PodWatch},
    journey::correlate::{Correlator, Limits},
    kernel::{self, caps},
    nat::{
        self, NatAttachment,
        conntrack::{self, Conntrack},
    },
    output::{self, Sink},
    resolve,
    summary::Summary,
    util,
};

/// How often the collector drains the ring buffer when the kernel did not wake it.
const DRAIN_EVERY: Duration = Duration::from_millis(20);
/// Most link-event datagrams read per wake-up (the rest wait for the next turn of the loop).
const LINK_READS: usize = 64;

/// Most events joined before their journeys are written (bounds the journeys held at once).
const DRAIN_BATCH: usize = 1024;

/// The output's buffer: journeys are written in batches of this size, and at the end of each
/// drain (one `write` per batch instead of one per line).
const OUT_BUFFER: usize = 64 << 10;

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
    Collect(#[from] collect::CollectError),
    #[error("writing --ready-file {path}")]
    ReadyFile {
        path: String,
        #[source]
        source: io::Error,
    },
    #[error("--nat-hook conntrack: {0}")]
    Conntrack(String),
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
                eprintln!(
                    "pktrace: pod {} found through {}",
                    util::safe(&found.pod.label()),
                    found.via
                );
            }
            Subject {
                label: found.pod.label(),
                addrs: found.pod.ips,
            }
        }
        Target::Ips(ips) => Subject {
            label: ips
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(","),
            addrs: ips.clone(),
        },
        Target::All => Subject {
            label: "*".into(),
            addrs: Vec::new(),
        },
    })
}

/// Runs a session to its end; the summary is written before returning.
pub fn run(cfg: &Config) -> Result<(), RunError> {
    let subject = subject(cfg)?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(RunError::Runtime)?;
    let result = rt.block_on(trace(cfg, subject));
    // A pod lookup still under way (a slow API server) must not delay the exit.
    rt.shutdown_background();
    result
}

async fn trace(cfg: &Config, subject: Subject) -> Result<(), RunError> {
    caps::preflight()?;
    let offsets = nat::kernel_offsets_or_default(cfg.verbose);
    let globals = Globals::new(cfg.trace_all || cfg.target == Target::All, offsets);
    // Declared before `ebpf` so that it drops after it, once our filters are gone.
    let mut created_qdiscs = CreatedQdiscs::default();
    // Lockdown ("confidentiality") refuses none of this (maps, no programs yet): it refuses the
    // NAT programs, which `nat::attach` explains.
    let mut ebpf = attach::load(&globals)?;
    attach::track_addrs(&mut ebpf, &subject.addrs)?;

    // Subscribed before listing: a link created in between is reported, not missed.
    let monitor = match LinkMonitor::open() {
        Ok(m) => Some(m),
        Err(e) => {
            eprintln!("pktrace: interfaces that appear later will not be traced: link events: {e}");
            None
        }
    };
    let all = tc::list_ifaces();
    let names: Vec<&str> = all.iter().map(|i| i.name.as_str()).collect();
    let choice = crate::config::choose_interfaces(cfg.interfaces.as_deref(), &names);
    let ifaces: Vec<tc::Iface> = all
        .iter()
        .filter(|i| util::iface_matches(&choice.patterns, &i.name))
        .cloned()
        .collect();
    if ifaces.is_empty() {
        return Err(tc::TcAttachError::NoInterface {
            patterns: choice.patterns.join(","),
            present: all
                .iter()
                .map(|i| util::safe(&i.name))
                .collect::<Vec<_>>()
                .join(" "),
        }
        .into());
    }
    let policy = Policy::current();
    let (attachments, modes) = tc::attach(
        &mut ebpf,
        &ifaces,
        &choice.patterns,
        policy,
        &mut created_qdiscs,
    )?;
    let swept = attachments.swept();
    if swept > 0 {
        eprintln!(
            "pktrace: removed {swept} tc filters left by a pktrace that did not exit cleanly"
        );
    }
    // Parsed once for every NAT hook nat::attach tries, and dropped once one is attached. Not
    // the parse the offsets came from: kept from there, the BTF (about 6 MiB) would sit in
    // memory through the object's load and the tc attach and raise the peak by as much.
    let kernel_btf = kernel::btf::KernelBtf::default();
    let mut nat_attachment: NatAttachment =
        nat::attach(cfg.nat_hook, &mut ebpf, &globals, &kernel_btf, cfg.verbose)?;
    drop(kernel_btf);
    let conntrack = match nat_attachment.take_conntrack() {
        Some(monitor) => {
            // Every packet traced: nothing to follow.
            let gates = if globals.filter_mode == tracer_common::filter::ALL {
                None
            } else {
                Some(
                    conntrack::Gates::take(&mut ebpf, attach::object())
                        .map_err(RunError::Conntrack)?,
                )
            };
            Some(Conntrack::new(monitor, gates, &subject.addrs))
        }
        None => None,
    };
    let mut collector = Collector::new(&mut ebpf)?;
    // Everything is loaded and attached: keep only what the rest of the session uses.
    let dropped = caps::drop_unneeded()?;
    if cfg.verbose > 0 {
        for line in dropped.report() {
            eprintln!("pktrace: {line}");
        }
    }

    announce(&subject, &ifaces, policy::summary(&modes), &nat_attachment);
    eprintln!("pktrace: interfaces {}", util::safe(&choice.describe()));
    eprintln!(
        "pktrace: attach: {}",
        policy.describe(&ifaces, &modes, &choice.patterns)
    );
    // Before the ready file: a SIGINT right after it must still end with the summary.
    let signals = (
        signal(SignalKind::interrupt()).map_err(RunError::Runtime)?,
        signal(SignalKind::terminate()).map_err(RunError::Runtime)?,
    );
    if let Some(path) = &cfg.ready_file {
        std::fs::write(path, format!("{}\n", std::process::id())).map_err(|source| {
            RunError::ReadyFile {
                path: path.display().to_string(),
                source,
            }
        })?;
    }

    let stdout: Box<dyn Write + Send> =
        Box::new(io::BufWriter::with_capacity(OUT_BUFFER, io::stdout()));
    let mut sink = output::sink(cfg.format, cfg.color, subject.label.clone(), stdout);
    let (host_ifs, roles_err) = tc::host_ifs(&ifaces);
    if let Some(e) = roles_err {
        eprintln!(
            "pktrace: warning: reading the interfaces' kinds over rtnetlink failed ({e}): every \
             interface counts as an edge, so packets routed through a bridge show as two journeys"
        );
    }
    let mut session = Session {
        correlator: Correlator::new(host_ifs, join_limits()),
        summary: Summary::new(),
        explainer: Explainer::start(kernel::host::local_addrs(), subject.addrs.clone()),
        journeys: 0,
        limit: cfg.limits.count,
        lost_reported: 0,
        evicted_reported: 0,
        flows_evicted_reported: 0,
        counters: Counters::default(),
        conntrack,
        ct_reported: conntrack::Losses::default(),
        pending: Vec::new(),
    };
    if session.conntrack.is_some() {
        session.correlator.use_conntrack();
    }
    // SAFETY: the monitor owns its socket, which stays open as long as the AsyncFd holds it.
    let links = monitor
        .map(|m| unsafe { AsyncFd::register(m) }.map_err(|e| RunError::Runtime(e.into())))
        .transpose()?;
    let pod = match &cfg.target {
        Target::Pod { .. } => Some(PodWatch::new(
            subject.label.clone(),
            subject.addrs.clone(),
            cfg.state_file.clone(),
        )),
        _ => None,
    };
    let mut hot = Hot {
        ebpf: &mut ebpf,
        tc: attachments,
        created: &mut created_qdiscs,
        links,
        verbose: cfg.verbose > 0,
        failed: HashSet::new(),
        pod,
        lookup: None,
        patterns: choice.patterns.clone(),
    };
    let result = session
        .event_loop(cfg, &mut collector, sink.as_mut(), signals, &mut hot)
        .await;
    drop(hot);
    // Whatever stopped the loop, report what is left.
    let end = session.drain(&mut collector, sink.as_mut()).and_then(|()| {
        session.correlator.flush();
        session.output(sink.as_mut())
    });
    let end = end
        .and_then(|()| session.housekeeping(&collector, sink.as_mut()))
        .and_then(|()| session.flow_evictions(&collector, sink.as_mut(), true));
    session.summary.set_lost(session.counters.ringbuf_full);
    session.summary.set_evicted(session.correlator.evicted());
    let end = end.and_then(|()| sink.summary(&session.summary));
    drop(nat_attachment);
    result
        .and(end.or_else(ignore_broken_pipe))
        .or_else(ignore_broken_pipe)
        .map_err(RunError::Output)
}

/// Hidden knob: the most journeys the join table keeps open (tests of its eviction).
const JOIN_MAX_ENV: &str = "PKTRACE_JOIN_MAX";

/// The join table's limits: the defaults, or a smaller table for tests.
fn join_limits() -> Limits {
    let mut limits = Limits::default();
    if let Some(n) = std::env::var(JOIN_MAX_ENV)
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
    {
        limits.max_open = n.max(1);
    }
    limits
}

fn ignore_broken_pipe(e: io::Error) -> io::Result<()> {
    if e.kind() == io::ErrorKind::BrokenPipe {
        Ok(())
    } else {
        Err(e)
    }
}

fn announce(subject: &Subject, ifaces: &[tc::Iface], mode: &str, nat: &NatAttachment) {
    let names: Vec<String> = ifaces.iter().map(|i| util::safe(&i.name)).collect();
    let addrs: Vec<String> = subject.addrs.iter().map(ToString::to_string).collect();
    eprintln!(
        "pktrace: tracing {} ({}) on {} interfaces ({}): {}",
        util::safe(&subject.label),
        if addrs.is_empty() {
            "every packet".into()
        } else {
            addrs.join(", ")
        },
        ifaces.len(),
        mode,
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
    /// Entries evicted from the kernel's followed-flows table, as last reported.
    flows_evicted_reported: u64,
    counters: Counters,
    /// With `--nat-hook conntrack`: its events, and the losses reported so far.
    conntrack: Option<Conntrack>,
    ct_reported: conntrack::Losses,
    /// Events read from the ring and not joined yet (conntrack's reports are read in between).
    pending: Vec<tracer_common::Observation>,
}

impl Session {
    async fn event_loop(
        &mut self,
        cfg: &Config,
        collector: &mut Collector,
        sink: &mut (dyn Sink + Send),
        (mut sigint, mut sigterm): (Signal, Signal),
        hot: &mut Hot<'_>,
    ) -> io::Result<()> {
        // SAFETY: the ring buffer's fd stays open and the same for as long as `collector`,
        // which outlives this AsyncFd.
        let mut ring =
            unsafe { AsyncFd::register_with_interest(RawRing(collector), Interest::READABLE) }
                .map_err(io::Error::from)?;
        let ct_fd = self
            .conntrack
            .as_ref()
            // SAFETY: the socket is owned by `self.conntrack`, which outlives this AsyncFd.
            .map(|c| unsafe { AsyncFd::register_with_interest(Fd(c.fd()), Interest::READABLE) })
            .transpose()
            .map_err(io::Error::from)?;
        let mut drain = interval(DRAIN_EVERY);
        drain.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let mut chores = interval(HOUSEKEEPING_EVERY);
        chores.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let deadline = cfg.limits.duration.map(|d| Instant::now() + d);
        let stop_at = sleep_until(
            deadline.unwrap_or_else(|| Instant::now() + Duration::from_secs(86_400 * 365)),
        );
        tokio::pin!(stop_at);
        loop {
            tokio::select! {
                guard = ring.readable_mut() => {
                    let mut guard = guard?;
                    // Cleared before the drain: the kernel's wakeups are edge-triggered, and
                    // one that comes while draining must not be cleared with this one.
                    guard.clear_ready();
                    self.drain(guard.get_inner_mut().0, sink)?;
                }
                _ = drain.tick() => self.drain(ring.get_mut().0, sink)?,
                guard = readable(ct_fd.as_ref()) => {
                    // Read at once: the kernel follows a NATed flow only once this is done.
                    guard?.clear_ready();
                    self.poll_conntrack(ring.get_mut().0)?;
                }
                _ = chores.tick() => {
                    self.housekeeping(ring.get_ref().0, sink)?;
                    if let Some(addrs) = hot.follow_pod(cfg).await {
                        if let Some(ct) = self.conntrack.as_mut() {
                            ct.set_traced(&addrs);
                        }
                        // Attribution replays the pod's packets from its new addresses.
                        self.explainer.set_sources(addrs);
                    }
                }
                events = hot.link_events(), if hot.links.is_some() => {
                    // Journeys must be up to date before one is closed for its interface.
                    self.drain(ring.get_mut().0, sink)?;
                    hot.apply(events, &mut self.correlator);
                    self.output(sink)?;
                }
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

    /// Joins every waiting event and writes the journeys they complete, [`DRAIN_BATCH`]
    /// events at a time (a full ring is 55,000 events or more: buffered as journeys at once,
    /// they would cost tens of MiB).
    fn drain(&mut self, collector: &mut Collector, sink: &mut (dyn Sink + Send)) -> io::Result<()> {
        loop {
            let (n, bad) = if self.conntrack.is_some() {
                self.drain_with_conntrack(collector)?
            } else {
                let correlator = &mut self.correlator;
                collector.drain(DRAIN_BATCH, |obs| correlator.push(obs))
            };
            self.summary.add_events(n);
            self.summary.add_bad_records(bad);
            self.output(sink)?;
            let emptied = n + bad < DRAIN_BATCH as u64;
            if emptied || self.limit.is_some_and(|n| self.journeys >= n) {
                return Ok(());
            }
        }
    }

    /// [`Self::drain`]'s batch with `--nat-hook conntrack`: the events are taken from the ring
    /// before conntrack's socket is read, so that the report of every connection these packets
    /// belong to (queued before the packets' later hops) is in the join before they are.
    fn drain_with_conntrack(&mut self, collector: &mut Collector) -> io::Result<(u64, u64)> {
        let mut events = std::mem::take(&mut self.pending);
        let counts = collector.drain(DRAIN_BATCH, |ev| events.push(*ev));
        self.poll_conntrack(collector)?;
        for ev in &events {
            self.correlator.push(ev);
        }
        events.clear();
        self.pending = events;
        Ok(counts)
    }

    /// Reads conntrack's reports (NAT mappings into the join, traced flows into the kernel's
    /// filter) and reports new losses.
    fn poll_conntrack(&mut self, collector: &mut Collector) -> io::Result<()> {
        let Some(ct) = self.conntrack.as_mut() else {
            return Ok(());
        };
        let losses = ct.poll(self.correlator.nat_table_mut(), collector)?;
        if losses.overflows > self.ct_reported.overflows {
            eprintln!(
                "pktrace: conntrack events lost: the kernel dropped events {} times (socket full); \
                 NAT steps of those connections are missing",
                losses.overflows
            );
        }
        if losses.unreadable > self.ct_reported.unreadable {
            eprintln!(
                "pktrace: {} conntrack event messages could not be read; NAT steps of those \
                 connections are missing",
                losses.unreadable
            );
        }
        if losses.unfollowed > self.ct_reported.unfollowed {
            eprintln!(
                "pktrace: {} NATed connections could not be followed in the kernel's filter ({}): \
                 their packets beyond the NAT are missing",
                losses.unfollowed,
                losses
                    .follow_error
                    .map_or_else(String::new, |k| k.to_string())
            );
        }
        self.ct_reported = losses;
        Ok(())
    }

    /// Explains, counts and prints the completed journeys (up to the `-c` limit), then
    /// flushes them in one write. Their step lists go back to the join table.
    fn output(&mut self, sink: &mut (dyn Sink + Send)) -> io::Result<()> {
        if !self.correlator.has_done() {
            return Ok(());
        }
        let mut wrote = false;
        self.explainer.take_updates();
        let (explainer, summary) = (&mut self.explainer, &mut self.summary);
        let (journeys, limit) = (&mut self.journeys, self.limit);
        self.correlator.drain_done(|j| {
            if j.steps.is_empty() || limit.is_some_and(|n| *journeys >= n) {
                return Ok(());
            }
            explainer.explain_with_current_rules(j);
            *journeys += 1;
            summary.record(j);
            wrote = true;
            sink.journey(j)
        })?;
        if wrote { sink.flush() } else { Ok(()) }
    }

    /// Reports new losses and evictions and closes idle journeys.
    fn housekeeping(
        &mut self,
        collector: &Collector,
        sink: &mut (dyn Sink + Send),
    ) -> io::Result<()> {
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
        self.correlator.expire(kernel::host::monotonic_ns());
        self.output(sink)?;
        let evicted = self.correlator.evicted();
        if evicted > self.evicted_reported {
            sink.evicted(evicted - self.evicted_reported, evicted)?;
            self.evicted_reported = evicted;
        }
        self.summary.set_evicted(evicted);
        self.flow_evictions(collector, sink, false)
    }

    /// Reports new evictions from the kernel's followed-flows table: while running, what the
    /// counters prove (entries added past the capacity); with `count`, also a walk of the
    /// table (once, at the end). Call after `housekeeping` read the counters.
    fn flow_evictions(
        &mut self,
        collector: &Collector,
        sink: &mut (dyn Sink + Send),
        count: bool,
    ) -> io::Result<()> {
        let added = self.counters.flow_entries;
        let live = (count && added > 0).then(|| collector.live_flow_entries());
        let evicted = collect::flows_evicted(added, collector.flow_capacity(), live);
        if evicted > self.flows_evicted_reported {
            sink.evicted_flows(evicted - self.flows_evicted_reported, evicted)?;
            self.flows_evicted_reported = evicted;
        }
        self.summary.set_evicted_flows(self.flows_evicted_reported);
        Ok(())
    }
}

/// What follows the node while the session runs: attachments of interfaces that come and go,
/// and the followed pod's addresses.
struct Hot<'a> {
    ebpf: &'a mut Ebpf,
    tc: tc::TcAttachments,
    created: &'a mut CreatedQdiscs,
    links: Option<AsyncFd<LinkMonitor>>,
    verbose: bool,
    /// Interfaces an attach failed on (reported once each).
    failed: HashSet<u32>,
    pod: Option<PodWatch>,
    /// A lookup of the followed pod under way.
    lookup: Option<tokio::task::JoinHandle<Option<Vec<IpAddr>>>>,
    /// The interface patterns chosen at start (`--interfaces`, or the default for the CNI
    /// found): interfaces that appear later are attached when they match.
    patterns: Vec<String>,
}

impl Hot<'_> {
    /// Waits for link notifications and returns them (a lost batch becomes a re-listing).
    async fn link_events(&mut self) -> Vec<LinkEvent> {
        let Some(links) = &self.links else {
            return std::future::pending().await;
        };
        let mut events = Vec::new();
        let Ok(mut guard) = links.readable().await else {
            return events;
        };
        for _ in 0..LINK_READS {
            match guard.try_io(|fd| fd.get_ref().recv()) {
                Ok(Ok(Batch::Events(evs))) => events.extend(evs),
                Ok(Ok(Batch::Overflow)) => {
                    let attached = self.tc.attached();
                    events.extend(follow::resync(&attached, &tc::list_ifaces()));
                }
                Ok(Err(e)) => {
                    eprintln!("pktrace: stopped following interfaces: link events: {e}");
                    self.links = None;
                    break;
                }
                Err(_would_block) => break,
            }
        }
        events
    }

    /// Applies link events: attach, rename, detach, forget; journeys last seen on a vanished
    /// interface end in the correlator's queue of completed journeys.
    fn apply(&mut self, events: Vec<LinkEvent>, correlator: &mut Correlator) {
        for ev in events {
            if let LinkEvent::Del { index, .. } = ev {
                self.failed.remove(&index);
            }
            match follow::decide(&ev, self.tc.name(ev.index()), &self.patterns) {
                Action::Attach(iface) => {
                    if let Some(pod) = &mut self.pod {
                        pod.dirty = true;
                    }
                    let attached: Vec<String> = self
                        .tc
                        .attached()
                        .into_iter()
                        .map(|(_, name)| name)
                        .collect();
                    let mode = self
                        .tc
                        .policy
                        .mode_for_new(&iface.name, &attached, &self.patterns);
                    match self.tc.attach(self.ebpf, &iface, mode, self.created) {
                        Ok(()) => {
                            self.failed.remove(&iface.index);
                            correlator.set_iface(
                                iface.index,
                                tc::host_if(&iface.name, tc::role_of(iface.index, &iface.name)),
                            );
                            if self.verbose {
                                eprintln!(
                                    "pktrace: attached to {} ({})",
                                    util::safe(&iface.name),
                                    mode.as_str()
                                );
                            }
                        }
                        // Gone again already (created and deleted at once): nothing to say.
                        Err(_) if !tc::list_ifaces().iter().any(|i| i.index == iface.index) => {}
                        Err(e) if self.failed.insert(iface.index) => eprintln!("pktrace: {e}"),
                        Err(_) => {}
                    }
                }
                Action::Rename { index, name } => {
                    self.tc.rename(index, &name);
                    correlator.set_iface(index, tc::host_if(&name, tc::role_of(index, &name)));
                }
                Action::Detach { index, name } => {
                    self.tc.detach(self.ebpf, index);
                    if self.verbose {
                        eprintln!(
                            "pktrace: detached from {}: renamed out of --interfaces",
                            util::safe(&name)
                        );
                    }
                }
                Action::Gone { index } => {
                    correlator.interface_gone(index);
                    let name = self.tc.forget(self.ebpf, index, self.created);
                    if self.verbose {
                        eprintln!(
                            "pktrace: {} is gone",
                            util::safe(name.as_deref().unwrap_or("?"))
                        );
                    }
                }
                Action::Nothing => {}
            }
        }
    }

    /// Resolves the followed pod again when its state file changed or a link appeared, and
    /// moves the in-kernel filter to its new addresses. The lookup may ask the container
    /// runtime or the API server (seconds), so it runs off the event loop, one at a time; its
    /// answer is taken on a later tick.
    ///
    /// Returns the pod's addresses when they changed.
    async fn follow_pod(&mut self, cfg: &Config) -> Option<Vec<IpAddr>> {
        let Some(pod) = &mut self.pod else {
            return None;
        };
        if self
            .lookup
            .as_ref()
            .is_some_and(tokio::task::JoinHandle::is_finished)
        {
            let found = match self.lookup.take() {
                Some(handle) => handle.await.ok().flatten(),
                None => None,
            };
            // Not resolvable for now (deleted, not recreated yet): keep the old addresses.
            let (added, removed) = found.and_then(|ips| pod.update(ips))?;
            let line = pod.moved_line(&removed);
            match attach::track_addrs(self.ebpf, &added)
                .and_then(|()| attach::untrack_addrs(self.ebpf, &removed))
            {
                Ok(()) => eprintln!("pktrace: {line}"),
                Err(e) => {
                    eprintln!("pktrace: {line}, but the kernel filter could not be updated: {e}")
                }
            }
            return Some(pod.addrs.clone());
        }
        if self.lookup.is_some() || !pod.due() {
            return None;
        }
        let Target::Pod { namespace, name } = &cfg.target else {
            return None;
        };
        let sources = resolve::Sources::for_node(&cfg.state_file, cfg.kubeconfig.as_deref());
        let (namespace, name) = (namespace.clone(), name.clone());
        self.lookup = Some(tokio::task::spawn_blocking(move || {
            resolve::resolve(&sources, &namespace, &name)
                .ok()
                .map(|found| found.pod.ips)
        }));
        None
    }
}

/// The collector as a raw fd for tokio's readiness.
/// Waits until `fd` is readable; never, without one.
async fn readable(
    fd: Option<&AsyncFd<Fd>>,
) -> io::Result<tokio::io::unix::AsyncFdReadyGuard<'_, Fd>> {
    match fd {
        Some(fd) => fd.readable().await,
        None => std::future::pending().await,
    }
}

/// A descriptor owned elsewhere, for readiness only.
struct Fd(std::os::fd::RawFd);

impl std::os::fd::AsRawFd for Fd {
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        self.0
    }
}

struct RawRing<'a>(&'a mut Collector);

impl std::os::fd::AsRawFd for RawRing<'_> {
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        self.0.as_raw_fd()
    }
}
