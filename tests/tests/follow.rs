//! Issue 4 part 3 and issue 6 item 7: pods that come and go while pktrace follows.
//!
//! Each test brings the lab up (and down on drop, which also removes added pods), starts
//! pktrace in the node namespace, adds, deletes, recreates or renames pods with
//! `xtask::lab::pods`, makes bounded traffic and reads what pktrace printed.

use std::{
    net::UdpSocket,
    sync::{OnceLock, mpsc},
    thread::{self, sleep},
    time::{Duration, Instant},
};

use tests::{
    LabGuard,
    rawbpf::enter_netns,
    trace::{Pktrace, Trace, iface},
};
use tracer_user::output::json::contract::{Ending, JourneyLine, Point};
use xtask::lab::{self, NODE_NS, in_ns, pods};

/// `default/whereami`'s ClusterIP.
const CLUSTER_IP: &str = "10.0.159.58:80";
/// How long a new pod's traffic may take to show up (the bound).
const ATTACH_BOUND: Duration = Duration::from_secs(2);

fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime into a timespec we own; CLOCK_MONOTONIC is bpf_ktime_get_ns's clock.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &raw mut ts) };
    u64::try_from(ts.tv_sec).unwrap_or(0) * 1_000_000_000 + u64::try_from(ts.tv_nsec).unwrap_or(0)
}

/// One TCP request from the pod's namespace to the ClusterIP; errors are returned, not fatal
/// (the pod may be going away).
fn request(ns: &str) -> anyhow::Result<String> {
    lab::client_tcp(ns, CLUSTER_IP)
}

/// Journeys that start with the pod's packet entering on its veth.
fn from_pod<'a>(
    journeys: impl IntoIterator<Item = &'a JourneyLine>,
    ip: &str,
    veth: &str,
) -> Vec<&'a JourneyLine> {
    journeys
        .into_iter()
        .filter(|j| {
            j.steps.first().is_some_and(|f| {
                f.point == Point::Ingress
                    && iface(f) == Some(veth)
                    && f.src.starts_with(&format!("{ip}:"))
            })
        })
        .collect()
}

/// Sends a request every 100 ms (at most `tries`) until pktrace has printed a journey from the
/// pod on its veth; returns that journey's start (kernel monotonic ns).
fn traffic_until_traced(
    tracer: &Pktrace,
    ns: &str,
    ip: &str,
    veth: &str,
    tries: usize,
) -> Option<u64> {
    for _ in 0..tries {
        let _ = request(ns);
        sleep(Duration::from_millis(100));
        let journeys = tracer.journeys_so_far();
        if let Some(j) = from_pod(&journeys, ip, veth).first() {
            return j.start_ktime_ns;
        }
    }
    None
}

fn ip_link(line: &str) {
    let status = in_ns(NODE_NS, "ip", line.split_whitespace())
        .status()
        .expect("ip");
    assert!(status.success(), "ip {line}");
}

#[test]
fn follow_a_pod_added_while_tracing_within_two_seconds() {
    let _lab = LabGuard::new();
    let tracer = Pktrace::start(&["--trace-all", "--follow", "-v"]);
    let before = monotonic_ns();
    let pod = pods::add("follow-a").expect("adding pod follow-a");
    let created = monotonic_ns();
    let (ns, ip) = (pod.netns(), pod.ip.to_string());
    let first = traffic_until_traced(&tracer, &ns, &ip, &pod.host_if, 30);
    let stderr = tracer.stderr_so_far();
    let first = first.unwrap_or_else(|| {
        panic!(
            "no journey from {ip} on {} within 3 s:\n{stderr}",
            pod.host_if
        )
    });
    let delay = Duration::from_nanos(first.saturating_sub(created));
    eprintln!(
        "follow: pod {} ({ip} on {}) traced {delay:?} after it was wired ({:?} to create it)",
        pod.full_name(),
        pod.host_if,
        Duration::from_nanos(created - before)
    );
    assert!(
        delay <= ATTACH_BOUND,
        "first traced packet {delay:?} after the pod was created"
    );
    assert!(
        stderr.contains(&format!("attached to {}", pod.host_if)),
        "{stderr}"
    );

    let trace = tracer.stop();
    assert!(trace.status.success(), "{}", trace.dump());
    let journeys = from_pod(trace.journeys(), &ip, &pod.host_if);
    // The pod's request went through the ClusterIP's DNAT and left on a backend's veth.
    assert!(
        journeys
            .iter()
            .any(|j| j.steps.iter().any(|s| s.point == Point::Dnat)),
        "no DNAT step in the new pod's journeys:\n{}",
        trace.dump()
    );
}

