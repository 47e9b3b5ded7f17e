//! The chain: state file, then crictl, then the Kubernetes API; the fallback lines, and which
//! error (and exit code) when every source failed.

use std::time::Duration;

use super::{
    api::tests::{HERE, kubeconfig, pod, serve, source},
    cri::tests::Fake,
    *,
};

const FIXTURE: &str = include_str!("../../tests-data/azure-vnet.json");

fn state_file(dir: &Path) -> PathBuf {
    let p = dir.join("azure-vnet.json");
    std::fs::write(&p, FIXTURE).unwrap();
    p
}

/// Sources: `state` (a path), the fake crictl (`None`: not installed), the API at `api`
/// (`None`: no credentials anywhere).
fn sources(state: PathBuf, crictl: Option<&Fake>, api: Option<&str>, fake: &Fake) -> Sources {
    let mut cri = fake.crictl.clone();
    match crictl {
        Some(f) => cri.program.clone_from(&f.crictl.program),
        None => cri.program = fake.dir.join("not-installed"),
    }
    let kube = match api {
        Some(url) => source(&kubeconfig(url, api::tests::TOKEN), Duration::from_secs(2)),
        None => api::KubeApi {
            timeout: Duration::from_secs(2),
            ..api::KubeApi::default()
        },
    };
    Sources {
        state_file: state,
        cri: Some(cri),
        api: Some(kube),
    }
}

#[test]
fn the_first_source_that_finds_the_pod_wins() {
    let fake = Fake::real();
    let missing = fake.dir.join("no-azure-vnet.json");

    let found = resolve(
        &sources(state_file(&fake.dir), Some(&fake), None, &fake),
        "default",
        "ubuntu",
    )
    .unwrap();
    assert_eq!(
        found.via,
        format!(
            "the state file {}",
            fake.dir.join("azure-vnet.json").display()
        )
    );
    assert!(found.fallbacks.is_empty());
    assert_eq!(found.pod.host_ifname.as_deref(), Some("azv47c3ee9d512"));
    assert!(
        fake.calls().is_empty(),
        "crictl is not run when the state file has the pod"
    );

    let found = resolve(
        &sources(missing.clone(), Some(&fake), None, &fake),
        "default",
        "ubuntu",
    )
    .unwrap();
    assert_eq!(found.via, "crictl");
    assert_eq!(
        found.fallbacks,
        [format!("state file {}: not found", missing.display())]
    );
    assert_eq!(found.pod.ips.len(), 2);

    let api = serve(Some(pod("aks-0", HERE)));
    let found = resolve(
        &sources(missing.clone(), None, Some(&api.url), &fake),
        "default",
        "ubuntu",
    )
    .unwrap();
    assert_eq!(found.via, format!("the Kubernetes API {}", api.url));
    assert_eq!(
        found.fallbacks,
        [
            format!("state file {}: not found", missing.display()),
            "crictl: not installed (not in PATH; set PKTRACE_CRICTL to its path)".to_owned(),
        ]
    );
}

#[test]
fn nothing_to_ask_is_one_line_with_every_reason_and_exit_1() {
    let fake = Fake::real();
    let missing = fake.dir.join("no-azure-vnet.json");
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://127.0.0.1:{}", l.local_addr().unwrap().port())
    };
    let err = resolve(
        &sources(missing.clone(), None, Some(&closed), &fake),
        "default",
        "ubuntu",
    )
    .unwrap_err();
    let msg = err.to_string();
    assert!(!err.is_usage(), "{msg}");
    assert_eq!(msg.lines().count(), 1, "{msg}");
    for want in [
        "cannot resolve pod default/ubuntu: ".to_owned(),
        format!("state file {}: not found; ", missing.display()),
        "; crictl: not installed".to_owned(),
        format!("; kubernetes API {closed}: cannot connect"),
        "use --pod-ip IP".to_owned(),
        "--kubeconfig PATH".to_owned(),
    ] {
        assert!(msg.contains(&want), "{want}: {msg}");
    }
    let err = resolve(&sources(missing, None, None, &fake), "default", "ubuntu").unwrap_err();
    assert!(
        err.to_string()
            .contains("; kubernetes API: no credentials: none of"),
        "{err}"
    );
}

