//! Issue 3: the NAT hook is chosen at run time (fentry → kprobe → netfilter link →
//! conntrack). An explicit `--nat-hook` the kernel cannot do fails fast with one line and exit
//! code 1; `auto` takes the best hook this kernel has and says why it skipped the better ones.
//!
//! The kernel's features are detected here, independently of pktrace (cilium/ebpf's rule): where
//! the kernel lacks a hook the test checks the failure; where it has it, the hook must work and
//! produce NAT steps. On this host (6.18: no kprobe PMU, fentry loads refused) the failures are
//! checked; `cargo xtask vm-test` runs the same tests on Debian's 6.1, which has both.

use std::{
    io,
    path::Path,
    process::Command,
    time::{Duration, Instant},
};

use serde_json::Value;
use tests::{
    LabGuard, pktrace_bin,
    trace::{Pktrace, Trace, ct_entry, nat_steps},
};
use tracer_user::output::json::contract::Point;
use xtask::lab::{self, NODE_NS, STATE_FILE, UBUNTU, in_ns};

const POD: &str = "10.13.76.46";
const CLUSTER_IP: &str = "10.0.159.58:80";
/// How long a failing `--nat-hook` may take to exit (it must not run its `-d`).
const FAIL_FAST: Duration = Duration::from_secs(10);

/// The hooks, best first, as `--nat-hook` names them.
const ORDER: [&str; 4] = ["fentry", "kprobe", "netfilter", "conntrack"];

/// What this kernel offers, found without pktrace.
#[derive(Debug)]
#[expect(
    clippy::struct_excessive_bools,
    reason = "one answer per probe of the kernel"
)]
struct Kernel {
    /// `perf_event_open` can create kprobes (the kprobe PMU exists).
    kprobe_pmu: bool,
    /// Tracing (fentry) programs get to the verifier; `Err(errno)` when refused before it.
    fentry: Result<(), i32>,
    /// BPF netfilter links (Linux 6.4+).
    netfilter: bool,
    /// `nf_nat_manip_pkt`'s BTF is there, for fentry to name: the `nf_nat` module's (5.11+), or
    /// vmlinux's when `nf_nat` is built in (a built-in module's `/sys/module` entry has no
    /// `initstate`).
    nat_btf: bool,
    /// BPF trampolines can attach to kernel functions: ftrace direct calls
    /// (`CONFIG_DYNAMIC_FTRACE_WITH_DIRECT_CALLS`; arm64 has them from 6.4 on), by the
    /// kernel's config when it can be read, else by the architecture and version.
    trampolines: bool,
}

impl Kernel {
    fn probe() -> Self {
        Self {
            kprobe_pmu: Path::new("/sys/bus/event_source/devices/kprobe/type").exists(),
            fentry: probe_tracing_load(),
            netfilter: kernel_at_least(6, 4),
            nat_btf: Path::new("/sys/kernel/btf/nf_nat").exists()
                || (Path::new("/sys/module/nf_nat").exists()
                    && !Path::new("/sys/module/nf_nat/initstate").exists()),
            trampolines: has_direct_calls(),
        }
    }

    /// Whether the kernel has `hook`, by the probes above.
    fn has(&self, hook: &str) -> bool {
        match hook {
            "fentry" => self.fentry.is_ok() && self.nat_btf && self.trampolines,
            "kprobe" => self.kprobe_pmu,
            "netfilter" => self.netfilter,
            // Conntrack's events over netlink: the lab's node loads nf_conntrack_netlink.
            "conntrack" => true,
            _ => false,
        }
    }
}

/// Whether the kernel has ftrace direct calls, which fentry needs to attach: the
/// `/boot/config-<release>` line when there is one, else every kernel but arm64 before 6.4.
fn has_direct_calls() -> bool {
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let config = std::fs::read_to_string(format!("/boot/config-{}", release.trim()));
    match config {
        Ok(text) => text
            .lines()
            .any(|l| l.trim() == "CONFIG_DYNAMIC_FTRACE_WITH_DIRECT_CALLS=y"),
        Err(_) => !cfg!(target_arch = "aarch64") || kernel_at_least(6, 4),
    }
}

