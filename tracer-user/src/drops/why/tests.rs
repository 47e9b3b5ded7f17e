//! Drops explained against real-shaped dumps (`testdata/`): kube-proxy in iptables and
//! nftables mode, Calico, Azure NPM, an admin's rules; and the other reasons' lines.
//! The nftables JSON follows nft 1.0.6's `-j` output as sigs.k8s.io/knftables reads it: a
//! commented element key is `{"elem": {"val": …, "comment": …}}`, verdicts `{"drop": null}`,
//! `{"goto": {"target": …}}`.

use tracer_common::{PROTO_ICMP, PROTO_TCP, PROTO_UDP};

use super::{DropFacts, DropRules, DropWhy, Traversal, why};
use crate::{drops::FailureClass, journey::tuple};

const KUBE_FILTER: &str = include_str!("testdata/kube-proxy-filter.txt");
const KUBE_NFT: &str = include_str!("testdata/kube-proxy-nftables.json");
const CALICO: &str = include_str!("testdata/calico-filter.txt");
const CALICO_SETS: &str = include_str!("testdata/calico-ipsets.txt");
/// The lab's Calico policy scenario (`cargo xtask lab up --variant calico`, then
/// `xtask::lab::drops::Scenario::CalicoPolicy`): the very rules the root test drops through.
const LAB_CALICO: &str = include_str!("../../../../tests/lab/src/drops/calico-policy-filter.txt");
const LAB_CALICO_SETS: &str =
    include_str!("../../../../tests/lab/src/drops/calico-policy-ipsets.txt");
const NPM: &str = include_str!("testdata/azure-npm-filter.txt");
const NPM_SETS: &str = include_str!("testdata/azure-npm-ipsets.txt");
const ADMIN: &str = include_str!("testdata/admin-drop.txt");
const ADMIN_SETS: &str = include_str!("testdata/admin-ipsets.txt");

fn facts(proto: u8, src: &str, dst: &str, traversal: Option<Traversal>) -> DropFacts {
    DropFacts {
        tuple: tuple(proto, src.parse().unwrap(), dst.parse().unwrap()),
        reason: "NETFILTER_DROP".into(),
        location: Some("nft_do_chain".into()),
        traversal,
        local_addrs: vec!["10.224.0.4".parse().unwrap()],
        ..DropFacts::default()
    }
}

fn iptables(text: &str, sets: Option<&str>) -> DropRules {
    DropRules::parse(&[("iptables-nft", text)], &[], sets)
}

fn explain(rules: &DropRules, drop: &DropFacts) -> DropWhy {
    why(rules, drop).expect("a netfilter drop is always explained")
}

#[test]
fn kube_proxy_iptables_names_the_service_without_endpoints() {
    let rules = iptables(KUBE_FILTER, None);
    let drop = facts(
        PROTO_TCP,
        "10.13.76.46:41000",
        "10.0.88.14:80",
        Some(Traversal::Forward),
    );
    let got = explain(&rules, &drop);
    assert_eq!(got.class, FailureClass::NoEndpoints, "{got:?}");
    assert_eq!(
        got.rule.as_deref(),
        Some("KUBE-SERVICES: default/orders:http has no endpoints")
    );
    assert_eq!(got.service.as_deref(), Some("default/orders"));
    assert!(got.why.starts_with("kube-proxy rejects tcp 10.13.76.46:41000 > 10.0.88.14:80: service default/orders:http has no endpoints"), "{}", got.why);
    assert!(
        got.why.contains("kubernetes.io/service-name=orders"),
        "{}",
        got.why
    );
}

