//! Naming the rule that dropped a packet, and its owner: kube-proxy (a service without
//! endpoints, a LoadBalancer source range, the localnet firewall), Calico (an endpoint's
//! policies), Azure NPM (a `NetworkPolicy`), or the admin (the rule as written).

use std::net::IpAddr;

use tracer_common::{FAMILY_IPV6, PROTO_TCP, PROTO_UDP};

use super::{DropFacts, DropTable, DropWhy};
use crate::{
    drops::FailureClass,
    rules::{
        eval::{DropHit, assumed, render_facts},
        nft::service_of_chain,
        service_of,
    },
    util::tuple::{dst_ip, proto_spelled, src_ip},
};

/// The explanation of `hit` in `table` for the dropped packet.
pub fn named(table: &DropTable, hit: &DropHit<'_>, drop: &DropFacts) -> DropWhy {
    let rule = Some(rule_text(table, hit));
    let service = service(table, hit);
    let owner = kube_proxy(hit, service.as_deref(), drop)
        .or_else(|| is_kube_proxy(table, hit).then(|| kube_proxy_other(hit, drop)))
        .or_else(|| calico(table, hit))
        .or_else(|| azure_npm(table, hit))
        .unwrap_or_else(|| admin(table, hit));
    let facts = render_facts(&hit.facts);
    let facts = if facts.is_empty() {
        String::new()
    } else {
        format!(" ({facts})")
    };
    DropWhy {
        class: class_of(table, hit, service.as_deref()),
        rule,
        why: format!("{owner}{facts}{}", assumed(&hit.notes)),
        service,
    }
}

/// The failure class of a rule's drop, by whose rule it is and what it tests: kube-proxy's
/// for a service without endpoints, a policy engine's (or a LoadBalancer's source ranges),
/// a rule on conntrack's `INVALID` state, else any other rule's.
fn class_of(table: &DropTable, hit: &DropHit<'_>, service: Option<&str>) -> FailureClass {
    if service.is_some() && no_endpoints(hit) {
        FailureClass::NoEndpoints
    } else if (service.is_some() && outside_source_ranges(hit))
        || hit
            .path
            .iter()
            .any(|c| c.starts_with("cali-") || c.starts_with("AZURE-NPM"))
    {
        FailureClass::Policy
    } else if rule_text(table, hit).contains("INVALID") {
        FailureClass::ConntrackInvalid
    } else {
        FailureClass::Firewall
    }
}

/// kube-proxy's rule for a service without (local) endpoints, by its comment or its
/// nftables chain.
fn no_endpoints(hit: &DropHit<'_>) -> bool {
    let comment = hit.rule.and_then(|r| r.comment.as_deref()).unwrap_or("");
    comment.contains("has no endpoints")
        || comment.contains("has no local endpoints")
        || hit.path.contains(&"service-endpoints-check")
        || hit.path.contains(&"nodeport-endpoints-check")
}

/// kube-proxy's rule for a source outside a LoadBalancer's `loadBalancerSourceRanges`.
fn outside_source_ranges(hit: &DropHit<'_>) -> bool {
    let comment = hit.rule.and_then(|r| r.comment.as_deref()).unwrap_or("");
    comment.contains("not accepted by")
        || hit.path.contains(&"firewall-check")
        || hit.path.contains(&"KUBE-PROXY-FIREWALL")
}

/// `KUBE-SERVICES: default/web:http has no endpoints`, `FORWARD: -A FORWARD … -j DROP`,
/// `FORWARD policy DROP`, `nft table ip kube-proxy reject-chain: rule 1 (REJECT)`.
pub fn rule_text(table: &DropTable, hit: &DropHit<'_>) -> String {
    let prefix = table.prefix();
    let Some(index) = hit.index else {
        return format!("{prefix}{} policy {}", hit.chain, hit.verdict);
    };
    let comment = hit.rule.and_then(|r| r.comment.as_deref());
    let text = table.rules.texts.get(hit.chain).and_then(|t| t.get(index));
    let body = match (comment, text) {
        (Some(c), _) => c.to_owned(),
        (None, Some(t)) => t.clone(),
        (None, None) => format!("rule {} ({})", index + 1, hit.verdict),
    };
    format!("{prefix}{}: {body}", hit.chain)
}

