//! Start-up as a plan: each step is one function that does one thing and fails with a
//! [`RunError`] saying what to do. `super::trace` calls them in order.

use std::io::{self, Write};

use aya::Ebpf;
use tracer_common::{ExprFilter, batch::BATCH_BYTES_DEFAULT};

use super::{RunError, interfaces::Chosen, session::Session};
use crate::{
    attach::{self, Globals},
    collect::{flush::Flusher, frames},
    config::{Config, Knobs, Target},
    diag,
    drops::{DropAttachment, DropNames, Reasons},
    explain::{DropExplainer, Explainer},
    expr::Filter,
    interfaces::{
        clsact::CreatedQdiscs,
        links::LinkMonitor,
        policy::{self, Policy},
        tc::{self, TcAttachments, TcMode},
    },
    journey::correlate::{Correlator, Limits},
    kernel::{self, btf::KernelBtf, caps},
    nat::{
        self, NatAttachment,
        conntrack::{self, Conntrack},
    },
    output::{self, Sink, pcapng},
    resolve,
    rules::Ruleset,
    services,
    traced::TracedAddrs,
    util,
};

/// The output's buffer: journeys are written in batches of this size, and at the end of each
/// drain (one `write` per batch instead of one per line).
const OUT_BUFFER: usize = 64 << 10;

/// What is traced, resolved: the one set of traced addresses the kernel's filter, conntrack's
/// filter and the explainer start from.
pub(super) struct Subject {
    pub(super) label: String,
    pub(super) addrs: TracedAddrs,
    /// With `--svc`: the service as resolved (its addresses are `addrs`).
    pub(super) service: Option<services::Service>,
}

/// Resolves the target: a pod's addresses, the given ones, or every packet.
pub(super) fn subject(cfg: &Config) -> Result<Subject, RunError> {
    Ok(match &cfg.target {
        Target::Pod { namespace, name } => pod(cfg, namespace, name)?,
        Target::Service { namespace, name } => service(cfg, namespace, name)?,
        Target::Ips(ips) => Subject {
            label: ips
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(","),
            addrs: TracedAddrs::new(ips.iter().copied()),
            service: None,
        },
        Target::All => Subject {
            label: "*".into(),
            addrs: TracedAddrs::default(),
            service: None,
        },
    })
}

fn pod(cfg: &Config, namespace: &str, name: &str) -> Result<Subject, RunError> {
    let sources = resolve::Sources::for_node(&cfg.state_file, cfg.kubeconfig.as_deref());
    let found = resolve::resolve(&sources, namespace, name)?;
    for line in &found.fallbacks {
        diag::line(line);
    }
    if !found.fallbacks.is_empty() || cfg.verbose > 0 {
        diag::line(format_args!(
            "pod {} found through {}",
            util::safe(&found.pod.label()),
            found.via
        ));
    }
    Ok(Subject {
        label: found.pod.label(),
        addrs: found.pod.ips.into(),
        service: None,
    })
}

/// Resolves a service: the node's rules, then the Kubernetes API.
fn service(cfg: &Config, namespace: &str, name: &str) -> Result<Subject, RunError> {
    let rules = Ruleset::load().map_err(|e| e.to_string());
    let api = resolve::api::KubeApi::from_env(cfg.kubeconfig.as_deref());
    let found = services::resolve(
        rules.as_ref().map_err(Clone::clone),
        Some(&api),
        namespace,
        name,
    )?;
    for line in &found.fallbacks {
        diag::line(line);
    }
    let s = found.service;
    diag::line(format_args!(
        "service {} found through {}: {}",
        util::safe(&s.label),
        found.via,
        services::describe(&s)
    ));
    Ok(Subject {
        label: s.label.clone(),
        addrs: TracedAddrs::new(s.addrs()),
        service: Some(s),
    })
}

/// The key of the warning that interfaces are not (or no longer) followed (said once).
pub(super) const LINKS_LOST: &str = "link-events";