#[test]
fn unknown_hook_is_tried_in_order_and_said() {
    let rules = iptables(KUBE_FILTER, None);
    // A NodePort of the node itself: not forwarded, found when replayed as local-in.
    let drop = facts(PROTO_TCP, "198.51.100.9:52000", "10.224.0.4:31380", None);
    let got = explain(&rules, &drop);
    assert_eq!(
        got.rule.as_deref(),
        Some("KUBE-EXTERNAL-SERVICES: default/orders:http has no endpoints")
    );
    assert!(
        got.why
            .contains("replayed as local-in (tried in order: local-in, local-out)"),
        "{}",
        got.why
    );
    // Without the node's addresses every traversal is tried, forwarded first.
    let mut drop = facts(PROTO_TCP, "10.13.76.46:41000", "10.0.88.14:80", None);
    drop.local_addrs.clear();
    let got = explain(&rules, &drop);
    assert!(
        got.why
            .contains("replayed as forwarded (tried in order: forwarded, local-in, local-out)"),
        "{}",
        got.why
    );
}

#[test]
fn kube_proxy_load_balancer_source_ranges() {
    let rules = iptables(KUBE_FILTER, None);
    let drop = facts(
        PROTO_TCP,
        "192.0.2.10:40000",
        "203.0.113.251:80",
        Some(Traversal::Forward),
    );
    let got = explain(&rules, &drop);
    assert_eq!(got.class, FailureClass::Policy, "{got:?}");
    assert_eq!(got.service.as_deref(), Some("default/whereami"));
    assert!(
        got.rule
            .unwrap()
            .starts_with("KUBE-PROXY-FIREWALL: default/whereami:http traffic not accepted")
    );
    assert!(
        got.why.contains(
            "192.0.2.10 is not in the loadBalancerSourceRanges of service default/whereami:http"
        ),
        "{}",
        got.why
    );
}

#[test]
fn kube_firewall_localnet() {
    let rules = iptables(KUBE_FILTER, None);
    let drop = facts(
        PROTO_TCP,
        "10.13.76.46:41000",
        "127.0.0.1:10248",
        Some(Traversal::LocalIn),
    );
    let got = explain(&rules, &drop);
    assert_eq!(got.class, FailureClass::Firewall, "{got:?}");
    assert_eq!(
        got.rule.as_deref(),
        Some("KUBE-FIREWALL: block incoming localnet connections")
    );
    assert_eq!(got.service, None);
    assert!(got.why.contains("127.0.0.0/8"), "{}", got.why);
    // The `! --ctstate RELATED,ESTABLISHED,DNAT` was taken on the NEW assumption, and said.
    assert!(
        got.why.contains("conntrack state taken as NEW"),
        "{}",
        got.why
    );
}

#[test]
fn no_drop_rule_matching_names_no_rule() {
    let rules = iptables(KUBE_FILTER, None);
    // A service with endpoints: after DNAT, to a pod; nothing in filter drops it.
    let drop = facts(
        PROTO_TCP,
        "10.13.76.46:41000",
        "10.13.76.26:80",
        Some(Traversal::Forward),
    );
    let got = explain(&rules, &drop);
    assert_eq!(got.class, FailureClass::Other, "{got:?}");
    assert_eq!(got.rule, None);
    assert_eq!(got.service, None);
    assert!(
        got.why.contains(
            "no DROP or REJECT rule of iptables-nft filter matches it when replayed as forwarded"
        ),
        "{}",
        got.why
    );
}

#[test]
fn an_invalid_packet_is_named_only_when_its_state_is_known() {
    let rules = iptables(KUBE_FILTER, None);
    // An out-of-window segment of a connection to a pod: only KUBE-FORWARD's INVALID rule
    // drops it. Without the state, no rule is named; the why says what INVALID would mean.
    let mut drop = facts(
        PROTO_TCP,
        "10.13.76.46:41000",
        "10.13.76.26:80",
        Some(Traversal::Forward),
    );
    let got = explain(&rules, &drop);
    assert_eq!(got.rule, None);
    assert!(
        got.why.contains("if conntrack found it INVALID (out of window, or its entry gone), KUBE-FORWARD: kubernetes forwarding rules drops it"),
        "{}",
        got.why
    );
    drop.ct_state = Some("INVALID".into());
    let got = explain(&rules, &drop);
    assert_eq!(
        got.rule.as_deref(),
        Some("KUBE-FORWARD: kubernetes forwarding rules")
    );
    assert!(got.why.contains("conntrack INVALID packets"), "{}", got.why);
    // An established packet passes Calico's endpoint chain.
    let calico = iptables(CALICO, Some(CALICO_SETS));
    let mut drop = facts(
        PROTO_TCP,
        "10.13.76.99:41000",
        "10.13.76.50:5432",
        Some(Traversal::Forward),
    );
    drop.out_iface = Some("cali12d4a061371".into());
    drop.ct_state = Some("ESTABLISHED".into());
    assert_eq!(explain(&calico, &drop).rule, None);
}

