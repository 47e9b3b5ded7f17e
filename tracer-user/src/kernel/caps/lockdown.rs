//! Whether the kernel's lockdown is why the verifier refused a program, and what to do.

use std::{fmt, fs};

/// Where the kernel says whether it is locked down (security/lockdown/lockdown.c, v6.1).
const LOCKDOWN_FILE: &str = "/sys/kernel/security/lockdown";

/// A program the kernel refused because it is locked down: in "confidentiality" mode
/// (security/lockdown, v6.1) the verifier knows no helper that reads kernel memory
/// (`bpf_probe_read`, `bpf_probe_read_kernel`, their `_str` forms: `kernel/trace/bpf_trace.c`
/// `bpf_tracing_func_proto`, kernel/bpf/helpers.c `bpf_base_func_proto`), so loading fails
/// with EINVAL and the log's "unknown func `bpf_probe_read#4`" (measured on Debian's
/// 6.1.0-56-cloud-amd64 booted with `lockdown=confidentiality`: fentry and kprobe programs;
/// tc programs load, as they read packets with `bpf_skb_load_bytes`). Later kernels word it
/// "program of this type cannot use helper `bpf_probe_read#4`" (measured on Debian's
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