#[test]
fn follow_a_pod_recreated_with_a_new_ip() {
    let _lab = LabGuard::new();
    let old = pods::add("follow-b").expect("adding pod follow-b");
    let mut tracer = Pktrace::start(&["--pod", "follow-b", "--follow"]);
    let traced_old =
        traffic_until_traced(&tracer, &old.netns(), &old.ip.to_string(), &old.host_if, 5);
    assert!(
        traced_old.is_some(),
        "the pod was not traced before its recreation:\n{}",
        tracer.stderr_so_far()
    );

    pods::del("follow-b").expect("deleting pod follow-b");
    let new = pods::add("follow-b").expect("adding pod follow-b again");
    assert_ne!(new.ip, old.ip, "a recreated pod gets a new IP");
    let line = format!("pod default/follow-b: now {} (was {})", new.ip, old.ip);
    let start = Instant::now();
    while !tracer.stderr_so_far().contains(&line) {
        assert!(
            start.elapsed() < Duration::from_secs(3),
            "no '{line}' within 3 s:\n{}",
            tracer.stderr_so_far()
        );
        sleep(Duration::from_millis(50));
    }
    eprintln!(
        "follow: '{line}' {:?} after the recreation",
        start.elapsed()
    );
    let traced_new =
        traffic_until_traced(&tracer, &new.netns(), &new.ip.to_string(), &new.host_if, 20);
    assert!(tracer.is_running());
    let trace = tracer.stop();
    assert!(
        traced_new.is_some(),
        "no journey from the new IP {}:\n{}",
        new.ip,
        trace.dump()
    );
    assert!(trace.status.success(), "{}", trace.dump());
    assert_eq!(
        trace.stderr.matches("follow-b: now ").count(),
        1,
        "one line per move:\n{}",
        trace.stderr
    );
    for j in trace.journeys() {
        assert_eq!(j.pod, "default/follow-b", "{j:?}");
    }
}

#[test]
fn follow_a_veth_deleted_under_traffic_ends_quietly() {
    let _lab = LabGuard::new();
    let pod = pods::add("follow-c").expect("adding pod follow-c");
    let mut tracer = Pktrace::start(&["--trace-all", "--follow", "-v"]);
    let ns = pod.netns();
    assert!(traffic_until_traced(&tracer, &ns, &pod.ip.to_string(), &pod.host_if, 10).is_some());

    // Bounded traffic from the pod while it is deleted: 40 requests at most, 4 s at most.
    let sender = {
        let ns = ns.clone();
        thread::spawn(move || {
            let start = Instant::now();
            let mut ok = 0;
            for _ in 0..40 {
                if start.elapsed() > Duration::from_secs(4) {
                    break;
                }
                if request(&ns).is_ok() {
                    ok += 1;
                }
                sleep(Duration::from_millis(20));
            }
            ok
        })
    };
    sleep(Duration::from_millis(300));
    pods::del("follow-c").expect("deleting pod follow-c");
    let ok = sender.join().expect("sender");
    assert!(ok > 0, "no request succeeded before the deletion");
    sleep(Duration::from_millis(500));
    assert!(
        tracer.is_running(),
        "pktrace died when the veth went:\n{}",
        tracer.stderr_so_far()
    );

    let trace = tracer.stop();
    assert!(trace.status.success(), "{}", trace.dump());
    let about: Vec<&str> = trace
        .stderr
        .lines()
        .filter(|l| l.contains(&pod.host_if))
        .collect();
    // At -v: one line when it was attached, one when it went.
    assert!(
        about.len() <= 2,
        "more than two lines about {}:\n{}",
        pod.host_if,
        trace.stderr
    );
    assert!(
        about.iter().any(|l| l.contains("is gone")),
        "{}",
        trace.stderr
    );
    let noisy = trace
        .stderr
        .lines()
        .filter(|l| l.contains("error") || l.contains("failed"))
        .count();
    assert_eq!(noisy, 0, "{}", trace.stderr);
    // A journey closed for its interface ends on that interface.
    let gone: Vec<&JourneyLine> = trace
        .journeys()
        .into_iter()
        .filter(|j| j.ending == Some(Ending::InterfaceGone))
        .collect();
    for j in &gone {
        let last = j.steps.iter().rev().find_map(iface).expect("a tc step");
        assert_eq!(last, pod.host_if.as_str(), "{j:?}");
    }
    eprintln!(
        "follow: {} requests during the deletion, {} journeys closed as interface_gone",
        ok,
        gone.len()
    );
}

