//! Issue 5: on a node with many pod veths pktrace attaches clsact filters to the veths (a tcx
//! link waits for an RCU grace period under rtnl, about 30 ms per interface) and keeps tcx on the
//! interfaces `--interfaces` names (`eth0`, `azure0`); veths that appear while following get
//! clsact too. Journeys still cross both kinds, and nothing is left after exit or SIGKILL.
//! The `many_veths_` tests need tcx (Linux 6.6+): the runners skip them by name on older
//! kernels (`xtask::needs::NEEDS`).

use std::{
    fs,
    sync::OnceLock,
    thread::sleep,
    time::{Duration, Instant},
};

use tests::{
    LabGuard,
    leftovers::{our_filters, ours_loaded_after_settling, require_tcx, tagged_pid, tc_snapshot},
    trace::{Pktrace, Trace},
};
use tracer_user::output::json::contract::{JourneyLine, Point};
use xtask::lab::{self, NODE_NS, PODS, UBUNTU, in_ns, pods};

/// Extra veths in the node namespace, named like pod veths: with the lab's 4 pods, more than
/// tracer-user's `attach::policy::TCX_MAX_BY_PATTERN` (8) interfaces match `azv*`.
const EXTRA: usize = 12;
/// A host in the VNet behind `eth0`: routed by the node, not translated.
const VNET_HOST: &str = "10.13.1.4:80";

/// Veth pairs `azvmanyNN` / `pkmanyNN` in the node namespace; deleted on drop.
struct ExtraVeths(usize);

impl ExtraVeths {
    fn add(n: usize) -> Self {
        let me = Self(n);
        for i in 0..n {
            let (a, b) = (format!("azvmany{i:02}"), format!("pkmany{i:02}"));
            let ok = in_ns(
                NODE_NS,
                "ip",
                ["link", "add", &a, "type", "veth", "peer", "name", &b],
            )
            .status()
            .is_ok_and(|s| s.success());
            assert!(ok, "ip link add {a}");
        }
        me
    }
}

impl ExtraVeths {
    /// Deletes all but the first `n`.
    fn shrink_to(&mut self, n: usize) {
        for i in n..self.0 {
            // Deleting one end deletes the pair.
            let ok = in_ns(NODE_NS, "ip", ["link", "del", &format!("azvmany{i:02}")])
                .status()
                .is_ok_and(|s| s.success());
            assert!(ok, "ip link del azvmany{i:02}");
        }
        self.0 = self.0.min(n);
    }
}

impl Drop for ExtraVeths {
    fn drop(&mut self) {
        for i in 0..self.0 {
            let _ = in_ns(NODE_NS, "ip", ["link", "del", &format!("azvmany{i:02}")]).status();
        }
    }
}

/// Our filters on `iface`, as `tc` lists them, with their handles.
fn filters_on(iface: &str) -> Vec<(String, u32)> {
    our_filters()
        .into_iter()
        .filter(|(line, _)| line.starts_with(&format!("{iface} ")))
        .collect()
}

/// Waits up to 3 s for `needle` in the running pktrace's stderr.
fn wait_for_line(pk: &Pktrace, needle: &str) {
    let start = Instant::now();
    loop {
        let stderr = pk.stderr_so_far();
        if stderr.contains(needle) {
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(3),
            "no '{needle}' within 3 s:\n{stderr}"
        );
        sleep(Duration::from_millis(50));
    }
}