/// The link-event subscription, or `None` (said on stderr) when it cannot be opened.
pub(super) fn link_monitor() -> Option<LinkMonitor> {
    match LinkMonitor::open() {
        Ok(m) => Some(m),
        Err(e) => {
            diag::once(
                LINKS_LOST,
                format_args!("interfaces that appear later will not be traced: link events: {e}"),
            );
            None
        }
    }
}

/// The kernel object, loaded, with the subject's addresses in its filter and the NAT hook
/// attached.
pub(super) struct Kernel {
    pub(super) ebpf: Ebpf,
    pub(super) globals: Globals,
    pub(super) nat: NatAttachment,
    /// The drop program, when it attached; the names the join gives its drops.
    pub(super) drops: Option<DropAttachment>,
    pub(super) drop_names: Option<DropNames>,
    /// Has CPUs write out the records they staged; `None` when nothing is staged.
    pub(super) flusher: Option<Flusher>,
}

/// Reads the kernel's BTF (once: the programs' offsets and the NAT hooks both use this parse),
/// loads the object, seeds the traced addresses and attaches the NAT observation. The BTF
/// (about 6 MiB) is dropped before the tc programs are loaded and attached.
pub(super) fn load(cfg: &Config, subject: &Subject) -> Result<Kernel, RunError> {
    let kernel_btf = KernelBtf::new(cfg.knobs.btf_path.clone());
    let offsets = nat::kernel_offsets_or_default(&kernel_btf, cfg.verbose);
    let mut globals = Globals::new(cfg.trace_all || cfg.target == Target::All, offsets)
        .with_expr(cfg.filter.as_ref().map_or(ExprFilter::ANY, Filter::kernel));
    globals.snaplen = cfg.capture.as_ref().map_or(0, |c| c.snaplen);
    globals.site_names = u32::from(crate::drops::attach::kernel_names_sites());
    // `-w` writes every record alone: its frame records are too large to stage.
    globals.batch_bytes = if globals.snaplen == 0 {
        cfg.knobs.batch_bytes.unwrap_or(BATCH_BYTES_DEFAULT)
    } else {
        0
    };
    // Lockdown ("confidentiality") refuses none of this (maps, no programs yet): it refuses the
    // NAT programs, which `nat::attach` explains.
    let mut ebpf = attach::load(&globals, &cfg.knobs)?;
    let flusher = if globals.batch_bytes == 0 {
        None
    } else {
        match Flusher::new(&mut ebpf) {
            Ok(f) => Some(f),
            Err(e) => {
                // The globals are fixed at load: load again with nothing staged.
                let mut why = e.to_string();
                let mut source = std::error::Error::source(&e);
                while let Some(inner) = source {
                    why = format!("{why}: {inner}");
                    source = inner.source();
                }
                diag::line(format_args!(
                    "warning: records are written to the ring one at a time: {why}"
                ));
                globals.batch_bytes = 0;
                ebpf = attach::load(&globals, &cfg.knobs)?;
                None
            }
        }
    };
    attach::track_addrs(&mut ebpf, subject.addrs.as_slice())?;
    let nat = nat::attach(cfg.nat_hook, &mut ebpf, &globals, &kernel_btf, cfg.verbose)?;
    let (drops, drop_names) = attach_drops(&mut ebpf, &globals, &kernel_btf, &cfg.knobs);
    drop(kernel_btf);
    Ok(Kernel {
        ebpf,
        globals,
        nat,
        drops,
        drop_names,
        flusher,
    })
}

