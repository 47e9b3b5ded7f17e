//! Privileges: what pktrace needs before it starts, why the kernel refused when it refuses, and
//! giving up every capability it no longer needs once its programs are attached.
//!
//! After attaching, pktrace keeps only what the rest of the session uses (each kept capability
//! says why in [`needed_after_attach`]) and drops the rest from its effective, permitted and
//! inheritable sets, the ambient set and the bounding set. The bounding set matters for the
//! commands it runs (`iptables-save`, `ipset`, `nft`, `crictl`): a root process's children get
//! the bounding set at exec, so they get no more than pktrace kept.
//!
//! The capability calls (capget(2)/capset(2), prctl(2) `PR_CAPBSET_DROP`,
//! `PR_CAP_AMBIENT_CLEAR_ALL`) are the `caps` crate's; what is pktrace's own is which
//! capabilities it needs and keeps, and waiting for its loader threads to be gone.

mod lockdown;

use std::{collections::HashSet, fs, io, os::unix::fs::MetadataExt as _, time::Duration};

pub use caps::Capability;
use caps::{
    CapSet,
    Capability::{
        CAP_BPF, CAP_NET_ADMIN, CAP_NET_RAW, CAP_PERFMON, CAP_SETPCAP, CAP_SYS_ADMIN,
        CAP_SYS_CHROOT, CAP_SYS_PTRACE,
    },
    CapsHashSet,
};
pub use lockdown::{LockdownRefusal, lockdown_refusal, read_lockdown};

/// A set's names, lowest capability number first, comma-separated (`CAP_NET_RAW,CAP_BPF`);
/// "none" for the empty set.
#[must_use]
pub fn names(set: &CapsHashSet) -> String {
    let mut caps: Vec<Capability> = set.iter().copied().collect();
    caps.sort_by_key(Capability::index);
    if caps.is_empty() {
        return "none".to_owned();
    }
    let names: Vec<String> = caps.iter().map(ToString::to_string).collect();
    names.join(",")
}

/// Refusals and failures around privileges; each message says what to do.
#[derive(Debug, thiserror::Error)]
pub enum PrivilegeError {
    #[error(
        "not root and missing {missing}: run as root (sudo) or with CAP_BPF, CAP_NET_ADMIN and \
         CAP_PERFMON"
    )]
    NotRoot { missing: String },
    #[error(
        "missing {missing}: pktrace runs as root but without them (dropped by the container \
         or by capsh/setpriv); grant CAP_BPF, CAP_NET_ADMIN and CAP_PERFMON (or CAP_SYS_ADMIN)"
    )]
    Missing { missing: String },
    #[error("reading this process's capabilities")]
    Read(#[source] caps::errors::CapsError),
    #[error(
        "dropping capabilities after attaching failed (pktrace stops rather than run with them)"
    )]
    Drop(#[source] io::Error),
    #[error(
        "dropping capabilities after attaching failed (pktrace stops rather than run with them)"
    )]
    DropCall(#[source] caps::errors::CapsError),
}

/// Capabilities that grant what `need` stands for; any one of them is enough.
struct Need {
    what: &'static str,
    any_of: &'static [Capability],
}

/// What loading and attaching takes (kernel/bpf/syscall.c `bpf_capable`, `perfmon_capable`,
/// net/core: `CAP_NET_ADMIN` for tcx links, clsact qdiscs and filters, netfilter links).
const NEEDS: [Need; 3] = [
    Need {
        what: "CAP_BPF",
        any_of: &[CAP_BPF, CAP_SYS_ADMIN],
    },
    Need {
        what: "CAP_PERFMON",
        any_of: &[CAP_PERFMON, CAP_SYS_ADMIN],
    },
    Need {
        what: "CAP_NET_ADMIN",
        any_of: &[CAP_NET_ADMIN],
    },
];

/// Checks, before anything is loaded, that the process may load and attach programs; a kernel
/// that does not know `CAP_BPF` is older than 5.8, and there only `CAP_SYS_ADMIN` grants eBPF.
/// A kernel without BTF is no refusal: the tc programs need none, and the NAT observation
/// falls back to conntrack (`nat::attach`).
///
/// # Errors
/// The first refusal, as a one-line reason.
pub fn preflight() -> Result<(), PrivilegeError> {
    let effective = caps::read(None, CapSet::Effective).map_err(PrivilegeError::Read)?;
    // SAFETY: geteuid has no failure modes.
    let root = unsafe { libc::geteuid() } == 0;
    check(&effective, root, &known())
}