fn kernel_at_least(major: u32, minor: u32) -> bool {
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let mut parts = release
        .trim()
        .split(['.', '-'])
        .map(|p| p.parse::<u32>().unwrap_or(0));
    (parts.next().unwrap_or(0), parts.next().unwrap_or(0)) >= (major, minor)
}

/// The start of `union bpf_attr` for `BPF_PROG_LOAD`, up to `attach_btf_id`
/// (include/uapi/linux/bpf.h, v5.5+); the kernel zero-fills the rest.
#[repr(C)]
#[derive(Default)]
struct ProgLoadAttr {
    prog_type: u32,
    insn_cnt: u32,
    insns: u64,
    license: u64,
    log_level: u32,
    log_size: u32,
    log_buf: u64,
    kern_version: u32,
    prog_flags: u32,
    prog_name: [u8; 16],
    prog_ifindex: u32,
    expected_attach_type: u32,
    prog_btf_fd: u32,
    func_info_rec_size: u32,
    func_info: u64,
    func_info_cnt: u32,
    line_info_rec_size: u32,
    line_info: u64,
    line_info_cnt: u32,
    attach_btf_id: u32,
}

/// libbpf's probe for tracing programs (`libbpf_probe_bpf_prog_type`): load `r0 = 0; exit` as
/// fentry on BTF type 1, which is never a function. A kernel that verifies tracing programs
/// answers `EINVAL` ("`attach_btf_id` 1 is not a function"); one that refuses them before the
/// verifier (lockdown, an LSM, missing capabilities) answers `EPERM`/`EACCES`.
fn probe_tracing_load() -> Result<(), i32> {
    const BPF_PROG_LOAD: libc::c_long = 5;
    const BPF_PROG_TYPE_TRACING: u32 = 26;
    const BPF_TRACE_FENTRY: u32 = 24;
    // r0 = 0; exit
    let insns: [u64; 2] = [0x0000_0000_0000_00b7, 0x0000_0000_0000_0095];
    let license = c"GPL";
    let attr = ProgLoadAttr {
        prog_type: BPF_PROG_TYPE_TRACING,
        insn_cnt: 2,
        insns: insns.as_ptr() as u64,
        license: license.as_ptr() as u64,
        expected_attach_type: BPF_TRACE_FENTRY,
        attach_btf_id: 1,
        ..ProgLoadAttr::default()
    };
    // SAFETY: `attr` is a valid prefix of `union bpf_attr` whose pointers outlive the call.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            BPF_PROG_LOAD,
            &raw const attr,
            size_of::<ProgLoadAttr>(),
        )
    };
    if ret >= 0 {
        // SAFETY: a new fd that nothing else owns.
        unsafe { libc::close(i32::try_from(ret).unwrap_or(-1)) };
        return Ok(());
    }
    match io::Error::last_os_error().raw_os_error().unwrap_or(0) {
        e @ (libc::EPERM | libc::EACCES) => Err(e),
        _ => Ok(()),
    }
}

/// pktrace's `NAT hook …` lines.
fn hook_lines(stderr: &str) -> Vec<&str> {
    stderr
        .lines()
        .filter_map(|l| l.strip_prefix("pktrace: NAT hook "))
        .collect()
}