/// `default/coredns`'s ClusterIP (a UDP responder behind DNAT).
const DNS_IP: &str = "10.0.0.10";
/// The holding queue's device in `pkt-node` (no interface pattern of pktrace matches it).
const HOLD_DEV: &str = "pktifb0";
/// Datagrams sent into the holding queue.
const HELD_SENT: usize = 10;
/// Bytes of each datagram's payload: with the queue's 1000 bytes/s, one frame (542 bytes) fits
/// its bucket at once and each further one waits 0.54 s more.
const HELD_PAYLOAD: usize = 500;

fn tc(args: &str) {
    let status = in_ns(NODE_NS, "tc", args.split_whitespace())
        .status()
        .expect("tc");
    assert!(status.success(), "tc {args}");
}

/// A queue that holds the pod's DNS datagrams between the veth's ingress hook (where pktrace
/// sees them) and the bridge: the veth's ingress redirects UDP to port 53 to an ifb device
/// whose token bucket lets one 542-byte frame through every 0.54 s; ifb then hands each
/// packet back to the veth's receive path, past tc, or drops it when the veth is gone
/// (drivers/net/ifb.c). tcx programs run before clsact filters (net/core/dev.c,
/// `sch_handle_ingress`), so pktrace's ingress event comes first. The ifb device is deleted on
/// drop; the clsact qdisc goes with the veth.
struct HoldingQueue;

impl HoldingQueue {
    fn on(veth: &str) -> Self {
        ip_link(&format!("link add {HOLD_DEV} type ifb"));
        let me = Self;
        ip_link(&format!("link set {HOLD_DEV} up"));
        tc(&format!(
            "qdisc add dev {HOLD_DEV} root tbf rate 8kbit burst 600 limit 60000"
        ));
        tc(&format!("qdisc add dev {veth} clsact"));
        tc(&format!(
            "filter add dev {veth} ingress pref 65000 protocol ip u32 match ip protocol 17 0xff \
             match ip dport 53 0xffff action mirred egress redirect dev {HOLD_DEV}"
        ));
        me
    }
}

impl Drop for HoldingQueue {
    fn drop(&mut self) {
        let _ = in_ns(NODE_NS, "ip", ["link", "del", HOLD_DEV]).status();
    }
}

/// What one run of the held-datagrams scenario left: the pod's veth is deleted while the
/// pod's DNS datagrams wait in a [`HoldingQueue`] behind its ingress hook.
struct HeldRun {
    ip: String,
    veth: String,
    /// Datagrams the pod sent, and replies it got.
    sent: usize,
    replies: usize,
    /// pktrace still ran 0.3 s after the pod was gone; its stderr then.
    running_after: bool,
    stderr_after: String,
    trace: Trace,
}

/// The scenario, run once for the `follow_held_` tests (they run one at a time; each also runs
/// alone). The lab is down again once it is built.
fn held_run() -> &'static HeldRun {
    static RUN: OnceLock<HeldRun> = OnceLock::new();
    RUN.get_or_init(hold_datagrams_and_delete_the_veth)
}

fn hold_datagrams_and_delete_the_veth() -> HeldRun {
    let _lab = LabGuard::new();
    let pod = pods::add("follow-e").expect("adding pod follow-e");
    let (ns, ip, veth) = (pod.netns(), pod.ip.to_string(), pod.host_if.clone());
    let _queue = HoldingQueue::on(&veth);
    let mut tracer = Pktrace::start(&["--trace-all", "--follow", "-v"]);
    // TCP is not held: it proves pktrace sees the pod before the test starts.
    assert!(traffic_until_traced(&tracer, &ns, &ip, &veth, 10).is_some());

    let (deleted_tx, deleted_rx) = mpsc::channel::<()>();
    let (sent_tx, sent_rx) = mpsc::channel::<()>();
    let sender = send_held_datagrams(ns, sent_tx, deleted_rx);
    sent_rx
        .recv_timeout(Duration::from_secs(5))
        .expect("the sender did not send");
    // The datagrams after the first wait in the queue; the veth goes while they do.
    sleep(Duration::from_millis(150));
    let deletion = Instant::now();
    ip_link(&format!("link del {veth}"));
    let deletion = deletion.elapsed();
    let _ = deleted_tx.send(());
    let (sent, replies) = sender.join().expect("sender");
    pods::del("follow-e").expect("deleting pod follow-e");
    sleep(Duration::from_millis(300));
    let running_after = tracer.is_running();
    let stderr_after = tracer.stderr_so_far();
    let trace = tracer.stop();
    eprintln!(
        "follow: {sent} datagrams held on {veth}, {replies} answered, veth deleted in {deletion:?}"
    );
    HeldRun {
        ip,
        veth,
        sent,
        replies,
        running_after,
        stderr_after,
        trace,
    }
}

