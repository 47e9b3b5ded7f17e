//! Issue 6, item 6: a kernel locked down in "confidentiality" mode. It refuses every eBPF
//! program that reads kernel memory: the verifier knows no `bpf_probe_read*` helper there, so
//! pktrace's NAT programs (fentry, kprobe, netfilter) are rejected with EINVAL ("unknown func
//! `bpf_probe_read#4`" on 6.1, "program of this type cannot use helper `bpf_probe_read#4`" on
//! 6.12), while its tc programs, which read packets with `bpf_skb_load_bytes`,
//! load. So: a NAT hook asked for by name ends pktrace with one line naming lockdown and what
//! to do, exit 1; the default (`auto`) says, once per refused hook, that lockdown refused it,
//! and falls back to conntrack's events over netlink (no program reads kernel memory): the tc
//! path with its NAT steps, untimed. Either way nothing of pktrace's is left in the kernel.
//!
//! Only a kernel booted with `lockdown=confidentiality` can run these, and lockdown cannot be
//! lifted without a reboot: they are `#[ignore]`d (counted as ignored elsewhere), and `cargo
//! xtask vm-test --full` boots its guest once more that way and runs this binary there with
//! `--include-ignored`. Run on a kernel that is not locked down, they fail.

/// Named so that `cargo xtask vm-test -- lockdown` selects these tests.
mod lockdown {
    use std::{
        fs,
        net::SocketAddr,
        process::Command,
        sync::OnceLock,
        thread::sleep,
        time::{Duration, Instant},
    };

    use tests::{
        LabGuard,
        leftovers::{kernel_at_least, ours_loaded_after_settling, tc_snapshot},
        pktrace_bin,
        trace::{CtEntry, Pktrace, Trace, ct_entry},
    };
    use tracer_user::output::json::contract::{JourneyLine, Point, StepLine};
    use xtask::lab::{self, UBUNTU, topology::VNET_HOST};

    const LOCKDOWN_FILE: &str = "/sys/kernel/security/lockdown";
    /// whereami's ClusterIP: DNAT to a backend on the node.
    const CLUSTER_IP: &str = "10.0.159.58:80";
    /// The VNet host, reached from the pod without NAT.
    const VNET_IP: &str = "10.13.1.4";
    /// What pktrace says lockdown refused (the helper's name follows).
    const REFUSED: &str = "the kernel is locked down (confidentiality) and refuses eBPF programs \
                           that read kernel memory (bpf_probe_read";
    const ADVICE: &str = "boot the node without lockdown=confidentiality to see timed NAT steps";

    /// Fails unless the kernel is locked down in confidentiality mode (these tests run only
    /// where it should be: the VM tier's lockdown boot, or when asked for by `--ignored`).
    fn require_lockdown() {
        let text = fs::read_to_string(LOCKDOWN_FILE)
            .unwrap_or_else(|e| format!("unreadable ({e}; is securityfs mounted?)"));
        assert!(
            text.contains("[confidentiality]"),
            "this test needs a kernel locked down in confidentiality mode, and {LOCKDOWN_FILE} \
             says: {}",
            text.trim()
        );
    }

    /// The warning of a pktrace whose drop program the kernel refused.
    const DROPS_REFUSED: &str = "pktrace: warning: drops are not traced: ";