#[test]
fn rules_without_table_headers_are_the_filter_table() {
    let text = "-P FORWARD ACCEPT\n-A FORWARD -s 192.0.2.0/24 -j DROP\n";
    let rules = DropRules::parse(&[("iptables", text)], &[], None);
    let labels: Vec<&str> = rules
        .tables
        .iter()
        .map(|t| t.rules.label.as_str())
        .collect();
    assert_eq!(labels, ["iptables filter"]);
    let drop = facts(
        PROTO_UDP,
        "192.0.2.1:53",
        "10.13.76.26:53",
        Some(Traversal::Forward),
    );
    assert_eq!(
        explain(&rules, &drop).rule.as_deref(),
        Some("FORWARD: -A FORWARD -s 192.0.2.0/24 -j DROP")
    );
}

#[test]
fn an_unknown_kube_proxy_rule_is_still_kube_proxys() {
    let text = "*filter\n:INPUT ACCEPT [0:0]\n:KUBE-NEW - [0:0]\n\
        -A INPUT -j KUBE-NEW\n-A KUBE-NEW -p udp -m udp --dport 9 -j DROP\nCOMMIT\n";
    let rules = iptables(text, None);
    let drop = facts(
        PROTO_UDP,
        "192.0.2.1:53",
        "10.224.0.4:9",
        Some(Traversal::LocalIn),
    );
    let got = explain(&rules, &drop);
    assert!(
        got.why
            .starts_with("kube-proxy drops udp 192.0.2.1:53 > 10.224.0.4:9 in KUBE-NEW"),
        "{}",
        got.why
    );
}

#[test]
fn ipv6_rules_and_packets() {
    let text = "*filter\n:INPUT ACCEPT [0:0]\n\
        -A INPUT -s 192.0.2.0/24 -p tcp -m tcp --dport 22 -j DROP\n\
        -A INPUT -s 2001:db8:bad::/48 -p tcp -m tcp --dport 22 -j DROP\n\
        COMMIT\n";
    let rules = DropRules::parse(&[("ip6tables-nft", text)], &[], None);
    let drop = facts(
        PROTO_TCP,
        "[2001:db8:bad::7]:50000",
        "[fd00::4]:22",
        Some(Traversal::LocalIn),
    );
    let got = explain(&rules, &drop);
    assert_eq!(
        got.rule.as_deref(),
        Some("INPUT: -A INPUT -s 2001:db8:bad::/48 -p tcp -m tcp --dport 22 -j DROP")
    );
    assert!(
        got.why.contains("2001:db8:bad::7 in 2001:db8:bad::/48"),
        "{}",
        got.why
    );
    let other = facts(
        PROTO_TCP,
        "[2001:db8:900d::7]:50000",
        "[fd00::4]:22",
        Some(Traversal::LocalIn),
    );
    assert_eq!(explain(&rules, &other).rule, None);
}

fn nft_rules() -> DropRules {
    DropRules::parse(&[], &[KUBE_NFT], None)
}

#[test]
fn kube_proxy_nftables_no_endpoint_services_map() {
    let rules = nft_rules();
    assert_eq!(rules.tables.len(), 1);
    let drop = facts(
        PROTO_TCP,
        "10.13.76.46:41000",
        "10.0.88.14:80",
        Some(Traversal::Forward),
    );
    let got = explain(&rules, &drop);
    assert_eq!(got.class, FailureClass::NoEndpoints, "{got:?}");
    assert_eq!(
        got.rule.as_deref(),
        Some("nft table ip kube-proxy reject-chain: rule 1 (REJECT)")
    );
    assert_eq!(got.service.as_deref(), Some("default/orders"));
    assert!(
        got.why
            .contains("service default/orders:http has no endpoints"),
        "{}",
        got.why
    );
}

