//! A dual-stack pod found through crictl (`additionalIps`) and through the Kubernetes API
//! (`status.podIPs`), without the Azure CNI state file: pktrace tracks both of its addresses, so
//! its IPv6 connection (masqueraded to the internet host) is traced, checked against the node's
//! conntrack entry, and another pod's IPv6 connection at the same time is not.
//!
//! The lab has no container runtime: crictl is a script written by the test that answers
//! `crictl pods` and `crictl inspectp` with the JSON a containerd node prints (the shapes of
//! `tracer-user/src/resolve/testdata/`), the pod's IPv4 address as `ip` and its IPv6 address
//! only in `additionalIps`.

use std::{fs, os::unix::fs::PermissionsExt as _, path::PathBuf};

use tests::{
    LabGuard,
    trace::{Pktrace, Trace, assert_masqueraded, ct_entry, tcp_request},
};
use xtask::lab::{
    UBUNTU, api,
    dualstack::{INET6_HOST, NODE6_IP, pod_ip6},
    topology::WHEREAMI_QFQ2K,
};

const POD_VETH: &str = "azv47c3ee9d512";
const NO_STATE_FILE: &str = "/nonexistent";

/// A fake crictl in a directory of its own, removed on drop.
struct FakeCrictl {
    dir: PathBuf,
}

impl FakeCrictl {
    fn new() -> Self {
        let dir = std::env::temp_dir().join(format!("pktrace-fake-crictl-{}", std::process::id()));
        fs::create_dir_all(&dir).expect("creating the fake crictl's directory");
        let me = Self { dir };
        let id = "9d1b6c0e2f4a4e0c8a1f3b5d7e9c2a4b6d8f0a1c3e5b7d9f1a3c5e7b9d1f3a5c";
        let pods = serde_json::json!({"items": [{
            "id": id,
            "metadata": {"name": UBUNTU.name, "namespace": UBUNTU.namespace, "uid": "u1", "attempt": 0},
            "state": "SANDBOX_READY",
            "createdAt": "1718035200123456789",
            "labels": {}, "annotations": {}, "runtimeHandler": ""
        }]});
        let inspect = serde_json::json!({"status": {
            "id": id,
            "metadata": {"name": UBUNTU.name, "namespace": UBUNTU.namespace, "uid": "u1", "attempt": 0},
            "state": "SANDBOX_READY",
            "network": {"ip": UBUNTU.ip.to_string(), "additionalIps": [{"ip": pod_ip6(&UBUNTU).to_string()}]},
            "linux": {"namespaces": {"options": {"network": "POD"}}}
        }});
        fs::write(me.dir.join("pods.json"), pods.to_string()).expect("pods.json");
        fs::write(me.dir.join("inspectp.json"), inspect.to_string()).expect("inspectp.json");
        let script = format!(
            "#!/bin/sh\n\
             for a in \"$@\"; do\n\
             \tcase \"$a\" in\n\
             \tpods) exec cat {dir}/pods.json ;;\n\
             \tinspectp) exec cat {dir}/inspectp.json ;;\n\
             \tesac\n\
             done\n\
             echo \"fake crictl: unexpected arguments: $*\" >&2\n\
             exit 1\n",
            dir = me.dir.display()
        );
        let path = me.program();
        fs::write(&path, script).expect("writing the fake crictl");
        fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).expect("chmod");
        me
    }

    fn program(&self) -> PathBuf {
        self.dir.join("crictl")
    }
}

impl Drop for FakeCrictl {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.dir);
    }
}

/// Traces `--pod ubuntu` with `args` and `env` while ubuntu and another pod connect to the
/// internet host over IPv6; checks the source pktrace named and that only ubuntu's connection
/// was traced, both ways, masqueraded to the node as conntrack says.
fn check(args: &[&str], env: &[(&str, &str)], via: &str) {
    let mut all = vec!["--pod", "ubuntu", "--state-file", NO_STATE_FILE, "--follow"];
    all.extend_from_slice(args);
    let pk = Pktrace::start_with_env(&all, env);
    let host = INET6_HOST.to_string();
    let seen = tcp_request(&UBUNTU.netns(), &host).expect("tcp over IPv6 from ubuntu");
    let other = tcp_request(&WHEREAMI_QFQ2K.netns(), &host).expect("tcp over IPv6 from whereami");
    let trace: Trace = pk.stop();
    assert!(trace.status.success(), "{}", trace.dump());
    let line = format!("pktrace: pod default/ubuntu found through {via}");
    assert!(
        trace.stderr.lines().any(|l| l == line),
        "missing {line:?}:\n{}",
        trace.stderr
    );

    let me = pod_ip6(&UBUNTU).to_string();
    let ct = ct_entry(&me, &host);
    assert_eq!(ct.reply_dst, NODE6_IP.to_string(), "{ct:?}");
    assert_eq!(
        seen,
        format!("client={}", ct.reply_dst_ep()),
        "the host saw the node"
    );
    let orig = trace.starting(&ct.orig_src_ep(), &ct.orig_dst_ep());
    let mut reply = trace.starting(&ct.reply_src_ep(), &ct.reply_dst_ep());
    reply.extend(trace.starting_at_nat(&ct.reply_src_ep(), &ct.reply_dst_ep()));
    assert!(!orig.is_empty() && !reply.is_empty(), "{}", trace.dump());
    assert_masqueraded(&orig, (POD_VETH, "eth0"), &[("snat", false)], &["azure0"]);
    assert_masqueraded(&reply, ("eth0", POD_VETH), &[("snat", true)], &["azure0"]);
    for j in orig.iter().chain(&reply) {
        assert_eq!(j.pod, "default/ubuntu", "{j:?}");
    }

    let other_ip = pod_ip6(&WHEREAMI_QFQ2K).to_string();
    let other_ct = ct_entry(&other_ip, &host);
    assert_eq!(other, format!("client={}", other_ct.reply_dst_ep()));
    for j in trace.journeys() {
        let text = serde_json::to_string(j).expect("a journey line serializes");
        assert!(
            !text.contains(&other_ip) && !text.contains(&other_ct.reply_dst_ep()),
            "another pod's IPv6 flow was traced: {text}"
        );
    }
}

#[test]
fn ipv6_a_dual_stack_pod_from_crictl_is_traced_on_its_ipv6_address() {
    let _lab = LabGuard::dual_stack();
    let crictl = FakeCrictl::new();
    let program = crictl.program().display().to_string();
    check(
        &[],
        &[
            ("PKTRACE_CRICTL", &program),
            // crictl's endpoint: there is no runtime socket in the lab to find.
            (
                "CONTAINER_RUNTIME_ENDPOINT",
                "unix:///run/containerd/containerd.sock",
            ),
        ],
        "crictl",
    );
}

#[test]
fn ipv6_a_dual_stack_pod_from_the_api_is_traced_on_its_ipv6_address() {
    let _lab = LabGuard::dual_stack();
    check(
        &["--kubeconfig", api::KUBECONFIG],
        &[("PKTRACE_CRICTL", "/nonexistent/crictl")],
        &format!("the Kubernetes API http://127.0.0.1:{}", api::PORT),
    );
}