fn records() -> Vec<String> {
    fs::read_dir("/run/pktrace")
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// What pktrace left in the kernel and on disk at one moment.
struct Left {
    filters: Vec<(String, u32)>,
    tc: String,
    loaded: Vec<String>,
    records: Vec<String>,
}

impl Left {
    fn now() -> Self {
        Self {
            filters: our_filters(),
            tc: tc_snapshot(),
            loaded: ours_loaded_after_settling(),
            records: records(),
        }
    }
}

/// What one run of the many-veths scenario saw: pktrace on a node with more `azv*` veths than
/// get tcx, a pod added and deleted while following, a clean exit; then a SIGKILL and the
/// next pktrace's sweep; then another SIGKILL, the node shrunk below the tcx bound, and the
/// next pktrace's sweep.
struct ManyRun {
    /// The tc state before any pktrace ran.
    before: String,
    /// Interfaces matching `azv*`.
    globbed: usize,
    pid: u32,
    /// The first pktrace's stderr once attached.
    start_stderr: String,
    /// Our filters on a pod veth and on an extra veth, and on the named interfaces.
    veth_filters: Vec<(&'static str, Vec<(String, u32)>)>,
    named_filters: Vec<(&'static str, Vec<(String, u32)>)>,
    /// Our filters on the veth of the pod added while following.
    added_filters: usize,
    trace: Trace,
    after_exit: Left,
    /// The PID of the first killed pktrace and the filters it left.
    dead: u32,
    killed_left: Vec<(String, u32)>,
    sweep: Trace,
    after_sweep: Left,
    /// Our filters after the second kill.
    killed_again_left: usize,
    /// Kept `azv*` extra veths after the shrink; the next pktrace's stderr once attached and
    /// our filters then.
    kept: usize,
    shrunk_stderr: String,
    shrunk_filters: Vec<(String, u32)>,
    shrunk_sweep: Trace,
    after_shrunk: Left,
}

/// The scenario, run once for this file's `many_veths_` tests (they run one at a time; each
/// also runs alone). They need tcx: on a kernel without it (< 6.6) every interface gets
/// clsact, the runners skip them by name (`xtask::needs::NEEDS`) and they fail if run
/// anyway. The lab is down again once it is built.
fn many_run() -> &'static ManyRun {
    static RUN: OnceLock<ManyRun> = OnceLock::new();
    require_tcx();
    RUN.get_or_init(run_many_veths)
}

fn run_many_veths() -> ManyRun {
    let _lab = LabGuard::new();
    let loaded = ours_loaded_after_settling();
    assert!(
        loaded.is_empty(),
        "programs of ours loaded before the test: {loaded:?}"
    );
    let mut veths = ExtraVeths::add(EXTRA);
    let before = tc_snapshot();
    assert!(
        !before.contains("clsact"),
        "a clsact qdisc before the test:\n{before}"
    );
    let globbed = PODS.len() + EXTRA;

    let pk = Pktrace::start(&["--pod", "ubuntu", "--follow", "-v"]);
    let pid = u32::try_from(pk.pid()).unwrap_or(0);
    let start_stderr = pk.stderr_so_far();
    let veth_filters = [UBUNTU.host_if, "azvmany00"]
        .map(|i| (i, filters_on(i)))
        .to_vec();
    let named_filters = ["eth0", "azure0"].map(|i| (i, filters_on(i))).to_vec();

    // A pod that appears while following (the count is still above 8).
    let added = pods::add("many-a").expect("adding pod many-a");
    wait_for_line(&pk, &format!("attached to {} (clsact)", added.host_if));
    let added_filters = filters_on(&added.host_if).len();
    lab::client_tcp(&UBUNTU.netns(), VNET_HOST).expect("traffic while attached");
    pods::del("many-a").expect("deleting pod many-a");
    wait_for_line(&pk, &format!("{} is gone", added.host_if));
    let trace = pk.stop();
    let after_exit = Left::now();

    // SIGKILL, then the next pktrace.
    let killed = Pktrace::start(&["--pod", "ubuntu", "--follow"]);
    let dead = u32::try_from(killed.pid()).unwrap_or(0);
    let _ = killed.kill_now();
    let killed_left = our_filters();
    let sweep = Pktrace::start(&["--pod", "ubuntu", "--follow"]).stop();
    let after_sweep = Left::now();

    // Killed again, and the node shrinks to 6 `azv*` veths before the next start.
    let killed = Pktrace::start(&["--pod", "ubuntu", "--follow"]);
    let _ = killed.kill_now();
    let killed_again_left = our_filters().len();
    let kept = 2;
    veths.shrink_to(kept);
    let next = Pktrace::start(&["--pod", "ubuntu", "--follow"]);
    let shrunk_stderr = next.stderr_so_far();
    let shrunk_filters = our_filters();
    let shrunk_sweep = next.stop();
    let after_shrunk = Left::now();
    ManyRun {
        before,
        globbed,
        pid,
        start_stderr,
        veth_filters,
        named_filters,
        added_filters,
        trace,
        after_exit,
        dead,
        killed_left,
        sweep,
        after_sweep,
        killed_again_left,
        kept,
        shrunk_stderr,
        shrunk_filters,
        shrunk_sweep,
        after_shrunk,
    }
}

/// The pod veths hold our filters, tagged with our PID; the named interfaces hold none (they
/// have tcx links); the start-up line says so.
#[test]
fn many_veths_get_clsact_and_named_interfaces_keep_tcx() {
    let r = many_run();
    let want = format!(
        "attach: tcx on eth0, azure0; clsact on {} interfaces matching azv*",
        r.globbed
    );
    assert!(
        r.start_stderr.contains(&want),
        "no '{want}':\n{}",
        r.start_stderr
    );
    for (iface, f) in &r.veth_filters {
        assert_eq!(f.len(), 2, "ingress and egress filters on {iface}: {f:?}");
        assert!(
            f.iter().all(|(_, h)| tagged_pid(*h) == Some(r.pid)),
            "{f:?}"
        );
    }
    for (iface, f) in &r.named_filters {
        assert!(f.is_empty(), "a filter on {iface}: it should be a tcx link");
    }
}

/// A pod that appears while following gets clsact as well (the count is still above 8).
#[test]
fn many_veths_a_pod_added_while_following_gets_clsact() {
    let r = many_run();
    assert_eq!(r.added_filters, 2, "filters on the new pod's veth");
}

/// The request entered on the pod's veth (clsact) and crossed azure0 and eth0 (tcx).
#[test]
fn many_veths_journeys_cross_clsact_and_tcx_interfaces() {
    let r = many_run();
    let trace = &r.trace;
    assert!(trace.status.success(), "{}", trace.dump());
    let want = [
        (Point::Ingress, UBUNTU.host_if),
        (Point::Ingress, "azure0"),
        (Point::Egress, "azure0"),
        (Point::Egress, "eth0"),
    ];
    let out: Vec<&JourneyLine> = trace
        .journeys()
        .into_iter()
        .filter(|j| j.steps[0].dst == VNET_HOST)
        .collect();
    assert!(
        !out.is_empty(),
        "no journey to {VNET_HOST}:\n{}",
        trace.dump()
    );
    for j in &out {
        let got: Vec<(Point, &str, bool)> = j
            .steps
            .iter()
            .map(|s| {
                let iface = s.iface.as_ref().and_then(Option::as_deref);
                (s.point, iface.unwrap_or("-"), s.reply.unwrap_or(false))
            })
            .collect();
        let want: Vec<(Point, &str, bool)> = want.iter().map(|&(p, i)| (p, i, false)).collect();
        assert_eq!(got, want, "{j:?}");
    }
}

#[test]
fn many_veths_nothing_is_left_after_exit() {
    let r = many_run();
    let left = &r.after_exit;
    assert!(
        left.filters.is_empty(),
        "filters left after exit: {:?}",
        left.filters
    );
    assert_eq!(left.tc, r.before, "tc qdiscs/filters changed");
    assert!(
        left.loaded.is_empty(),
        "left behind after exit: {:?}",
        left.loaded
    );
    assert!(
        left.records.is_empty(),
        "qdisc records left: {:?}",
        left.records
    );
}

/// SIGKILL: the filters stay, tagged with the dead PID; the next pktrace removes them.
#[test]
fn many_veths_filters_left_by_sigkill_are_swept_by_the_next_run() {
    let r = many_run();
    let left = &r.killed_left;
    assert_eq!(
        left.len(),
        2 * r.globbed,
        "one filter per direction and veth: {left:?}"
    );
    assert!(
        left.iter().all(|(_, h)| tagged_pid(*h) == Some(r.dead)),
        "{left:?}"
    );
    let trace = &r.sweep;
    assert!(trace.status.success(), "{}", trace.dump());
    assert!(
        trace
            .stderr
            .contains(&format!("removed {} tc filters", 2 * r.globbed)),
        "no sweep reported:\n{}",
        trace.stderr
    );
    let after = &r.after_sweep;
    assert!(
        after.filters.is_empty(),
        "filters left: {:?}",
        after.filters
    );
    assert_eq!(
        after.tc, r.before,
        "tc qdiscs/filters changed after the kill and the sweep"
    );
    assert!(
        after.loaded.is_empty(),
        "left behind after SIGKILL and the next run: {:?}",
        after.loaded
    );
    assert!(
        after.records.is_empty(),
        "qdisc records left: {:?}",
        after.records
    );
}

/// Killed again, and the node shrinks to 6 `azv*` veths before the next start: that one picks
/// tcx for them, and must still remove the clsact filters the dead one left there (the filters
/// on the deleted veths went with them).
#[test]
fn many_veths_a_run_that_picks_tcx_still_sweeps_clsact_filters_left() {
    let r = many_run();
    assert_eq!(
        r.killed_again_left,
        2 * r.globbed,
        "filters after the second kill"
    );
    let want = format!(
        "attach: tcx on eth0, azure0, {} interfaces matching azv*",
        PODS.len() + r.kept
    );
    assert!(
        r.shrunk_stderr.contains(&want),
        "no '{want}':\n{}",
        r.shrunk_stderr
    );
    assert!(
        r.shrunk_filters.is_empty(),
        "filters left beside tcx: {:?}",
        r.shrunk_filters
    );
    let trace = &r.shrunk_sweep;
    assert!(trace.status.success(), "{}", trace.dump());
    let swept = format!("removed {} tc filters", 2 * (PODS.len() + r.kept));
    assert!(
        trace.stderr.contains(&swept),
        "no '{swept}':\n{}",
        trace.stderr
    );
    let after = &r.after_shrunk;
    assert!(
        !after.tc.contains("clsact"),
        "a clsact qdisc left:\n{}",
        after.tc
    );
    assert!(after.loaded.is_empty(), "left behind: {:?}", after.loaded);
    assert!(
        after.records.is_empty(),
        "qdisc records left: {:?}",
        after.records
    );
}

/// Record files written by the test itself, removed on drop.
struct RecordFiles(Vec<std::path::PathBuf>);

impl Drop for RecordFiles {
    fn drop(&mut self) {
        for p in &self.0 {
            let _ = fs::remove_file(p);
        }
    }
}

/// The ifindex of `iface` in the node namespace.
fn node_ifindex(iface: &str) -> u32 {
    let out = in_ns(NODE_NS, "cat", [format!("/sys/class/net/{iface}/ifindex")])
        .output()
        .expect("reading an ifindex");
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("no ifindex for {iface}"))
}

fn has_clsact_qdisc(iface: &str) -> bool {
    let out = in_ns(NODE_NS, "tc", ["qdisc", "show", "dev", iface])
        .output()
        .expect("tc qdisc show");
    String::from_utf8_lossy(&out.stdout).contains("clsact")
}

/// Issue 6, item 1: records of clsact qdiscs left by dead pktraces are acted on only while they
/// still describe the same interface, and records of namespaces that are gone are deleted.
/// (A namespace inode and an ifindex can both be reused: a stale record must never make
/// pktrace delete a qdisc it did not create.)
#[test]
fn stale_qdisc_records_never_remove_a_foreign_qdisc() {
    use std::os::unix::fs::MetadataExt as _;
    struct Pairs<'a>(&'a [(&'a str, &'a str)]);
    impl Drop for Pairs<'_> {
        fn drop(&mut self) {
            for (a, _) in self.0 {
                let _ = in_ns(NODE_NS, "ip", ["link", "del", a]).status();
            }
        }
    }
    let _lab = LabGuard::new();
    // Two veths pktrace does not attach to (not `azv*`), each with a clsact qdisc and no
    // filter, created here: a dead pktrace's record claims both.
    let pairs = [("pkrec0", "pkrecp0"), ("pkrec1", "pkrecp1")];
    let _pairs = Pairs(&pairs);
    for (a, b) in pairs {
        let ok = in_ns(
            NODE_NS,
            "ip",
            ["link", "add", a, "type", "veth", "peer", "name", b],
        )
        .status()
        .is_ok_and(|s| s.success())
            && in_ns(NODE_NS, "tc", ["qdisc", "add", "dev", a, "clsact"])
                .status()
                .is_ok_and(|s| s.success());
        assert!(ok, "veth {a} with a clsact qdisc");
    }
    let node_ns = fs::metadata(format!("/run/netns/{NODE_NS}"))
        .expect("the node's netns mount")
        .ino();
    let root_ns = fs::metadata("/proc/self/ns/net").expect("own netns").ino();
    // The "dead pktrace" is this test process: alive, but not a pktrace.
    let pid = std::process::id();
    let dir = std::path::Path::new("/run/pktrace");
    fs::create_dir_all(dir).expect("/run/pktrace");
    let same_ns = dir.join(format!("clsact-{node_ns}-{pid}"));
    let gone_ns = dir.join(format!("clsact-1-{pid}"));
    let live_ns = dir.join(format!("clsact-{root_ns}-{pid}"));
    let _files = RecordFiles(vec![same_ns.clone(), gone_ns.clone(), live_ns.clone()]);
    // pkrec0 is recorded under the name it has (as if the dead pktrace created its qdisc);
    // pkrec1's ifindex is recorded under another name (the interface it created one on is
    // gone and the ifindex now belongs to someone else).
    let (i0, i1) = (node_ifindex("pkrec0"), node_ifindex("pkrec1"));
    fs::write(&same_ns, format!("{i0} pkrec0\n{i1} azvreused\n")).expect("record");
    fs::write(&gone_ns, "3 azv0\n").expect("record");
    fs::write(&live_ns, "999999 azvnothere\n").expect("record");

    let trace = Pktrace::start(&["--pod", "ubuntu"]).stop();
    assert!(trace.status.success(), "{}", trace.dump());
    assert!(
        !has_clsact_qdisc("pkrec0"),
        "the dead pktrace's own (recorded, empty) qdisc should have been removed"
    );
    assert!(
        has_clsact_qdisc("pkrec1"),
        "a qdisc recorded under another interface's name was removed"
    );
    assert!(!same_ns.exists(), "the adopted record is still there");
    assert!(
        !gone_ns.exists(),
        "the record of a namespace that is gone is still there"
    );
    assert!(
        live_ns.exists(),
        "the record of a live namespace (not this pktrace's) was removed"
    );
}