#[test]
fn kube_proxy_nftables_drop_verdict_and_nodeports() {
    let rules = nft_rules();
    let local_only = facts(
        PROTO_TCP,
        "192.0.2.10:40000",
        "203.0.113.253:443",
        Some(Traversal::Forward),
    );
    let got = explain(&rules, &local_only);
    assert_eq!(got.service.as_deref(), Some("default/local-only"));
    assert_eq!(
        got.rule.as_deref(),
        Some("nft table ip kube-proxy service-endpoints-check: rule 1 (DROP)")
    );
    let nodeport = facts(
        PROTO_TCP,
        "192.0.2.10:40000",
        "10.224.0.4:31380",
        Some(Traversal::LocalIn),
    );
    let got = explain(&rules, &nodeport);
    assert_eq!(got.service.as_deref(), Some("default/orders"));
    assert!(got.why.contains("has no endpoints"), "{}", got.why);
}

#[test]
fn kube_proxy_nftables_checks_only_new_connections() {
    let rules = nft_rules();
    let mut drop = facts(
        PROTO_TCP,
        "10.13.76.46:41000",
        "10.0.88.14:80",
        Some(Traversal::Forward),
    );
    let got = explain(&rules, &drop);
    assert!(
        got.why
            .contains("conntrack state taken as NEW for `--ctstate NEW`"),
        "{}",
        got.why
    );
    drop.ct_state = Some("NEW".into());
    let got = explain(&rules, &drop);
    assert_eq!(got.service.as_deref(), Some("default/orders"));
    assert!(!got.why.contains("taken as NEW"), "{}", got.why);
    // `ct state new jump …`: an established connection's packet is not checked.
    drop.ct_state = Some("ESTABLISHED".into());
    assert_eq!(explain(&rules, &drop).rule, None);
}

#[test]
fn kube_proxy_nftables_unallocated_cluster_ip_and_no_match() {
    let rules = nft_rules();
    let stray = facts(
        PROTO_TCP,
        "10.13.76.46:41000",
        "10.0.7.7:80",
        Some(Traversal::Forward),
    );
    let got = explain(&rules, &stray);
    assert_eq!(
        got.rule.as_deref(),
        Some("nft table ip kube-proxy cluster-ips-check: Drop traffic to unallocated ClusterIPs")
    );
    assert!(
        got.why.contains("10.0.7.7 is in the service CIDR"),
        "{}",
        got.why
    );
    assert_eq!(got.service, None);
    let fine = facts(
        PROTO_TCP,
        "10.13.76.46:41000",
        "10.13.76.26:80",
        Some(Traversal::Forward),
    );
    assert_eq!(explain(&rules, &fine).rule, None);
}

#[test]
fn calico_names_the_endpoint_and_its_policies() {
    let rules = iptables(CALICO, Some(CALICO_SETS));
    let mut drop = facts(
        PROTO_TCP,
        "10.13.76.99:41000",
        "10.13.76.50:5432",
        Some(Traversal::Forward),
    );
    drop.out_iface = Some("cali12d4a061371".into());
    let got = explain(&rules, &drop);
    assert_eq!(got.class, FailureClass::Policy, "{got:?}");
    assert_eq!(
        got.rule.as_deref(),
        Some("cali-tw-cali12d4a061371: Drop if no policies passed packet")
    );
    assert_eq!(got.service, None);
    assert!(got.why.starts_with("no Calico policy allowed this packet (policies: cali-pi-_tTE-E7yY40ogArNVgKt) to the workload on cali12d4a061371 (ingress)"), "{}", got.why);
    // A frontend pod (in the policy's ipset) is allowed: no rule drops it.
    let mut allowed = facts(
        PROTO_TCP,
        "10.13.76.31:41000",
        "10.13.76.50:5432",
        Some(Traversal::Forward),
    );
    allowed.out_iface = Some("cali12d4a061371".into());
    assert_eq!(explain(&rules, &allowed).rule, None);
}

