//! The binaries against hostile and broken input files (issue 6): each fails fast with one
//! line that says what to do, names escaped, and the exit code of the contract (1: a problem
//! on the node, 2: the user asked for something that is not there). Nothing here needs root:
//! pktrace resolves the pod before it touches the kernel, and every case fails there.

use std::{
    fs::{self, File},
    net::TcpListener,
    path::{Path, PathBuf},
    process::{Command, Output},
    time::{Duration, Instant},
};

/// Far above what a failure takes, far below a hang or a 30 s network timeout.
const FAST: Duration = Duration::from_secs(10);

/// A scratch directory, removed on drop.
struct Scratch(tempfile::TempDir);

impl Scratch {
    fn new(tag: &str) -> Self {
        let dir = tempfile::Builder::new()
            .prefix(&format!("pktrace-{tag}-"))
            .tempdir()
            .unwrap();
        Self(dir)
    }

    fn file(&self, name: &str, content: &[u8]) -> PathBuf {
        let path = self.0.path().join(name);
        fs::write(&path, content).unwrap();
        path
    }
}

/// Runs `bin` with `args`, checks it ended fast, and returns its exit code and stderr.
fn run(bin: &str, args: &[&str]) -> (i32, String) {
    let start = Instant::now();
    let out: Output = Command::new(bin)
        .args(args)
        .env_remove("KUBECONFIG")
        // No credentials or runtime of the machine running the tests: only the state file.
        .env("HOME", "/nonexistent")
        .env("PKTRACE_CRICTL", "/nonexistent/crictl")
        .output()
        .unwrap_or_else(|e| panic!("running {bin}: {e}"));
    let elapsed = start.elapsed();
    let stderr = String::from_utf8(out.stderr).expect("stderr is UTF-8");
    assert!(elapsed < FAST, "{bin} {args:?} took {elapsed:?}: {stderr}");
    assert!(
        out.stdout.is_empty(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    (out.status.code().expect("exited"), stderr)
}

/// One line, nothing a terminal would act on.
fn assert_one_clean_line(stderr: &str) {
    assert_eq!(stderr.lines().count(), 1, "{stderr:?}");
    let bad = stderr.trim_end_matches('\n').chars().find(|&c| {
        c.is_control() || matches!(c, '\u{61c}' | '\u{200b}'..='\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
    });
    assert_eq!(bad, None, "{stderr:?}");
}

fn pktrace(state_file: &Path, pod: &str, namespace: &str) -> (i32, String) {
    let path = state_file.to_str().unwrap();
    run(
        env!("CARGO_BIN_EXE_pktrace"),
        &["--pod", pod, "-n", namespace, "--state-file", path],
    )
}

#[test]
fn broken_state_files_exit_1_with_what_to_do() {
    let dir = Scratch::new("hostile-files");
    let sparse = dir.0.path().join("sparse.json");
    File::create(&sparse).unwrap().set_len(1 << 30).unwrap();
    let cases: Vec<(&str, PathBuf, &str)> = vec![
        (
            "missing",
            dir.0.path().join("absent.json"),
            "absent.json: not found;",
        ),
        (
            "a directory",
            dir.0.path().to_path_buf(),
            ": cannot read it: ",
        ),
        (
            "corrupt",
            dir.file(
                "corrupt.json",
                b"{\"Network\": {\"ExternalInterfaces\": [1,",
            ),
            "corrupt at line 1",
        ),
        (
            "binary",
            dir.file("binary.json", &[0xff, 0xfe, 0, 0x1b, b'[', b'2', b'J']),
            ": corrupt at line",
        ),
        ("1 GiB", sparse, ": too large (1073741824 bytes"),
        ("endless", PathBuf::from("/dev/zero"), ": too large"),
    ];
    for (name, path, want) in cases {
        let (code, stderr) = pktrace(&path, "ubuntu", "default");
        assert_eq!(code, 1, "{name}: {stderr}");
        assert!(
            stderr.starts_with("pktrace: cannot resolve pod default/ubuntu: state file "),
            "{name}: {stderr}"
        );
        assert!(stderr.contains(want), "{name}: {stderr}");
        assert!(
            stderr.contains("; crictl: not installed"),
            "{name}: {stderr}"
        );
        assert!(stderr.contains("; kubernetes API: "), "{name}: {stderr}");
        assert!(stderr.contains("--pod-ip IP"), "{name}: {stderr}");
        assert_one_clean_line(&stderr);
    }
}

#[test]
fn hostile_pod_names_are_printed_escaped() {
    let dir = Scratch::new("hostile-names");
    let state = dir.file(
        "azure-vnet.json",
        br#"{"Network":{"ExternalInterfaces":{"eth0":{"Networks":{"azure":{"Endpoints":{
            "a":{"PODName":"evil\u001b[2J\u001b]0;pwned\u0007","PODNameSpace":"default","IPAddresses":[{"IP":"10.13.76.9"}]},
            "b":{"PODName":"line\nbreak\u202e","PODNameSpace":"default","IPAddresses":[{"IP":"10.13.76.10"}]},
            "c":{"PODName":"starting\u009b","PODNameSpace":"kube\nsystem","IPAddresses":[]}}}}}}}}"#,
    );
    // Not found (exit 2): the pods of the namespace and the near misses are listed, escaped.
    let (code, stderr) = pktrace(&state, "evil", "default");
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains("evil\\u{1b}[2J\\u{1b}]0;pwned\\u{7}"),
        "{stderr}"
    );
    assert!(stderr.contains("line\\nbreak\\u{202e}"), "{stderr}");
    assert_one_clean_line(&stderr);
    // In another namespace, under a hostile namespace name.
    let (code, stderr) = pktrace(&state, "starting\u{9b}", "default");
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("kube\\nsystem"), "{stderr}");
    assert_one_clean_line(&stderr);
    // Found without an address yet (exit 1).
    let (code, stderr) = pktrace(&state, "starting\u{9b}", "kube\nsystem");
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains("has no IP address"), "{stderr}");
    assert_one_clean_line(&stderr);
}

