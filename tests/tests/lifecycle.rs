//! Many concurrent connections, SIGKILL leaves nothing behind, another program on
//! the same hook keeps seeing every packet, limits and errors behave.

use std::{
    collections::{BTreeMap, BTreeSet},
    process::Stdio,
    time::Duration,
};

use tests::{
    LabGuard,
    leftovers::{
        kernel_has_tcx, our_filters, ours_loaded, ours_loaded_after_settling, tagged_pid,
        tc_snapshot,
    },
    pktrace_bin,
    trace::{Pktrace, Trace, assert_path, conntrack, nat_steps},
};
use tracer_user::output::json::contract::{Ending, JourneyLine, Point};
use xtask::lab::{self, NODE_NS, PODS, UBUNTU, in_ns};

const CONNECTIONS: usize = 50;

/// A segment the receiving pod's own TCP refused after it left the node (a retransmit that
/// came as old data on a slow machine: `TCP_OLD_DATA`, or without drop reasons `NOT_SPECIFIED`
/// in `tcp_v4_rcv`) ends `dropped` after its egress: it crossed the node whole.
fn left_then_refused(j: &JourneyLine) -> bool {
    j.ending == Some(Ending::Dropped)
        && j.steps
            .iter()
            .rev()
            .nth(1)
            .is_some_and(|s| s.point == Point::Egress)
}

#[test]
fn fifty_concurrent_connections_are_neither_merged_nor_split() {
    let _lab = LabGuard::new();
    let pk = Pktrace::start(&["--pod", "ubuntu", "--follow"]);
    let children: Vec<_> = (0..CONNECTIONS)
        .map(|_| {
            in_ns(
                &UBUNTU.netns(),
                xtask::xtask_exe().expect("xtask"),
                ["lab", "client", "--tcp", "10.0.159.58:80"],
            )
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("client")
        })
        .collect();
    let mut seen = BTreeSet::new();
    for c in children {
        let out = c.wait_with_output().expect("client");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        seen.insert(String::from_utf8_lossy(&out.stdout).trim().to_owned());
    }
    assert_eq!(
        seen.len(),
        CONNECTIONS,
        "every connection got its own answer"
    );
    let trace = pk.stop();
    assert!(trace.status.success(), "{}", trace.dump());

    // Every connection to the ClusterIP, as conntrack knows them.
    let flows: Vec<_> = conntrack()
        .into_iter()
        .filter(|e| e.orig_src == "10.13.76.46" && e.orig_dst_ep() == "10.0.159.58:80")
        .collect();
    assert_eq!(flows.len(), CONNECTIONS, "conntrack entries");

    let mut syns_per_flow: BTreeMap<String, usize> = BTreeMap::new();
    for whole in trace.journeys() {
        // Its path on the node: without a drop by the receiving pod after it left.
        let mut j = whole.clone();
        if left_then_refused(whole) {
            j.steps.pop();
        }
        let j = &j;
        let first = &j.steps[0];
        let src = first.src.clone();
        let Some(ct) = flows
            .iter()
            .find(|e| e.orig_src_ep() == src && first.dst == "10.0.159.58:80")
        else {
            continue;
        };
        // Not merged: every step of the journey is this flow's packet (before or after DNAT).
        for s in &j.steps {
            assert_eq!(s.src, ct.orig_src_ep(), "step of another flow in {j:?}");
        }
        // Not split: the whole path, from the pod's veth to the backend's, DNAT once.
        let backend = PODS
            .iter()
            .find(|p| p.ip.to_string() == ct.reply_src)
            .expect("a lab backend");
        assert_path(
            j,
            UBUNTU.host_if,
            &[("dnat", false)],
            backend.host_if,
            &["azure0"],
        );
        *syns_per_flow.entry(src).or_default() += 1;
    }
    assert_eq!(
        syns_per_flow.len(),
        CONNECTIONS,
        "a complete journey for every connection\n{}",
        trace.dump()
    );
    assert_eq!(trace.summary().lost_events, 0);
    let incomplete: Vec<_> = trace
        .journeys()
        .into_iter()
        .filter(|j| j.ending != Some(Ending::Left) && !left_then_refused(j))
        .collect();
    assert!(
        incomplete.is_empty(),
        "journeys that did not leave the node: {incomplete:?}"
    );
}

