//! Choosing and attaching the NAT observation (DESIGN.md "NAT observation"): which hook this
//! kernel allows, and why better ones were skipped.

use aya::Ebpf;
use tracer_common::{KernelOffsets, hook};

use super::{
    conntrack::CtMonitor,
    netfilter::{self, NetfilterLink, NetfilterProgram},
    probe::{self, ProbeAttachment, ProbeError},
};
use crate::{
    attach::{Globals, object, verifier_reason},
    config::NatHook,
    kernel::{
        btf,
        caps::{self, LockdownRefusal},
    },
};

/// `NF_IP_PRI_NAT_DST` and `NF_IP_PRI_NAT_SRC` (`include/uapi/linux/netfilter_ipv4.h`, v6.1).
const PRI_NAT_DST: i32 = -100;
const PRI_NAT_SRC: i32 = 100;
/// How many priorities a bracket program tries on each side of the nat table's, nearest first:
/// the kernel gives each BPF netfilter link a priority of its own (`EBUSY` otherwise,
/// `nf_hook_entries_grow`, net/netfilter/core.c, v6.4), so a second pktrace in the same
/// namespace brackets the first one's programs. 32 keeps every bracket between the nat table
/// and the hooks around it (conntrack at -200, mangle at -150, filter at 0, security at 50,
/// conntrack confirm last).
const PRIORITY_SLOTS: i32 = 32;

/// The hooks in order of preference (DESIGN.md "NAT observation").
const ORDER: [NatHook; 4] = [
    NatHook::Fentry,
    NatHook::Kprobe,
    NatHook::Netfilter,
    NatHook::Conntrack,
];

/// Failures to set up the requested NAT observation. `Display` is one line, the reason (with
/// `-v`, a verifier rejection's whole log is printed before it).
#[derive(Debug, thiserror::Error)]
pub enum NatError {
    #[error("--nat-hook {hook}: {why}")]
    Unavailable { hook: &'static str, why: String },
}

/// What is attached for NAT observation.
enum Hooked {
    None,
    Netfilter {
        links: Vec<NetfilterLink>,
        /// Whether the programs can read conntrack entries.
        conntrack: bool,
        /// How many priorities further from the nat table than the nearest the farthest
        /// bracket had to go ([`attach_bracket`]).
        shift: i32,
        /// Why IPv6's nat hooks have no links, when they have none.
        no_ipv6: Option<String>,
    },
    Probe(ProbeAttachment),
    /// Conntrack's events over netlink (the session takes the socket).
    Conntrack(Option<CtMonitor>),
}

impl Hooked {
    /// What is attached and what its latency measures, for the report.
    fn describe(&self) -> String {
        match self {
            Self::None => "nothing attached".into(),
            Self::Netfilter {
                links,
                conntrack,
                shift,
                no_ipv6,
            } => format!(
                "{} BPF netfilter links bracketing the {} (PREROUTING, OUTPUT, \
                 POSTROUTING, INPUT); latency = rule traversal + rewrite{}{}",
                links.len(),
                no_ipv6.as_ref().map_or_else(
                    || "IPv4 and IPv6 nat tables".to_owned(),
                    |why| format!("IPv4 nat table (IPv6 NAT is not observed: {why})")
                ),
                if *shift > 0 {
                    format!(
                        "; brackets moved out by up to {shift} (other BPF netfilter programs, such as \
                         another pktrace, hold the nearer priorities)"
                    )
                } else {
                    String::new()
                },
                if *conntrack {
                    ""
                } else {
                    "; every packet is read (no struct nf_conn in vmlinux BTF, conntrack is \
                     probably a module: packets of untraced connections are not skipped early)"
                }
            ),
            Self::Probe(p) => p.describe(),
            Self::Conntrack(_) => "conntrack events over netlink (NEW, UPDATE) joined with the \
                                   tc events in user space; NAT steps untimed (latency_ns null)"
                .into(),
        }
    }
}

/// The NAT observation in use; dropping it detaches.
pub struct NatAttachment {
    /// Held for its Drop: the links detach with it.
    hooked: Hooked,
    report: Vec<String>,
}

impl NatAttachment {
    /// One line per hook considered: the one used and why the better ones were skipped.
    #[must_use]
    pub fn report(&self) -> &[String] {
        &self.report
    }