#[test]
fn an_unknown_pod_keeps_the_state_files_message_and_exit_2() {
    let fake = Fake::real();
    let state = state_file(&fake.dir);
    let err = resolve(
        &sources(state.clone(), None, None, &fake),
        "default",
        "ubutnu",
    )
    .unwrap_err();
    let msg = err.to_string();
    assert!(err.is_usage(), "{msg}");
    assert!(
        msg.starts_with(&format!(
            "pod 'ubutnu' not found in namespace 'default' on this node (according to {}); did \
             you mean 'ubuntu'?",
            state.display()
        )),
        "{msg}"
    );
    assert!(msg.contains("; sources: state file"), "{msg}");
    assert!(
        msg.contains("no such pod on this node; crictl: not installed"),
        "{msg}"
    );
    assert_eq!(msg.lines().count(), 1);

    // crictl's pod list stands in when there is no state file.
    let missing = fake.dir.join("none.json");
    let err = resolve(
        &sources(missing.clone(), Some(&fake), None, &fake),
        "default",
        "ubutnu",
    )
    .unwrap_err();
    assert!(err.is_usage());
    assert!(
        err.to_string()
            .contains("(according to crictl); did you mean 'ubuntu'?"),
        "{err}"
    );

    // Only the API knows: 404, and its pods of the namespace on this node.
    let api = serve_pods(vec![
        named(
            pod("aks-nodepool1-12345678-vmss000000", HERE),
            "default",
            "ubuntu",
        ),
        named(
            pod("aks-nodepool1-12345678-vmss000000", HERE),
            "default",
            "web-1",
        ),
        named(
            pod("aks-nodepool1-12345678-vmss000000", HERE),
            "tools",
            "ubutnu",
        ),
        // Elsewhere: neither listed nor suggested.
        named(pod("other", "10.13.76.5"), "default", "ubutn"),
    ]);
    let err = resolve(
        &sources(missing.clone(), None, Some(&api.url), &fake),
        "default",
        "ubutnu",
    )
    .unwrap_err();
    let msg = err.to_string();
    assert!(err.is_usage(), "{msg}");
    assert!(
        msg.starts_with(&format!(
            "pod 'ubutnu' not found in namespace 'default' on this node (according to the \
             Kubernetes API {}); did you mean 'ubuntu'?; a pod 'ubutnu' exists in namespace \
             tools (use -n tools); pods in 'default' here: ubuntu, web-1;",
            api.url
        )),
        "{msg}"
    );
    assert!(msg.contains("does not exist (404)"), "{msg}");
    assert!(!msg.contains("ubutn,") && !msg.contains("'ubutn'"), "{msg}");
    assert_eq!(msg.lines().count(), 1);

    // An API that lists nothing (or may not list): the 404, and the empty namespace said.
    let api = serve(None);
    let err = resolve(
        &sources(missing, None, Some(&api.url), &fake),
        "default",
        "ubutnu",
    )
    .unwrap_err();
    assert!(err.is_usage());
    assert!(err.to_string().contains("does not exist (404)"), "{err}");
    assert!(
        err.to_string()
            .contains("this node has no pods in namespace 'default'"),
        "{err}"
    );
}

/// Pod object `base` renamed to `namespace/name`.
fn named(mut base: serde_json::Value, namespace: &str, name: &str) -> serde_json::Value {
    base["metadata"] = serde_json::json!({"name": name, "namespace": namespace});
    base
}

fn serve_pods(pods: Vec<serde_json::Value>) -> crate::kubernetes::fake_api::FakeApi {
    crate::kubernetes::fake_api::FakeApi::start(crate::kubernetes::fake_api::Scenario {
        token: Some(api::tests::TOKEN.into()),
        pods,
        ..crate::kubernetes::fake_api::Scenario::default()
    })
}

#[test]
fn the_most_helpful_source_names_the_pods() {
    // The state file knows no pod close to the name; crictl does: crictl's list is shown.
    let fake = Fake::real();
    let empty = fake.dir.join("empty.json");
    std::fs::write(&empty, r#"{"Network":{"ExternalInterfaces":{}}}"#).unwrap();
    let err = resolve(
        &sources(empty, Some(&fake), None, &fake),
        "default",
        "ubutnu",
    )
    .unwrap_err();
    assert!(err.is_usage(), "{err}");
    assert!(
        err.to_string()
            .contains("(according to crictl); did you mean 'ubuntu'?"),
        "{err}"
    );
    // The state file was read and said "no such pod" first.
    assert!(
        err.to_string()
            .contains("empty.json: no such pod on this node"),
        "{err}"
    );
}

#[test]
fn a_pod_on_another_node_or_not_ready_is_exit_1() {
    let fake = Fake::real();
    let state = state_file(&fake.dir);
    let api = serve(Some(pod("aks-nodepool1-12345678-vmss000001", "10.13.76.5")));
    let err = resolve(
        &sources(state, None, Some(&api.url), &fake),
        "default",
        "remote",
    )
    .unwrap_err();
    assert!(
        matches!(err, ResolveError::OtherNode(_)) && !err.is_usage(),
        "{err}"
    );
    assert!(
        err.to_string()
            .contains("runs on node aks-nodepool1-12345678-vmss000001"),
        "{err}"
    );

    let err = resolve(
        &sources(fake.dir.join("none.json"), Some(&fake), None, &fake),
        "default",
        "starting",
    )
    .unwrap_err();
    assert!(
        matches!(err, ResolveError::NotReady { .. }) && !err.is_usage(),
        "{err}"
    );
    assert!(err.to_string().contains("no ready sandbox"), "{err}");
}