/// The pure part of [`preflight`]'s capability check; `known`: the capabilities this kernel
/// knows.
fn check(effective: &CapsHashSet, root: bool, known: &CapsHashSet) -> Result<(), PrivilegeError> {
    let missing: Vec<&str> = NEEDS
        .iter()
        // Kernels before 5.8 have neither CAP_BPF nor CAP_PERFMON: CAP_SYS_ADMIN it is.
        .filter(|n| {
            !n.any_of
                .iter()
                .any(|c| known.contains(c) && effective.contains(c))
        })
        .map(|n| {
            if known.contains(&n.any_of[0]) {
                n.what
            } else {
                "CAP_SYS_ADMIN"
            }
        })
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    let mut missing: Vec<&str> = missing;
    missing.dedup();
    let missing = missing.join(", ");
    Err(if root {
        PrivilegeError::Missing { missing }
    } else {
        PrivilegeError::NotRoot { missing }
    })
}

/// The capabilities this kernel knows (up to `/proc/sys/kernel/cap_last_cap`); all the `caps`
/// crate knows where that cannot be read.
fn known() -> CapsHashSet {
    caps::runtime::procfs_all_supported(None).unwrap_or_else(|_| caps::all())
}

/// The capabilities the session still uses after its programs are attached, each with why.
/// `cap_bpf`: the kernel knows `CAP_BPF` (5.8+); `host_root_elsewhere`: pktrace runs in a
/// container whose root is not the node's, so node commands run chrooted via `/proc/1/root`.
#[must_use]
pub fn needed_after_attach(
    cap_bpf: bool,
    host_root_elsewhere: bool,
) -> Vec<(Capability, &'static str)> {
    let mut keep = vec![
        // Reading the counters and draining the ring buffer are bpf(2) calls on maps we hold;
        // kernels before 6.5 refuse every bpf(2) command without it when unprivileged eBPF is
        // off. Attaching the loaded programs to interfaces that appear later is also bpf(2).
        if cap_bpf {
            (
                CAP_BPF,
                "bpf(2) on our maps and links: counters, ring buffer, attaching to new interfaces",
            )
        } else {
            (
                CAP_SYS_ADMIN,
                "bpf(2) on our maps and links (this kernel has no CAP_BPF)",
            )
        },
        // tcx links and clsact filters on interfaces that appear later, removing our clsact
        // filters and qdiscs at exit, and reading the nat rules (iptables-save, ipset, nft
        // speak netlink or getsockopt that need it).
        (
            CAP_NET_ADMIN,
            "attaching to new interfaces, detaching clsact filters at exit, reading iptables/ipset/nft",
        ),
        // iptables-legacy-save reads the tables through a raw socket.
        (
            CAP_NET_RAW,
            "iptables-legacy-save opens a raw socket to read the tables",
        ),
    ];
    if host_root_elsewhere {
        // In a container, node commands run chrooted to /proc/1/root: following that link
        // needs ptrace access to PID 1 (whose capabilities exceed ours), and chroot(2) needs
        // CAP_SYS_CHROOT.
        keep.push((
            CAP_SYS_PTRACE,
            "following /proc/1/root to run the node's iptables-save/crictl",
        ));
        keep.push((
            CAP_SYS_CHROOT,
            "running the node's iptables-save/crictl chrooted to its root",
        ));
    }
    keep
}