    /// The conntrack event socket, when conntrack is the NAT observation (once).
    pub fn take_conntrack(&mut self) -> Option<CtMonitor> {
        match &mut self.hooked {
            Hooked::Conntrack(m) => m.take(),
            _ => None,
        }
    }
}

/// Kernel offsets for the NAT programs from the running kernel's BTF (parsed into
/// `kernel_btf`, kept there for the NAT hooks); zeros (NAT programs unusable, tc unaffected)
/// when there is no BTF.
#[must_use]
pub fn kernel_offsets_or_default(kernel_btf: &btf::KernelBtf, verbose: u8) -> KernelOffsets {
    match kernel_btf.get().and_then(btf::kernel_offsets) {
        Ok(o) => o,
        Err(e) => {
            if verbose > 0 {
                crate::diag::line(format_args!("no kernel offsets for the NAT programs: {e}"));
            }
            KernelOffsets::default()
        }
    }
}

/// Why one hook could not be used: a one-line reason and, if the verifier said why, its log.
struct Skip {
    why: String,
    verifier_log: Option<String>,
    /// The kernel's lockdown is what refused (then `why` says so).
    lockdown: Option<LockdownRefusal>,
}

impl From<String> for Skip {
    fn from(why: String) -> Self {
        Self {
            why,
            verifier_log: None,
            lockdown: None,
        }
    }
}

impl From<ProbeError> for Skip {
    fn from(e: ProbeError) -> Self {
        let verifier_log = e.verifier_log().map(str::to_owned);
        Self {
            why: one_line(&e),
            verifier_log,
            lockdown: None,
        }
    }
}

impl From<netfilter::AttachError> for Skip {
    fn from(e: netfilter::AttachError) -> Self {
        match e {
            netfilter::AttachError::Verifier {
                program,
                errno,
                log,
            } => Self {
                why: format!(
                    "the verifier rejected {program} ({errno}): {}",
                    verifier_reason(&log)
                ),
                verifier_log: Some(log),
                lockdown: None,
            },
            other => Self {
                why: one_line(&other),
                verifier_log: None,
                lockdown: None,
            },
        }
    }
}

impl Skip {
    /// The skip with lockdown as its reason when the kernel's lockdown (`lockdown`: the
    /// lockdown file's text) is what made the verifier reject the program.
    fn explained(mut self, lockdown: Option<&str>) -> Self {
        let refusal = self
            .verifier_log
            .as_deref()
            .and_then(|log| caps::lockdown_refusal(lockdown, log));
        if let Some(refusal) = refusal {
            self.why = refusal.to_string();
            self.lockdown = Some(refusal);
        }
        self
    }

