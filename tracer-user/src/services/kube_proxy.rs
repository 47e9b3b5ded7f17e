//! Kubernetes services as kube-proxy wrote them into the node's nat rules: each service's
//! front addresses (cluster IP, external and load balancer IPs, node ports) and the endpoints its
//! DNAT rules send packets to, with the rule (chain) of each.
//!
//! Both of kube-proxy's rule-writing modes are read from the one model of the nat tables
//! ([`Ruleset`]):
//! - iptables mode: `KUBE-SERVICES` rules `-d VIP/32 … --comment "ns/name:port cluster IP"
//!   -j KUBE-SVC-…` (also `external IP`, `loadbalancer IP`), `KUBE-NODEPORTS` rules
//!   `--comment "ns/name:port" --dport N`, and the `KUBE-SEP-…` chains their jumps reach, whose
//!   `DNAT --to-destination` is an endpoint;
//! - nftables mode (table `ip kube-proxy`): the `service-ips` and `service-nodeports` verdict
//!   maps whose elements go to `service-HASH-ns/name/proto/port` (ClusterIP) or
//!   `external-…` (external and load balancer IPs, node ports) chains, the `endpoint-…` chains
//!   their `numgen` maps reach, and the commented elements of `no-endpoint-services`.
//!
//! A service is known from any of these, so one without endpoints is still found (with its
//! front addresses and no endpoint). Current kube-proxy writes a service without endpoints
//! in iptables mode only into the filter table (a REJECT rule), which is not read: such a
//! service is not found here.

use std::{collections::BTreeMap, net::IpAddr};

use crate::rules::{NatRules, Rule, Ruleset, Target, Test, Val, nft::service_of_chain, service_of};

/// What kind of front address a service has.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum FrontKind {
    ClusterIp,
    /// An `externalIPs` address (iptables mode tells it from a LoadBalancer IP).
    External,
    LoadBalancer,
    /// nftables mode: an external or LoadBalancer IP (its rules do not tell which).
    ExternalOrLoadBalancer,
    NodePort,
}

impl FrontKind {
    /// As `kubectl` and kube-proxy's comments say it.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::ClusterIp => "cluster IP",
            Self::External => "external IP",
            Self::LoadBalancer => "loadbalancer IP",
            Self::ExternalOrLoadBalancer => "external or loadbalancer IP",
            Self::NodePort => "node port",
        }
    }
}

/// One way into a service: an address (none for a NodePort: every node address) and port.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Front {
    pub kind: FrontKind,
    pub addr: Option<IpAddr>,
    /// IP protocol number (6 TCP, 17 UDP, 132 SCTP); 0 when the rule does not say.
    pub proto: u8,
    pub port: Option<u16>,
}

/// One endpoint a service's DNAT sends packets to.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Endpoint {
    pub addr: IpAddr,
    pub port: Option<u16>,
    /// The chain of the DNAT rule (`KUBE-SEP-…`, `endpoint-…`), when read from rules.
    pub rule: Option<String>,
}

/// A service: `namespace/name`, its front addresses and its endpoints (sorted, no duplicates).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Service {
    pub label: String,
    pub fronts: Vec<Front>,
    pub endpoints: Vec<Endpoint>,
}

impl Service {
    /// The addresses to trace: front addresses, then endpoints, without duplicates.
    #[must_use]
    pub fn addrs(&self) -> Vec<IpAddr> {
        let fronts = self.fronts.iter().filter_map(|f| f.addr);
        let mut out: Vec<IpAddr> = Vec::new();
        for a in fronts.chain(self.endpoints.iter().map(|e| e.addr)) {
            if !out.contains(&a) {
                out.push(a);
            }
        }
        out
    }

    fn tidy(&mut self) {
        self.fronts.sort();
        self.fronts.dedup();
        self.endpoints.sort();
        self.endpoints
            .dedup_by(|a, b| a.addr == b.addr && a.port == b.port);
    }
}

/// Most chains one walk from a service's entry visits (rules are data from the node).
const WALK_LIMIT: usize = 4096;

/// Every service the rules name, by `namespace/name`.
#[must_use]
pub fn services(rules: &Ruleset) -> BTreeMap<String, Service> {
    let mut found: BTreeMap<String, Service> = BTreeMap::new();
    for table in &rules.tables {
        iptables_entries(table, &mut found);
        nft_entries(table, &mut found);
    }
    for (label, svc) in &mut found {
        svc.label.clone_from(label);
        svc.tidy();
    }
    found
}

fn entry<'a>(found: &'a mut BTreeMap<String, Service>, label: &str) -> &'a mut Service {
    found.entry(label.to_owned()).or_default()
}

/// kube-proxy iptables mode: the commented jumps of `KUBE-SERVICES` and `KUBE-NODEPORTS`
/// (and any chain named `KUBE-SVC-…` with a service comment: a service whose rules are there
/// but lead to no endpoint).
fn iptables_entries(table: &NatRules, found: &mut BTreeMap<String, Service>) {
    for chain in table.chains() {
        for rule in &chain.rules {
            let (Target::Jump(to) | Target::Goto(to)) = &rule.target else {
                continue;
            };
            let Some(label) = service_of(rule) else {
                continue;
            };
            if to.starts_with("KUBE-MARK-") {
                continue;
            }
            let front = if chain.name == "KUBE-NODEPORTS" {
                Some(front_of(rule, FrontKind::NodePort))
            } else if chain.name == "KUBE-SERVICES" {
                iptables_kind(rule).map(|kind| front_of(rule, kind))
            } else {
                None
            };
            if front.is_none() && !chain.name.starts_with("KUBE-SVC-") {
                continue;
            }
            let svc = entry(found, &label);
            svc.fronts.extend(front);
            walk(table, to, &mut svc.endpoints);
        }
    }
}