#[test]
fn calico_policy_comment_names_the_policy() {
    let text = "*filter\n:FORWARD ACCEPT [0:0]\n\
        -A FORWARD -o cali+ -j cali-tw-caliabc\n\
        -A cali-tw-caliabc -j cali-pi-_X\n\
        -A cali-pi-_X -m comment --comment \"cali:a1\" -m comment --comment \"Policy default/deny-db ingress\" -s 192.0.2.0/24 -j DROP\n\
        COMMIT\n";
    let rules = iptables(text, None);
    let drop = facts(
        PROTO_TCP,
        "192.0.2.3:1000",
        "10.13.76.50:5432",
        Some(Traversal::Forward),
    );
    let got = explain(&rules, &drop);
    assert!(
        got.why.starts_with(
            "Calico policy default/deny-db denies this packet to the workload on caliabc"
        ),
        "{}",
        got.why
    );
}

/// The lab's Calico node: `cali-FORWARD` → dispatch (`-i`/`-o cali+`, `-g`) → the endpoint
/// chains, marks set and tested on the way (0x10000 accept, 0x20000 pass), the policy's ipset,
/// profiles; Kubernetes' policy named from felix's comment.
#[test]
fn calico_lab_policy_drop_is_named_with_its_network_policy() {
    let rules = iptables(LAB_CALICO, Some(LAB_CALICO_SETS));
    let pod = |src: &str, dst: &str, in_if: &str, out_if: &str| {
        let mut d = facts(PROTO_TCP, src, dst, Some(Traversal::Forward));
        d.in_iface = Some(in_if.into());
        d.out_iface = Some(out_if.into());
        d
    };
    let denied = pod(
        "10.13.76.46:41000",
        "10.13.76.26:80",
        "cali47c3ee9d512",
        "calia4124965a9b",
    );
    let got = explain(&rules, &denied);
    assert_eq!(
        got.rule.as_deref(),
        Some("cali-tw-calia4124965a9b: Drop if no policies passed packet")
    );
    assert_eq!(got.service, None);
    assert_eq!(
        got.why,
        "no Calico policy allowed this packet (policies: NetworkPolicy \
         default/whereami-ingress) to the workload on calia4124965a9b (ingress); look at \
         `kubectl get networkpolicy -A` and Calico's policies (mark 0x0)"
    );
    // The other whereami pod has no policy: its profile accepts; a frontend pod (in the
    // policy's ipset) reaches the selected one; the replies' way back is profile-accepted too.
    for allowed in [
        pod(
            "10.13.76.46:41000",
            "10.13.76.7:80",
            "cali47c3ee9d512",
            "cali1a68ecb6fb1",
        ),
        pod(
            "10.13.76.31:41000",
            "10.13.76.26:80",
            "cali0000000031",
            "calia4124965a9b",
        ),
        pod(
            "10.13.76.7:80",
            "10.13.76.46:41000",
            "cali1a68ecb6fb1",
            "cali47c3ee9d512",
        ),
    ] {
        let got = explain(&rules, &allowed);
        if allowed.in_iface.as_deref() == Some("cali0000000031") {
            // An interface no endpoint has: Calico's dispatch drops it.
            assert_eq!(
                got.rule.as_deref(),
                Some("cali-from-wl-dispatch: Unknown interface")
            );
            continue;
        }
        assert_eq!(got.rule, None, "{allowed:?}: {got:?}");
    }
    // The policy only allows tcp/80: a frontend pod on another port is denied.
    let mut other_port = pod(
        "10.13.76.31:41000",
        "10.13.76.26:8080",
        "cali1a68ecb6fb1",
        "calia4124965a9b",
    );
    other_port.in_iface = Some("cali1a68ecb6fb1".into());
    assert!(explain(&rules, &other_port).rule.is_some());
    // IPinIP from a workload: `-p ipencap` is protocol 4, dropped in the endpoint chain.
    let mut ipip = pod("10.13.76.46:0", "10.13.1.4:0", "cali47c3ee9d512", "eth0");
    ipip.tuple.proto = 4;
    assert_eq!(
        explain(&rules, &ipip).rule.as_deref(),
        Some("cali-fw-cali47c3ee9d512: Drop IPinIP encapped packets originating in workloads")
    );
}

