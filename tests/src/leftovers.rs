//! What the kernel holds of pktrace's: loaded programs and links (bpftool), tc qdiscs and
//! filters in the lab's node namespace. Tests compare these before and after a pktrace.

use std::{
    process::Command,
    thread::sleep,
    time::{Duration, Instant},
};

use xtask::{
    lab::{NODE_NS, in_ns},
    needs,
};

/// Names of pktrace's kernel programs (prefixes), as bpftool lists them.
const OUR_PROGRAMS: [&str; 6] = [
    "tc_ingress",
    "tc_egress",
    "nf_enter",
    "nf_exit",
    "nat_",
    "drop_",
];

/// tcx links exist from Linux 6.6 (pktrace uses them there unless told otherwise).
#[must_use]
pub fn kernel_has_tcx() -> bool {
    needs::release_at_least(&needs::running_release(), needs::TCX_SINCE)
}

/// For the tests that need tcx links ([`needs::NEEDS`], which the runners skip by name on
/// a kernel without them): fails on such a kernel, rather than pass without testing.
///
/// # Panics
/// If this kernel has no tcx.
pub fn require_tcx() {
    assert!(
        kernel_has_tcx(),
        "this test needs tcx links (Linux 6.6+) and the kernel is {}: the runners skip it on \
         such a kernel (xtask::needs::NEEDS)",
        needs::running_release()
    );
}

/// Whether the running kernel's release (`/proc/sys/kernel/osrelease`) is `major.minor` or later.
#[must_use]
pub fn kernel_at_least(major: u32, minor: u32) -> bool {
    needs::release_at_least(&needs::running_release(), (major, minor))
}

/// Our programs and links as `bpftool prog/link show` lists them.
///
/// # Panics
/// If bpftool cannot be run.
#[must_use]
pub fn ours_loaded() -> Vec<String> {
    let mut found = Vec::new();
    for what in ["prog", "link"] {
        let out = Command::new("bpftool")
            .args([what, "show"])
            .output()
            .expect("bpftool");
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            if OUR_PROGRAMS
                .iter()
                .any(|name| line.contains(&format!("name {name}")))
            {
                found.push(format!("{what}: {line}"));
            }
        }
    }
    found
}

/// [`ours_loaded`] after giving the kernel up to 5 s to free programs whose last reference is
/// gone (it does so after an RCU grace period).
#[must_use]
pub fn ours_loaded_after_settling() -> Vec<String> {
    let start = Instant::now();
    while !ours_loaded().is_empty() && start.elapsed() < Duration::from_secs(5) {
        sleep(Duration::from_millis(50));
    }
    ours_loaded()
}

/// The node namespace's interfaces.
///
/// # Panics
/// If `ip` cannot be run.
#[must_use]
pub fn node_ifaces() -> Vec<String> {
    let out = in_ns(NODE_NS, "ip", ["-o", "link", "show"])
        .output()
        .expect("ip link");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split(": ").nth(1))
        .map(|n| n.split('@').next().unwrap_or(n).to_owned())
        .collect()
}

/// Every qdisc and every ingress/egress filter of the node namespace, as `tc` prints them.
///
/// # Panics
/// If `tc` cannot be run.
#[must_use]
pub fn tc_snapshot() -> String {
    let qdiscs = in_ns(NODE_NS, "tc", ["qdisc", "show"])
        .output()
        .expect("tc");
    let mut all = String::from_utf8_lossy(&qdiscs.stdout).into_owned();
    for iface in node_ifaces() {
        for dir in ["ingress", "egress"] {
            let out = in_ns(NODE_NS, "tc", ["filter", "show", "dev", &iface, dir])
                .output()
                .expect("tc");
            all.push_str(&String::from_utf8_lossy(&out.stdout));
        }
    }
    all
}

/// Our clsact filters (`cls_bpf` holding `tc_ingress`/`tc_egress`) in the node namespace, as
/// (where and what, handle).
///
/// # Panics
/// If `tc` cannot be run.
#[must_use]
pub fn our_filters() -> Vec<(String, u32)> {
    let mut found = Vec::new();
    for iface in node_ifaces() {
        for dir in ["ingress", "egress"] {
            let out = in_ns(NODE_NS, "tc", ["filter", "show", "dev", &iface, dir])
                .output()
                .expect("tc");
            for line in String::from_utf8_lossy(&out.stdout).lines() {
                if !(line.contains("tc_ingress") || line.contains("tc_egress")) {
                    continue;
                }
                let handle = line
                    .split_whitespace()
                    .skip_while(|w| *w != "handle")
                    .nth(1)
                    .and_then(|h| u32::from_str_radix(h.trim_start_matches("0x"), 16).ok())
                    .unwrap_or(0);
                found.push((format!("{iface} {dir}: {line}"), handle));
            }
        }
    }
    found
}

/// The PID a filter handle of ours carries (`0x5000 | pid >> 16` : `pid & 0xffff`, see
/// tracer-user's `attach::clsact`); `None` for other handles.
#[must_use]
pub const fn tagged_pid(handle: u32) -> Option<u32> {
    let major = handle >> 16;
    if major & 0xf000 != 0x5000 {
        return None;
    }
    Some(((major & 0x0fff) << 16) | (handle & 0xffff))
}