/// For kube-proxy's rules: the service of the rule, of a verdict-map element on the way
/// (its nftables `no-endpoint-services`), or of a chain on the path (its nftables chain
/// names). Other owners' comments are not services.
fn service(table: &DropTable, hit: &DropHit<'_>) -> Option<String> {
    if !is_kube_proxy(table, hit) {
        return None;
    }
    hit.rule
        .and_then(service_of)
        .or_else(|| hit.map_comments.iter().rev().find_map(|c| service_word(c)))
        .or_else(|| hit.path.iter().rev().find_map(|c| service_of_chain(c)))
}

/// Whether the rule is kube-proxy's: reached through a `KUBE-` chain, or in its nftables
/// table.
fn is_kube_proxy(table: &DropTable, hit: &DropHit<'_>) -> bool {
    hit.path.iter().any(|c| c.starts_with("KUBE-"))
        || (table.iptables.is_none() && table.rules.label.ends_with("kube-proxy"))
}

/// A kube-proxy rule none of the known shapes matches.
fn kube_proxy_other(hit: &DropHit<'_>, drop: &DropFacts) -> String {
    format!(
        "kube-proxy {} {} in {}; look at the services and endpoints it serves",
        verb(hit),
        packet(drop),
        hit.chain
    )
}

/// `ns/name` from a word such as `ns2/svc2:p80`.
fn service_word(text: &str) -> Option<String> {
    let word = text.split_whitespace().next()?;
    let name = word.split(':').next()?;
    let (ns, svc) = name.split_once('/')?;
    (!ns.is_empty() && !svc.is_empty()).then(|| name.to_owned())
}

/// The service with its port name, as kube-proxy's comment says it (`default/web:http`).
fn service_port(hit: &DropHit<'_>, service: &str) -> String {
    let comment = hit.rule.and_then(|r| r.comment.as_deref());
    comment
        .into_iter()
        .chain(hit.map_comments.iter().copied())
        .filter_map(|c| c.split_whitespace().next())
        .find(|w| w.starts_with(service))
        .unwrap_or(service)
        .trim_end_matches(':')
        .to_owned()
}

/// kube-proxy's drops: a service without (local) endpoints, a LoadBalancer source range, an
/// unallocated ClusterIP, the localnet firewall, a packet it marked to drop.
fn kube_proxy(hit: &DropHit<'_>, service: Option<&str>, drop: &DropFacts) -> Option<String> {
    let comment = hit.rule.and_then(|r| r.comment.as_deref()).unwrap_or("");
    let on_path = |name: &str| hit.path.contains(&name);
    let pkt = packet(drop);
    let no_local = comment.contains("has no local endpoints");
    if let Some(svc) = service.filter(|_| no_endpoints(hit) && !no_local) {
        let (ns, name) = svc.split_once('/').unwrap_or(("default", svc));
        return Some(format!(
            "kube-proxy {} {pkt}: service {} has no endpoints (no ready pod backs it); look \
             at `kubectl get endpointslices -n {ns} -l kubernetes.io/service-name={name}` and \
             the readiness of its pods",
            verb(hit),
            service_port(hit, svc)
        ));
    }
    if let Some(svc) = service.filter(|_| no_local) {
        return Some(format!(
            "kube-proxy drops {pkt}: service {} has externalTrafficPolicy Local and no ready \
             pod on this node; the load balancer should not send it here (look at its health \
             probe, or the pods' placement)",
            service_port(hit, svc)
        ));
    }
    if let Some(svc) = service.filter(|_| outside_source_ranges(hit)) {
        return Some(format!(
            "kube-proxy drops {pkt}: source {} is not in the loadBalancerSourceRanges of \
             service {}; look at `kubectl get service` `spec.loadBalancerSourceRanges`",
            src_ip(&drop.tuple),
            service_port(hit, svc)
        ));
    }
    if on_path("cluster-ips-check") {
        return Some(format!(
            "kube-proxy {} {pkt}: {} is in the service CIDR but no service has this \
             address and port",
            verb(hit),
            dst_ip(&drop.tuple)
        ));
    }
    if hit.chain == "KUBE-FIREWALL" || hit.chain == "KUBE-FORWARD" {
        return Some(kube_firewall(hit, comment, &pkt));
    }
    None
}

