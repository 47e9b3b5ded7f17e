//! Issue 4 (pod resolution without the Azure CNI state file) and issue 6 item 5 (a kubeconfig
//! pointing nowhere): `pktrace --pod` in the lab's node namespace with no state file, no crictl
//! and the lab's fake Kubernetes API server (`xtask lab`, `pkt-node`'s 127.0.0.1).
//!
//! Checked against what the lab's servers saw and the node's conntrack table, as in
//! `journeys.rs`: the pod the API named is the one traced, and only it.

use std::{
    fs,
    path::PathBuf,
    process::Output,
    time::{Duration, Instant},
};

use tests::{
    LabGuard, pktrace_bin,
    trace::{Pktrace, assert_path, ct_entry},
};
use xtask::lab::{self, NODE_NS, UBUNTU, api, in_ns, topology::WHEREAMI_QFQ2K};

/// No crictl on the lab node: the runtime step fails fast and the API is asked.
const NO_CRICTL: (&str, &str) = ("PKTRACE_CRICTL", "/nonexistent/crictl");
/// How long pktrace may take to give up on an API server that is not there.
const GIVE_UP: Duration = Duration::from_secs(10);

const POD: &str = "10.13.76.46";
const VNET_HOST: &str = "10.13.1.4:80";

/// Runs pktrace in the node namespace to its end (it is expected to fail before attaching).
fn pktrace_fails(args: &[&str]) -> (Output, Duration) {
    let start = Instant::now();
    let out = in_ns(NODE_NS, pktrace_bin(), args)
        .env(NO_CRICTL.0, NO_CRICTL.1)
        .env_remove("KUBECONFIG")
        .output()
        .expect("running pktrace");
    (out, start.elapsed())
}

#[test]
fn resolve_through_the_kubernetes_api_traces_that_pod() {
    let _lab = LabGuard::new();
    let args = [
        "--pod",
        "ubuntu",
        "--state-file",
        "/nonexistent",
        "--kubeconfig",
        api::KUBECONFIG,
        "--follow",
    ];
    let pk = Pktrace::start_with_env(&args, &[NO_CRICTL]);
    let seen = lab::client_tcp(&UBUNTU.netns(), VNET_HOST).expect("tcp from ubuntu");
    // Another pod's traffic on the same hooks: it must not be traced.
    let other = lab::client_tcp(&WHEREAMI_QFQ2K.netns(), VNET_HOST).expect("tcp from whereami");
    let trace = pk.stop();
    assert!(trace.status.success(), "{}", trace.dump());

    let lines: Vec<&str> = trace.stderr.lines().collect();
    let fallbacks = [
        "pktrace: state file /nonexistent: not found".to_owned(),
        "pktrace: crictl: not installed (not in PATH; set PKTRACE_CRICTL to its path)".to_owned(),
        format!(
            "pktrace: pod default/ubuntu found through the Kubernetes API http://127.0.0.1:{}",
            api::PORT
        ),
    ];
    for want in &fallbacks {
        assert!(
            lines.contains(&want.as_str()),
            "missing {want:?}:\n{}",
            trace.stderr
        );
    }

    let ct = ct_entry(POD, VNET_HOST);
    assert_eq!(
        seen,
        format!("client={}", ct.orig_src_ep()),
        "the VNet host saw the pod"
    );
    assert!(lab::server_log("pkt-vnethost").contains(&ct.orig_src_ep()));
    let orig = trace.starting(&ct.orig_src_ep(), &ct.orig_dst_ep());
    let reply = trace.starting(&ct.reply_src_ep(), &ct.reply_dst_ep());
    assert!(!orig.is_empty() && !reply.is_empty(), "{}", trace.dump());
    for j in &orig {
        assert_eq!(j.pod, "default/ubuntu", "{j:?}");
        assert_path(j, UBUNTU.host_if, &[], "eth0", &["azure0"]);
    }
    for j in &reply {
        assert_path(j, "eth0", &[], UBUNTU.host_if, &["azure0"]);
    }
    let other_src = other
        .trim()
        .strip_prefix("client=")
        .unwrap_or("?")
        .to_owned();
    assert!(
        other_src.starts_with(&format!("{}:", WHEREAMI_QFQ2K.ip)),
        "{other}"
    );
    for j in trace.journeys() {
        let text = serde_json::to_string(j).expect("a journey line serializes");
        assert!(
            text.contains(POD),
            "a journey without the traced pod: {text}"
        );
        assert!(
            !text.contains(&other_src),
            "another pod's flow was traced: {text}"
        );
    }
}