    /// The error when this hook was asked for by name: the reason and, for lockdown, what to
    /// do, on one line.
    fn unavailable(self, hook: &'static str) -> NatError {
        let why = match &self.lockdown {
            Some(refusal) => format!(
                "{}: {}, or use --nat-hook conntrack (NAT steps untimed)",
                self.why,
                refusal.advice()
            ),
            None => self.why,
        };
        NatError::Unavailable { hook, why }
    }
}

/// Ends the report of an `auto` choice that attached nothing: its last line says NAT steps
/// will not be shown and, when lockdown refused a hook, what would show them.
fn no_hook_left(report: &mut [String], lockdown: Option<&LockdownRefusal>) {
    if let Some(last) = report.last_mut() {
        last.push_str("; NAT steps will not be shown");
        if let Some(refusal) = lockdown {
            last.push_str(" (");
            last.push_str(&refusal.advice());
            last.push(')');
        }
    }
}

/// Picks and attaches the NAT observation for `want`, in the preference order fentry →
/// kprobe → netfilter link → conntrack. With `auto` every hook that cannot work is skipped with
/// a report line saying why; with an explicit hook that cannot work, the error is that reason.
/// A hook that fails leaves nothing loaded or attached, and the hooks after the chosen one are
/// never loaded. With `verbose`, a verifier rejection's whole log goes to stderr.
pub fn attach(
    want: NatHook,
    ebpf: &mut Ebpf,
    globals: &Globals,
    kernel_btf: &btf::KernelBtf,
    verbose: u8,
) -> Result<NatAttachment, NatError> {
    let mut report = Vec::new();
    let lockdown = caps::read_lockdown();
    let mut refused_by_lockdown = None;
    for hook in ORDER {
        if want != NatHook::Auto && want != hook {
            continue;
        }
        let name = want_name(hook);
        let skip = match attach_one(hook, ebpf, globals, kernel_btf) {
            Ok(hooked) => {
                let fallback = if want == NatHook::Auto && hook == NatHook::Conntrack {
                    "fallback, no kernel NAT hook can be used here (see above): "
                } else {
                    ""
                };
                report.push(format!("NAT hook {name}: {fallback}{}", hooked.describe()));
                return Ok(NatAttachment { hooked, report });
            }
            Err(skip) => skip.explained(lockdown.as_deref()),
        };
        if let Some(log) = skip.verifier_log.as_deref().filter(|_| verbose > 0) {
            crate::diag::line(format_args!("NAT hook {name}: verifier log:\n{log}"));
        }
        if want != NatHook::Auto {
            return Err(skip.unavailable(name));
        }
        report.push(format!("NAT hook {name}: skipped ({})", skip.why));
        refused_by_lockdown = refused_by_lockdown.or(skip.lockdown);
    }
    no_hook_left(&mut report, refused_by_lockdown.as_ref());
    Ok(NatAttachment {
        hooked: Hooked::None,
        report,
    })
}

/// Attaches one hook, or says why it cannot be used.
fn attach_one(
    hook: NatHook,
    ebpf: &mut Ebpf,
    globals: &Globals,
    kernel_btf: &btf::KernelBtf,
) -> Result<Hooked, Skip> {
    if hook == NatHook::Conntrack {
        return CtMonitor::open()
            .map(|m| Hooked::Conntrack(Some(m)))
            .map_err(|e| {
                format!(
                    "subscribing to conntrack events failed ({e}): load the nf_conntrack_netlink \
                     module and run with CAP_NET_ADMIN"
                )
                .into()
            });
    }
    if globals.offsets.skb_data == 0 {
        return Err(format!(
            "no kernel BTF for sk_buff offsets ({} cannot be read)",
            kernel_btf.path().display()
        )
        .into());
    }
    let bytes = globals.as_bytes();
    let refs: Vec<(&str, &[u8])> = bytes.iter().map(|(n, b)| (*n, b.as_slice())).collect();
    Ok(match hook {
        NatHook::Fentry => Hooked::Probe(probe::attach_fentry(ebpf, &refs, kernel_btf)?),
        NatHook::Kprobe => Hooked::Probe(probe::attach_kprobes(ebpf)?),
        _ => {
            let (links, conntrack, shift, no_ipv6) = attach_netfilter(ebpf, &refs, kernel_btf)?;
            Hooked::Netfilter {
                links,
                conntrack,
                shift,
                no_ipv6,
            }
        }
    })
}

const fn want_name(h: NatHook) -> &'static str {
    match h {
        NatHook::Auto => "auto",
        NatHook::Netfilter => "netfilter",
        NatHook::Conntrack => "conntrack",
        NatHook::Kprobe => "kprobe",
        NatHook::Fentry => "fentry",
    }
}

/// The links, whether the programs read conntrack entries, and how far the farthest bracket
/// moved ([`attach_bracket`]); IPv4's nat table's four hooks, then IPv6's
/// (`NF_IP6_PRI_NAT_DST`/`_SRC` are IPv4's -100 and 100,
/// `include/uapi/linux/netfilter_ipv6.h`, v6.4). IPv6 links a kernel refuses (other than for a
/// taken priority) leave IPv4's in place: the last element says why IPv6 NAT is not observed.
fn attach_netfilter(
    ebpf: &Ebpf,
    globals: &[(&str, &[u8])],
    kernel_btf: &btf::KernelBtf,
) -> Result<(Vec<NetfilterLink>, bool, i32, Option<String>), Skip> {
    let (programs, conntrack) =
        netfilter::load_netfilter_programs(object(), globals, ebpf, kernel_btf)?;
    let (mut links, shift) = attach_family(&programs, netfilter::NFPROTO_IPV4)?;
    match attach_family(&programs, netfilter::NFPROTO_IPV6) {
        Ok((v6, moved)) => {
            links.extend(v6);
            Ok((links, conntrack, shift.max(moved), None))
        }
        Err(e) => Ok((links, conntrack, shift, Some(e.why))),
    }
}