#[test]
fn calico_policy_names_from_felix_comments() {
    for (comment, want) in [
        (
            "Policy default/knp.default.web ingress",
            "NetworkPolicy default/web denies",
        ),
        (
            "KubernetesNetworkPolicy default/web ingress",
            "NetworkPolicy default/web denies",
        ),
        (
            "GlobalNetworkPolicy default.deny-all egress",
            "GlobalNetworkPolicy default.deny-all denies",
        ),
        ("not a policy comment", "Calico policy cali-pi-_X denies"),
    ] {
        let text = format!(
            "*filter\n:FORWARD ACCEPT [0:0]\n\
             -A FORWARD -o cali+ -j cali-tw-caliabc\n\
             -A cali-tw-caliabc -j cali-pi-_X\n\
             -A cali-pi-_X -m comment --comment \"{comment}\" -s 192.0.2.0/24 -j DROP\n\
             COMMIT\n"
        );
        let rules = iptables(&text, None);
        let drop = facts(
            PROTO_TCP,
            "192.0.2.3:1000",
            "10.13.76.50:5432",
            Some(Traversal::Forward),
        );
        let got = explain(&rules, &drop);
        assert!(got.why.starts_with(want), "{comment}: {}", got.why);
    }
}

#[test]
fn azure_npm_drop() {
    let rules = iptables(NPM, Some(NPM_SETS));
    let drop = facts(
        PROTO_TCP,
        "10.13.76.46:41000",
        "10.13.76.26:80",
        Some(Traversal::Forward),
    );
    let got = explain(&rules, &drop);
    assert_eq!(got.class, FailureClass::Policy, "{got:?}");
    assert_eq!(
        got.rule.as_deref(),
        Some("AZURE-NPM-INGRESS-DROPS: DROP-ALL-TO-app:backend-IN-ns-default")
    );
    assert_eq!(got.service, None);
    assert!(
        got.why.starts_with("Azure NPM drops this packet"),
        "{}",
        got.why
    );
    assert!(
        got.why.contains("in ipset azure-npm-2837910840"),
        "{}",
        got.why
    );
    // A pod the policy does not select: the sets say no, nothing drops it.
    let other = facts(
        PROTO_TCP,
        "10.13.76.26:41000",
        "10.13.76.46:80",
        Some(Traversal::Forward),
    );
    assert_eq!(explain(&rules, &other).rule, None);
}

#[test]
fn azure_npm_policy_named_from_the_jump() {
    let text = "*filter\n:FORWARD ACCEPT [0:0]\n\
        -A FORWARD -j AZURE-NPM\n\
        -A AZURE-NPM -j AZURE-NPM-INGRESS\n\
        -A AZURE-NPM-INGRESS -d 10.13.76.26/32 -m comment --comment \"INGRESS-POLICY-default/deny-all-TO-podlabel-app:backend-IN-ns-default\" -j AZURE-NPM-INGRESS-2697641196\n\
        -A AZURE-NPM-INGRESS-2697641196 -m comment --comment \"DROP-ALL-TO-podlabel-app:backend-IN-ns-default\" -j DROP\n\
        COMMIT\n";
    let rules = iptables(text, None);
    let drop = facts(
        PROTO_TCP,
        "10.13.76.46:41000",
        "10.13.76.26:80",
        Some(Traversal::Forward),
    );
    let got = explain(&rules, &drop);
    assert!(
        got.why.starts_with(
            "Azure NPM drops this packet: NetworkPolicy default/deny-all selects it and"
        ),
        "{}",
        got.why
    );
}

