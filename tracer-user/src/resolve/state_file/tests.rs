//! The state file on the fixture and on made-up files: pods, not-found messages, file errors.

use std::{fs, path::PathBuf, sync::atomic::AtomicU32};

use super::{not_found::distance_within, *};

const FIXTURE: &str = include_str!("../../../tests-data/azure-vnet.json");

/// Writes `content` to a fresh file in the temp dir and returns its path.
fn file(content: &str) -> PathBuf {
    static N: AtomicU32 = AtomicU32::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let path =
        std::env::temp_dir().join(format!("pktrace-resolve-{}-{n}.json", std::process::id()));
    fs::write(&path, content).unwrap();
    path
}

#[test]
fn resolves_the_fixture_pods() {
    let path = file(FIXTURE);
    let cases = [
        ("default", "ubuntu", "10.13.76.46", "azv47c3ee9d512"),
        (
            "default",
            "whereami-564765b89-qfq2k",
            "10.13.76.26",
            "azva4124965a9b",
        ),
        (
            "default",
            "whereami-564765b89-j7bpw",
            "10.13.76.7",
            "azv1a68ecb6fb1",
        ),
        (
            "kube-system",
            "addon-http-application-routing-nginx-ingress-controller-8fx6v2r",
            "10.13.76.17",
            "azv3cd1b2db354",
        ),
    ];
    for (ns, name, ip, veth) in cases {
        let pod = resolve_pod(&path, ns, name).unwrap();
        assert_eq!(pod.ips, [ip.parse::<IpAddr>().unwrap()], "{name}");
        assert_eq!(pod.host_ifname.as_deref(), Some(veth));
        assert_eq!(pod.label(), format!("{ns}/{name}"));
    }
    let all = list_pods(&path).unwrap();
    assert_eq!(all.len(), 4);
    assert_eq!(
        all[0].label(),
        "default/ubuntu",
        "sorted by namespace, then name"
    );
    assert_eq!(
        cni_layout(&path),
        Some(CniLayout {
            mode: "bridge".into(),
            bridge: Some("azure0".into())
        })
    );
}

#[test]
fn pod_not_found_suggests() {
    let path = file(FIXTURE);
    let cases: &[(&str, &str, &[&str], &[&str])] = &[
        ("default", "ubutnu", &["did you mean 'ubuntu'?"], &[]),
        ("default", "ubunt", &["did you mean 'ubuntu'?"], &[]),
        (
            "default",
            "whereami",
            &["did you mean 'whereami-564765b89-j7bpw' or 'whereami-564765b89-qfq2k'?"],
            &[],
        ),
        (
            "kube-system",
            "ubuntu",
            &["exists in namespace default (use -n default)"],
            &["did you mean"],
        ),
        (
            "nope",
            "x",
            &["this node has no pods in namespace 'nope'"],
            &["did you mean"],
        ),
        (
            "default",
            "zzz",
            &["pods in 'default' here: ubuntu, whereami-564765b89-j7bpw, whereami-564765b89-qfq2k"],
            &["did you mean", "exists in"],
        ),
        (
            "default",
            "evil\u{1b}[2J",
            &["pod 'evil\\u{1b}[2J' not found"],
            &["\u{1b}"],
        ),
    ];
    for (ns, name, has, lacks) in cases {
        let err = resolve_pod(&path, ns, name).unwrap_err();
        assert!(err.is_usage(), "{name}");
        let msg = err.to_string();
        for want in *has {
            assert!(msg.contains(want), "{name}: {msg}");
        }
        for unwanted in *lacks {
            assert!(!msg.contains(unwanted), "{name}: {msg}");
        }
    }
}

#[test]
fn file_errors() {
    let missing = std::env::temp_dir().join("pktrace-no-such-state-file.json");
    let cases: Vec<(PathBuf, &str)> = vec![
        (missing, "not an Azure CNI node? use --state-file PATH"),
        (
            file("{\"Network\": {\n  \"ExternalInterfaces\": [1,"),
            "corrupt at line 2, column",
        ),
        (
            file("{\"Network\": {\"ExternalInterfaces\": {\"eth0\": {\"Networks\": 5}}}}"),
            "corrupt",
        ),
        (std::env::temp_dir(), "cannot read the Azure CNI state file"),
    ];
    for (path, want) in cases {
        let err = resolve_pod(&path, "default", "ubuntu").unwrap_err();
        assert!(!err.is_usage());
        assert!(err.to_string().contains(want), "{err}");
        assert!(err.to_string().contains("--pod-ip IP"), "{err}");
        assert!(err.to_string().matches("at line").count() <= 1, "{err}");
        assert_eq!(cni_layout(&path), None);
    }
}

#[test]
fn tolerates_nulls_missing_fields_and_odd_entries() {
    let cases: &[(&str, usize)] = &[
        ("{}", 0),
        ("null", 0),
        ("{\"Network\": null}", 0),
        ("{\"Network\": {\"ExternalInterfaces\": null}}", 0),
        (
            "{\"Network\": {\"ExternalInterfaces\": {\"eth0\": {\"Networks\": null}}}}",
            0,
        ),
        (
            r#"{"Network":{"ExternalInterfaces":{"eth0":{"Networks":{"azure":{"Endpoints":{
                "a":{"PODName":"p","PODNameSpace":"ns","IPAddresses":null,"Extra":[1]},
                "b":{"PODName":"p","PODNameSpace":"ns","IPAddresses":[null,{"IP":"bad"},
                     {"IP":"10.0.0.9","Mask":"////AA=="},{"IP":"10.0.0.9"},{"IP":"fd00::9"}]},
                "c":{"PODName":"","PODNameSpace":"ns"},
                "d":{"PODName":null}}}}}}}}"#,
            1,
        ),
    ];
    for (json, n) in cases {
        let pods = list_pods(&file(json)).unwrap();
        assert_eq!(pods.len(), *n, "{json}");
    }
    let path = file(cases[5].0);
    let pod = resolve_pod(&path, "ns", "p").unwrap();
    assert_eq!(
        pod.ips,
        [
            "10.0.0.9".parse::<IpAddr>().unwrap(),
            "fd00::9".parse().unwrap()
        ]
    );
    assert_eq!((pod.host_ifname, cni_layout(&path)), (None, None));
}

#[test]
fn pod_without_address() {
    let path = file(
        r#"{"Network":{"ExternalInterfaces":{"eth0":{"BridgeName":"",
        "Networks":{"azure":{"Mode":"Transparent","Endpoints":{"a":{"PODName":"p","PODNameSpace":"ns"}}}}}}}}"#,
    );
    let err = resolve_pod(&path, "ns", "p").unwrap_err();
    assert!(
        matches!(err, StateFileError::NoAddress { .. }) && !err.is_usage(),
        "{err}"
    );
    assert_eq!(
        cni_layout(&path),
        Some(CniLayout {
            mode: "transparent".into(),
            bridge: None
        })
    );
}

#[test]
fn edit_distance() {
    let cases = [
        ("ubuntu", "ubuntu", Some(0)),
        ("ubutnu", "ubuntu", Some(2)),
        ("ubunt", "ubuntu", Some(1)),
        ("ubuntux", "ubuntu", Some(1)),
        ("whereami", "whereami-564765b89-qfq2k", None),
        ("", "ab", Some(2)),
        ("", "abc", None),
        ("é", "e", Some(1)),
    ];
    for (a, b, want) in cases {
        assert_eq!(distance_within(a, b, 2), want, "{a} {b}");
    }
}
