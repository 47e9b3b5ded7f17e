//! The plugin against a fake API server ([`crate::kubernetes::fake_api`]): which node it picks, the pod it
//! creates, the arguments it passes, that it always cleans up, and how it logs in.

use std::{sync::Arc, thread, time::Duration};

use base64::Engine as _;
use serde_json::{Value, json};

use super::session::{self, Plan, SessionError, Stop};
use crate::kubernetes::{
    api::{self, Api, ApiError},
    fake_api::{FakeApi, Request, SUFFIX, Scenario, Tls},
    kubeconfig::{ClusterAccess, Kubeconfig},
};

const TOKEN: &str = "t0k3n";
const DEBUG_POD: &str = "pktrace-ubuntu-x7k2q";

fn target_pod() -> Value {
    json!({"kind": "Pod", "metadata": {"name": "ubuntu", "namespace": "default"},
           "spec": {"nodeName": "aks-nodepool1-12345678-vmss000002", "containers": []},
           "status": {"phase": "Running", "podIP": "10.13.76.46"}})
}

fn scenario() -> Scenario {
    Scenario {
        target: Some(target_pod()),
        starting: vec![json!({"phase": "Pending"}), json!({"phase": "Running"})],
        log: vec![
            r#"{"type":"journey","proto":"tcp"}"#.into(),
            r#"{"type":"summary","journeys":1}"#.into(),
        ],
        token: Some(TOKEN.into()),
        ..Scenario::default()
    }
}

fn plan(args: &[&str]) -> Plan {
    Plan {
        pod: "ubuntu".into(),
        node: None,
        namespace: "default".into(),
        debug_namespace: "default".into(),
        image: "registry.example/pktrace:test".into(),
        pktrace_args: args.iter().map(|a| (*a).to_owned()).collect(),
        start_timeout: Duration::from_secs(10),
        dry_run: false,
    }
}

fn api_for(fake: &FakeApi) -> Arc<Api> {
    let access = ClusterAccess {
        server: fake.url.clone(),
        token: Some(TOKEN.into()),
        ..ClusterAccess::default()
    };
    Arc::new(Api::new(&access, api::CALL_TIMEOUT, "kubectl-pktrace").unwrap())
}

/// Runs the plugin's session against `fake`: (result, stdout).
fn run(fake: &FakeApi, plan: &Plan, stop: &Stop) -> (Result<u8, SessionError>, String) {
    let mut out = Vec::new();
    let result = session::run(plan, &api_for(fake), stop, &mut out);
    (result, String::from_utf8(out).unwrap())
}

fn routes(requests: &[Request]) -> Vec<String> {
    let mut routes: Vec<String> = requests.iter().map(Request::route).collect();
    routes.dedup();
    routes
}

fn created(requests: &[Request]) -> Value {
    requests
        .iter()
        .find(|r| r.method == "POST")
        .map(Request::json)
        .expect("a pod was created")
}

const GET_TARGET: &str = "GET /api/v1/namespaces/default/pods/ubuntu";
const POST: &str = "POST /api/v1/namespaces/default/pods";
const GET_DEBUG: &str = "GET /api/v1/namespaces/default/pods/pktrace-ubuntu-x7k2q";
const LOG: &str = "GET /api/v1/namespaces/default/pods/pktrace-ubuntu-x7k2q/log";
const DELETE: &str = "DELETE /api/v1/namespaces/default/pods/pktrace-ubuntu-x7k2q";