#[test]
fn admin_rules_are_shown_as_written() {
    let rules = DropRules::parse(&[("iptables-legacy", ADMIN)], &[], Some(ADMIN_SETS));
    let ssh = facts(
        PROTO_TCP,
        "198.51.100.7:50000",
        "10.13.76.26:22",
        Some(Traversal::Forward),
    );
    let got = explain(&rules, &ssh);
    assert_eq!(got.class, FailureClass::Firewall, "{got:?}");
    assert_eq!(
        got.rule.as_deref(),
        Some("DOCKER-USER: -A DOCKER-USER -s 198.51.100.0/24 -p tcp -m tcp --dport 22 -j DROP")
    );
    assert!(
        got.why
            .starts_with("a DROP rule in filter DOCKER-USER (not kube-proxy's"),
        "{}",
        got.why
    );
    // raw PREROUTING runs first.
    let raw = facts(
        PROTO_UDP,
        "192.0.2.66:53",
        "10.13.76.26:5353",
        Some(Traversal::Forward),
    );
    assert_eq!(
        explain(&rules, &raw).rule.as_deref(),
        Some("raw PREROUTING: -A PREROUTING -s 192.0.2.66/32 -j DROP")
    );
    // Nothing accepts azure0 → outside: the FORWARD policy drops it.
    let mut policy = facts(
        PROTO_TCP,
        "10.13.76.26:41000",
        "192.0.2.80:443",
        Some(Traversal::Forward),
    );
    policy.in_iface = Some("azure0".into());
    policy.out_iface = Some("azure1".into());
    let got = explain(&rules, &policy);
    assert_eq!(got.rule.as_deref(), Some("FORWARD policy DROP"));
    // An ipset match on INPUT.
    let kubelet = facts(
        PROTO_TCP,
        "203.0.113.5:40000",
        "10.224.0.4:10250",
        Some(Traversal::LocalIn),
    );
    let got = explain(&rules, &kubelet);
    assert_eq!(
        got.rule.as_deref(),
        Some(
            "INPUT: -A INPUT -p tcp -m tcp --dport 10250 -m set --match-set admin-blocked src -j REJECT --reject-with tcp-reset"
        )
    );
    let outside = facts(
        PROTO_TCP,
        "203.0.113.200:40000",
        "10.224.0.4:10250",
        Some(Traversal::LocalIn),
    );
    assert_eq!(explain(&rules, &outside).rule, None);
}

#[test]
fn older_kernels_netfilter_location_without_reason() {
    let rules = iptables(KUBE_FILTER, None);
    let mut drop = facts(
        PROTO_TCP,
        "10.13.76.46:41000",
        "10.0.88.14:80",
        Some(Traversal::Forward),
    );
    drop.reason = "NOT_SPECIFIED".into();
    drop.location = Some("nf_hook_slow".into());
    assert_eq!(
        explain(&rules, &drop).service.as_deref(),
        Some("default/orders")
    );
    drop.location = Some("kfree_skb_list".into());
    let got = explain(&rules, &drop);
    assert_eq!(got.rule, None);
    assert!(got.why.contains("freed in kfree_skb_list"), "{}", got.why);
    drop.location = None;
    assert_eq!(why(&rules, &drop), None);
}