/// From the pod's namespace `ns`: [`HELD_SENT`] datagrams with distinct payloads (distinct
/// fingerprints), 10 ms apart, then `sent` is told; replies are counted until the veth has
/// been gone (`deleted`) for 0.5 s. Returns (sent, replies).
fn send_held_datagrams(
    ns: String,
    sent_tx: mpsc::Sender<()>,
    deleted_rx: mpsc::Receiver<()>,
) -> thread::JoinHandle<(usize, usize)> {
    thread::spawn(move || {
        enter_netns(&ns);
        let socket = UdpSocket::bind(("0.0.0.0", 0)).expect("udp socket");
        socket.connect((DNS_IP, 53)).expect("connect");
        socket
            .set_read_timeout(Some(Duration::from_millis(50)))
            .expect("timeout");
        let mut payload = vec![b'.'; HELD_PAYLOAD];
        let mut sent = 0;
        for i in 0..HELD_SENT {
            payload[..8].copy_from_slice(format!("held-{i:02} ").as_bytes());
            if socket.send(&payload).is_ok() {
                sent += 1;
            }
            sleep(Duration::from_millis(10));
        }
        let _ = sent_tx.send(());
        let (mut replies, mut buf) = (0, [0u8; 2048]);
        let mut gone_at = None;
        let start = Instant::now();
        while gone_at.is_none_or(|t: Instant| t.elapsed() < Duration::from_millis(500))
            && start.elapsed() < Duration::from_secs(10)
        {
            if socket.recv(&mut buf).is_ok() {
                replies += 1;
            }
            if gone_at.is_none() && deleted_rx.try_recv().is_ok() {
                gone_at = Some(Instant::now());
            }
        }
        (sent, replies)
    })
}

impl HeldRun {
    /// The journeys of the pod's datagrams to the DNS ClusterIP.
    fn requests(&self) -> Vec<&JourneyLine> {
        let dns = format!("{DNS_IP}:53");
        from_pod(self.trace.journeys(), &self.ip, &self.veth)
            .into_iter()
            .filter(|j| j.steps[0].dst == dns)
            .collect()
    }

    fn ending(&self, ending: Ending) -> usize {
        self.requests()
            .iter()
            .filter(|j| j.ending == Some(ending))
            .count()
    }
}

#[test]
fn follow_held_pktrace_outlives_the_veth_and_exits_cleanly() {
    let r = held_run();
    assert!(
        r.running_after,
        "pktrace died when the veth went:\n{}",
        r.stderr_after
    );
    assert!(r.trace.status.success(), "{}", r.trace.dump());
}

/// At -v: at most one line when the veth was attached and exactly one when it went; nothing
/// about errors.
#[test]
fn follow_held_stderr_says_once_that_the_veth_is_gone() {
    let r = held_run();
    let stderr = &r.trace.stderr;
    let about: Vec<&str> = stderr.lines().filter(|l| l.contains(&r.veth)).collect();
    assert!(
        about.len() <= 2,
        "more than two lines about {}:\n{stderr}",
        r.veth
    );
    assert_eq!(
        about.iter().filter(|l| l.contains("is gone")).count(),
        1,
        "{stderr}"
    );
    let noisy = stderr
        .lines()
        .filter(|l| l.contains("error") || l.contains("failed"))
        .count();
    assert_eq!(noisy, 0, "{stderr}");
}

