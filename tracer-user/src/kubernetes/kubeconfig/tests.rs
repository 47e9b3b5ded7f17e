//! Reading kubeconfig files: contexts, merging a `$KUBECONFIG` list, relative paths, inline
//! data, token files and exec credential plugins.

use std::{fs, path::PathBuf};

use super::{Kubeconfig, KubeconfigError, paths};

fn dir(name: &str) -> PathBuf {
    let dir =
        std::env::temp_dir().join(format!("kubectl-pktrace-kc-{}-{name}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).unwrap();
    dir
}

const MAIN: &str = r#"
apiVersion: v1
kind: Config
current-context: aks
clusters:
- name: aks-cluster
  cluster:
    server: https://aks-dns-1234.hcp.westeurope.azmk8s.io:443/
    certificate-authority: certs/ca.crt
- name: lab
  cluster: {server: "http://127.0.0.1:6443", insecure-skip-tls-verify: true}
contexts:
- name: aks
  context:
    cluster: aks-cluster
    user: clusterUser
    namespace: shop
- name: lab
  context: {cluster: lab, user: tok}
users:
- name: clusterUser
  user:
    client-certificate: certs/client.crt
    client-key: certs/client.key
- name: tok
  user:
    tokenFile: token
"#;

#[test]
fn resolves_contexts_relative_files_and_token_files() {
    let d = dir("main");
    fs::create_dir_all(d.join("certs")).unwrap();
    for (name, content) in [
        ("certs/ca.crt", "CA"),
        ("certs/client.crt", "CERT"),
        ("certs/client.key", "KEY"),
        ("token", "s3cr3t\n"),
    ] {
        fs::write(d.join(name), content).unwrap();
    }
    fs::write(d.join("config"), MAIN).unwrap();
    let k = Kubeconfig::load(&[d.join("config")]).unwrap();

    let aks = k.access(None).unwrap();
    assert_eq!(
        aks.server, "https://aks-dns-1234.hcp.westeurope.azmk8s.io:443",
        "no trailing slash"
    );
    assert_eq!(
        aks.ca_pem.as_deref(),
        Some(&b"CA"[..]),
        "relative to the kubeconfig's directory"
    );
    assert_eq!(
        aks.client_cert_pem,
        Some((b"CERT".to_vec(), b"KEY".to_vec()))
    );
    assert_eq!(
        (aks.namespace.as_deref(), aks.token.as_deref()),
        (Some("shop"), None)
    );

    let lab = k.access(Some("lab")).unwrap();
    assert!(lab.insecure_skip_tls_verify);
    assert_eq!(lab.token.as_deref(), Some("s3cr3t"));
    assert_eq!(lab.namespace, None);

    let err = k.access(Some("nope")).unwrap_err();
    assert!(
        matches!(
            err,
            KubeconfigError::NotFound {
                kind: "context",
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn merges_a_kubeconfig_list_first_file_wins() {
    let d = dir("merge");
    let first = "current-context: b\nclusters:\n- name: c\n  cluster: {server: 'https://first'}\n\
                 contexts: []\nusers:\n- name: u\n  user: {token: one}\n";
    let second = "current-context: a\nclusters:\n- name: c\n  cluster: {server: 'https://second'}\n\
                  contexts:\n- name: b\n  context: {cluster: c, user: u}\nusers:\n- name: u\n  user: {token: two}\n";
    fs::write(d.join("1"), first).unwrap();
    fs::write(d.join("2"), second).unwrap();
    let k = Kubeconfig::load(&[d.join("1"), d.join("missing"), d.join("2")]).unwrap();
    let a = k.access(None).unwrap();
    assert_eq!(
        (a.server.as_str(), a.token.as_deref()),
        ("https://first", Some("one"))
    );

    let err = Kubeconfig::load(&[d.join("missing")]).unwrap_err();
    assert!(matches!(err, KubeconfigError::Read { .. }), "{err}");
    let err = Kubeconfig::load(&[d.join("missing"), d.join("missing2")]).unwrap_err();
    assert!(matches!(err, KubeconfigError::Missing), "{err}");
    fs::write(d.join("bad"), "clusters: [1, 2").unwrap();
    let err = Kubeconfig::load(&[d.join("bad")]).unwrap_err();
    assert!(
        err.to_string().contains("is not a valid kubeconfig"),
        "{err}"
    );
    fs::write(d.join("empty"), "").unwrap();
    let err = Kubeconfig::load(&[d.join("empty")])
        .unwrap()
        .access(None)
        .unwrap_err();
    assert!(matches!(err, KubeconfigError::NoContext), "{err}");

    assert_eq!(paths(Some(&d.join("x"))), [d.join("x")]);
}

#[test]
fn inline_data_and_exec_plugins() {
    let d = dir("exec");
    let config = r#"
current-context: x
clusters:
- name: c
  cluster:
    server: https://example
    certificate-authority-data: "Q0EgREFUQQ=="
contexts:
- name: x
  context: {cluster: c, user: aad}
- name: bad
  context: {cluster: c, user: failing}
- name: garbled
  context: {cluster: c, user: garbled}
users:
- name: aad
  user:
    exec:
      apiVersion: client.authentication.k8s.io/v1beta1
      command: sh
      args: ["-c", "printf '{\"kind\":\"ExecCredential\",\"status\":{\"token\":\"%s\"}}' \"$TOKEN_FROM_ENV\""]
      env: [{name: TOKEN_FROM_ENV, value: aad-token}]
- name: failing
  user:
    exec: {command: sh, args: ["-c", "exit 3"]}
- name: garbled
  user:
    client-key-data: "not base64!"
    client-certificate-data: "Q0VSVA=="
"#;
    fs::write(d.join("config"), config).unwrap();
    let k = Kubeconfig::load(&[d.join("config")]).unwrap();
    let a = k.access(None).unwrap();
    assert_eq!(a.ca_pem.as_deref(), Some(&b"CA DATA"[..]));
    assert_eq!(a.token.as_deref(), Some("aad-token"));

    let err = k.access(Some("bad")).unwrap_err();
    assert!(
        err.to_string().contains("credential plugin `sh` failed"),
        "{err}"
    );
    let err = k.access(Some("garbled")).unwrap_err();
    assert!(
        matches!(
            err,
            KubeconfigError::Base64 {
                what: "client-key-data",
                ..
            }
        ),
        "{err}"
    );
}
