//! Choosing and attaching the NAT observation (DESIGN.md "NAT observation"): which hook this
//! kernel allows, and why better ones were skipped.

use std::net::IpAddr;

use aya::Ebpf;
use tracer_common::{KernelOffsets, hook};

use crate::{
    attach::{
        Globals, object,
        netfilter::{self, NetfilterLink},
    },
    btf,
    config::NatHook,
};

/// `NFPROTO_IPV4` (include/uapi/linux/netfilter.h, v6.1).
const NFPROTO_IPV4: u32 = 2;
/// `NF_IP_PRI_NAT_DST` and `NF_IP_PRI_NAT_SRC` (include/uapi/linux/netfilter_ipv4.h, v6.1).
const PRI_NAT_DST: i32 = -100;
const PRI_NAT_SRC: i32 = 100;

/// Failures to set up the requested NAT observation.
#[derive(Debug, thiserror::Error)]
pub enum NatError {
    #[error("--nat-hook {hook}: {why}")]
    Unavailable { hook: &'static str, why: String },
    #[error("attaching the NAT programs failed")]
    Netfilter(#[source] netfilter::AttachError),
}

/// The NAT observation in use; dropping it detaches.
pub struct NatAttachment {
    links: Vec<NetfilterLink>,
    report: Vec<String>,
}

impl NatAttachment {
    /// One line per hook considered: the one used and why the better ones were skipped.
    #[must_use]
    pub fn report(&self) -> &[String] {
        &self.report
    }

    /// How many kernel links are attached.
    #[must_use]
    pub fn links(&self) -> usize {
        self.links.len()
    }
}

/// Kernel offsets for the NAT programs from the running kernel's BTF; zeros (NAT programs
/// unusable, tc unaffected) when there is no BTF.
#[must_use]
pub fn kernel_offsets_or_default(verbose: u8) -> KernelOffsets {
    match btf::Btf::from_sys_fs().and_then(|b| btf::kernel_offsets(&b)) {
        Ok(o) => o,
        Err(e) => {
            if verbose > 0 {
                eprintln!("pktrace: no kernel offsets for the NAT programs: {e}");
            }
            KernelOffsets::default()
        }
    }
}

/// Picks and attaches the NAT observation for `want`, in the preference order fentry →
/// kprobe → netfilter link → conntrack.
pub fn attach(want: NatHook, ebpf: &Ebpf, globals: &Globals) -> Result<NatAttachment, NatError> {
    let mut report = Vec::new();
    let usable = |hook: &'static str| matches!(want, NatHook::Auto) || want_name(want) == hook;
    for hook in ["fentry", "kprobe"] {
        if usable(hook) {
            let why = "not built into this pktrace yet";
            if want != NatHook::Auto {
                return Err(NatError::Unavailable { hook, why: why.into() });
            }
            report.push(format!("NAT hook {hook}: skipped ({why})"));
        }
    }
    if usable("netfilter") {
        match attach_netfilter(ebpf, globals) {
            Ok(links) => {
                report.push(format!(
                    "NAT hook netfilter: {} BPF netfilter links bracketing the nat table \
                     (PREROUTING, OUTPUT, POSTROUTING, INPUT); latency = rule traversal + rewrite",
                    links.len()
                ));
                return Ok(NatAttachment { links, report });
            }
            Err(why) if want == NatHook::Auto => {
                report.push(format!("NAT hook netfilter: skipped ({why})"));
            }
            Err(why) => return Err(NatError::Unavailable { hook: "netfilter", why }),
        }
    }
    let why = "conntrack over netlink is not built into this pktrace yet";
    if want == NatHook::Conntrack {
        return Err(NatError::Unavailable { hook: "conntrack", why: why.into() });
    }
    report.push(format!("NAT hook conntrack: skipped ({why}); NAT steps will not be shown"));
    Ok(NatAttachment { links: Vec::new(), report })
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

fn attach_netfilter(ebpf: &Ebpf, globals: &Globals) -> Result<Vec<NetfilterLink>, String> {
    if globals.offsets.skb_data == 0 {
        return Err("no kernel BTF for sk_buff offsets (/sys/kernel/btf/vmlinux)".into());
    }
    let bytes = globals.as_bytes();
    let refs: Vec<(&str, &[u8])> = bytes.iter().map(|(n, b)| (*n, b.as_slice())).collect();
    let programs = netfilter::load_netfilter_programs(object(), &refs, ebpf)
        .map_err(|e| format!("{:#}", anyhow_chain(&e)))?;
    let find = |name: &str| programs.iter().find(|p| p.name() == name);
    let mut links = Vec::new();
    for (prefix, hook_num, pri) in [
        ("nf_pre", hook::PRE_ROUTING, PRI_NAT_DST),
        ("nf_out", hook::LOCAL_OUT, PRI_NAT_DST),
        ("nf_post", hook::POST_ROUTING, PRI_NAT_SRC),
        ("nf_in", hook::LOCAL_IN, PRI_NAT_SRC),
    ] {
        for (suffix, at) in [("_enter", pri - 1), ("_exit", pri + 1)] {
            let name = format!("{prefix}{suffix}");
            let prog = find(&name).ok_or_else(|| format!("program {name} missing from the object"))?;
            let link = prog
                .attach(NFPROTO_IPV4, u32::from(hook_num), at)
                .map_err(|e| format!("{:#}", anyhow_chain(&e)))?;
            links.push(link);
        }
    }
    Ok(links)
}

/// An error and its sources on one line.
fn anyhow_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(inner) = src {
        s.push_str(": ");
        s.push_str(&inner.to_string());
        src = inner.source();
    }
    s
}

/// The node's own addresses (for `-m addrtype --dst-type LOCAL`).
#[must_use]
pub fn local_addrs() -> Vec<IpAddr> {
    let mut out = Vec::new();
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills `head` with a list freed by freeifaddrs below; entries are only
    // read while the list is alive.
    unsafe {
        if libc::getifaddrs(&raw mut head) != 0 {
            return out;
        }
        let mut p = head;
        while !p.is_null() {
            let sa = (*p).ifa_addr;
            if !sa.is_null() {
                match i32::from((*sa).sa_family) {
                    libc::AF_INET => {
                        let sin = &*sa.cast::<libc::sockaddr_in>();
                        out.push(IpAddr::from(u32::from_be(sin.sin_addr.s_addr).to_be_bytes()));
                    }
                    libc::AF_INET6 => {
                        let sin6 = &*sa.cast::<libc::sockaddr_in6>();
                        out.push(IpAddr::from(sin6.sin6_addr.s6_addr));
                    }
                    _ => {}
                }
            }
            p = (*p).ifa_next;
        }
        libc::freeifaddrs(head);
    }
    out
}

/// `CLOCK_MONOTONIC` in nanoseconds: the clock of `bpf_ktime_get_ns`.
#[must_use]
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes into the timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &raw mut ts) };
    u64::try_from(ts.tv_sec).unwrap_or(0) * 1_000_000_000 + u64::try_from(ts.tv_nsec).unwrap_or(0)
}
