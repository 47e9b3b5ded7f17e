//! The Kubernetes API source against the in-process fake API server: a pod here, on another
//! node, absent, not scheduled, refused credentials; where the credentials come from; and
//! servers that are down, unknown or silent fail within the time-out with one line.

use std::{
    fs,
    net::TcpListener,
    sync::atomic::{AtomicU32, Ordering},
    time::Instant,
};

use serde_json::json;

use super::*;
use crate::kubernetes::fake_api::{FakeApi, Scenario};

pub(crate) const TOKEN: &str = "node-t0k3n";
pub(crate) const HERE: &str = "10.13.76.4";

fn temp_dir(tag: &str) -> PathBuf {
    static N: AtomicU32 = AtomicU32::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("pktrace-kube-{tag}-{}-{n}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).unwrap();
    dir
}

/// A kubeconfig for `server` with a token, in a fresh dir.
pub(crate) fn kubeconfig(server: &str, token: &str) -> PathBuf {
    let path = temp_dir("kc").join("config");
    let text = format!(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\nclusters:\n- name: k\n  cluster:\n    \
         server: {server}\ncontexts:\n- name: c\n  context:\n    cluster: k\n    user: u\n\
         users:\n- name: u\n  user:\n    token: {token}\n"
    );
    fs::write(&path, text).unwrap();
    path
}

/// The API source for `kubeconfig` on a node whose address is [`HERE`].
pub(crate) fn source(kubeconfig: &Path, timeout: Duration) -> KubeApi {
    KubeApi {
        explicit: Some(kubeconfig.to_owned()),
        timeout,
        node: ThisNode {
            name: None,
            hostname: "aks-nodepool1-12345678-vmss000000".into(),
            addrs: vec!["127.0.0.1".parse().unwrap(), HERE.parse().unwrap()],
        },
        ..KubeApi::default()
    }
}

pub(crate) fn pod(node: &str, host_ip: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "ubuntu", "namespace": "default"},
           "spec": {"nodeName": node, "containers": [{"name": "ubuntu"}]},
           "status": {"phase": "Running", "hostIP": host_ip, "hostIPs": [{"ip": host_ip}],
                      "podIP": "10.13.76.46",
                      "podIPs": [{"ip": "10.13.76.46"}, {"ip": "fd00:10:13::2e"}]}})
}

pub(crate) fn serve(target: Option<Value>) -> FakeApi {
    FakeApi::start(Scenario {
        target,
        token: Some(TOKEN.into()),
        ..Scenario::default()
    })
}

#[test]
fn resolves_a_pod_of_this_node() {
    let api = serve(Some(pod("aks-nodepool1-12345678-vmss000000", HERE)));
    let kc = kubeconfig(&api.url, TOKEN);
    let (pod, server) = source(&kc, CALL_TIMEOUT)
        .resolve("default", "ubuntu")
        .unwrap();
    assert_eq!(server, api.url);
    assert_eq!(
        pod.ips,
        [
            "10.13.76.46".parse::<IpAddr>().unwrap(),
            "fd00:10:13::2e".parse().unwrap()
        ]
    );
    let requests = api.requests();
    assert_eq!(
        requests[0].route(),
        "GET /api/v1/namespaces/default/pods/ubuntu"
    );
    assert_eq!(
        requests[0].header("authorization"),
        Some(format!("Bearer {TOKEN}").as_str())
    );
}

#[test]
fn a_pod_elsewhere_absent_or_not_running_yet() {
    let other = "aks-nodepool1-12345678-vmss000001";
    let api = serve(Some(pod(other, "10.13.76.5")));
    let kc = kubeconfig(&api.url, TOKEN);
    let err = source(&kc, CALL_TIMEOUT)
        .resolve("default", "ubuntu")
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "pod default/ubuntu runs on node {other}, this is aks-nodepool1-12345678-vmss000000 \
             (no local address is 10.13.76.5): run pktrace there or use `kubectl pktrace ubuntu \
             -n default`"
        )
    );
    // $NODE_NAME (the downward API) decides when set.
    let mut here = source(&kc, CALL_TIMEOUT);
    here.node.name = Some(other.into());
    assert!(here.resolve("default", "ubuntu").is_ok());

    let api = serve(None);
    let kc = kubeconfig(&api.url, TOKEN);
    let err = source(&kc, CALL_TIMEOUT)
        .resolve("default", "ubuntu")
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        format!("{}: pod default/ubuntu does not exist (404)", api.url)
    );

    let mut pending = pod("", "");
    pending["status"] = json!({"phase": "Pending"});
    let api = serve(Some(pending));
    let kc = kubeconfig(&api.url, TOKEN);
    let err = source(&kc, CALL_TIMEOUT)
        .resolve("default", "ubuntu")
        .unwrap_err();
    assert!(matches!(err, KubeError::Unscheduled { .. }), "{err}");

    let mut starting = pod("aks-nodepool1-12345678-vmss000000", HERE);
    starting["status"]["podIPs"] = json!([]);
    starting["status"]["podIP"] = Value::Null;
    let api = serve(Some(starting));
    let kc = kubeconfig(&api.url, TOKEN);
    let err = source(&kc, CALL_TIMEOUT)
        .resolve("default", "ubuntu")
        .unwrap_err();
    assert!(matches!(err, KubeError::NoAddress { .. }), "{err}");
}