#[test]
fn resolve_refuses_a_pod_on_another_node_or_unknown_to_the_api() {
    let _lab = LabGuard::new();
    let base = [
        "--state-file",
        "/nonexistent",
        "--kubeconfig",
        api::KUBECONFIG,
    ];
    let r = api::REMOTE_POD;
    let (out, took) = pktrace_fails(&[&["--pod", r.name][..], &base].concat());
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.starts_with(&format!(
            "pktrace: pod default/{} runs on node {}, this is ",
            r.name, r.node
        )),
        "{err}"
    );
    assert!(
        err.contains("use `kubectl pktrace remote-web -n default`"),
        "{err}"
    );
    assert!(took < GIVE_UP, "{took:?}");

    let (out, _) = pktrace_fails(&[&["--pod", "ubutnu"][..], &base].concat());
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("pod default/ubutnu does not exist (404)"),
        "{err}"
    );
    // The API's pods of the namespace on this node, as the state file would name them.
    assert!(
        err.starts_with(
            "pktrace: pod 'ubutnu' not found in namespace 'default' on this node (according to \
             the Kubernetes API "
        ) && err.contains("did you mean 'ubuntu'?"),
        "{err}"
    );
    assert!(err.contains("pods in 'default' here: "), "{err}");
    assert!(
        !err.contains(r.name),
        "a pod of another node is not offered: {err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");
}

/// A kubeconfig pointing nowhere (closed port, unresolvable host, an address nobody answers):
/// exit 1 within seconds, one line naming the server.
#[test]
fn resolve_with_a_kubeconfig_pointing_nowhere_fails_fast_in_one_line() {
    let _lab = LabGuard::new();
    let dir = std::env::temp_dir().join(format!("pktrace-resolve-it-{}", std::process::id()));
    fs::create_dir_all(&dir).expect("temp dir");
    let servers = [
        ("closed", "https://127.0.0.1:1", "cannot connect"),
        ("unresolvable", "https://pktrace-nowhere.invalid:6443", ""),
        // In the VNet host's subnet, but nobody has it: ARP goes unanswered.
        ("blackhole", "https://10.13.1.99:6443", ""),
    ];
    for (name, server, want) in servers {
        let kc: PathBuf = dir.join(name);
        fs::write(
            &kc,
            format!(
                "apiVersion: v1\nkind: Config\ncurrent-context: c\nclusters:\n- name: k\n  \
                 cluster:\n    server: {server}\n    insecure-skip-tls-verify: true\ncontexts:\n\
                 - name: c\n  context: {{cluster: k, user: u}}\nusers:\n- name: u\n  user:\n    \
                 token: t\n"
            ),
        )
        .expect("kubeconfig");
        let kc = kc.display().to_string();
        let (out, took) = pktrace_fails(&[
            "--pod",
            "ubuntu",
            "--state-file",
            "/nonexistent",
            "--kubeconfig",
            &kc,
        ]);
        let err = String::from_utf8_lossy(&out.stderr);
        eprintln!("{name}: {took:?}: {err}");
        assert_eq!(out.status.code(), Some(1), "{name}: {err}");
        assert!(took < GIVE_UP, "{name}: took {took:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{name}: {err}");
        assert!(
            err.contains(&format!("; kubernetes API {server}: {want}")),
            "{name}: {err}"
        );
        assert!(err.contains("use --pod-ip IP"), "{name}: {err}");
    }
    let _ = fs::remove_dir_all(&dir);
}

/// Pods added and deleted on the running lab (`lab pod add|del`) are what the API answers.
#[test]
fn resolve_through_the_api_sees_pods_added_and_deleted() {
    let _lab = LabGuard::new();
    let pod = lab::pods::add("resolve-a").expect("adding pod resolve-a");
    let args = [
        "--pod",
        "resolve-a",
        "--state-file",
        "/nonexistent",
        "--kubeconfig",
        api::KUBECONFIG,
        "-d",
        "1s",
    ];
    let (out, _) = pktrace_fails(&args);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(
        err.contains("pktrace: pod default/resolve-a found through the Kubernetes API"),
        "{err}"
    );
    let tracing = format!("pktrace: tracing default/resolve-a ({}) on ", pod.ip);
    assert!(err.contains(&tracing), "the added pod's address: {err}");

    lab::pods::del("resolve-a").expect("deleting pod resolve-a");
    let (out, _) = pktrace_fails(&args);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("pod default/resolve-a does not exist (404)"),
        "{err}"
    );
}