/// The names of the BPF programs process `pid` holds (program fds, and the programs of its
/// links), and how many perf events it holds (kprobes), from /proc/PID/fd and fdinfo; names
/// from bpftool (15 bytes, as the kernel keeps them).
fn held_by(pid: i32) -> (Vec<String>, usize) {
    let dir = format!("/proc/{pid}");
    let mut prog_ids = Vec::new();
    let mut perf_events = 0;
    for entry in std::fs::read_dir(format!("{dir}/fd"))
        .expect("fds of pktrace")
        .flatten()
    {
        let target = std::fs::read_link(entry.path()).unwrap_or_default();
        let target = target.to_string_lossy();
        if target == "anon_inode:[perf_event]" {
            perf_events += 1;
        } else if target == "anon_inode:bpf-prog"
            || target == "anon_inode:bpf_link"
            || target == "anon_inode:bpf-link"
        {
            let info = std::fs::read_to_string(format!(
                "{dir}/fdinfo/{}",
                entry.file_name().to_string_lossy()
            ))
            .unwrap_or_default();
            prog_ids.extend(
                info.lines()
                    .filter_map(|l| l.strip_prefix("prog_id:"))
                    .map(|id| id.trim().to_owned()),
            );
        }
    }
    let names = prog_ids
        .iter()
        .filter_map(|id| {
            let out = Command::new("bpftool")
                .args(["-j", "prog", "show", "id", id])
                .output()
                .expect("bpftool");
            let v: Value = serde_json::from_slice(&out.stdout).ok()?;
            v["name"].as_str().map(str::to_owned)
        })
        .collect();
    (names, perf_events)
}

/// Runs pktrace with `--nat-hook hook`, expecting it to fail at once; returns its stderr.
fn expect_fail_fast(hook: &str) -> String {
    let start = Instant::now();
    let args = [
        "--pod",
        "ubuntu",
        "--state-file",
        STATE_FILE,
        "--nat-hook",
        hook,
        "-d",
        "30s",
    ];
    let out = in_ns(NODE_NS, pktrace_bin(), args)
        .output()
        .expect("pktrace");
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(
        out.status.code(),
        Some(1),
        "--nat-hook {hook} must fail on this kernel: {err}"
    );
    assert!(
        start.elapsed() < FAIL_FAST,
        "--nat-hook {hook} took {:?} to fail: {err}",
        start.elapsed()
    );
    assert_eq!(err.lines().count(), 1, "one line, not a stack trace: {err}");
    assert!(
        err.starts_with(&format!("pktrace: --nat-hook {hook}: ")),
        "{err}"
    );
    err
}

/// Traces one TCP connection to the ClusterIP with `--nat-hook hook` and checks that its NAT
/// steps were seen and timed by that hook.
fn expect_working(hook: &str, describes: &str) -> Trace {
    let pk = Pktrace::start(&["--pod", "ubuntu", "--follow", "--nat-hook", hook]);
    lab::client_tcp(&UBUNTU.netns(), CLUSTER_IP).expect("traffic");
    let trace = pk.stop();
    assert!(trace.status.success(), "{}", trace.dump());
    let lines = hook_lines(&trace.stderr);
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with(&format!("{hook}: {describes}"))),
        "no 'NAT hook {hook}: {describes}' line:\n{}",
        trace.stderr
    );
    check_dnat_seen(&trace, hook != "conntrack");
    trace
}