    /// The NAT hooks lockdown must refuse on this kernel: kprobe; fentry from 5.11 (its target
    /// `nf_nat_manip_pkt` is in the `nf_nat` module, whose BTF came in 5.11: Debian's 5.10
    /// refuses it for that, not for lockdown); and from 6.4 the BPF netfilter programs
    /// (Debian's 6.1 has none: its refusal there is not lockdown's).
    fn refused_hooks() -> Vec<&'static str> {
        let mut hooks = vec!["kprobe"];
        if kernel_at_least(5, 11) {
            hooks.insert(0, "fentry");
        }
        if kernel_at_least(6, 4) {
            hooks.push("netfilter");
        }
        hooks
    }

    /// Nothing of pktrace's in the kernel: no program or link, no clsact qdisc on `lo`.
    fn assert_nothing_left(what: &str) {
        let left = ours_loaded_after_settling();
        assert!(left.is_empty(), "{what}: left behind: {left:?}");
        let out = Command::new("tc")
            .args(["qdisc", "show", "dev", "lo"])
            .output()
            .expect("tc");
        let qdiscs = String::from_utf8_lossy(&out.stdout);
        assert!(
            !qdiscs.contains("clsact"),
            "{what}: clsact left on lo: {qdiscs}"
        );
    }

    #[test]
    #[ignore = "needs a kernel booted with lockdown=confidentiality (the VM tier's lockdown boot)"]
    fn a_nat_hook_refused_by_lockdown_is_one_line_and_exit_1() {
        require_lockdown();
        let bin = pktrace_bin();
        for hook in refused_hooks() {
            // tc attaches first (to lo: no lab needed), then the NAT hook is refused.
            let out = Command::new(&bin)
                .args(["--pod-ip", "192.0.2.10", "--interfaces", "lo", "-d", "2s"])
                .args(["--nat-hook", hook])
                .output()
                .expect("run pktrace");
            let err = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(1), "--nat-hook {hook}: {err}");
            // Before 5.17 the drop program reads the tracepoint's arguments with
            // bpf_probe_read, which lockdown refuses too: one warning line says so.
            let lines: Vec<&str> = err
                .lines()
                .filter(|l| kernel_at_least(5, 17) || !l.starts_with(DROPS_REFUSED))
                .collect();
            assert_eq!(lines.len(), 1, "--nat-hook {hook}: one line: {err}");
            let line = lines[0].trim_end();
            assert!(
                line.starts_with(&format!("pktrace: --nat-hook {hook}: {REFUSED}")),
                "--nat-hook {hook}: {line}"
            );
            assert!(
                line.ends_with(&format!(
                    "): {ADVICE}, or use --nat-hook conntrack (NAT steps untimed)"
                )),
                "--nat-hook {hook}: {line}"
            );
            assert!(
                out.stdout.is_empty(),
                "--nat-hook {hook}: stdout {:?}",
                out.stdout
            );
            assert_nothing_left(&format!("--nat-hook {hook}"));
            eprintln!("--nat-hook {hook}: exit 1: {line}");
        }
    }

    /// What one run of pktrace with the default NAT hook (`auto`) on the locked-down kernel
    /// left: its output, conntrack's entry for the ClusterIP connection, and what the kernel
    /// held of ours afterwards.
    struct AutoRun {
        trace: Trace,
        /// The conntrack entry of the connection to the ClusterIP.
        ct: CtEntry,
        vnet: SocketAddr,
        loaded_after: Vec<String>,
        tc_before: String,
        tc_after: String,
    }

    impl AutoRun {
        /// The stderr lines about NAT hooks.
        fn nat_lines(&self) -> Vec<&str> {
            self.trace
                .stderr
                .lines()
                .filter(|l| l.starts_with("pktrace: NAT hook "))
                .collect()
        }

        /// Journeys to the ClusterIP, as conntrack recorded the connection.
        fn to_svc(&self) -> Vec<&JourneyLine> {
            let (src, dst) = (self.ct.orig_src_ep(), self.ct.orig_dst_ep());
            self.trace
                .journeys()
                .into_iter()
                .filter(|j| j.steps[0].src == src && j.steps[0].dst == dst)
                .collect()
        }

        /// Journeys from the pod to the VNet host.
        fn to_vnet(&self) -> Vec<&JourneyLine> {
            let from_pod = format!("{}:", UBUNTU.ip);
            let vnet = self.vnet.to_string();
            self.trace
                .journeys()
                .into_iter()
                .filter(|j| j.steps[0].src.starts_with(&from_pod) && j.steps[0].dst == vnet)
                .collect()
        }
    }

    /// The run, once for the `auto_` tests (they run one at a time; each also runs alone).
    /// The lab is down again once it is built.
    fn auto_run() -> &'static AutoRun {
        static RUN: OnceLock<AutoRun> = OnceLock::new();
        require_lockdown();
        RUN.get_or_init(trace_with_auto)
    }

    fn trace_with_auto() -> AutoRun {
        let _lab = LabGuard::new();
        let tc_before = tc_snapshot();
        let pk = Pktrace::start(&["--pod", "ubuntu", "--follow"]);
        let vnet: SocketAddr = format!("{VNET_IP}:{}", VNET_HOST.tcp_port)
            .parse()
            .expect("address");
        lab::client_tcp(&UBUNTU.netns(), vnet).expect("traffic");
        lab::client_tcp(&UBUNTU.netns(), CLUSTER_IP).expect("traffic to the ClusterIP");
        // Journeys are printed once closed: wait for the first (bounded), then stop.
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(20) && pk.journeys_so_far().is_empty() {
            sleep(Duration::from_millis(100));
        }
        let trace = pk.stop();
        let ct = ct_entry(&UBUNTU.ip.to_string(), CLUSTER_IP);
        AutoRun {
            trace,
            ct,
            vnet,
            loaded_after: ours_loaded_after_settling(),
            tc_before,
            tc_after: tc_snapshot(),
        }
    }

    /// Once per refused hook, a line that lockdown refused it; the last NAT hook line says
    /// conntrack is the fallback; pktrace runs and exits 0.
    #[test]
    #[ignore = "needs a kernel booted with lockdown=confidentiality (the VM tier's lockdown boot)"]
    fn auto_names_lockdown_once_for_each_refused_nat_hook_and_falls_back_to_conntrack() {
        let r = auto_run();
        let trace = &r.trace;
        assert!(trace.status.success(), "{}", trace.dump());
        let nat_lines = r.nat_lines();
        for hook in refused_hooks() {
            let want = format!("pktrace: NAT hook {hook}: skipped ({REFUSED}");
            assert_eq!(
                nat_lines.iter().filter(|l| l.starts_with(&want)).count(),
                1,
                "one line for {hook}: {}",
                trace.stderr
            );
        }
        let last = nat_lines.last().expect("NAT hook lines");
        assert!(
            last.starts_with(
                "pktrace: NAT hook conntrack: fallback, no kernel NAT hook can be used here"
            ),
            "{}",
            trace.stderr
        );
    }

    /// The ClusterIP's DNAT, from conntrack's events: what conntrack recorded, untimed.
    #[test]
    #[ignore = "needs a kernel booted with lockdown=confidentiality (the VM tier's lockdown boot)"]
    fn auto_on_lockdown_shows_the_cluster_ip_dnat_from_conntrack_untimed() {
        let r = auto_run();
        let to_svc = r.to_svc();
        assert!(
            !to_svc.is_empty(),
            "no journey to the ClusterIP: {}",
            r.trace.dump()
        );
        for j in &to_svc {
            let nat: Vec<&StepLine> = j.steps.iter().filter(|s| s.point.is_nat()).collect();
            assert_eq!(nat.len(), 1, "one DNAT: {j:?}");
            assert_eq!(nat[0].point, Point::Dnat, "{j:?}");
            assert_eq!(nat[0].dst, r.ct.reply_src_ep(), "{j:?}");
            assert!(nat[0].latency_ns.flatten().is_none(), "untimed: {j:?}");
        }
    }

    /// The tc path is traced: the pod's packets to the VNet host, hop by hop from its veth out
    /// of eth0, without a NAT step (no hook to see one).
    #[test]
    #[ignore = "needs a kernel booted with lockdown=confidentiality (the VM tier's lockdown boot)"]
    fn auto_on_lockdown_traces_the_tc_path() {
        let r = auto_run();
        let journeys = r.to_vnet();
        assert!(!journeys.is_empty(), "no journey: {}", r.trace.dump());
        for j in &journeys {
            let hops: Vec<(&str, Point)> = j
                .steps
                .iter()
                .map(|s| {
                    (
                        s.iface.as_ref().and_then(Option::as_deref).unwrap_or(""),
                        s.point,
                    )
                })
                .collect();
            assert_eq!(
                hops.first(),
                Some(&(UBUNTU.host_if, Point::Ingress)),
                "{j:?}"
            );
            assert_eq!(hops.last(), Some(&("eth0", Point::Egress)), "{j:?}");
        }
        eprintln!(
            "auto: exit {:?}, {} journeys pod → VNet host, {} to the ClusterIP with conntrack's \
             DNAT, {} NAT hook lines",
            r.trace.status.code(),
            journeys.len(),
            r.to_svc().len(),
            r.nat_lines().len()
        );
    }

    #[test]
    #[ignore = "needs a kernel booted with lockdown=confidentiality (the VM tier's lockdown boot)"]
    fn auto_on_lockdown_leaves_nothing_behind() {
        let r = auto_run();
        assert!(
            r.loaded_after.is_empty(),
            "auto: left behind: {:?}",
            r.loaded_after
        );
        assert_eq!(
            r.tc_after, r.tc_before,
            "auto: the node's qdiscs and filters changed"
        );
    }
}