/// A kubeconfig pointing to a closed port: pktrace --pod gives up at once, in one line.
#[test]
fn pktrace_fails_fast_when_the_api_server_is_not_there() {
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let dir = Scratch::new("pktrace-kubeconfig");
    let config = dir.file(
        "config",
        format!(
            "apiVersion: v1\nkind: Config\ncurrent-context: c\nclusters:\n- name: k\n  \
             cluster:\n    server: https://127.0.0.1:{port}\ncontexts:\n- name: c\n  context: \
             {{cluster: k, user: u}}\nusers:\n- name: u\n  user:\n    token: t\n"
        )
        .as_bytes(),
    );
    let absent = dir.0.path().join("absent.json");
    let (code, stderr) = run(
        env!("CARGO_BIN_EXE_pktrace"),
        &[
            "--pod",
            "ubuntu",
            "--state-file",
            absent.to_str().unwrap(),
            "--kubeconfig",
            config.to_str().unwrap(),
        ],
    );
    assert_eq!(code, 1, "{stderr}");
    assert!(
        stderr.contains(&format!(
            "; kubernetes API https://127.0.0.1:{port}: cannot connect"
        )),
        "{stderr}"
    );
    assert_one_clean_line(&stderr);
}

#[test]
fn kubectl_plugin_fails_fast_when_the_api_server_is_not_there() {
    // A port that was just free: connecting is refused at once.
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let dir = Scratch::new("kubeconfig");
    let config = dir.file(
        "config",
        format!(
            "apiVersion: v1\nkind: Config\ncurrent-context: nowhere\nclusters:\n- name: c\n  \
             cluster:\n    server: https://127.0.0.1:{port}\n    insecure-skip-tls-verify: true\n\
             contexts:\n- name: nowhere\n  context: {{cluster: c, user: u}}\nusers:\n- name: u\n  \
             user:\n    token: not-a-real-token\n"
        )
        .as_bytes(),
    );
    let (code, stderr) = run(
        env!("CARGO_BIN_EXE_kubectl-pktrace"),
        &["ubuntu", "--kubeconfig", config.to_str().unwrap()],
    );
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.starts_with("kubectl-pktrace: "), "{stderr}");
    assert!(stderr.contains("cannot reach the API server"), "{stderr}");
    assert!(stderr.contains(&format!("127.0.0.1:{port}")), "{stderr}");
}