/// With tcx (Linux 6.6+) SIGKILL leaves nothing: every link and program goes with the
/// process. Without tcx the tc programs are clsact filters, which outlive the process by the
/// kernel's design: then only they are left (tagged with the dead PID, holding only the tc
/// programs; the NAT hook's and the drop program are gone), and the next pktrace removes them
/// and the qdiscs.
#[test]
fn sigkill_leaves_no_program_link_filter_or_qdisc() {
    let _lab = LabGuard::new();
    // The previous test's programs may still be on their way out (RCU).
    let loaded = ours_loaded_after_settling();
    assert!(
        loaded.is_empty(),
        "programs of ours loaded before the test: {loaded:?}"
    );
    let tc_before = tc_snapshot();
    let pk = Pktrace::start(&["--pod", "ubuntu", "--follow"]);
    let pid = u32::try_from(pk.pid()).unwrap_or(0);
    let loaded = ours_loaded();
    assert!(
        loaded.iter().any(|l| l.contains("tc_ingress")),
        "pktrace attached nothing? {loaded:?}"
    );
    // The drop program (tp_btf on this host's 6.18) is attached and must go too.
    assert!(
        loaded.iter().any(|l| l.contains("name drop_")),
        "no drop program attached: {loaded:?}"
    );
    lab::client_tcp(&UBUNTU.netns(), "10.0.159.58:80").expect("traffic while attached");
    let trace = pk.stop_with(libc::SIGKILL);
    assert!(!trace.status.success());
    // The kernel frees programs after the last reference is gone (RCU): give it a moment.
    let loaded = ours_loaded_after_settling();
    if kernel_has_tcx() {
        assert!(loaded.is_empty(), "left behind after SIGKILL: {loaded:?}");
    } else {
        clsact_left_by_sigkill_is_swept_by_the_next_run(pid, &loaded);
    }
    assert_eq!(tc_snapshot(), tc_before, "tc qdiscs/filters changed");
}

/// Without tcx: after a SIGKILL of pktrace `pid`, which left `loaded`, the clsact filters
/// (tagged with `pid`) and the tc programs they hold are all that is left, and the next
/// pktrace removes them.
fn clsact_left_by_sigkill_is_swept_by_the_next_run(pid: u32, loaded: &[String]) {
    let filters = our_filters();
    assert!(!filters.is_empty(), "no clsact filter left by SIGKILL");
    assert!(
        filters.iter().all(|(_, h)| tagged_pid(*h) == Some(pid)),
        "filters not tagged with the killed PID {pid}: {filters:?}"
    );
    let tc_program = |l: &String| {
        l.starts_with("prog: ") && (l.contains("name tc_ingress") || l.contains("name tc_egress"))
    };
    let other: Vec<&String> = loaded.iter().filter(|l| !tc_program(l)).collect();
    assert!(
        other.is_empty(),
        "left behind after SIGKILL besides the tc programs: {other:?}"
    );
    let next = Pktrace::start(&["--pod", "ubuntu", "--follow"]).stop();
    assert!(next.status.success(), "{}", next.dump());
    let swept = format!("removed {} tc filters left", filters.len());
    assert!(
        next.stderr.contains(&swept),
        "no '{swept}':\n{}",
        next.stderr
    );
    let loaded = ours_loaded_after_settling();
    assert!(
        loaded.is_empty(),
        "left behind after the next run: {loaded:?}"
    );
}

/// `n` pings from `ubuntu` to the VNet host, 50 ms apart.
fn ping(n: usize) {
    ping_every(n, "0.05");
}

/// `n` pings from `ubuntu` to the VNet host, `interval` seconds apart; all must be answered.
fn ping_every(n: usize, interval: &str) {
    let ok = in_ns(
        &UBUNTU.netns(),
        "ping",
        ["-c", &n.to_string(), "-i", interval, "-W", "1", "10.13.1.4"],
    )
    .stdout(Stdio::null())
    .status()
    .expect("ping");
    assert!(ok.success(), "ping failed: a packet's fate changed?");
}