/// Every datagram entered on the veth and is accounted for: it went on (left through the DNS
/// pod's veth) or was still held when the veth went (interface gone). Nothing timed out or was
/// flushed at exit.
#[test]
fn follow_held_every_datagram_is_one_journey_that_left_or_ended_with_its_interface() {
    let r = held_run();
    let (gone, left) = (r.ending(Ending::InterfaceGone), r.ending(Ending::Left));
    eprintln!(
        "follow: journeys: {} in all, {gone} interface_gone, {left} left",
        r.requests().len()
    );
    assert_eq!(r.sent, HELD_SENT, "the pod could not send");
    assert_eq!(
        r.requests().len(),
        r.sent,
        "one journey per datagram:\n{}",
        r.trace.dump()
    );
    assert_eq!(
        gone + left,
        r.sent,
        "every journey left or ended with its interface:\n{}",
        r.trace.dump()
    );
}

/// A datagram that was answered was delivered: its journey is never closed as gone.
#[test]
fn follow_held_answered_datagrams_left() {
    let r = held_run();
    let left = r.ending(Ending::Left);
    assert!(
        left >= r.replies,
        "{} answered but only {left} journeys left",
        r.replies
    );
}

/// The queue lets at most two through before the deletion (one at once, the next 0.54 s
/// later): the rest were in flight when the veth went, and their journeys have only their
/// ingress step on the veth.
#[test]
fn follow_held_datagrams_end_as_interface_gone_after_their_ingress_step() {
    let r = held_run();
    let gone = r.ending(Ending::InterfaceGone);
    assert!(
        gone >= r.sent - 2,
        "only {gone} of {} held datagrams closed as interface_gone:\n{}",
        r.sent,
        r.trace.dump()
    );
    for j in r
        .requests()
        .iter()
        .filter(|j| j.ending == Some(Ending::InterfaceGone))
    {
        assert_eq!(
            j.steps.len(),
            1,
            "a held journey has only its ingress step: {j:?}"
        );
        let s = &j.steps[0];
        assert_eq!(
            (s.point, iface(s)),
            (Point::Ingress, Some(r.veth.as_str())),
            "{j:?}"
        );
    }
}

#[test]
fn follow_link_down_up_keeps_and_rename_re_evaluates() {
    let _lab = LabGuard::new();
    let pod = pods::add("follow-d").expect("adding pod follow-d");
    let tracer = Pktrace::start(&["--trace-all", "--follow", "-v"]);
    let (ns, ip, veth) = (pod.netns(), pod.ip.to_string(), pod.host_if.clone());
    assert!(traffic_until_traced(&tracer, &ns, &ip, &veth, 10).is_some());

    // Down and up: still attached (no new "attached" line, traffic still traced).
    ip_link(&format!("link set {veth} down"));
    ip_link(&format!("link set {veth} up"));
    let seen = from_pod(&tracer.journeys_so_far(), &ip, &veth).len();
    for _ in 0..3 {
        let _ = request(&ns);
    }
    sleep(Duration::from_millis(300));
    assert!(
        from_pod(&tracer.journeys_so_far(), &ip, &veth).len() > seen,
        "not traced after down/up"
    );

    // Renamed out of the patterns: detached; renamed back: attached again.
    let other = "pkttmp0";
    ip_link(&format!("link set {veth} down"));
    ip_link(&format!("link set {veth} name {other}"));
    ip_link(&format!("link set {other} up"));
    sleep(Duration::from_millis(300));
    for _ in 0..3 {
        let _ = request(&ns);
    }
    sleep(Duration::from_millis(300));
    let (journeys, stderr) = (tracer.journeys_so_far(), tracer.stderr_so_far());
    assert!(
        stderr.contains(&format!("detached from {other}")),
        "{stderr}"
    );
    assert!(
        from_pod(&journeys, &ip, other).is_empty(),
        "traced on an interface no pattern matches"
    );
    ip_link(&format!("link set {other} down"));
    ip_link(&format!("link set {other} name {veth}"));
    ip_link(&format!("link set {veth} up"));
    let seen = from_pod(&tracer.journeys_so_far(), &ip, &veth).len();
    let start = Instant::now();
    while from_pod(&tracer.journeys_so_far(), &ip, &veth).len() <= seen {
        assert!(
            start.elapsed() < Duration::from_secs(3),
            "not traced after the rename back"
        );
        let _ = request(&ns);
        sleep(Duration::from_millis(100));
    }
    let trace = tracer.stop();
    assert!(trace.status.success(), "{}", trace.dump());
    assert_eq!(
        trace.stderr.matches(&format!("attached to {veth}")).count(),
        1,
        "{}",
        trace.stderr
    );
}