/// The connection to the ClusterIP was DNATed on the way out and un-DNATed on the way back,
/// and each step was timed (`timed`) or not (conntrack: `latency_ns` null).
fn check_dnat_seen(trace: &Trace, timed: bool) {
    let ct = ct_entry(POD, CLUSTER_IP);
    let out = trace.starting(&ct.orig_src_ep(), &ct.orig_dst_ep());
    let back = trace.starting(&ct.reply_src_ep(), &ct.reply_dst_ep());
    assert!(
        !out.is_empty() && !back.is_empty(),
        "no journeys for {ct:?}\n{}",
        trace.dump()
    );
    for (journeys, reply) in [(out, false), (back, true)] {
        for j in journeys {
            let steps = nat_steps(j);
            assert_eq!(steps.len(), 1, "one NAT step expected: {j:?}");
            assert_eq!(
                (steps[0].point, steps[0].reply),
                (Point::Dnat, Some(reply)),
                "{j:?}"
            );
            let latency = steps[0].latency_ns.flatten();
            if !timed {
                assert!(latency.is_none(), "conntrack cannot time a step: {j:?}");
                continue;
            }
            let latency = latency.unwrap_or_else(|| panic!("untimed: {j:?}"));
            assert!(
                latency > 0 && latency < 1_000_000_000,
                "implausible latency: {j:?}"
            );
        }
    }
    // The summary counts every DNAT step shown; its times are null when none was timed.
    let shown = trace
        .journeys()
        .into_iter()
        .flat_map(nat_steps)
        .filter(|s| s.point == Point::Dnat)
        .count() as u64;
    let dnat = trace.summary().nat.dnat;
    assert_eq!(dnat.count, shown, "{dnat:?}\n{}", trace.dump());
    assert_eq!(dnat.p50_ns.is_some(), timed, "{dnat:?}");
}

#[test]
fn kprobe_hook_fails_fast_without_a_kprobe_pmu_and_works_with_one() {
    let _lab = LabGuard::new();
    let kernel = Kernel::probe();
    if kernel.kprobe_pmu {
        println!("kernel has a kprobe PMU: --nat-hook kprobe must work");
        expect_working("kprobe", "kprobe/kretprobe on nf_nat_manip_pkt");
    } else {
        let err = expect_fail_fast("kprobe");
        assert!(
            err.contains("kprobes cannot attach: this kernel has no kprobe PMU"),
            "{err}"
        );
    }
}

#[test]
fn fentry_hook_fails_fast_where_tracing_is_refused_and_works_elsewhere() {
    let _lab = LabGuard::new();
    let kernel = Kernel::probe();
    match kernel.fentry {
        Ok(()) if kernel.nat_btf && !kernel.trampolines => {
            println!("no ftrace direct calls: --nat-hook fentry must fail fast and say why");
            let err = expect_fail_fast("fentry");
            assert!(
                err.contains("ENOTSUPP — this kernel cannot attach BPF trampolines"),
                "{err}"
            );
        }
        Ok(()) if kernel.nat_btf => {
            println!("kernel verifies tracing programs: --nat-hook fentry must work");
            expect_working("fentry", "fentry/fexit on nf_nat_manip_pkt");
        }
        Ok(()) => {
            println!("no BTF for nf_nat_manip_pkt (nf_nat module without BTF: before 5.11)");
            let err = expect_fail_fast("fentry");
            assert!(
                err.contains("nf_nat_manip_pkt is not in the kernel's BTF"),
                "{err}"
            );
        }
        Err(errno) => {
            let err = expect_fail_fast("fentry");
            let name = if errno == libc::EPERM {
                "EPERM"
            } else {
                "EACCES"
            };
            assert!(
                err.contains(&format!(
                    "the kernel refused to load fentry programs: {name} — "
                )),
                "{err}"
            );
        }
    }
}

