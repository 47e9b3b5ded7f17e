//! Issue 5: on a node with many pod veths pktrace attaches clsact filters to the veths (a tcx
//! link waits for an RCU grace period under rtnl, about 30 ms per interface) and keeps tcx on the
//! interfaces `--interfaces` names (`eth0`, `azure0`); veths that appear while following get
//! clsact too. Journeys still cross both kinds, and nothing is left after exit or SIGKILL.

use std::{
    fs,
    thread::sleep,
    time::{Duration, Instant},
};

use tests::{
    LabGuard,
    leftovers::{kernel_has_tcx, our_filters, ours_loaded_after_settling, tagged_pid, tc_snapshot},
    trace::{Pktrace, shape},
};
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
        let (_, stderr) = pk.so_far();
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

#[test]
fn many_veths_get_clsact_named_interfaces_keep_tcx_and_nothing_is_left() {
    if !kernel_has_tcx() {
        eprintln!("skipped: this kernel has no tcx (< 6.6), so every interface gets clsact");
        return;
    }
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
    let (_, stderr) = pk.so_far();
    let want = format!("attach: tcx on eth0, azure0; clsact on {globbed} interfaces matching azv*");
    assert!(stderr.contains(&want), "no '{want}':\n{stderr}");
    // The pod veths hold our filters, tagged with our PID; the named interfaces hold none.
    for iface in [UBUNTU.host_if, "azvmany00"] {
        let f = filters_on(iface);
        assert_eq!(f.len(), 2, "ingress and egress filters on {iface}: {f:?}");
        assert!(f.iter().all(|(_, h)| tagged_pid(*h) == Some(pid)), "{f:?}");
    }
    for iface in ["eth0", "azure0"] {
        assert!(
            filters_on(iface).is_empty(),
            "a filter on {iface}: it should be a tcx link"
        );
    }

    // A pod that appears while following gets clsact as well (the count is still above 8).
    let added = pods::add("many-a").expect("adding pod many-a");
    wait_for_line(&pk, &format!("attached to {} (clsact)", added.host_if));
    assert_eq!(
        filters_on(&added.host_if).len(),
        2,
        "filters on the new pod's veth"
    );

    lab::client_tcp(&UBUNTU.netns(), VNET_HOST).expect("traffic while attached");
    pods::del("many-a").expect("deleting pod many-a");
    wait_for_line(&pk, &format!("{} is gone", added.host_if));
    let trace = pk.stop();
    assert!(trace.status.success(), "{}", trace.dump());
    // The request entered on the pod's veth (clsact) and crossed azure0 and eth0 (tcx).
    let want: Vec<(String, String, bool)> = [
        ("ingress", UBUNTU.host_if),
        ("ingress", "azure0"),
        ("egress", "azure0"),
        ("egress", "eth0"),
    ]
    .iter()
    .map(|(p, i)| ((*p).to_owned(), (*i).to_owned(), false))
    .collect();
    let out = trace
        .journeys()
        .into_iter()
        .filter(|j| j["steps"][0]["dst"] == VNET_HOST)
        .collect::<Vec<_>>();
    assert!(
        !out.is_empty(),
        "no journey to {VNET_HOST}:\n{}",
        trace.dump()
    );
    for j in &out {
        assert_eq!(shape(j), want, "{j}");
    }

    assert!(
        our_filters().is_empty(),
        "filters left after exit: {:?}",
        our_filters()
    );
    assert_eq!(tc_snapshot(), before, "tc qdiscs/filters changed");
    let loaded = ours_loaded_after_settling();
    assert!(loaded.is_empty(), "left behind after exit: {loaded:?}");
    assert!(records().is_empty(), "qdisc records left: {:?}", records());

    // SIGKILL: the filters stay, tagged with the dead PID; the next pktrace removes them.
    let killed = Pktrace::start(&["--pod", "ubuntu", "--follow"]);
    let dead = u32::try_from(killed.pid()).unwrap_or(0);
    let _ = killed.kill_now();
    let left = our_filters();
    assert_eq!(
        left.len(),
        2 * globbed,
        "one filter per direction and veth: {left:?}"
    );
    assert!(
        left.iter().all(|(_, h)| tagged_pid(*h) == Some(dead)),
        "{left:?}"
    );
    let next = Pktrace::start(&["--pod", "ubuntu", "--follow"]);
    let trace = next.stop();
    assert!(trace.status.success(), "{}", trace.dump());
    assert!(
        trace
            .stderr
            .contains(&format!("removed {} tc filters", 2 * globbed)),
        "no sweep reported:\n{}",
        trace.stderr
    );
    assert!(
        our_filters().is_empty(),
        "filters left: {:?}",
        our_filters()
    );
    assert_eq!(
        tc_snapshot(),
        before,
        "tc qdiscs/filters changed after the kill and the sweep"
    );
    let loaded = ours_loaded_after_settling();
    assert!(
        loaded.is_empty(),
        "left behind after SIGKILL and the next run: {loaded:?}"
    );
    assert!(records().is_empty(), "qdisc records left: {:?}", records());

    // Killed again, and the node shrinks to 6 `azv*` veths before the next start: that one
    // picks tcx for them, and must still remove the clsact filters the dead one left there
    // (the filters on the deleted veths went with them).
    let killed = Pktrace::start(&["--pod", "ubuntu", "--follow"]);
    let _ = killed.kill_now();
    assert_eq!(our_filters().len(), 2 * globbed, "{:?}", our_filters());
    let kept = 2;
    veths.shrink_to(kept);
    let next = Pktrace::start(&["--pod", "ubuntu", "--follow"]);
    let (_, stderr) = next.so_far();
    let want = format!(
        "attach: tcx on eth0, azure0, {} interfaces matching azv*",
        PODS.len() + kept
    );
    assert!(stderr.contains(&want), "no '{want}':\n{stderr}");
    assert!(
        our_filters().is_empty(),
        "filters left beside tcx: {:?}",
        our_filters()
    );
    let trace = next.stop();
    assert!(trace.status.success(), "{}", trace.dump());
    let swept = format!("removed {} tc filters", 2 * (PODS.len() + kept));
    assert!(
        trace.stderr.contains(&swept),
        "no '{swept}':\n{}",
        trace.stderr
    );
    let after = tc_snapshot();
    assert!(!after.contains("clsact"), "a clsact qdisc left:\n{after}");
    let loaded = ours_loaded_after_settling();
    assert!(loaded.is_empty(), "left behind: {loaded:?}");
    assert!(records().is_empty(), "qdisc records left: {:?}", records());
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
    let _lab = LabGuard::new();
    // Two veths pktrace does not attach to (not `azv*`), each with a clsact qdisc and no
    // filter, created here: a dead pktrace's record claims both.
    let pairs = [("pkrec0", "pkrecp0"), ("pkrec1", "pkrecp1")];
    struct Pairs<'a>(&'a [(&'a str, &'a str)]);
    impl Drop for Pairs<'_> {
        fn drop(&mut self) {
            for (a, _) in self.0 {
                let _ = in_ns(NODE_NS, "ip", ["link", "del", a]).status();
            }
        }
    }
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