/// Attaches the drop program and reads the kernel's drop reasons; without them the trace goes
/// on without drops (said once, with each way tried).
fn attach_drops(
    ebpf: &mut Ebpf,
    globals: &Globals,
    kernel_btf: &KernelBtf,
    knobs: &Knobs,
) -> (Option<DropAttachment>, Option<DropNames>) {
    let values = kernel_btf
        .get()
        .ok()
        .and_then(|b| b.enum_values("skb_drop_reason").ok().flatten());
    let bytes = globals.as_bytes();
    let named: Vec<(&str, &[u8])> = bytes.iter().map(|(n, b)| (*n, b.as_slice())).collect();
    match crate::drops::attach::attach(ebpf, &named, kernel_btf, values.is_some()) {
        Ok(a) => {
            let reasons = Reasons::new(&values.unwrap_or_default());
            (Some(a), Some(DropNames::new(reasons, &knobs.kallsyms_path)))
        }
        Err(why) => {
            let why: Vec<String> = why
                .iter()
                .map(|(way, e)| format!("{way}: {}", e.line()))
                .collect();
            diag::line(format_args!(
                "warning: drops are not traced: {}",
                why.join("; ")
            ));
            (None, None)
        }
    }
}

/// The tc attachments and the mechanism of each chosen interface.
pub(super) struct TcStart {
    pub(super) attachments: TcAttachments,
    pub(super) modes: Vec<TcMode>,
}

/// Attaches the tc programs to the chosen interfaces.
pub(super) fn attach_tc(
    cfg: &Config,
    kernel: &mut Kernel,
    chosen: &Chosen,
    created: &mut CreatedQdiscs,
) -> Result<TcStart, RunError> {
    let policy = Policy::current(&cfg.knobs);
    let (attachments, modes) = tc::attach(
        &mut kernel.ebpf,
        &chosen.ifaces,
        &chosen.choice.patterns,
        policy,
        created,
    )?;
    let swept = attachments.swept();
    if swept > 0 {
        diag::line(format_args!(
            "removed {swept} tc filters left by a pktrace that did not exit cleanly"
        ));
    }
    Ok(TcStart { attachments, modes })
}

/// With `--nat-hook conntrack` (chosen or fallen back to): its events, and the gates that let
/// the kernel follow NATed flows (none when every packet is traced: nothing to follow).
pub(super) fn conntrack(
    kernel: &mut Kernel,
    subject: &Subject,
) -> Result<Option<Conntrack>, RunError> {
    let Some(monitor) = kernel.nat.take_conntrack() else {
        return Ok(None);
    };
    let gates = if kernel.globals.filter_mode == tracer_common::filter::ALL {
        None
    } else {
        Some(
            conntrack::Gates::take(&mut kernel.ebpf, attach::object())
                .map_err(RunError::Conntrack)?,
        )
    };
    Ok(Some(Conntrack::new(monitor, gates, subject.addrs.clone())))
}

/// Drops the capabilities the rest of the session does not use.
pub(super) fn drop_privileges(cfg: &Config) -> Result<(), RunError> {
    let dropped = caps::drop_unneeded()?;
    if cfg.verbose > 0 {
        for line in dropped.report() {
            diag::line(line);
        }
    }
    Ok(())
}

/// The start-up report: what is traced where, how, and with which NAT hook.
pub(super) fn announce(
    subject: &Subject,
    chosen: &Chosen,
    tc: &TcStart,
    nat: &NatAttachment,
    drops: Option<&DropAttachment>,
) {
    let ifaces = &chosen.ifaces;
    let names: Vec<String> = ifaces.iter().map(|i| util::safe(&i.name)).collect();
    diag::line(format_args!(
        "tracing {} ({}) on {} interfaces ({}): {}",
        util::safe(&subject.label),
        if subject.addrs.is_empty() {
            "every packet".into()
        } else {
            subject.addrs.to_string()
        },
        ifaces.len(),
        policy::summary(&tc.modes),
        names.join(" ")
    ));
    for line in nat.report() {
        diag::line(line);
    }
    if let Some(d) = drops {
        diag::line(d.describe());
    }
    diag::line(format_args!(
        "interfaces {}",
        util::safe(&chosen.choice.describe())
    ));
    let policy = tc.attachments.policy;
    diag::line(format_args!(
        "attach: {}",
        policy.describe(ifaces, &tc.modes, &chosen.choice.patterns)
    ));
}