#[test]
fn auto_takes_the_best_hook_and_says_why_it_skipped_the_better_ones() {
    let _lab = LabGuard::new();
    let kernel = Kernel::probe();
    let best = ORDER
        .iter()
        .position(|h| kernel.has(h))
        .unwrap_or(ORDER.len() - 1);
    let chosen = ORDER[best];
    println!("kernel: {kernel:?}; auto must choose {chosen}");
    let pk = Pktrace::start(&["--pod", "ubuntu", "--follow", "--nat-hook", "auto"]);
    // Only the chosen hook's programs are loaded: failed attempts left nothing, later hooks
    // were never tried.
    let (names, kprobes) = held_by(pk.pid());
    let has = |prefix: &str| names.iter().any(|n| n.starts_with(prefix));
    assert_eq!(
        has("nat_fentry") || has("nat_fexit"),
        chosen == "fentry",
        "{chosen}: {names:?}"
    );
    assert_eq!(
        has("nat_kprobe") || has("nat_kretprobe"),
        chosen == "kprobe",
        "{chosen}: {names:?}"
    );
    assert_eq!(has("nf_"), chosen == "netfilter", "{chosen}: {names:?}");
    if chosen != "kprobe" {
        assert_eq!(
            kprobes, 0,
            "perf events (kprobes) left by a failed kprobe attempt"
        );
    }
    lab::client_tcp(&UBUNTU.netns(), CLUSTER_IP).expect("traffic");
    let trace = pk.stop();
    assert!(trace.status.success(), "{}", trace.dump());

    let lines = hook_lines(&trace.stderr);
    let want: Vec<&str> = ORDER[..=best].to_vec();
    let got: Vec<&str> = lines
        .iter()
        .map(|l| l.split(':').next().unwrap_or(""))
        .collect();
    assert_eq!(
        got, want,
        "one line per hook up to the chosen one:\n{}",
        trace.stderr
    );
    for (line, hook) in lines.iter().zip(&want[..best]) {
        assert!(
            line.starts_with(&format!("{hook}: skipped (")) && line.ends_with(')'),
            "{line}"
        );
    }
    assert!(!lines[best].contains("skipped"), "{}", lines[best]);
    if let Err(errno) = kernel.fentry {
        let name = if errno == libc::EPERM {
            "EPERM"
        } else {
            "EACCES"
        };
        assert!(
            lines[0].contains(&format!(
                "the kernel refused to load fentry programs: {name}"
            )),
            "{}",
            lines[0]
        );
    }
    if kernel.fentry.is_ok() && kernel.nat_btf && !kernel.trampolines {
        assert!(
            lines[0].contains("cannot attach BPF trampolines"),
            "{}",
            lines[0]
        );
    }
    if !kernel.kprobe_pmu && best > 1 {
        assert!(lines[1].contains("no kprobe PMU"), "{}", lines[1]);
    }
    check_dnat_seen(&trace, chosen != "conntrack");
}

#[test]
fn conntrack_hook_joins_conntrack_events_untimed() {
    let _lab = LabGuard::new();
    expect_working("conntrack", "conntrack events over netlink");
}

/// A kernel without BTF (`PKTRACE_BTF_PATH` names none): pktrace still runs (the tc programs
/// need no BTF), every kernel NAT hook is skipped for want of it, and `auto` falls back to
/// conntrack, which sees the NAT.
#[test]
fn without_btf_auto_falls_back_to_conntrack_and_sees_nat() {
    let _lab = LabGuard::new();
    let env = [("PKTRACE_BTF_PATH", "/nonexistent/vmlinux")];
    let pk = Pktrace::start_with_env(&["--pod", "ubuntu", "--follow", "--nat-hook", "auto"], &env);
    let (names, kprobes) = held_by(pk.pid());
    assert!(
        !names
            .iter()
            .any(|n| n.starts_with("nat_") || n.starts_with("nf_"))
            && kprobes == 0,
        "no NAT program without BTF: {names:?}, {kprobes} kprobes"
    );
    lab::client_tcp(&UBUNTU.netns(), CLUSTER_IP).expect("traffic");
    let trace = pk.stop();
    assert!(trace.status.success(), "{}", trace.dump());
    let lines = hook_lines(&trace.stderr);
    assert_eq!(lines.len(), ORDER.len(), "{}", trace.stderr);
    for (line, hook) in lines.iter().zip(&ORDER[..3]) {
        assert!(
            line.starts_with(&format!(
                "{hook}: skipped (no kernel BTF for sk_buff offsets (/nonexistent/vmlinux"
            )),
            "{line}"
        );
    }
    assert!(
        lines[3].starts_with("conntrack: fallback, no kernel NAT hook can be used here"),
        "{}",
        lines[3]
    );
    check_dnat_seen(&trace, false);
}
