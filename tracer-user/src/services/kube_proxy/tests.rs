use std::net::IpAddr;

use super::*;
use crate::rules::ruleset::Raw;

const KUBE_PROXY: &str = include_str!("../../../tests-data/iptables-kube-proxy-services.txt");
const AZURE: &str = include_str!("../../../tests-data/iptables-save-azure-cni.txt");
const NFT: &str = include_str!("../../../tests-data/nft-kube-proxy.json");

fn iptables(dump: &str) -> BTreeMap<String, Service> {
    services(&Ruleset::from_raw(&Raw {
        dumps: vec![("iptables".into(), dump.into())],
        ..Raw::default()
    }))
}

fn nft(json: &str) -> BTreeMap<String, Service> {
    services(&Ruleset::from_raw(&Raw {
        nft_json: vec![json.into()],
        ..Raw::default()
    }))
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

/// `kind addr proto/port` of each front, sorted.
fn fronts(s: &Service) -> Vec<String> {
    s.fronts
        .iter()
        .map(|f| {
            let addr = f.addr.map_or_else(|| "*".to_owned(), |a| a.to_string());
            format!(
                "{} {addr} {}/{}",
                f.kind.as_str(),
                f.proto,
                f.port.unwrap_or(0)
            )
        })
        .collect()
}

/// `addr:port by rule` of each endpoint, sorted.
fn endpoints(s: &Service) -> Vec<String> {
    s.endpoints
        .iter()
        .map(|e| {
            format!(
                "{}:{} by {}",
                e.addr,
                e.port.unwrap_or(0),
                e.rule.as_deref().unwrap_or("?")
            )
        })
        .collect()
}

#[test]
fn iptables_mode_services_fronts_and_endpoints() {
    let found = iptables(KUBE_PROXY);
    let names: Vec<&str> = found.keys().map(String::as_str).collect();
    assert_eq!(
        names,
        [
            "kube-system/kube-dns",
            "shop/cache",
            "shop/legacy",
            "shop/web"
        ]
    );
    let web = &found["shop/web"];
    assert_eq!(web.label, "shop/web");
    assert_eq!(
        fronts(web),
        [
            "cluster IP 10.0.42.7 6/80",
            "external IP 198.51.100.9 6/80",
            "loadbalancer IP 203.0.113.40 6/80",
            "node port * 6/31380",
        ]
    );
    assert_eq!(
        endpoints(web),
        [
            "10.244.1.11:8080 by KUBE-SEP-WEBA1111111111AA",
            "10.244.1.12:8080 by KUBE-SEP-WEBB2222222222BB",
            "10.244.2.13:8080 by KUBE-SEP-WEBC3333333333CC",
        ]
    );
    assert_eq!(
        web.addrs(),
        [
            ip("10.0.42.7"),
            ip("198.51.100.9"),
            ip("203.0.113.40"),
            ip("10.244.1.11"),
            ip("10.244.1.12"),
            ip("10.244.2.13"),
        ]
    );
    let dns = &found["kube-system/kube-dns"];
    assert_eq!(
        fronts(dns),
        ["cluster IP 10.0.0.10 6/53", "cluster IP 10.0.0.10 17/53"]
    );
    // Both ports' rules DNAT to the one address and port: one endpoint.
    assert_eq!(
        endpoints(dns),
        ["10.244.1.5:53 by KUBE-SEP-DNST5555555555EE"]
    );
    assert_eq!(dns.addrs(), [ip("10.0.0.10"), ip("10.244.1.5")]);
    assert_eq!(
        endpoints(&found["shop/cache"]),
        ["10.244.1.20:6379 by KUBE-SEP-CACHE66666666FF"]
    );
}

#[test]
fn a_service_without_endpoints_has_its_fronts_only() {
    let found = iptables(KUBE_PROXY);
    let legacy = &found["shop/legacy"];
    assert_eq!(fronts(legacy), ["cluster IP 10.0.91.4 6/80"]);
    assert!(legacy.endpoints.is_empty());
    assert_eq!(legacy.addrs(), [ip("10.0.91.4")]);
    // Current kube-proxy writes it into the filter table only: not in the nat rules.
    assert!(!found.contains_key("shop/empty"));
}

#[test]
fn the_labs_rules_give_whereami_with_its_loadbalancer_ip() {
    let found = iptables(AZURE);
    let w = &found["default/whereami"];
    assert_eq!(
        fronts(w),
        [
            "cluster IP 10.0.159.58 6/80",
            "loadbalancer IP 203.0.113.251 6/80",
            "node port * 6/30064",
        ]
    );
    assert_eq!(
        endpoints(w),
        [
            "10.13.76.7:80 by KUBE-SEP-IJTMGMPNVALZGJZD",
            "10.13.76.26:80 by KUBE-SEP-6HBOEI5FVFTJNRJ3",
        ]
    );
}

#[test]
fn nftables_mode_services_fronts_and_endpoints() {
    let found = nft(NFT);
    let names: Vec<&str> = found.keys().map(String::as_str).collect();
    assert_eq!(names, ["default/whereami", "kube-system/kube-dns"]);
    let w = &found["default/whereami"];
    assert_eq!(
        fronts(w),
        [
            "cluster IP 10.0.159.58 6/80",
            "external or loadbalancer IP 203.0.113.251 6/80",
            "node port * 6/30064",
        ]
    );
    assert_eq!(
        endpoints(w),
        [
            "10.13.76.7:80 by endpoint-BBBBBBBB-default/whereami/tcp/__10.13.76.7/80",
            "10.13.76.26:80 by endpoint-AAAAAAAA-default/whereami/tcp/__10.13.76.26/80",
        ]
    );
    let dns = &found["kube-system/kube-dns"];
    assert_eq!(fronts(dns), ["cluster IP 10.0.0.10 17/53"]);
    assert_eq!(dns.addrs(), [ip("10.0.0.10"), ip("10.13.76.17")]);
}

/// kube-proxy's nftables mode sends a service without endpoints to `reject-chain` through
/// `no-endpoint-services`, naming it only in the element's comment.
#[test]
fn nftables_mode_service_without_endpoints_from_the_no_endpoint_map() {
    let mut doc: serde_json::Value = serde_json::from_str(NFT).unwrap();
    let items = doc["nftables"].as_array_mut().unwrap();
    items.push(serde_json::json!({"map": {
        "family": "ip", "name": "no-endpoint-services", "table": "kube-proxy",
        "type": ["ipv4_addr", "inet_proto", "inet_service"], "map": "verdict",
        "elem": [[
            {"elem": {"val": {"concat": ["10.0.91.4", "tcp", 80]}, "comment": "default/empty:http"}},
            {"goto": {"target": "reject-chain"}}
        ]]
    }}));
    let found = nft(&doc.to_string());
    let empty = &found["default/empty"];
    assert_eq!(fronts(empty), ["cluster IP 10.0.91.4 6/80"]);
    assert!(empty.endpoints.is_empty());
    assert_eq!(found.len(), 3);
}

#[test]
fn rules_without_kube_proxy_name_no_service() {
    let dump = "*nat\n:POSTROUTING ACCEPT [0:0]\n-A POSTROUTING -s 10.0.0.0/8 -m comment \
                --comment \"a/b c\" -j MASQUERADE\n-A PREROUTING -d 10.1.1.1/32 -j DNAT \
                --to-destination 10.2.2.2\nCOMMIT\n";
    assert!(iptables(dump).is_empty());
}