/// Writes our process id to `--ready-file`: every hook is attached.
pub(super) fn ready_file(cfg: &Config) -> Result<(), RunError> {
    let Some(path) = &cfg.ready_file else {
        return Ok(());
    };
    std::fs::write(path, format!("{}\n", std::process::id())).map_err(|source| {
        RunError::ReadyFile {
            path: path.display().to_string(),
            source,
        }
    })
}

/// `-w`: the pcapng's destination (a new file, or stdout for `-w -`), buffered.
pub(super) fn capture_out(cfg: &Config) -> Result<Option<Box<dyn Write + Send>>, RunError> {
    let Some(capture) = &cfg.capture else {
        return Ok(None);
    };
    let out: Box<dyn Write + Send> = match &capture.path {
        None => Box::new(io::stdout()),
        Some(path) => {
            Box::new(
                std::fs::File::create(path).map_err(|source| RunError::Capture {
                    path: path.display().to_string(),
                    source,
                })?,
            )
        }
    };
    Ok(Some(Box::new(io::BufWriter::with_capacity(
        OUT_BUFFER, out,
    ))))
}

/// The output: text or JSON lines on a buffered stdout; with `-w`, the pcapng in front of it
/// (with `-w -` the pcapng has stdout, and the text or JSON sink, which then gets no
/// journeys, stderr).
pub(super) fn sink(
    cfg: &Config,
    subject: &Subject,
    capture: Option<(Box<dyn Write + Send>, frames::Shared)>,
) -> io::Result<Box<dyn Sink + Send>> {
    let to_stdout = cfg.capture.as_ref().is_some_and(|c| c.path.is_none());
    let text_out: Box<dyn Write + Send> = if to_stdout {
        Box::new(io::stderr())
    } else {
        Box::new(io::BufWriter::with_capacity(OUT_BUFFER, io::stdout()))
    };
    let color = cfg.color && !to_stdout;
    let inner = match &subject.service {
        Some(s) => output::service_sink(cfg.format, color, &s.label, text_out),
        None => output::sink(cfg.format, color, subject.label.clone(), text_out),
    };
    let (Some((out, frames)), Some(c)) = (capture, &cfg.capture) else {
        return Ok(inner);
    };
    let options = pcapng::Options {
        print_journeys: !to_stdout,
        snaplen: c.snaplen,
        wall_offset_ns: pcapng::wall_offset_ns(kernel::host::monotonic_ns()),
        pod: subject.label.clone(),
    };
    Ok(Box::new(pcapng::PcapSink::new(
        inner, out, frames, options,
    )?))
}

/// The join table (with the interfaces' kinds), the explainer and the output's state.
pub(super) fn session(
    cfg: &Config,
    subject: &Subject,
    ifaces: &[tc::Iface],
    conntrack: Option<Conntrack>,
    drop_names: Option<DropNames>,
) -> Session {
    let (host_ifs, roles_err) = tc::host_ifs(ifaces);
    if let Some(e) = roles_err {
        diag::line(format_args!(
            "warning: reading the interfaces' kinds over rtnetlink failed ({e}): every \
             interface counts as an edge, so packets routed through a bridge show as two journeys"
        ));
    }
    let mut correlator = Correlator::new(host_ifs, join_limits(&cfg.knobs));
    if conntrack.is_some() {
        correlator.use_conntrack();
    }
    if let Some(names) = drop_names {
        correlator.set_drop_names(names);
    }
    let explainer = Explainer::start(kernel::host::local_addrs(), subject.addrs.clone());
    let mut session = Session::new(correlator, explainer, cfg.limits.count, conntrack)
        .with_filter(cfg.filter.clone());
    session.failures_only = cfg.show == crate::config::Show::Failures;
    session.drops =
        DropExplainer::new(kernel::host::local_addrs()).watching(session.explainer.changes());
    session
}

/// The join table's limits: the defaults, or a smaller table for tests.
fn join_limits(knobs: &Knobs) -> Limits {
    let mut limits = Limits::default();
    if let Some(n) = knobs.join_max {
        limits.max_open = n;
    }
    if let Some(n) = knobs.join_bytes {
        limits.max_bytes = n;
    }
    limits
}