/// The two bracket programs in the four hooks of family `pf`'s nat table, and how far the
/// farthest bracket moved.
fn attach_family(
    programs: &[NetfilterProgram],
    pf: u32,
) -> Result<(Vec<NetfilterLink>, i32), Skip> {
    let find = |name: &str| programs.iter().find(|p| p.name() == name);
    let mut links = Vec::new();
    let mut shift = 0;
    // The same two programs in every hook: each reads which hook it runs in.
    for (hook_num, pri) in [
        (hook::PRE_ROUTING, PRI_NAT_DST),
        (hook::LOCAL_OUT, PRI_NAT_DST),
        (hook::POST_ROUTING, PRI_NAT_SRC),
        (hook::LOCAL_IN, PRI_NAT_SRC),
    ] {
        for (name, step) in [("nf_enter", -1), ("nf_exit", 1)] {
            let prog =
                find(name).ok_or_else(|| format!("program {name} missing from the object"))?;
            let (link, moved) =
                attach_bracket(|at| prog.attach(pf, u32::from(hook_num), at), pri, step)?;
            shift = shift.max(moved);
            links.push(link);
        }
    }
    Ok((links, shift))
}

/// Attaches one bracket program by `attach` at the free priority nearest the nat table's
/// `nat` on the side `step` (-1: before it, 1: after it), trying [`PRIORITY_SLOTS`] of them:
/// the link and how many priorities beyond the nearest it went. Any refusal other than a
/// taken priority, or the last one, is the error.
fn attach_bracket<L>(
    mut attach: impl FnMut(i32) -> Result<L, netfilter::AttachError>,
    nat: i32,
    step: i32,
) -> Result<(L, i32), netfilter::AttachError> {
    let mut moved = 0;
    loop {
        match attach(nat + step * (moved + 1)) {
            Ok(link) => return Ok((link, moved)),
            Err(e) if e.is_busy() && moved + 1 < PRIORITY_SLOTS => moved += 1,
            Err(e) => return Err(e),
        }
    }
}

/// An error and its sources on one line, joined with ": ".
fn one_line(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(inner) = src {
        s.push_str(": ");
        s.push_str(&inner.to_string());
        src = inner.source();
    }
    s.replace('\n', " ")
}

#[cfg(test)]
mod tests {
    use super::*;

    const LOCKED: Option<&str> = Some("none integrity [confidentiality]\n");
    /// How Debian's 6.1 kernel booted with `lockdown=confidentiality` rejects the NAT programs.
    const LOCKED_DOWN_LOG: &str = "44: (85) call bpf_probe_read#4\nunknown func bpf_probe_read#4\n\
                                   processed 42 insns (limit 1000000) max_states_per_insn 0\n";

    fn rejected() -> Skip {
        Skip::from(ProbeError::Verifier {
            program: "nat_fentry_enter",
            errno: std::io::Error::from_raw_os_error(libc::EINVAL),
            log: LOCKED_DOWN_LOG.into(),
        })
    }

    /// A refusal of the link at `priority` with `errno`.
    fn refused(priority: i32, errno: i32) -> netfilter::AttachError {
        netfilter::AttachError::Link {
            program: "nf_enter".into(),
            pf: netfilter::NFPROTO_IPV4,
            hook: 0,
            priority,
            hint: "",
            source: std::io::Error::from_raw_os_error(errno),
        }
    }