fn kube_firewall(hit: &DropHit<'_>, comment: &str, pkt: &str) -> String {
    if comment.contains("localnet") {
        return format!(
            "kubelet's KUBE-FIREWALL drops {pkt}: a packet to 127.0.0.0/8 that did not come \
             from the node itself (martian/localnet guard of route_localnet)"
        );
    }
    if comment.contains("marked") {
        return format!(
            "kube-proxy's KUBE-FIREWALL drops {pkt}: it was marked 0x8000 by KUBE-MARK-DROP \
             (a LoadBalancer source range or a service without endpoints, in the nat table)"
        );
    }
    format!(
        "kube-proxy's {} drops {pkt} (conntrack INVALID packets are dropped here: look at \
         `conntrack -S` for `invalid`)",
        hit.chain
    )
}

/// Calico's drops: an endpoint's policies, a policy's deny rule, profiles.
fn calico(table: &DropTable, hit: &DropHit<'_>) -> Option<String> {
    if !hit.path.iter().any(|c| c.starts_with("cali-")) {
        return None;
    }
    let endpoint = hit.path.iter().rev().find_map(|c| {
        c.strip_prefix("cali-tw-")
            .map(|i| format!("to the workload on {i} (ingress)"))
            .or_else(|| {
                c.strip_prefix("cali-fw-")
                    .map(|i| format!("from the workload on {i} (egress)"))
            })
    });
    let endpoint = endpoint.unwrap_or_else(|| "on a host endpoint".into());
    let comment = hit.rule.and_then(|r| r.comment.as_deref()).unwrap_or("");
    if is_policy_chain(hit.chain) {
        let name = policy_name(table, hit.chain);
        let name = if name == hit.chain {
            format!("Calico policy {name}")
        } else {
            name
        };
        return Some(format!("{name} denies this packet {endpoint}"));
    }
    let tried: Vec<String> = table
        .rules
        .chain(hit.chain)
        .map(|c| &c.rules)
        .into_iter()
        .flatten()
        .filter_map(|r| match &r.target {
            crate::rules::Target::Jump(n) if is_policy_chain(n) => Some(policy_name(table, n)),
            _ => None,
        })
        .collect();
    let what = if comment.contains("profile") {
        "no Calico profile allowed this packet".to_owned()
    } else if tried.is_empty() {
        format!("Calico drops this packet ({})", hit.chain)
    } else {
        format!(
            "no Calico policy allowed this packet (policies: {})",
            tried.join(", ")
        )
    };
    Some(format!(
        "{what} {endpoint}; look at `kubectl get networkpolicy -A` and Calico's policies"
    ))
}

fn is_policy_chain(chain: &str) -> bool {
    chain.starts_with("cali-pi-") || chain.starts_with("cali-po-")
}

/// A Calico policy's name: from the comment felix puts on its chain's first rule, else the
/// chain. Felix before 3.30 writes `Policy <ns>/knp.default.<name> ingress` for a Kubernetes
/// `NetworkPolicy` (`Policy <ns>/<tier>.<name> …` for Calico's own), later ones `<Kind>
/// <ns>/<name> ingress` (`KubernetesNetworkPolicy`, `NetworkPolicy`, `GlobalNetworkPolicy`).
fn policy_name(table: &DropTable, chain: &str) -> String {
    let named = table.rules.chain(chain).and_then(|c| {
        c.rules
            .iter()
            .find_map(|r| policy_of_comment(r.comment.as_deref()?))
    });
    named.unwrap_or_else(|| chain.to_owned())
}