#[test]
fn runs_pktrace_privileged_on_the_pods_node_streams_its_output_and_deletes_the_pod() {
    let fake = FakeApi::start(scenario());
    let (result, out) = run(&fake, &plan(&["-c", "5", "-o", "json"]), &Stop::default());
    assert_eq!(result.unwrap(), 0);
    assert_eq!(
        out,
        "{\"type\":\"journey\",\"proto\":\"tcp\"}\n{\"type\":\"summary\",\"journeys\":1}\n"
    );

    let requests = fake.requests();
    assert_eq!(
        routes(&requests),
        [GET_TARGET, POST, GET_DEBUG, LOG, GET_DEBUG, DELETE]
    );
    for r in &requests {
        assert_eq!(r.header("authorization"), Some("Bearer t0k3n"), "{r:?}");
    }
    let log = requests.iter().find(|r| r.route() == LOG).unwrap();
    assert!(
        log.path.contains("follow=true") && log.path.contains("container=pktrace"),
        "{}",
        log.path
    );

    let pod = created(&requests);
    assert_eq!(pod["metadata"]["generateName"], "pktrace-ubuntu-");
    assert_eq!(pod["metadata"]["namespace"], "default");
    assert_eq!(
        pod["metadata"]["labels"]["app.kubernetes.io/managed-by"],
        "kubectl-pktrace"
    );
    let spec = &pod["spec"];
    assert_eq!(
        spec["nodeName"], "aks-nodepool1-12345678-vmss000002",
        "the target pod's node"
    );
    assert_eq!(
        (spec["hostNetwork"].as_bool(), spec["hostPID"].as_bool()),
        (Some(true), Some(true))
    );
    assert_eq!(spec["restartPolicy"], "Never");
    assert_eq!(spec["tolerations"], json!([{"operator": "Exists"}]));
    let container = &spec["containers"][0];
    assert_eq!(container["image"], "registry.example/pktrace:test");
    assert_eq!(container["securityContext"]["privileged"], true);
    assert_eq!(
        container["args"],
        json!(["--pod", "ubuntu", "-n", "default", "-c", "5", "-o", "json"])
    );
    let mounts: Vec<(&str, &str)> = container["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["name"].as_str().unwrap(),
                m["mountPath"].as_str().unwrap(),
            )
        })
        .collect();
    let want = [
        "/sys/fs/bpf",
        "/sys/kernel/btf",
        "/var/run/azure-vnet.json",
        "/run/containerd/containerd.sock",
    ];
    assert_eq!(mounts.iter().map(|m| m.1).collect::<Vec<_>>(), want);
    for (name, path) in mounts {
        let volume = spec["volumes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|v| v["name"] == name)
            .unwrap();
        assert_eq!(
            volume["hostPath"]["path"], path,
            "mounted where the host has it"
        );
    }
}

#[test]
fn pktraces_exit_code_is_passed_on() {
    let fake = FakeApi::start(Scenario {
        exit_code: 2,
        ..scenario()
    });
    let (result, _) = run(&fake, &plan(&[]), &Stop::default());
    assert_eq!(result.unwrap(), 2);
    assert_eq!(
        routes(&fake.requests()).last().map(String::as_str),
        Some(DELETE)
    );
}

#[test]
fn ctrl_c_deletes_the_pod_and_the_summary_still_arrives() {
    let fake = Arc::new(FakeApi::start(Scenario {
        log_until_deleted: true,
        log: vec!["journey 1".into()],
        log_after_delete: vec!["summary".into()],
        ..scenario()
    }));
    let stop = Stop::default();
    let stopper = {
        let (fake, stop) = (Arc::clone(&fake), stop.clone());
        thread::spawn(move || {
            fake.wait_for(|r| r.route() == LOG);
            thread::sleep(Duration::from_millis(200));
            stop.request();
        })
    };
    let (result, out) = run(&fake, &plan(&["-f"]), &stop);
    stopper.join().unwrap();
    assert_eq!(result.unwrap(), 0, "pktrace stopped by SIGTERM exits 0");
    assert_eq!(out, "journey 1\nsummary\n");
    let routes = routes(&fake.requests());
    let first_delete = routes.iter().position(|r| r == DELETE).expect("deleted");
    assert!(
        routes[..first_delete].contains(&LOG.to_owned()),
        "{routes:?}"
    );
}

#[test]
fn ctrl_c_while_the_pod_starts_deletes_it() {
    let fake = Arc::new(FakeApi::start(Scenario {
        starting: vec![json!({"phase": "Pending"})],
        ..scenario()
    }));
    let stop = Stop::default();
    let stopper = {
        let (fake, stop) = (Arc::clone(&fake), stop.clone());
        thread::spawn(move || {
            fake.wait_for(|r| r.route() == GET_DEBUG);
            stop.request();
        })
    };
    let (result, out) = run(&fake, &plan(&[]), &stop);
    stopper.join().unwrap();
    assert_eq!((result.unwrap(), out.as_str()), (0, ""));
    let routes = routes(&fake.requests());
    assert!(
        routes.contains(&DELETE.to_owned()) && !routes.contains(&LOG.to_owned()),
        "{routes:?}"
    );
}

#[test]
fn an_unknown_pod_is_a_usage_error_and_creates_nothing() {
    let fake = FakeApi::start(Scenario {
        target: None,
        ..scenario()
    });
    let (result, _) = run(&fake, &plan(&[]), &Stop::default());
    let err = result.unwrap_err();
    assert_eq!(err.exit_code(), 2);
    assert!(
        err.to_string()
            .contains("pod 'ubuntu' not found in namespace 'default'"),
        "{err}"
    );
    assert_eq!(routes(&fake.requests()), [GET_TARGET]);
}