#[test]
fn other_reasons_fill_in_the_packet() {
    let rules = DropRules::default();
    let mut drop = facts(PROTO_TCP, "10.13.76.46:41000", "10.0.0.5:8080", None);
    drop.in_iface = Some("eth0".into());
    drop.out_iface = Some("azv47c3ee9d512".into());
    let cases = [
        ("NO_SOCKET", "nothing listens on 10.0.0.5 tcp/8080"),
        ("IP_NOROUTE", "no route to 10.0.0.5"),
        ("IP_INNOROUTES", "no route to 10.0.0.5"),
        ("IP_OUTNOROUTES", "no route to 10.0.0.5"),
        (
            "NEIGH_FAILED",
            "no ARP answer from 10.0.0.5 on azv47c3ee9d512",
        ),
        ("NEIGH_QUEUEFULL", "no ARP/ND answer from 10.0.0.5"),
        ("IP_RPFILTER", "reverse-path filter on eth0"),
        (
            "TCP_INVALID_SEQUENCE",
            "TCP refused tcp 10.13.76.46:41000 > 10.0.0.5:8080",
        ),
        ("NF_CONNTRACK", "INVALID"),
        ("OTHERHOST", "another host's MAC on eth0"),
        ("PKT_TOO_SMALL", "truncated"),
        ("TC_EGRESS", "tc egress of azv47c3ee9d512"),
        ("TC_INGRESS", "tc ingress of eth0"),
        ("TC_CHAIN_NOTFOUND", "a tc hook"),
        ("QDISC_DROP", "queueing discipline of azv47c3ee9d512"),
        ("QDISC_EGRESS", "queueing discipline"),
        ("FULL_RING", "ring of eth0 was full"),
        ("SOME_FUTURE_REASON", "(SOME_FUTURE_REASON in nft_do_chain)"),
    ];
    for (reason, want) in cases {
        drop.reason = reason.into();
        let got = why(&rules, &drop).unwrap();
        assert_eq!(got.rule, None, "{reason}");
        assert!(got.why.contains(want), "{reason}: {}", got.why);
    }
    drop.tuple = tuple(
        PROTO_ICMP,
        "10.13.76.46:0".parse().unwrap(),
        "10.0.0.5:0".parse().unwrap(),
    );
    drop.reason = "NEIGH_FAILED".into();
    assert!(why(&rules, &drop).unwrap().why.contains("10.0.0.5"));
    // Through a gateway, the neighbour is the gateway; over IPv6 it is NDP.
    drop.next_hop = Some("10.13.0.1".parse().unwrap());
    drop.out_iface = Some("eth0".into());
    let got = why(&rules, &drop).unwrap().why;
    assert!(
        got.starts_with("no ARP answer from 10.13.0.1 on eth0:"),
        "{got}"
    );
    drop.tuple = tuple(
        PROTO_UDP,
        "[2001:db8::46]:5000".parse().unwrap(),
        "[2001:db8::9]:53".parse().unwrap(),
    );
    drop.next_hop = None;
    let got = why(&rules, &drop).unwrap().why;
    assert!(
        got.starts_with("no NDP answer from 2001:db8::9 on eth0:"),
        "{got}"
    );
    // A kernel without drop reasons (5.10): the neighbour code that freed it says as much.
    drop.reason = "NOT_SPECIFIED".into();
    drop.location = Some("neigh_invalidate".into());
    let got = why(&rules, &drop).unwrap().why;
    assert!(
        got.starts_with("no NDP answer from 2001:db8::9 on eth0:")
            && got.contains("(the kernel gave no reason: neigh_invalidate freed it)")
            && !got.contains("NEIGH_FAILED"),
        "{got}"
    );
}

#[test]
fn read_from_the_node_tools() {
    use crate::rules::{ExplainError, source::Output};
    let run = |program: &str, args: &[&str]| -> Result<Output, ExplainError> {
        let stdout = match (program, args) {
            ("iptables-nft-save", []) => KUBE_FILTER,
            ("nft", ["list", "tables"]) => "table ip filter\ntable ip kube-proxy\n",
            ("nft", ["-j", "list", "table", "ip", "kube-proxy"]) => KUBE_NFT,
            ("ipset", ["save"]) => ADMIN_SETS,
            _ => {
                return Err(ExplainError::NotInstalled {
                    tried: program.into(),
                });
            }
        };
        Ok(Output {
            stdout: stdout.into(),
        })
    };
    let rules = DropRules::read_from(&run, false);
    let labels: Vec<&str> = rules
        .tables
        .iter()
        .map(|t| t.rules.label.as_str())
        .collect();
    assert_eq!(labels, ["iptables-nft filter", "nft table ip kube-proxy"]);
    assert!(rules.notes.is_empty(), "{:?}", rules.notes);
    let drop = facts(
        PROTO_TCP,
        "10.13.76.46:41000",
        "10.0.88.14:80",
        Some(Traversal::Forward),
    );
    assert_eq!(
        explain(&rules, &drop).rule.as_deref(),
        Some("KUBE-SERVICES: default/orders:http has no endpoints")
    );
}