/// `NetworkPolicy default/web` from `Policy default/knp.default.web ingress` or
/// `KubernetesNetworkPolicy default/web ingress`; `Calico policy default/web` from `Policy
/// default/default.web ingress`, `GlobalNetworkPolicy web` as said.
fn policy_of_comment(comment: &str) -> Option<String> {
    let mut words = comment.split_whitespace();
    let kind = words.next()?;
    let name = words.next()?;
    if !matches!(words.next(), Some("ingress" | "egress")) || !kind.ends_with("Policy") {
        return None;
    }
    let (ns, local) = name
        .split_once('/')
        .map_or((None, name), |(n, l)| (Some(n), l));
    let knp = local.strip_prefix("knp.default.");
    let kubernetes = kind == "KubernetesNetworkPolicy" || knp.is_some();
    let local = knp.unwrap_or(local);
    let full = ns.map_or_else(|| local.to_owned(), |ns| format!("{ns}/{local}"));
    Some(if kubernetes {
        format!("NetworkPolicy {full}")
    } else if kind == "Policy" {
        format!("Calico policy {full}")
    } else {
        format!("{kind} {full}")
    })
}

/// Azure NPM's drops: the `NetworkPolicy` from the comments of the rule and of the rules
/// that jumped to it (`INGRESS-POLICY-default/deny-all-TO-…`).
fn azure_npm(table: &DropTable, hit: &DropHit<'_>) -> Option<String> {
    if !hit.path.iter().any(|c| c.starts_with("AZURE-NPM")) {
        return None;
    }
    let comment = hit.rule.and_then(|r| r.comment.as_deref()).unwrap_or("");
    let jumped = hit
        .jumps
        .iter()
        .filter_map(|&(chain, i)| table.rules.chain(chain)?.rules.get(i)?.comment.as_deref());
    let policy = std::iter::once(comment)
        .chain(jumped)
        .find_map(|c| c.split("POLICY-").nth(1))
        .and_then(|rest| rest.split("-TO-").next()?.split("-FROM-").next())
        .map(str::to_owned);
    let policy = policy.map_or_else(
        || format!("network policies select it ({comment})"),
        |p| format!("NetworkPolicy {p} selects it"),
    );
    Some(format!(
        "Azure NPM drops this packet: {policy} and no rule allows it; look at `kubectl get \
         networkpolicy -A`"
    ))
}

/// A rule nobody known owns: said as the admin's.
fn admin(table: &DropTable, hit: &DropHit<'_>) -> String {
    let table_name = table.iptables.unwrap_or(&table.rules.label);
    if hit.index.is_none() {
        return format!(
            "the {table_name} chain {} has policy {} and no rule accepted this packet",
            hit.chain, hit.verdict
        );
    }
    format!(
        "a {} rule in {table_name} {} (not kube-proxy's, Calico's or Azure NPM's) matched; \
         look at who added it",
        hit.verdict, hit.chain
    )
}

fn verb(hit: &DropHit<'_>) -> &'static str {
    if hit.verdict == "REJECT" {
        "rejects"
    } else {
        "drops"
    }
}

/// `tcp 10.13.76.46:41000 > 10.0.0.10:80` (source > destination, as in tcpdump).
pub fn packet(drop: &DropFacts) -> String {
    let t = &drop.tuple;
    let (src, dst) = (src_ip(t), dst_ip(t));
    let proto = proto_spelled(t.proto);
    if matches!(t.proto, PROTO_TCP | PROTO_UDP) {
        format!(
            "{proto} {} > {}",
            endpoint(src, t.sport, t.family),
            endpoint(dst, t.dport, t.family)
        )
    } else {
        format!("{proto} {src} > {dst}")
    }
}

fn endpoint(ip: IpAddr, port: u16, family: u8) -> String {
    if family == FAMILY_IPV6 {
        format!("[{ip}]:{port}")
    } else {
        format!("{ip}:{port}")
    }
}