#[test]
fn an_unscheduled_pod_creates_nothing() {
    let mut pod = target_pod();
    pod["spec"].as_object_mut().unwrap().remove("nodeName");
    let fake = FakeApi::start(Scenario {
        target: Some(pod),
        ..scenario()
    });
    let err = run(&fake, &plan(&[]), &Stop::default()).0.unwrap_err();
    assert!(matches!(err, SessionError::NotScheduled { .. }), "{err}");
    assert_eq!(routes(&fake.requests()), [GET_TARGET]);
}

#[test]
fn a_pod_that_cannot_start_is_reported_and_deleted() {
    let waiting = json!({"phase": "Pending", "containerStatuses": [{"name": "pktrace",
        "state": {"waiting": {"reason": "ErrImagePull", "message": "manifest unknown"}}}]});
    let fake = FakeApi::start(Scenario {
        starting: vec![waiting],
        ..scenario()
    });
    let err = run(&fake, &plan(&[]), &Stop::default()).0.unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("ErrImagePull")
            && text.contains("manifest unknown")
            && text.contains("--image"),
        "{text}"
    );
    assert_eq!(
        routes(&fake.requests()),
        [GET_TARGET, POST, GET_DEBUG, DELETE]
    );

    let fake = FakeApi::start(Scenario {
        starting: vec![json!({"phase": "Pending"})],
        ..scenario()
    });
    let slow = Plan {
        start_timeout: Duration::from_millis(700),
        ..plan(&[])
    };
    let err = run(&fake, &slow, &Stop::default()).0.unwrap_err();
    assert!(
        matches!(err, SessionError::StartTimeout { ref phase, .. } if phase == "Pending"),
        "{err}"
    );
    assert_eq!(
        routes(&fake.requests()).last().map(String::as_str),
        Some(DELETE)
    );
}

#[test]
fn dry_run_prints_the_manifest_and_creates_nothing() {
    let fake = FakeApi::start(scenario());
    let (result, out) = run(
        &fake,
        &Plan {
            dry_run: true,
            ..plan(&["-f"])
        },
        &Stop::default(),
    );
    assert_eq!(result.unwrap(), 0);
    let pod: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        pod["spec"]["containers"][0]["args"],
        json!(["--pod", "ubuntu", "-n", "default", "-f"])
    );
    assert_eq!(routes(&fake.requests()), [GET_TARGET]);

    // With --node nothing is asked of the API server.
    let fake = FakeApi::start(scenario());
    let on_node = Plan {
        dry_run: true,
        node: Some("aks-node-9".into()),
        ..plan(&[])
    };
    let pod: Value = serde_json::from_str(&run(&fake, &on_node, &Stop::default()).1).unwrap();
    assert_eq!(pod["spec"]["nodeName"], "aks-node-9");
    assert!(fake.requests().is_empty());
}

/// deploy/daemonset.yaml runs pktrace like the plugin's pod: same host access, same mounts.
#[test]
fn the_daemonset_mounts_what_the_plugins_pod_mounts() {
    use serde::Deserialize as _;
    let text = include_str!("../../../../deploy/daemonset.yaml");
    let docs: Vec<Value> = serde_yaml_ng::Deserializer::from_str(text)
        .map(|d| Value::deserialize(d).expect("YAML"))
        .collect();
    let ds = docs
        .iter()
        .find(|d| d["kind"] == "DaemonSet")
        .expect("a DaemonSet");
    let spec = &ds["spec"]["template"]["spec"];
    let pod = super::pod_spec::DebugPod {
        node: "n".into(),
        namespace: "pktrace".into(),
        image: "i".into(),
        args: vec![],
        target: ("default".into(), "ubuntu".into()),
    }
    .manifest();
    for key in [
        "hostNetwork",
        "hostPID",
        "volumes",
        "tolerations",
        "dnsPolicy",
    ] {
        assert_eq!(spec[key], pod["spec"][key], "{key}");
    }
    let (c, want) = (&spec["containers"][0], &pod["spec"]["containers"][0]);
    for key in ["securityContext", "volumeMounts"] {
        assert_eq!(c[key], want[key], "{key}");
    }
    let image = c["image"].as_str().unwrap();
    assert!(
        image.ends_with(&format!(":{}", env!("CARGO_PKG_VERSION"))),
        "release image: {image}"
    );
    assert_eq!(image, super::DEFAULT_IMAGE);
}

#[test]
fn a_wrong_token_is_reported_with_the_servers_message() {
    let fake = FakeApi::start(Scenario {
        token: Some("other".into()),
        ..scenario()
    });
    let err = run(&fake, &plan(&[]), &Stop::default()).0.unwrap_err();
    assert!(
        matches!(err, SessionError::Api(ApiError::Status { code: 401, .. })),
        "{err}"
    );
    assert!(err.to_string().contains("401: Unauthorized"), "{err}");
}