    #[test]
    fn a_bracket_takes_the_nearest_free_priority_on_its_side() {
        // Before the nat table: -101 and -102 are taken (two pktraces already run there).
        let mut tried = Vec::new();
        let got = attach_bracket(
            |at| {
                tried.push(at);
                if at > -103 {
                    Err(refused(at, libc::EBUSY))
                } else {
                    Ok(at)
                }
            },
            PRI_NAT_DST,
            -1,
        );
        assert_eq!(got.ok(), Some((-103, 2)));
        assert_eq!(tried, [-101, -102, -103]);
        // After it, nothing taken: the nearest.
        let got = attach_bracket(Ok::<i32, netfilter::AttachError>, PRI_NAT_SRC, 1);
        assert_eq!(got.ok(), Some((101, 0)));
    }

    #[test]
    fn a_bracket_stops_at_another_refusal_or_after_its_slots() {
        let mut tried = 0;
        let err = attach_bracket(
            |at| {
                tried += 1;
                Err::<(), _>(refused(
                    at,
                    if at == -102 { libc::EPERM } else { libc::EBUSY },
                ))
            },
            PRI_NAT_DST,
            -1,
        )
        .unwrap_err();
        assert!(!err.is_busy() && tried == 2, "{err}");
        let mut tried = Vec::new();
        let err = attach_bracket(
            |at| {
                tried.push(at);
                Err::<(), _>(refused(at, libc::EBUSY))
            },
            PRI_NAT_SRC,
            1,
        )
        .unwrap_err();
        assert!(err.is_busy());
        assert_eq!(tried.len(), PRIORITY_SLOTS as usize);
        assert_eq!(tried.last(), Some(&(PRI_NAT_SRC + PRIORITY_SLOTS)));
        assert!(err.to_string().contains("priority 132)"), "{err}");
    }

    #[test]
    fn a_hook_refused_by_lockdown_says_so_and_what_to_do() {
        let skip = rejected().explained(LOCKED);
        assert_eq!(
            skip.why,
            "the kernel is locked down (confidentiality) and refuses eBPF programs that read \
             kernel memory (bpf_probe_read#4)"
        );
        let lockdown = skip.lockdown.clone();
        assert_eq!(
            skip.unavailable("fentry").to_string(),
            "--nat-hook fentry: the kernel is locked down (confidentiality) and refuses eBPF \
             programs that read kernel memory (bpf_probe_read#4): boot the node without \
             lockdown=confidentiality to see timed NAT steps, or use --nat-hook conntrack (NAT \
             steps untimed)"
        );
        let mut report = vec![
            "NAT hook fentry: skipped (the kernel is locked down …)".to_owned(),
            "NAT hook conntrack: skipped (no nf_conntrack_netlink)".to_owned(),
        ];
        no_hook_left(&mut report, lockdown.as_ref());
        assert_eq!(
            report[1],
            "NAT hook conntrack: skipped (no nf_conntrack_netlink); NAT steps will not be shown \
             (boot the node without lockdown=confidentiality to see timed NAT steps)"
        );
    }

    #[test]
    fn other_rejections_keep_the_verifiers_reason() {
        // Not locked down (integrity refuses nothing pktrace loads): the verifier's line.
        let skip = rejected().explained(Some("none [integrity] confidentiality"));
        assert!(skip.lockdown.is_none());
        assert_eq!(
            skip.why,
            "the verifier rejected nat_fentry_enter (EINVAL): unknown func bpf_probe_read#4"
        );
        assert_eq!(
            skip.unavailable("kprobe").to_string(),
            "--nat-hook kprobe: the verifier rejected nat_fentry_enter (EINVAL): unknown func \
             bpf_probe_read#4"
        );
        // No verifier log (a kernel without the program type): never blamed on lockdown.
        let skip = Skip::from(String::from("no BPF netfilter programs")).explained(LOCKED);
        assert!(skip.lockdown.is_none());
        let mut report = vec!["NAT hook conntrack: skipped (no nf_conntrack_netlink)".to_owned()];
        no_hook_left(&mut report, None);
        assert_eq!(
            report[0],
            "NAT hook conntrack: skipped (no nf_conntrack_netlink); NAT steps will not be shown"
        );
    }
}
