use std::time::Duration;

use serde_json::json;

use super::*;
use crate::{
    kubernetes::fake_api::{FakeApi, Scenario},
    resolve::api::tests::{TOKEN, kubeconfig, source},
    rules::ruleset_from_iptables,
};

const KUBE_PROXY: &str = include_str!("../../tests-data/iptables-kube-proxy-services.txt");

#[test]
fn found_in_the_rules_with_its_addresses() {
    let rules = ruleset_from_iptables(KUBE_PROXY);
    let found = resolve(Ok(&rules), None, "shop", "web").unwrap();
    assert_eq!(found.service.label, "shop/web");
    assert!(
        found.via.starts_with("the node's nat rules"),
        "{}",
        found.via
    );
    assert_eq!(found.service.addrs().len(), 6);
    assert_eq!(
        describe(&found.service),
        "cluster IP 10.0.42.7:80/tcp, external IP 198.51.100.9:80/tcp, loadbalancer IP \
         203.0.113.40:80/tcp, node port 31380/tcp; endpoints 10.244.1.11:8080 \
         (KUBE-SEP-WEBA1111111111AA), 10.244.1.12:8080 (KUBE-SEP-WEBB2222222222BB), \
         10.244.2.13:8080 (KUBE-SEP-WEBC3333333333CC)"
    );
}

#[test]
fn unknown_service_lists_the_namespaces_services_and_is_a_usage_error() {
    let rules = ruleset_from_iptables(KUBE_PROXY);
    let err = resolve(Ok(&rules), None, "shop", "wbe").unwrap_err();
    assert!(err.is_usage());
    let text = err.to_string();
    assert!(
        text.contains("service shop/wbe not found")
            && text.contains("services in namespace shop: cache, legacy, web"),
        "{text}"
    );
    let err = resolve(Ok(&rules), None, "nowhere", "web").unwrap_err();
    assert!(
        err.to_string()
            .ends_with("services in namespace nowhere: none"),
        "{err}"
    );
}

#[test]
fn no_readable_source_is_not_a_usage_error() {
    let err = resolve(
        Err("iptables-save: not installed".into()),
        None,
        "shop",
        "web",
    )
    .unwrap_err();
    assert!(!err.is_usage());
    assert!(
        err.to_string().contains("iptables-save: not installed"),
        "{err}"
    );
}

#[test]
fn api_objects_give_fronts_and_ready_endpoints() {
    let service = json!({
        "metadata": {"name": "web", "namespace": "shop"},
        "spec": {
            "clusterIP": "10.0.42.7", "clusterIPs": ["10.0.42.7"],
            "externalIPs": ["198.51.100.9"],
            "ports": [{"name": "http", "protocol": "TCP", "port": 80, "targetPort": 8080,
                       "nodePort": 31380}]
        },
        "status": {"loadBalancer": {"ingress": [{"ip": "203.0.113.40"}]}}
    });
    let slice = json!({
        "ports": [{"name": "http", "protocol": "TCP", "port": 8080}],
        "endpoints": [
            {"addresses": ["10.244.1.11"], "conditions": {"ready": true}},
            {"addresses": ["10.244.1.12"], "conditions": {"ready": false}},
            {"addresses": ["10.244.2.13"]}
        ]
    });
    let s = api::from_objects("shop/web", &service, &[slice]);
    assert_eq!(
        describe(&s),
        "cluster IP 10.0.42.7:80/tcp, external IP 198.51.100.9:80/tcp, loadbalancer IP \
         203.0.113.40:80/tcp, node port 31380/tcp; endpoints 10.244.1.11:8080, 10.244.2.13:8080"
    );
    // A headless service without endpoints: nothing to trace but what it is.
    let headless = json!({"spec": {"clusterIP": "None", "ports": [{"port": 80}]}});
    let s = api::from_objects("shop/h", &headless, &[]);
    assert!(s.addrs().is_empty());
    assert_eq!(describe(&s), "no front address; endpoints none");
}

fn web_objects() -> (serde_json::Value, serde_json::Value) {
    let service = json!({
        "metadata": {"name": "web", "namespace": "shop"},
        "spec": {"clusterIPs": ["10.0.42.7"],
                 "ports": [{"protocol": "TCP", "port": 80, "nodePort": 31380}]}
    });
    let slice = json!({
        "metadata": {"name": "web-abcde", "namespace": "shop",
                     "labels": {"kubernetes.io/service-name": "web"}},
        "ports": [{"port": 8080, "protocol": "TCP"}],
        "endpoints": [{"addresses": ["10.244.1.11"], "conditions": {"ready": true}}]
    });
    (service, slice)
}

/// The rules do not hold the service (no kube-proxy here): the API gives it.
#[test]
fn the_api_resolves_what_the_rules_do_not_hold() {
    let (service, slice) = web_objects();
    let other = json!({"metadata": {"name": "db", "namespace": "shop"}, "spec": {}});
    let api = FakeApi::start(Scenario {
        token: Some(TOKEN.into()),
        services: vec![service, other],
        endpoint_slices: vec![slice],
        ..Scenario::default()
    });
    let kube = source(&kubeconfig(&api.url, TOKEN), Duration::from_secs(2));
    let empty = ruleset_from_iptables("*nat\n:PREROUTING ACCEPT [0:0]\nCOMMIT\n");
    let found = resolve(Ok(&empty), Some(&kube), "shop", "web").unwrap();
    assert_eq!(found.via, format!("the Kubernetes API {}", api.url));
    assert_eq!(
        found.fallbacks,
        ["the node's nat rules: no kube-proxy rule names it (0 services)"]
    );
    assert_eq!(
        describe(&found.service),
        "cluster IP 10.0.42.7:80/tcp, node port 31380/tcp; endpoints 10.244.1.11:8080"
    );
    // Unknown to both: the API's services of the namespace are listed.
    let err = resolve(Ok(&empty), Some(&kube), "shop", "wbe").unwrap_err();
    assert!(err.is_usage());
    assert!(
        err.to_string()
            .ends_with("does not exist (404); services in namespace shop: db, web"),
        "{err}"
    );
}