#[test]
fn another_program_on_the_same_hook_still_sees_every_packet() {
    let _lab = LabGuard::new();
    // `first` is the program already on the hooks; `second` attaches at the head of the same
    // tcx chains afterwards and must pass every packet on to it.
    let first = Pktrace::start(&["--pod", "ubuntu", "--follow"]);
    ping(10);
    let second = Pktrace::start(&["--pod", "ubuntu", "--follow"]);
    ping(10);
    // One connection through the ClusterIP: both see its DNAT, when NAT is observed at all (a
    // BPF netfilter link needs a priority of its own, so the second brackets the first).
    let client = in_ns(
        &UBUNTU.netns(),
        xtask::xtask_exe().expect("xtask"),
        ["lab", "client", "--tcp", "10.0.159.58:80"],
    )
    .output()
    .expect("client");
    assert!(
        client.status.success(),
        "{}",
        String::from_utf8_lossy(&client.stderr)
    );
    let (second, first) = (second.stop(), first.stop());
    let requests = |t: &Trace| t.starting("10.13.76.46", "10.13.1.4").len();
    let replies = |t: &Trace| t.starting("10.13.1.4", "10.13.76.46").len();
    assert_eq!(
        (requests(&first), replies(&first)),
        (20, 20),
        "the first program missed packets\n{}",
        first.dump()
    );
    assert_eq!(
        (requests(&second), replies(&second)),
        (10, 10),
        "{}",
        second.dump()
    );
    // The NAT hook each chose ("pktrace: NAT hook NAME: …", not a skipped one) and its DNATs.
    let nat_hook = |t: &Trace| {
        t.stderr
            .lines()
            .filter(|l| l.starts_with("pktrace: NAT hook ") && !l.contains(": skipped"))
            .filter_map(|l| l.split(':').nth(1).map(str::to_owned))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        nat_hook(&second),
        nat_hook(&first),
        "the second pktrace chose another NAT hook\n{}",
        second.dump()
    );
    let dnats = |t: &Trace| {
        t.journeys()
            .into_iter()
            .filter(|j| {
                let first = &j.steps[0];
                first.src.starts_with("10.13.76.46:")
                    && first.dst == "10.0.159.58:80"
                    && nat_steps(j).iter().any(|s| s.point == Point::Dnat)
            })
            .count()
    };
    if !nat_hook(&first).is_empty() {
        assert!(dnats(&first) > 0, "{}", first.dump());
        assert!(dnats(&second) > 0, "{}", second.dump());
    }
}

/// A collector that gets no CPU for longer than the idle timeout (a busy node, a preempted
/// vCPU) finds the events of that time waiting in the ring and in the CPUs' staging; a
/// journey is closed as timed out only when no event of it came for that long, not because
/// the collector did not look. Where a CPU's staged records begin relative to a journey is
/// chance, so the stall is repeated.
#[test]
fn a_collector_stalled_past_the_idle_timeout_still_joins_every_journey() {
    const PINGS: usize = 50;
    const STALLS: usize = 3;
    let _lab = LabGuard::new();
    let pk = Pktrace::start(&["--pod", "ubuntu", "--follow"]);
    for _ in 0..STALLS {
        pk.signal(libc::SIGSTOP);
        ping_every(PINGS, "0.01");
        // Past the idle timeout (1 s) since the last packet, still stopped.
        std::thread::sleep(Duration::from_millis(1500));
        pk.signal(libc::SIGCONT);
        std::thread::sleep(Duration::from_millis(500));
    }
    let trace = pk.stop();
    assert!(trace.status.success(), "{}", trace.dump());
    assert_eq!(trace.summary().lost_events, 0, "{}", trace.dump());
    let cut: Vec<_> = trace
        .journeys()
        .into_iter()
        .filter(|j| j.ending != Some(Ending::Left))
        .collect();
    assert!(cut.is_empty(), "journeys cut short: {cut:?}");
    let requests = trace.starting("10.13.76.46", "10.13.1.4").len();
    let replies = trace.starting("10.13.1.4", "10.13.76.46").len();
    assert_eq!(
        (requests, replies),
        (PINGS * STALLS, PINGS * STALLS),
        "one journey per packet\n{}",
        trace.dump()
    );
}