#[test]
fn refused_credentials_are_one_line() {
    let api = serve(Some(pod("n", HERE)));
    let kc = kubeconfig(&api.url, "wrong");
    let err = source(&kc, CALL_TIMEOUT)
        .resolve("default", "ubuntu")
        .unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.starts_with(&format!("{}: 401 Unauthorized", api.url)),
        "{msg}"
    );
    assert_eq!(msg.lines().count(), 1, "{msg}");
}

/// A kubeconfig pointing nowhere: each fails within the time-out (plus slack), in one line.
#[test]
fn servers_down_unknown_or_silent_fail_fast() {
    let timeout = Duration::from_secs(1);
    let closed = {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    // Accepts (the kernel completes the handshake) but never answers.
    let silent = TcpListener::bind("127.0.0.1:0").unwrap();
    let silent_url = format!("http://127.0.0.1:{}", silent.local_addr().unwrap().port());
    let cases = [
        (format!("http://127.0.0.1:{closed}"), "cannot connect"),
        (silent_url, "no answer within 1 s"),
        ("https://pktrace-nowhere.invalid:6443".to_owned(), ""),
    ];
    for (server, want) in cases {
        let kc = kubeconfig(&server, TOKEN);
        let start = Instant::now();
        let err = source(&kc, timeout)
            .resolve("default", "ubuntu")
            .unwrap_err();
        let took = start.elapsed();
        let msg = err.to_string();
        assert!(took < Duration::from_secs(3), "{server}: {took:?}: {msg}");
        assert!(matches!(err, KubeError::Call { .. }), "{msg}");
        assert!(
            msg.starts_with(&format!("{server}: ")) && msg.contains(want),
            "{msg}"
        );
        assert_eq!(msg.lines().count(), 1, "{msg}");
    }
    drop(silent);
}

#[test]
fn credentials_come_from_the_first_source_there_is() {
    let dir = temp_dir("order");
    let write = |name: &str, server: &str| {
        let p = dir.join(name);
        fs::write(&p, fs::read_to_string(kubeconfig(server, TOKEN)).unwrap()).unwrap();
        p
    };
    let explicit = write("explicit", "https://explicit:6443");
    let env = write("env", "https://env:6443");
    let kubelet = write("kubelet", "https://kubelet:443");
    let home = write("home", "https://home:443");
    let sa = dir.join("sa");
    fs::create_dir_all(&sa).unwrap();
    fs::write(sa.join("token"), "sa-token\n").unwrap();
    fs::write(sa.join("ca.crt"), "CA").unwrap();
    let mut src = KubeApi {
        explicit: Some(explicit),
        env: Some(env.clone().into_os_string()),
        kubelet: vec![dir.join("absent"), kubelet],
        home: Some(home),
        in_cluster: Some(("fd00::1".into(), "443".into())),
        service_account: sa,
        ..KubeApi::default()
    };
    let server = |s: &KubeApi| s.access().map(|a| a.server).unwrap();
    assert_eq!(server(&src), "https://explicit:6443");
    src.explicit = None;
    assert_eq!(server(&src), "https://env:6443");
    src.env = None;
    assert_eq!(
        server(&src),
        "https://kubelet:443",
        "the first kubelet file that exists"
    );
    src.kubelet.clear();
    assert_eq!(server(&src), "https://home:443");
    src.home = None;
    let access = src.access().unwrap();
    assert_eq!(access.server, "https://[fd00::1]:443");
    assert_eq!(access.token.as_deref(), Some("sa-token"));
    assert_eq!(access.ca_pem.as_deref(), Some(&b"CA"[..]));

    src.in_cluster = None;
    let err = src.access().unwrap_err().to_string();
    assert!(
        err.starts_with("no credentials: none of --kubeconfig, $KUBECONFIG"),
        "{err}"
    );

    src.explicit = Some(dir.join("missing"));
    let err = src.access().unwrap_err().to_string();
    assert_eq!(
        err,
        format!("kubeconfig {}: not found", dir.join("missing").display())
    );
    fs::write(dir.join("bad"), "clusters: [").unwrap();
    src.explicit = Some(dir.join("bad"));
    let err = src.access().unwrap_err().to_string();
    assert!(
        err.contains("is not a valid kubeconfig") && !err.contains('\n'),
        "{err}"
    );
    let _ = fs::remove_dir_all(&dir);
}
