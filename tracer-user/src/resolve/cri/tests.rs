//! The CRI source against a fake `crictl` (a shell script in a temp dir) that prints
//! crictl's real JSON (`testdata/crictl-*.json`, in the `protojson` shape of cri-tools'
//! `crictl pods -o json` and `crictl inspectp -o json`) and records its arguments.

use std::{
    fs,
    os::unix::fs::PermissionsExt as _,
    sync::atomic::{AtomicU32, Ordering},
};

use super::*;

const PODS: &str = include_str!("../testdata/crictl-pods.json");
const INSPECT: &str = include_str!("../testdata/crictl-inspectp.json");
const READY_ID: &str = "9d1b6c0e2f4a4e0c8a1f3b5d7e9c2a4b6d8f0a1c3e5b7d9f1a3c5e7b9d1f3a5c";

/// A temp dir holding a fake crictl, removed on drop.
pub(in crate::resolve) struct Fake {
    pub dir: PathBuf,
    pub crictl: Crictl,
}

impl Fake {
    /// A crictl that logs its arguments to `calls`, then runs `body` (sh; `$*` is the
    /// argument list, `$D` the dir holding `pods.json` and `inspect.json`).
    pub fn new(body: &str) -> Self {
        static N: AtomicU32 = AtomicU32::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("pktrace-crictl-{}-{n}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        fs::write(dir.join("pods.json"), PODS).unwrap();
        fs::write(dir.join("inspect.json"), INSPECT).unwrap();
        fs::write(dir.join("containerd.sock"), "").unwrap();
        let script = format!(
            "#!/bin/sh\nD='{}'\necho \"$*\" >> \"$D/calls\"\n{body}\n",
            dir.display()
        );
        let program = dir.join("crictl");
        fs::write(&program, script).unwrap();
        fs::set_permissions(&program, fs::Permissions::from_mode(0o755)).unwrap();
        let crictl = Crictl {
            program,
            config: dir.join("no-crictl.yaml"),
            endpoint_env: false,
            sockets: vec![dir.join("no-such.sock"), dir.join("containerd.sock")],
            timeout: Duration::from_secs(5),
        };
        Self { dir, crictl }
    }

    /// The usual crictl: answers `pods` and `inspectp`.
    pub fn real() -> Self {
        Self::new(
            r#"case "$*" in
  *" pods "*) cat "$D/pods.json" ;;
  *" inspectp "*) cat "$D/inspect.json" ;;
  *) echo "unknown command" >&2; exit 1 ;;
esac"#,
        )
    }

    pub fn calls(&self) -> Vec<String> {
        fs::read_to_string(self.dir.join("calls"))
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect()
    }
}

impl Drop for Fake {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.dir);
    }
}

#[test]
fn resolves_the_ready_sandbox_with_every_address() {
    let fake = Fake::real();
    let pod = fake.crictl.resolve("default", "ubuntu").unwrap();
    assert_eq!(pod.label(), "default/ubuntu");
    assert_eq!(
        pod.ips,
        [
            "10.13.76.46".parse::<IpAddr>().unwrap(),
            "fd00:10:13::2e".parse().unwrap()
        ]
    );
    let sock = fake.dir.join("containerd.sock");
    let global = format!("--runtime-endpoint unix://{} --timeout 2s", sock.display());
    assert_eq!(
        fake.calls(),
        [
            format!("{global} pods --namespace ^default$ -o json"),
            format!("{global} inspectp -o json {READY_ID}"),
        ],
        "the first existing socket; the newest ready sandbox, not the older stopped one"
    );
}

#[test]
fn crictls_own_endpoint_wins() {
    let mut fake = Fake::real();
    fs::write(
        fake.dir.join("crictl.yaml"),
        "runtime-endpoint: unix:///x.sock\n",
    )
    .unwrap();
    fake.crictl.config = fake.dir.join("crictl.yaml");
    fake.crictl.resolve("default", "ubuntu").unwrap();
    let calls = fake.calls();
    assert!(calls[0].starts_with("--timeout 2s pods"), "{calls:?}");
    let mut fake = Fake::real();
    fake.crictl.endpoint_env = true;
    fake.crictl.resolve("default", "ubuntu").unwrap();
    assert!(fake.calls()[0].starts_with("--timeout 2s pods"));
}