#[test]
fn count_limit_stops_after_n_journeys_with_the_summary_last() {
    let _lab = LabGuard::new();
    let pk = Pktrace::start(&["--pod", "ubuntu", "-c", "3"]);
    ping(5);
    let trace = pk.wait(Duration::from_secs(10));
    assert!(trace.status.success(), "{}", trace.dump());
    assert_eq!(trace.journeys().len(), 3);
    assert_eq!(trace.summary().journeys, 3);
}

#[test]
fn unknown_pod_exits_2_and_lists_the_pods_there() {
    let _lab = LabGuard::new();
    let out = in_ns(
        NODE_NS,
        pktrace_bin(),
        [
            "--pod",
            "ubutnu",
            "--state-file",
            lab::STATE_FILE,
            "-d",
            "1s",
        ],
    )
    .output()
    .expect("pktrace");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("ubuntu"), "should suggest ubuntu: {err}");
    assert!(
        err.contains("whereami-564765b89-qfq2k"),
        "should list the namespace's pods: {err}"
    );
}

#[test]
fn without_privileges_pktrace_says_so_and_exits_1() {
    let _lab = LabGuard::new();
    let out = in_ns(
        NODE_NS,
        "setpriv",
        [
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--inh-caps=-all",
        ],
    )
    .arg(pktrace_bin())
    .args(["--pod-ip", "10.13.76.46", "-d", "1s"])
    .output()
    .expect("setpriv");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("root") && err.contains("CAP_BPF"), "{err}");
    assert_eq!(err.lines().count(), 1, "one line, not a stack trace: {err}");
}

const FORCE_CLSACT: (&str, &str) = ("PKTRACE_FORCE_CLSACT", "1");

#[test]
fn clsact_path_detaches_on_exit_and_sweeps_what_a_killed_pktrace_left() {
    let _lab = LabGuard::new();
    let tc_before = tc_snapshot();
    // Clean exit: filters and the qdiscs pktrace created are gone.
    let pk = Pktrace::start_with_env(&["--pod", "ubuntu", "--follow"], &[FORCE_CLSACT]);
    assert!(!our_filters().is_empty(), "clsact mode attached no filter");
    ping(3);
    let trace = pk.stop();
    assert!(trace.status.success(), "{}", trace.dump());
    assert_eq!(
        trace.starting("10.13.76.46", "10.13.1.4").len(),
        3,
        "{}",
        trace.dump()
    );
    assert!(
        our_filters().is_empty(),
        "filters left after a clean exit: {:?}",
        our_filters()
    );
    assert_eq!(tc_snapshot(), tc_before, "qdiscs left after a clean exit");

    // SIGKILL: clsact filters outlive the process (tcx links would not)...
    let killed = Pktrace::start_with_env(&["--pod", "ubuntu", "--follow"], &[FORCE_CLSACT]);
    let _ = killed.stop_with(libc::SIGKILL);
    assert!(
        !our_filters().is_empty(),
        "expected the killed pktrace's filters to remain"
    );
    // ...and the next pktrace removes them, then cleans up after itself.
    let next = Pktrace::start_with_env(&["--pod", "ubuntu", "--follow"], &[FORCE_CLSACT]);
    ping(2);
    let trace = next.stop();
    assert!(
        trace.stderr.contains("removed") && trace.stderr.contains("tc filters left"),
        "{}",
        trace.stderr
    );
    assert_eq!(
        trace.starting("10.13.76.46", "10.13.1.4").len(),
        2,
        "no duplicate events from stale filters\n{}",
        trace.dump()
    );
    assert!(our_filters().is_empty(), "left behind: {:?}", our_filters());
    let loaded = ours_loaded_after_settling();
    assert!(loaded.is_empty(), "programs left: {loaded:?}");
    assert_eq!(tc_snapshot(), tc_before, "qdiscs left behind");
}