/// What [`drop_unneeded`] did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[expect(
    clippy::struct_field_names,
    reason = "`dropped` names the capabilities dropped, beside `kept`"
)]
pub struct Dropped {
    pub dropped: CapsHashSet,
    pub kept: Vec<(Capability, &'static str)>,
    /// The bounding set could not be lowered (no `CAP_SETPCAP)`: then children of a non-root
    /// pktrace still get nothing, as they have no file capabilities.
    pub bounding_kept: bool,
}

impl Dropped {
    /// Lines for `-v`.
    #[must_use]
    pub fn report(&self) -> Vec<String> {
        let mut lines = vec![format!("dropped capabilities: {}", names(&self.dropped))];
        for (cap, why) in &self.kept {
            lines.push(format!("kept {cap}: {why}"));
        }
        if self.bounding_kept {
            lines.push("the bounding set was left as it was (no CAP_SETPCAP)".into());
        }
        lines
    }
}

/// Drops every capability the session no longer needs (see the module doc).
///
/// # Errors
/// A capset/prctl call failed; the caller stops rather than keep running privileged.
pub fn drop_unneeded() -> Result<Dropped, PrivilegeError> {
    // Credentials are per thread: a thread started before this keeps what it had.
    let threads = settle_to_one_thread(
        || fs::read_dir("/proc/self/task").map_or(1, Iterator::count),
        THREAD_EXIT_WAIT,
        std::thread::sleep,
    );
    if threads > 1 {
        return Err(PrivilegeError::Drop(io::Error::other(format!(
            "{threads} threads still run after {} ms; capabilities must be dropped before any \
             starts",
            THREAD_EXIT_WAIT.as_millis()
        ))));
    }
    let read = |set| caps::read(None, set).map_err(PrivilegeError::DropCall);
    let (effective, permitted) = (read(CapSet::Effective)?, read(CapSet::Permitted)?);
    let known = known();
    let needed = needed_after_attach(known.contains(&CAP_BPF), host_root_elsewhere());
    let kept: Vec<(Capability, &'static str)> = needed
        .into_iter()
        .filter(|(c, _)| permitted.contains(c))
        .collect();
    let keep: CapsHashSet = kept.iter().map(|(c, _)| *c).collect();
    // The bounding set first: lowering it needs CAP_SETPCAP, which goes with the rest below.
    let bounding_kept = !effective.contains(&CAP_SETPCAP);
    if !bounding_kept {
        for cap in known.difference(&keep) {
            caps::drop(None, CapSet::Bounding, *cap).map_err(PrivilegeError::DropCall)?;
        }
    }
    caps::clear(None, CapSet::Ambient).map_err(PrivilegeError::DropCall)?;
    // Effective first: it must stay within the permitted set at every step.
    for set in [CapSet::Effective, CapSet::Inheritable, CapSet::Permitted] {
        let lowered: CapsHashSet = read(set)?.intersection(&keep).copied().collect();
        caps::set(None, set, &lowered).map_err(PrivilegeError::DropCall)?;
    }
    let dropped = permitted.union(&effective).copied().collect::<HashSet<_>>();
    Ok(Dropped {
        dropped: dropped.difference(&keep).copied().collect(),
        kept,
        bounding_kept,
    })
}

/// How long [`drop_unneeded`] waits for joined threads to leave `/proc/self/task`.
const THREAD_EXIT_WAIT: Duration = Duration::from_secs(2);

/// Polls `count` (threads in this process) until it says 1 or `within` has passed, and returns
/// the last count.
///
/// A joined thread is not gone yet: `pthread_join` returns once the kernel clears the thread's
/// tid, which happens before the thread leaves the thread group, so `/proc/self/task` can still
/// list it for a while (seen on a one-CPU TCG guest, right after the parallel loads joined). A
/// thread that really runs on stays listed, and the caller refuses.
fn settle_to_one_thread(
    mut count: impl FnMut() -> usize,
    within: Duration,
    mut sleep: impl FnMut(Duration),
) -> usize {
    const STEP: Duration = Duration::from_millis(1);
    let mut waited = Duration::ZERO;
    loop {
        let threads = count();
        if threads <= 1 || waited >= within {
            return threads;
        }
        sleep(STEP);
        waited += STEP;
    }
}

/// True when `/` is not the node's root (pktrace in a container with hostPID).
fn host_root_elsewhere() -> bool {
    let (Ok(own), Ok(host)) = (fs::metadata("/"), fs::metadata("/proc/1/root")) else {
        return false;
    };
    (own.dev(), own.ino()) != (host.dev(), host.ino())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_joined_thread_still_listed_is_waited_for() {
        let mut counts = [2, 2, 1].into_iter();
        let mut slept = Vec::new();
        let threads = settle_to_one_thread(
            || counts.next().expect("asked once more than needed"),
            Duration::from_secs(2),
            |d| slept.push(d),
        );
        assert_eq!(threads, 1);
        assert_eq!(slept, [Duration::from_millis(1); 2]);
    }

    #[test]
    fn a_thread_that_runs_on_is_reported_after_the_wait() {
        let mut asked = 0;
        let mut slept = Duration::ZERO;
        let threads = settle_to_one_thread(
            || {
                asked += 1;
                3
            },
            Duration::from_millis(5),
            |d| slept += d,
        );
        assert_eq!(threads, 3);
        assert_eq!(slept, Duration::from_millis(5));
        assert_eq!(asked, 6);
    }

    fn set_of(caps: &[Capability]) -> CapsHashSet {
        caps.iter().copied().collect()
    }

    /// The capabilities of a kernel whose `cap_last_cap` is `last`.
    fn up_to(last: u8) -> CapsHashSet {
        caps::all()
            .into_iter()
            .filter(|c| c.index() <= last)
            .collect()
    }

    #[test]
    fn names_and_display() {
        assert_eq!(CAP_BPF.to_string(), "CAP_BPF");
        assert_eq!(
            names(&set_of(&[CAP_BPF, CAP_NET_RAW])),
            "CAP_NET_RAW,CAP_BPF"
        );
        assert_eq!(names(&CapsHashSet::default()), "none");
    }

    #[test]
    fn preflight_names_what_is_missing() {
        let all = set_of(&[CAP_BPF, CAP_PERFMON, CAP_NET_ADMIN]);
        assert!(check(&all, true, &up_to(40)).is_ok());
        // CAP_SYS_ADMIN stands for both CAP_BPF and CAP_PERFMON.
        assert!(check(&set_of(&[CAP_SYS_ADMIN, CAP_NET_ADMIN]), true, &up_to(40)).is_ok());
        let e = check(&set_of(&[CAP_PERFMON, CAP_NET_ADMIN]), true, &up_to(40)).unwrap_err();
        assert_eq!(
            e.to_string(),
            "missing CAP_BPF: pktrace runs as root but without them (dropped by the container or by \
             capsh/setpriv); grant CAP_BPF, CAP_NET_ADMIN and CAP_PERFMON (or CAP_SYS_ADMIN)"
        );
        let e = check(&CapsHashSet::default(), false, &up_to(40)).unwrap_err();
        assert!(
            e.to_string().starts_with(
                "not root and missing CAP_BPF, CAP_PERFMON, CAP_NET_ADMIN: run as root"
            ),
            "{e}"
        );
        // Before 5.8 (cap_last_cap 37) CAP_BPF does not exist: ask for CAP_SYS_ADMIN, once.
        let e = check(&set_of(&[CAP_NET_ADMIN, CAP_BPF]), false, &up_to(37)).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("not root and missing CAP_SYS_ADMIN: "),
            "{e}"
        );
        assert!(check(&set_of(&[CAP_NET_ADMIN, CAP_SYS_ADMIN]), false, &up_to(37)).is_ok());
    }

    #[test]
    fn kept_capabilities_each_have_a_reason_and_nothing_else_is_kept() {
        let node = needed_after_attach(true, false);
        let caps: Vec<Capability> = node.iter().map(|(c, _)| *c).collect();
        assert_eq!(caps, [CAP_BPF, CAP_NET_ADMIN, CAP_NET_RAW]);
        assert!(node.iter().all(|(_, why)| !why.is_empty()));
        let old_kernel: Vec<Capability> = needed_after_attach(false, false)
            .iter()
            .map(|(c, _)| *c)
            .collect();
        assert_eq!(old_kernel, [CAP_SYS_ADMIN, CAP_NET_ADMIN, CAP_NET_RAW]);
        let container: Vec<Capability> = needed_after_attach(true, true)
            .iter()
            .map(|(c, _)| *c)
            .collect();
        assert_eq!(
            container,
            [
                CAP_BPF,
                CAP_NET_ADMIN,
                CAP_NET_RAW,
                CAP_SYS_PTRACE,
                CAP_SYS_CHROOT
            ]
        );
    }

    #[test]
    fn own_capabilities_can_be_read() {
        let effective = caps::read(None, CapSet::Effective).expect("capget");
        let permitted = caps::read(None, CapSet::Permitted).expect("capget");
        // The effective set is always within the permitted set.
        assert!(
            effective.is_subset(&permitted),
            "{effective:?} {permitted:?}"
        );
    }
}