#[test]
fn unknown_pods_not_ready_and_host_network() {
    let fake = Fake::real();
    let err = fake.crictl.resolve("default", "ubutnu").unwrap_err();
    let CriError::PodNotFound { detail, .. } = &err else {
        panic!("{err}");
    };
    assert_eq!(detail.suggestions, ["ubuntu"]);
    assert_eq!(
        detail.in_namespace,
        ["starting", "ubuntu", "whereami-564765b89-qfq2k"],
        "exactly namespace default, each pod once"
    );
    let msg = state_file::not_found_message(detail);
    assert!(
        msg.contains("(according to crictl); did you mean 'ubuntu'?"),
        "{msg}"
    );
    assert_eq!(err.to_string(), "no pod default/ubutnu in the runtime");

    let err = fake.crictl.resolve("default", "starting").unwrap_err();
    assert_eq!(
        err.to_string(),
        "pod default/starting has no ready sandbox (it is SANDBOX_NOTREADY)"
    );
    let err = fake.crictl.resolve("kube-system", "ubuntu").unwrap_err();
    assert!(matches!(err, CriError::PodNotFound { .. }), "{err}");

    let host = INSPECT
        .replace("\"ip\": \"10.13.76.46\"", "\"ip\": \"\"")
        .replace("\"ip\": \"fd00:10:13::2e\"", "\"ip\": \"\"")
        .replace("\"network\": \"POD\"", "\"network\": \"NODE\"");
    fs::write(fake.dir.join("inspect.json"), &host).unwrap();
    let err = fake.crictl.resolve("default", "ubuntu").unwrap_err();
    assert!(matches!(err, CriError::HostNetwork { .. }), "{err}");
    let none = host.replace("\"network\": \"NODE\"", "\"network\": \"POD\"");
    fs::write(fake.dir.join("inspect.json"), none).unwrap();
    let err = fake.crictl.resolve("default", "ubuntu").unwrap_err();
    assert!(matches!(err, CriError::NoAddress { .. }), "{err}");
}

#[test]
fn crictl_missing_failing_slow_or_garbled() {
    let mut fake = Fake::real();
    fake.crictl.program = fake.dir.join("not-installed");
    let err = fake.crictl.resolve("default", "ubuntu").unwrap_err();
    assert!(matches!(err, CriError::NotInstalled), "{err}");

    let mut fake = Fake::real();
    fake.crictl.sockets = vec![fake.dir.join("none.sock")];
    let err = fake.crictl.resolve("default", "ubuntu").unwrap_err();
    assert!(matches!(err, CriError::NoEndpoint), "{err}");
    assert!(
        fake.calls().is_empty(),
        "crictl is not run without an endpoint"
    );

    let fake = Fake::new(
        "echo 'time=\"2024\" level=fatal msg=\"validate service connection: connection refused\"' >&2; exit 1",
    );
    let err = fake.crictl.resolve("default", "ubuntu").unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.starts_with("`crictl pods --namespace ^default$ -o json` failed (exit status: 1)"),
        "{msg}"
    );
    assert!(msg.contains("connection refused"), "{msg}");

    let mut fake = Fake::new("exec sleep 30");
    fake.crictl.timeout = Duration::from_millis(300);
    let start = Instant::now();
    let err = fake.crictl.resolve("default", "ubuntu").unwrap_err();
    assert!(matches!(err, CriError::Timeout { .. }), "{err}");
    assert!(
        start.elapsed() < Duration::from_secs(3),
        "{:?}",
        start.elapsed()
    );

    let fake = Fake::new("echo 'NAME  STATE'");
    let err = fake.crictl.resolve("default", "ubuntu").unwrap_err();
    assert!(matches!(err, CriError::Output { .. }), "{err}");

    // More output than a pipe holds: read while crictl writes.
    let fake = Fake::new(
        r#"case "$*" in
  *" pods "*) printf '{"items":[' ; i=0; while [ $i -lt 3000 ]; do printf '{"id":"x%d","metadata":{"name":"p%d","namespace":"default"},"state":"SANDBOX_READY","createdAt":"1"},' $i $i; i=$((i+1)); done; printf '{"id":"u","metadata":{"name":"ubuntu","namespace":"default"},"state":"SANDBOX_READY","createdAt":"2"}]}' ;;
  *) cat "$D/inspect.json" ;;
esac"#,
    );
    let pod = fake.crictl.resolve("default", "ubuntu").unwrap();
    assert_eq!(pod.ips.len(), 2);
    assert!(fake.calls()[1].ends_with("inspectp -o json u"));
}

#[test]
fn escapes_regex_characters() {
    assert_eq!(regex_escape("kube-system"), "kube-system");
    assert_eq!(regex_escape("a.b*c"), "a\\.b\\*c");
}