const CA: &[u8] = include_bytes!("testdata/ca.crt");
const OTHER_CA: &[u8] = include_bytes!("testdata/other-ca.crt");
const SERVER_CERT: &[u8] = include_bytes!("testdata/server.crt");
const SERVER_KEY: &[u8] = include_bytes!("testdata/server.key");
const CLIENT_CERT: &[u8] = include_bytes!("testdata/client.crt");
const CLIENT_KEY: &[u8] = include_bytes!("testdata/client.key");

fn b64(data: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(data)
}

/// A kubeconfig for `server`; `cluster` and `user` are YAML lines for those entries.
fn kubeconfig(server: &str, cluster: &str, user: &str) -> Kubeconfig {
    let text = format!(
        "apiVersion: v1\nkind: Config\ncurrent-context: test\nclusters:\n- name: c\n  cluster:\n    \
         server: {server}\n{cluster}contexts:\n- name: test\n  context: {{cluster: c, user: u}}\n\
         users:\n- name: u\n  user:\n{user}"
    );
    let dir = std::env::temp_dir().join(format!(
        "kubectl-pktrace-{}-{}",
        std::process::id(),
        b64(server.as_bytes())
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("config");
    std::fs::write(&path, text).unwrap();
    Kubeconfig::load(&[path]).unwrap()
}

fn run_with(config: &Kubeconfig) -> Result<u8, SessionError> {
    let access = config.access(None).unwrap();
    let api = Arc::new(Api::new(&access, api::CALL_TIMEOUT, "kubectl-pktrace")?);
    session::run(&plan(&[]), &api, &Stop::default(), &mut Vec::new())
}

#[test]
fn tls_with_the_kubeconfigs_ca_and_client_certificate() {
    let tls = || Tls {
        cert_pem: SERVER_CERT,
        key_pem: SERVER_KEY,
        client_ca_pem: Some(CA),
    };
    let fake = FakeApi::start_with(
        Scenario {
            token: None,
            ..scenario()
        },
        Some(tls()),
    );
    let cert_user = format!(
        "    client-certificate-data: {}\n    client-key-data: {}\n",
        b64(CLIENT_CERT),
        b64(CLIENT_KEY)
    );
    let ca = format!("    certificate-authority-data: {}\n", b64(CA));
    assert_eq!(
        run_with(&kubeconfig(&fake.url, &ca, &cert_user)).unwrap(),
        0
    );
    assert!(
        fake.requests()
            .iter()
            .all(|r| r.header("authorization").is_none())
    );

    // No client certificate: the TLS handshake fails.
    let fake = FakeApi::start_with(
        Scenario {
            token: None,
            ..scenario()
        },
        Some(tls()),
    );
    let err = run_with(&kubeconfig(&fake.url, &ca, "    token: x\n")).unwrap_err();
    assert!(
        matches!(err, SessionError::Api(ApiError::Transport { .. })),
        "{err}"
    );
}

#[test]
fn tls_server_verification_ca_wrong_ca_and_insecure_skip() {
    let tls = || Tls {
        cert_pem: SERVER_CERT,
        key_pem: SERVER_KEY,
        client_ca_pem: None,
    };
    let token = format!("    token: {TOKEN}\n");
    let fake = FakeApi::start_with(scenario(), Some(tls()));
    let ca = format!("    certificate-authority-data: {}\n", b64(CA));
    assert_eq!(run_with(&kubeconfig(&fake.url, &ca, &token)).unwrap(), 0);

    let fake = FakeApi::start_with(scenario(), Some(tls()));
    let wrong = format!("    certificate-authority-data: {}\n", b64(OTHER_CA));
    let err = run_with(&kubeconfig(&fake.url, &wrong, &token)).unwrap_err();
    let text = format!("{:#}", anyhow::Error::new(err));
    assert!(
        text.contains("cannot reach the API server") && text.to_lowercase().contains("certificate"),
        "{text}"
    );
    assert!(
        fake.requests().is_empty(),
        "nothing sent to an unverified server"
    );

    let fake = FakeApi::start_with(scenario(), Some(tls()));
    let skip = "    insecure-skip-tls-verify: true\n";
    assert_eq!(run_with(&kubeconfig(&fake.url, skip, &token)).unwrap(), 0);
    assert_eq!(
        routes(&fake.requests()).last().map(String::as_str),
        Some(DELETE)
    );
    assert!(DEBUG_POD.ends_with(SUFFIX));
}
