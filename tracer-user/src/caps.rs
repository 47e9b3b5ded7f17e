//! Privileges: what pktrace needs before it starts, why the kernel refused when it refuses, and
//! giving up every capability it no longer needs once its programs are attached.
//!
//! After attaching, pktrace keeps only what the rest of the session uses (each kept capability
//! says why in [`needed_after_attach`]) and drops the rest from its effective, permitted and
//! inheritable sets, the ambient set and the bounding set. The bounding set matters for the
//! commands it runs (`iptables-save`, `ipset`, `nft`, `crictl`): a root process's children get
//! the bounding set at exec, so they get no more than pktrace kept.
//!
//! Capability numbers are from include/uapi/linux/capability.h (v6.1); the calls are
//! capget(2)/capset(2) with `_LINUX_CAPABILITY_VERSION_3` and prctl(2) `PR_CAPBSET_DROP`,
//! `PR_CAP_AMBIENT_CLEAR_ALL`.

use std::{fmt, fs, io, os::unix::fs::MetadataExt as _, time::Duration};

/// Capability numbers (include/uapi/linux/capability.h, v6.1) and their names.
const NAMES: [&str; 41] = [
    "CAP_CHOWN",
    "CAP_DAC_OVERRIDE",
    "CAP_DAC_READ_SEARCH",
    "CAP_FOWNER",
    "CAP_FSETID",
    "CAP_KILL",
    "CAP_SETGID",
    "CAP_SETUID",
    "CAP_SETPCAP",
    "CAP_LINUX_IMMUTABLE",
    "CAP_NET_BIND_SERVICE",
    "CAP_NET_BROADCAST",
    "CAP_NET_ADMIN",
    "CAP_NET_RAW",
    "CAP_IPC_LOCK",
    "CAP_IPC_OWNER",
    "CAP_SYS_MODULE",
    "CAP_SYS_RAWIO",
    "CAP_SYS_CHROOT",
    "CAP_SYS_PTRACE",
    "CAP_SYS_PACCT",
    "CAP_SYS_ADMIN",
    "CAP_SYS_BOOT",
    "CAP_SYS_NICE",
    "CAP_SYS_RESOURCE",
    "CAP_SYS_TIME",
    "CAP_SYS_TTY_CONFIG",
    "CAP_MKNOD",
    "CAP_LEASE",
    "CAP_AUDIT_WRITE",
    "CAP_AUDIT_CONTROL",
    "CAP_SETFCAP",
    "CAP_MAC_OVERRIDE",
    "CAP_MAC_ADMIN",
    "CAP_SYSLOG",
    "CAP_WAKE_ALARM",
    "CAP_BLOCK_SUSPEND",
    "CAP_AUDIT_READ",
    "CAP_PERFMON",
    "CAP_BPF",
    "CAP_CHECKPOINT_RESTORE",
];

pub const CAP_NET_ADMIN: u32 = 12;
pub const CAP_NET_RAW: u32 = 13;
pub const CAP_SYS_CHROOT: u32 = 18;
pub const CAP_SYS_PTRACE: u32 = 19;
pub const CAP_SYS_ADMIN: u32 = 21;
pub const CAP_PERFMON: u32 = 38;
pub const CAP_BPF: u32 = 39;

/// `_LINUX_CAPABILITY_VERSION_3`: two 32-bit words per set.
const CAPABILITY_VERSION_3: u32 = 0x2008_0522;
const PR_CAPBSET_DROP: libc::c_int = 24;
const PR_CAP_AMBIENT: libc::c_int = 47;
const PR_CAP_AMBIENT_CLEAR_ALL: libc::c_ulong = 4;
/// Where the kernel says whether it is locked down (security/lockdown/lockdown.c, v6.1).
const LOCKDOWN_FILE: &str = "/sys/kernel/security/lockdown";
/// Hidden override of where the kernel's BTF is looked for (tests of a kernel without BTF:
/// a missing path makes pktrace run as it would there).
pub const BTF_PATH_ENV: &str = "PKTRACE_BTF_PATH";

/// A set of capabilities, bit `n` for capability `n`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CapSet(pub u64);

impl CapSet {
    #[must_use]
    pub const fn has(self, cap: u32) -> bool {
        self.0 & (1 << cap) != 0
    }

    #[must_use]
    pub const fn with(self, cap: u32) -> Self {
        Self(self.0 | (1 << cap))
    }

    #[must_use]
    pub const fn minus(self, other: Self) -> Self {
        Self(self.0 & !other.0)
    }

