//! Why loading or attaching a BPF netfilter program failed, with the hint that says what to do
//! (privileges, kernel version, a priority another program holds).

use std::io;

use thiserror::Error;

use super::PROGRAM_PREFIX;
use crate::kernel::loader::PrepareError;

/// Failures to load or attach BPF netfilter programs.
#[derive(Debug, Error)]
pub enum AttachError {
    /// Preparing the kernel object for the raw loader failed.
    #[error(transparent)]
    Prepare(#[from] PrepareError),
    /// The object has no program named `nf_*`.
    #[error("the eBPF object has no netfilter programs (functions named {PROGRAM_PREFIX}*)")]
    NoPrograms,
    /// A program's code is missing from the object.
    #[error("program {program} has no code in the eBPF object")]
    MissingFunction { program: String },
    /// The verifier rejected a program; its log says why.
    #[error("the kernel rejected netfilter program {program} ({errno}); verifier log:\n{log}")]
    Verifier {
        program: String,
        errno: io::Error,
        log: String,
    },
    /// Loading failed before verification (no log): privileges or an old kernel.
    #[error("loading netfilter program {program} failed{hint}")]
    Load {
        program: String,
        hint: &'static str,
        #[source]
        source: io::Error,
    },
    /// The kernel's BTF could not be read for the programs' typed loads.
    #[error(
        "reading /sys/kernel/btf/vmlinux for the netfilter programs failed (they need a kernel \
         built with CONFIG_DEBUG_INFO_BTF)"
    )]
    Btf(#[source] crate::kernel::btf::BtfError),
    /// The kernel's BTF lacks something the programs need.
    #[error("this kernel's BTF has no {what}, which the netfilter programs need")]
    BtfMissing { what: &'static str },
    /// A placeholder instruction could not be patched.
    #[error(
        "netfilter program {program}, instruction {index}: {what} (the kernel object and its \
         loader disagree: rebuild pktrace)"
    )]
    Patch {
        program: String,
        index: usize,
        what: String,
    },
    /// A placeholder was in none of the netfilter programs.
    #[error(
        "no netfilter program holds the placeholder for {what} (the kernel object and its \
         loader disagree: rebuild pktrace)"
    )]
    PatchUnused { what: &'static str },
    /// Netfilter refuses hooks at `NF_IP_PRI_FIRST` and `NF_IP_PRI_LAST`.
    #[error(
        "netfilter priority {priority} is reserved (NF_IP_PRI_FIRST/NF_IP_PRI_LAST); use a \
         priority strictly between them"
    )]
    ReservedPriority { priority: i32 },
    /// The kernel refused the link.
    #[error(
        "attaching {program} to netfilter (pf {pf}, hook {hook}, priority {priority}) failed{hint}"
    )]
    Link {
        program: String,
        pf: u32,
        hook: u32,
        priority: i32,
        hint: &'static str,
        #[source]
        source: io::Error,
    },
}

impl AttachError {
    /// True when the kernel refused a link because another BPF netfilter program holds the
    /// priority: each BPF netfilter link needs a priority of its own on its hook
    /// (`nf_hook_entries_grow`, net/netfilter/core.c, v6.4: `EBUSY`).
    #[must_use]
    pub fn is_busy(&self) -> bool {
        matches!(self, Self::Link { source, .. } if source.raw_os_error() == Some(libc::EBUSY))
    }
}

/// What a load failure without a verifier log usually means.
fn load_hint(e: &io::Error) -> &'static str {
    match e.raw_os_error() {
        Some(libc::EPERM | libc::EACCES) => {
            ": run as root or with CAP_BPF, CAP_NET_ADMIN and CAP_PERFMON"
        }
        Some(libc::EINVAL) => {
            ": no verifier log, so most likely this kernel has no BPF netfilter programs (needs \
             Linux 6.4+ built with CONFIG_NETFILTER_BPF_LINK)"
        }
        _ => "",
    }
}

/// What a link failure means (`bpf_nf_check_pf_and_hooks`, `net/netfilter/nf_bpf_link.c`, v6.4).
pub(super) fn link_hint(e: &io::Error) -> &'static str {
    match e.raw_os_error() {
        Some(libc::EPERM | libc::EACCES) => ": run as root or with CAP_BPF and CAP_NET_ADMIN",
        Some(libc::EAFNOSUPPORT) => ": the family must be NFPROTO_IPV4 (2) or NFPROTO_IPV6 (10)",
        Some(libc::EPROTO) => ": the hook number must be below NF_INET_NUMHOOKS (5)",
        Some(libc::ERANGE) => ": priority reserved (NF_IP_PRI_FIRST/LAST)",
        Some(libc::EBUSY) => {
            ": another BPF netfilter program holds this priority (each needs one of its own)"
        }
        Some(libc::EINVAL | libc::EOPNOTSUPP) => {
            ": this kernel has no BPF netfilter links (needs Linux 6.4+ built with \
             CONFIG_NETFILTER_BPF_LINK)"
        }
        _ => "",
    }
}

/// A netfilter program load failure as an [`AttachError`].
pub(super) fn refused(program: String, errno: io::Error, log: String) -> AttachError {
    if log.is_empty() {
        AttachError::Load {
            program,
            hint: load_hint(&errno),
            source: errno,
        }
    } else {
        AttachError::Verifier {
            program,
            errno,
            log,
        }
    }
}