/// The front address kind a `KUBE-SERVICES` comment states.
fn iptables_kind(rule: &Rule) -> Option<FrontKind> {
    let comment = rule.comment.as_deref()?;
    [
        ("cluster IP", FrontKind::ClusterIp),
        ("external IP", FrontKind::External),
        ("loadbalancer IP", FrontKind::LoadBalancer),
    ]
    .into_iter()
    .find_map(|(words, kind)| comment.ends_with(words).then_some(kind))
}

fn front_of(rule: &Rule, kind: FrontKind) -> Front {
    let mut front = Front {
        kind,
        addr: None,
        proto: 0,
        port: None,
    };
    for cond in rule.conds.iter().filter(|c| !c.negated) {
        match &cond.test {
            Test::Dst(cidr) if kind != FrontKind::NodePort => front.addr = Some(cidr.addr),
            Test::Proto(p) => front.proto = *p,
            Test::Dport(ranges) => front.port = ranges.first().map(|&(lo, _)| lo),
            _ => {}
        }
    }
    front
}

/// kube-proxy nftables mode: the elements of the verdict maps that go to a service's chain,
/// the service chains themselves, and the commented elements of the no-endpoint maps.
fn nft_entries(table: &NatRules, found: &mut BTreeMap<String, Service>) {
    for elems in table.nft_maps.values() {
        for (key, target) in elems {
            let (Target::Jump(to) | Target::Goto(to)) = target else {
                continue;
            };
            let Some(label) = service_of_chain(to) else {
                continue;
            };
            let external = to.starts_with("external-");
            let svc = entry(found, &label);
            svc.fronts.extend(nft_front(key, external));
            walk(table, to, &mut svc.endpoints);
        }
    }
    for chain in table.chains() {
        if chain.name.starts_with("service-")
            && let Some(label) = service_of_chain(&chain.name)
        {
            let svc = entry(found, &label);
            walk(table, &chain.name, &mut svc.endpoints);
        }
    }
    for (name, comments) in &table.nft_map_comments {
        let elems = table.nft_maps.get(name).map_or(&[][..], Vec::as_slice);
        let commented = elems
            .iter()
            .zip(comments)
            .filter_map(|((key, _), c)| Some((key, c.as_ref()?)));
        for (key, comment) in commented {
            let rule = Rule {
                conds: Vec::new(),
                target: Target::None,
                comment: Some(comment.clone()),
            };
            if let Some(label) = service_of(&rule) {
                entry(found, &label).fronts.extend(nft_front(key, false));
            }
        }
    }
}

/// A map key `addr . proto . port` (an address's) or `proto . port` (a NodePort's).
fn nft_front(key: &[Val], external: bool) -> Option<Front> {
    let num = |v: &Val| match v {
        Val::Num(lo, hi) if lo == hi => Some(*lo),
        _ => None,
    };
    let proto_port = |p: &Val, n: &Val| {
        let proto = u8::try_from(num(p)?).ok()?;
        let port = u16::try_from(num(n)?).ok()?;
        Some((proto, port))
    };
    match key {
        [Val::Net(cidr), p, n] => {
            let (proto, port) = proto_port(p, n)?;
            let kind = if external {
                FrontKind::ExternalOrLoadBalancer
            } else {
                FrontKind::ClusterIp
            };
            Some(Front {
                kind,
                addr: Some(cidr.addr),
                proto,
                port: Some(port),
            })
        }
        [p, n] => {
            let (proto, port) = proto_port(p, n)?;
            Some(Front {
                kind: FrontKind::NodePort,
                addr: None,
                proto,
                port: Some(port),
            })
        }
        _ => None,
    }
}

/// The DNAT targets reachable from `chain` by jumps, gotos and verdict maps.
fn walk(table: &NatRules, chain: &str, out: &mut Vec<Endpoint>) {
    let mut todo = vec![chain.to_owned()];
    let mut seen: Vec<String> = Vec::new();
    while let Some(name) = todo.pop() {
        if seen.contains(&name) || seen.len() >= WALK_LIMIT {
            continue;
        }
        let Some(c) = table.chain(&name) else {
            seen.push(name);
            continue;
        };
        for rule in &c.rules {
            let mut targets = vec![&rule.target];
            if let Target::Vmap { map, .. } = &rule.target {
                targets.extend(table.map_elems(map).unwrap_or(&[]).iter().map(|(_, t)| t));
            }
            for target in targets {
                match target {
                    Target::Dnat(Some(to)) => out.push(Endpoint {
                        addr: to.lo,
                        port: to.ports.map(|(lo, _)| lo),
                        rule: Some(name.clone()),
                    }),
                    Target::Jump(n) | Target::Goto(n)
                        if !n.starts_with("KUBE-MARK-") && n != "mark-for-masquerade" =>
                    {
                        todo.push(n.clone());
                    }
                    _ => {}
                }
            }
        }
        seen.push(name);
    }
}

#[cfg(test)]
mod tests;