    #[must_use]
    pub const fn and(self, other: Self) -> Self {
        Self(self.0 & other.0)
    }

    /// The capability numbers in the set, lowest first.
    pub fn iter(self) -> impl Iterator<Item = u32> {
        (0..64).filter(move |&c| self.has(c))
    }
}

impl fmt::Display for CapSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0 == 0 {
            return f.write_str("none");
        }
        let names: Vec<String> = self.iter().map(name).collect();
        f.write_str(&names.join(","))
    }
}

/// A capability's name (`CAP_BPF`), or its number for ones newer than this list.
#[must_use]
pub fn name(cap: u32) -> String {
    NAMES
        .get(cap as usize)
        .map_or_else(|| format!("cap_{cap}"), |n| (*n).to_owned())
}

/// This process's capability sets.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Caps {
    pub effective: CapSet,
    pub permitted: CapSet,
    pub inheritable: CapSet,
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
    Read(#[source] io::Error),
    #[error(
        "dropping capabilities after attaching failed (pktrace stops rather than run with them)"
    )]
    Drop(#[source] io::Error),
}

/// Capabilities that grant what `need` stands for; any one of them is enough.
struct Need {
    what: &'static str,
    any_of: &'static [u32],
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

/// Checks, before anything is loaded, that the process may load and attach programs;
/// `cap_last_cap` below 39 means a kernel before 5.8, where only `CAP_SYS_ADMIN` grants eBPF.
/// A kernel without BTF is no refusal: the tc programs need none, and the NAT observation
/// falls back to conntrack (`nat::attach`).
///
/// # Errors
/// The first refusal, as a one-line reason.
pub fn preflight() -> Result<(), PrivilegeError> {
    let caps = current().map_err(PrivilegeError::Read)?;
    // SAFETY: geteuid has no failure modes.
    let root = unsafe { libc::geteuid() } == 0;
    check(caps.effective, root, last_cap())
}

/// The vmlinux BTF path: `PKTRACE_BTF_PATH` when set, else `/sys/kernel/btf/vmlinux`.
#[must_use]
pub fn btf_path() -> String {
    std::env::var(BTF_PATH_ENV)
        .ok()
        .filter(|p| !p.is_empty())
        .unwrap_or_else(|| crate::btf::VMLINUX_BTF.to_owned())
}

/// The pure part of [`preflight`]'s capability check.
fn check(effective: CapSet, root: bool, last_cap: u32) -> Result<(), PrivilegeError> {
    let missing: Vec<&str> = NEEDS
        .iter()
        // Kernels before 5.8 have neither CAP_BPF nor CAP_PERFMON: CAP_SYS_ADMIN it is.
        .filter(|n| !n.any_of.iter().any(|&c| c <= last_cap && effective.has(c)))
        .map(|n| {
            if n.any_of[0] > last_cap {
                "CAP_SYS_ADMIN"
            } else {
                n.what
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

/// A program the kernel refused because it is locked down: in "confidentiality" mode
/// (security/lockdown, v6.1) the verifier knows no helper that reads kernel memory
/// (`bpf_probe_read`, `bpf_probe_read_kernel`, their `_str` forms: kernel/trace/bpf_trace.c
/// `bpf_tracing_func_proto`, kernel/bpf/helpers.c `bpf_base_func_proto`), so loading fails
/// with EINVAL and the log's "unknown func bpf_probe_read#4" (measured on Debian's
/// 6.1.0-56-cloud-amd64 booted with `lockdown=confidentiality`: fentry and kprobe programs;
/// tc programs load, as they read packets with `bpf_skb_load_bytes`). Later kernels word it
/// "program of this type cannot use helper bpf_probe_read#4" (measured on Debian's
/// 6.12.74+deb12-cloud-amd64, the same boot: fentry, kprobe and netfilter programs).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LockdownRefusal {
    /// The active lockdown mode (`confidentiality`).
    pub mode: String,
    /// The helper the verifier refused (`bpf_probe_read#4`).
    pub helper: String,
}

impl fmt::Display for LockdownRefusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "the kernel is locked down ({}) and refuses eBPF programs that read kernel memory \
             ({})",
            self.mode, self.helper
        )
    }
}

impl LockdownRefusal {
    /// What to do about it (NAT steps need a kernel booted without this lockdown mode).
    #[must_use]
    pub fn advice(&self) -> String {
        format!(
            "boot the node without lockdown={} to see timed NAT steps",
            self.mode
        )
    }
}

/// Whether lockdown is why the verifier rejected a program: the verifier's `log` names an
/// unknown kernel-memory-reading helper, and the lockdown file (its text, see
/// [`read_lockdown`]) says "confidentiality". Without a readable file (no securityfs where
/// pktrace looks) the log alone decides: on the kernels pktrace runs on (5.8+), only lockdown
/// hides these helpers from tracing programs, and only its confidentiality mode does. A file
/// naming another mode, or another rejection, keeps the verifier's own reason (`None`).
#[must_use]
pub fn lockdown_refusal(lockdown: Option<&str>, log: &str) -> Option<LockdownRefusal> {
    let mode = lockdown
        .and_then(lockdown_mode)
        .unwrap_or("confidentiality");
    if mode != "confidentiality" {
        return None;
    }
    let helper = log.lines().find_map(|l| {
        let l = l.trim();
        let func = l
            .strip_prefix("unknown func ")
            .or_else(|| l.strip_prefix("program of this type cannot use helper "))?;
        func.starts_with("bpf_probe_read").then(|| func.to_owned())
    })?;
    Some(LockdownRefusal {
        mode: mode.to_owned(),
        helper,
    })
}

/// The active mode in the lockdown file's `none [integrity] confidentiality` form.
fn lockdown_mode(text: &str) -> Option<&str> {
    text.split_whitespace()
        .find_map(|w| w.strip_prefix('[').and_then(|w| w.strip_suffix(']')))
}

/// The lockdown file's contents: ours, else the one seen from PID 1's root (`ip netns exec`
/// mounts a fresh /sys without securityfs; a container may have none); `None` where neither
/// can be read (no securityfs, no lockdown LSM).
#[must_use]
pub fn read_lockdown() -> Option<String> {
    fs::read_to_string(LOCKDOWN_FILE)
        .or_else(|_| fs::read_to_string(format!("/proc/1/root{LOCKDOWN_FILE}")))
        .ok()
}

/// The highest capability this kernel knows.
fn last_cap() -> u32 {
    fs::read_to_string("/proc/sys/kernel/cap_last_cap")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(40)
}

/// The capabilities the session still uses after its programs are attached, each with why.
/// `cap_bpf`: the kernel knows CAP_BPF (5.8+); `host_root_elsewhere`: pktrace runs in a
/// container whose root is not the node's, so node commands run chrooted via `/proc/1/root`.
#[must_use]
pub fn needed_after_attach(cap_bpf: bool, host_root_elsewhere: bool) -> Vec<(u32, &'static str)> {
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
pub struct Dropped {
    pub dropped: CapSet,
    pub kept: Vec<(u32, &'static str)>,
    /// The bounding set could not be lowered (no CAP_SETPCAP): then children of a non-root
    /// pktrace still get nothing, as they have no file capabilities.
    pub bounding_kept: bool,
}

impl Dropped {
    /// Lines for `-v`.
    #[must_use]
    pub fn report(&self) -> Vec<String> {
        let mut lines = vec![format!("dropped capabilities: {}", self.dropped)];
        for (cap, why) in &self.kept {
            lines.push(format!("kept {}: {why}", name(*cap)));
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
    let before = current().map_err(PrivilegeError::Drop)?;
    let last = last_cap();
    let needed = needed_after_attach(last >= CAP_BPF, host_root_elsewhere());
    let kept: Vec<(u32, &'static str)> = needed
        .into_iter()
        .filter(|(c, _)| before.permitted.has(*c))
        .collect();
    let keep = kept.iter().fold(CapSet::default(), |s, (c, _)| s.with(*c));
    // The bounding set first: lowering it needs CAP_SETPCAP, which goes with the rest below.
    let mut bounding_kept = false;
    if before.effective.has(8) {
        for cap in (0..=last).filter(|c| !keep.has(*c)) {
            // SAFETY: prctl with integer arguments only.
            if unsafe { libc::prctl(PR_CAPBSET_DROP, libc::c_ulong::from(cap), 0, 0, 0) } != 0 {
                return Err(PrivilegeError::Drop(io::Error::last_os_error()));
            }
        }
    } else {
        bounding_kept = true;
    }
    // SAFETY: prctl with integer arguments only.
    let ambient = unsafe { libc::prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) };
    if ambient != 0 {
        return Err(PrivilegeError::Drop(io::Error::last_os_error()));
    }
    let after = Caps {
        effective: before.effective.and(keep),
        permitted: before.permitted.and(keep),
        inheritable: before.inheritable.and(keep),
    };
    set(after).map_err(PrivilegeError::Drop)?;
    let dropped = before.permitted.or_effective(before.effective).minus(keep);
    Ok(Dropped {
        dropped,
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

impl CapSet {
    const fn or_effective(self, other: Self) -> Self {
        Self(self.0 | other.0)
    }
}

/// True when `/` is not the node's root (pktrace in a container with hostPID).
fn host_root_elsewhere() -> bool {
    let (Ok(own), Ok(host)) = (fs::metadata("/"), fs::metadata("/proc/1/root")) else {
        return false;
    };
    (own.dev(), own.ino()) != (host.dev(), host.ino())
}

#[repr(C)]
struct CapHeader {
    version: u32,
    pid: libc::c_int,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

/// This process's effective, permitted and inheritable sets (capget(2)).
///
/// # Errors
/// capget failed.
pub fn current() -> io::Result<Caps> {
    let mut header = CapHeader {
        version: CAPABILITY_VERSION_3,
        pid: 0,
    };
    let mut data = [CapData::default(); 2];
    // SAFETY: version 3 takes a header and two data structs, both valid for writing.
    let ret = unsafe { libc::syscall(libc::SYS_capget, &raw mut header, data.as_mut_ptr()) };
    if ret != 0 {
        return Err(io::Error::last_os_error());
    }
    let join =
        |f: fn(&CapData) -> u32| CapSet(u64::from(f(&data[0])) | (u64::from(f(&data[1])) << 32));
    Ok(Caps {
        effective: join(|d| d.effective),
        permitted: join(|d| d.permitted),
        inheritable: join(|d| d.inheritable),
    })
}

fn set(caps: Caps) -> io::Result<()> {
    let mut header = CapHeader {
        version: CAPABILITY_VERSION_3,
        pid: 0,
    };
    let split = |s: CapSet| ((s.0 & 0xffff_ffff) as u32, (s.0 >> 32) as u32);
    let (e, p, i) = (
        split(caps.effective),
        split(caps.permitted),
        split(caps.inheritable),
    );
    let data = [
        CapData {
            effective: e.0,
            permitted: p.0,
            inheritable: i.0,
        },
        CapData {
            effective: e.1,
            permitted: p.1,
            inheritable: i.1,
        },
    ];
    // SAFETY: version 3 takes a header and two data structs, read by the kernel.
    let ret = unsafe { libc::syscall(libc::SYS_capset, &raw mut header, data.as_ptr()) };
    if ret != 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
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

    fn set_of(caps: &[u32]) -> CapSet {
        caps.iter().fold(CapSet::default(), |s, c| s.with(*c))
    }

    #[test]
    fn names_and_display() {
        assert_eq!(name(CAP_BPF), "CAP_BPF");
        assert_eq!(name(CAP_NET_ADMIN), "CAP_NET_ADMIN");
        assert_eq!(name(63), "cap_63");
        assert_eq!(
            set_of(&[CAP_NET_RAW, CAP_BPF]).to_string(),
            "CAP_NET_RAW,CAP_BPF"
        );
        assert_eq!(CapSet::default().to_string(), "none");
    }

    #[test]
    fn preflight_names_what_is_missing() {
        let all = set_of(&[CAP_BPF, CAP_PERFMON, CAP_NET_ADMIN]);
        assert!(check(all, true, 40).is_ok());
        // CAP_SYS_ADMIN stands for both CAP_BPF and CAP_PERFMON.
        assert!(check(set_of(&[CAP_SYS_ADMIN, CAP_NET_ADMIN]), true, 40).is_ok());
        let e = check(set_of(&[CAP_PERFMON, CAP_NET_ADMIN]), true, 40).unwrap_err();
        assert_eq!(
            e.to_string(),
            "missing CAP_BPF: pktrace runs as root but without them (dropped by the container or by \
             capsh/setpriv); grant CAP_BPF, CAP_NET_ADMIN and CAP_PERFMON (or CAP_SYS_ADMIN)"
        );
        let e = check(CapSet::default(), false, 40).unwrap_err();
        assert!(
            e.to_string().starts_with(
                "not root and missing CAP_BPF, CAP_PERFMON, CAP_NET_ADMIN: run as root"
            ),
            "{e}"
        );
        // Before 5.8 (cap_last_cap 37) CAP_BPF does not exist: ask for CAP_SYS_ADMIN, once.
        let e = check(set_of(&[CAP_NET_ADMIN, CAP_BPF]), false, 37).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("not root and missing CAP_SYS_ADMIN: "),
            "{e}"
        );
        assert!(check(set_of(&[CAP_NET_ADMIN, CAP_SYS_ADMIN]), false, 37).is_ok());
    }

    /// The end of the log Debian's 6.1 cloud kernel wrote for `nat_fentry_enter` when booted
    /// with `lockdown=confidentiality` (the kprobe program's ends the same way).
    const LOCKED_DOWN_LOG: &str = "\
41: (bf) r1 = r10                     ; R1_w=fp0 R10=fp0
42: (07) r1 += -8                     ; R1_w=fp-8
; fun(dst, size, unsafe_ptr)
43: (b7) r2 = 4                       ; R2_w=4
44: (85) call bpf_probe_read#4
unknown func bpf_probe_read#4
processed 42 insns (limit 1000000) max_states_per_insn 0 total_states 1 peak_states 1 mark_read 1
";

    #[test]
    fn a_verifier_rejection_under_lockdown_confidentiality_says_so() {
        let locked = Some("none integrity [confidentiality]\n");
        let refusal = lockdown_refusal(locked, LOCKED_DOWN_LOG).expect("lockdown");
        assert_eq!(
            refusal,
            LockdownRefusal {
                mode: "confidentiality".into(),
                helper: "bpf_probe_read#4".into()
            }
        );
        assert_eq!(
            refusal.to_string(),
            "the kernel is locked down (confidentiality) and refuses eBPF programs that read \
             kernel memory (bpf_probe_read#4)"
        );
        assert!(
            refusal
                .advice()
                .starts_with("boot the node without lockdown=confidentiality"),
            "{}",
            refusal.advice()
        );
        let kernel = LOCKED_DOWN_LOG.replace("bpf_probe_read#4", "bpf_probe_read_kernel#113");
        assert_eq!(
            lockdown_refusal(locked, &kernel).map(|r| r.helper),
            Some("bpf_probe_read_kernel#113".into())
        );
        // The wording of later kernels (Debian's 6.12, same boot), for every program type.
        let later = LOCKED_DOWN_LOG.replace(
            "unknown func bpf_probe_read#4",
            "program of this type cannot use helper bpf_probe_read#4",
        );
        assert_eq!(lockdown_refusal(locked, &later), Some(refusal.clone()));
        let other_later = "program of this type cannot use helper bpf_get_current_task#35";
        assert!(lockdown_refusal(locked, other_later).is_none());
        // Integrity mode allows every helper pktrace uses: a rejection there is the verifier's.
        assert!(
            lockdown_refusal(Some("none [integrity] confidentiality"), LOCKED_DOWN_LOG).is_none()
        );
        assert!(
            lockdown_refusal(Some("[none] integrity confidentiality"), LOCKED_DOWN_LOG).is_none()
        );
        // No lockdown file to read (securityfs not mounted here), or one in an unknown form:
        // the log decides, as only confidentiality mode hides these helpers.
        assert_eq!(
            lockdown_refusal(None, LOCKED_DOWN_LOG),
            Some(refusal.clone())
        );
        assert_eq!(
            lockdown_refusal(Some("garbage"), LOCKED_DOWN_LOG),
            Some(refusal)
        );
        assert!(lockdown_refusal(None, "R1 invalid mem access 'scalar'").is_none());
        // Locked down, but the verifier refused something else (another helper, a bound).
        let other = "unknown func bpf_get_current_task#35\nprocessed 3 insns";
        assert!(lockdown_refusal(locked, other).is_none());
        assert!(lockdown_refusal(locked, "R1 invalid mem access 'scalar'").is_none());
    }

    #[test]
    fn kept_capabilities_each_have_a_reason_and_nothing_else_is_kept() {
        let node = needed_after_attach(true, false);
        let caps: Vec<u32> = node.iter().map(|(c, _)| *c).collect();
        assert_eq!(caps, [CAP_BPF, CAP_NET_ADMIN, CAP_NET_RAW]);
        assert!(node.iter().all(|(_, why)| !why.is_empty()));
        let old_kernel: Vec<u32> = needed_after_attach(false, false)
            .iter()
            .map(|(c, _)| *c)
            .collect();
        assert_eq!(old_kernel, [CAP_SYS_ADMIN, CAP_NET_ADMIN, CAP_NET_RAW]);
        let container: Vec<u32> = needed_after_attach(true, true)
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
        let caps = current().expect("capget");
        // The effective set is always within the permitted set.
        assert_eq!(caps.effective.minus(caps.permitted), CapSet::default());
    }
}
