//! Issue 4: the lab's four CNI variants (Azure CNI bridge and transparent mode, kubenet, Azure
//! CNI + Calico) and seed 003's externalTrafficPolicy=Local service: for each, pktrace shows
//! the right steps and names the right rule (and service) for each NAT step, checked against
//! the node's conntrack table, the nat rules the lab loaded, and what the servers saw.
//!
//! Each test brings the lab up as its variant (rebuilt when it ran as another one; down on
//! drop), starts pktrace in the node namespace with the default interfaces (so the
//! auto-detection of `cbr0,veth*` and `cali*` is part of what is tested), makes bounded traffic
//! and reads the JSON lines.

use tests::{
    LabGuard,
    trace::{
        CtEntry, Pktrace, Trace, assert_masqueraded, assert_path, ct_entry, nat_steps, point_name,
        tcp_request,
    },
};
use tracer_user::output::json::contract::JourneyLine;
use xtask::lab::{
    self, Variant, api,
    topology::{
        ExternalHost, INET_HOST, NODE_IP, PEER_HOST, VNET_HOST, WHEREAMI_CLUSTER_IP,
        WHEREAMI_LOCAL_LB_VIP,
    },
    wiring::nat_rules,
};

/// Interfaces a journey may pass between entering and leaving the node.
fn middle(variant: Variant) -> Vec<&'static str> {
    variant.bridge().into_iter().collect()
}

fn host_if_of(variant: Variant, ip: &str) -> &'static str {
    variant
        .pods()
        .iter()
        .find(|p| p.ip.to_string() == ip)
        .map_or_else(|| panic!("{ip} is not a pod of {variant}"), |p| p.host_if)
}

fn netns_of(variant: Variant, ip: &str) -> String {
    variant
        .pods()
        .iter()
        .find(|p| p.ip.to_string() == ip)
        .map_or_else(
            || panic!("{ip} is not a pod of {variant}"),
            lab::topology::Pod::netns,
        )
}

/// The KUBE-SEP chain whose DNAT sends `service`'s traffic to `endpoint`, read from the nat
/// rules the lab loaded for `variant` (the oracle for the DNAT step's `rule`).
fn sep_chain(variant: Variant, service: &str, endpoint: &str) -> String {
    let comment = format!("\"{service}:\"");
    let target = format!("-j DNAT --to-destination {endpoint}");
    nat_rules(variant)
        .lines()
        .find(|l| l.starts_with("-A KUBE-SEP-") && l.contains(&comment) && l.ends_with(&target))
        .and_then(|l| l.split_whitespace().nth(1))
        .unwrap_or_else(|| {
            panic!("no KUBE-SEP chain of {service} DNATs to {endpoint} in {variant}'s rules")
        })
        .to_owned()
}

/// What pktrace must say it attached to, beyond Azure CNI's default set.
fn detected_patterns(variant: Variant) -> Option<&'static str> {
    match variant {
        Variant::Kubenet => Some("cbr0,veth*"),
        Variant::Calico => Some("cali*"),
        Variant::AzureBridge | Variant::AzureTransparent => None,
    }
}

/// No container runtime in the lab: pod resolution goes on to the Kubernetes API.
const NO_CRICTL: (&str, &str) = ("PKTRACE_CRICTL", "/nonexistent/crictl");

/// Runs `traffic` under pktrace tracing `args` (JSON, default interfaces) and returns the trace.
fn traced(variant: Variant, args: &[&str], env: &[(&str, &str)], traffic: impl FnOnce()) -> Trace {
    let mut full = args.to_vec();
    full.push("--follow");
    let pk = Pktrace::start_with_env(&full, env);
    traffic();
    let trace = pk.stop();
    assert!(trace.status.success(), "{}", trace.dump());
    assert_eq!(trace.summary().lost_events, 0, "{}", trace.dump());
    if let Some(extra) = detected_patterns(variant) {
        assert!(
            trace
                .stderr
                .lines()
                .any(|l| l.starts_with("pktrace: interfaces ") && l.contains(extra)),
            "pktrace must say it added {extra} for {variant}:\n{}",
            trace.stderr
        );
    }
    for j in trace.journeys() {
        assert!(j.steps.windows(2).all(|w| w[0].t_ns <= w[1].t_ns), "{j:?}");
    }
    trace
}

/// Traces pod `ubuntu` of `variant` by name: through the Azure CNI state file where the
/// variant has one, else (kubenet) through the lab's fake Kubernetes API server.
fn trace_ubuntu(variant: Variant, traffic: impl FnOnce()) -> Trace {
    let trace = if variant.state_file().is_some() {
        traced(variant, &["--pod", "ubuntu"], &[], traffic)
    } else {
        let args = ["--pod", "ubuntu", "--kubeconfig", api::KUBECONFIG];
        let trace = traced(variant, &args, &[NO_CRICTL], traffic);
        let through_api = "pktrace: pod default/ubuntu found through the Kubernetes API";
        assert!(
            trace.stderr.lines().any(|l| l.starts_with(through_api)),
            "kubenet has no state file: the pod comes from the API server:\n{}",
            trace.stderr
        );
        trace
    };
    for j in trace.journeys() {
        assert_eq!(j.pod, "default/ubuntu", "{j:?}");
    }
    trace
}

/// The journeys of one connection: original direction and replies, both non-empty.
fn flow<'a>(trace: &'a Trace, ct: &CtEntry) -> (Vec<&'a JourneyLine>, Vec<&'a JourneyLine>) {
    let orig = trace.starting(&ct.orig_src_ep(), &ct.orig_dst_ep());
    let reply = trace.starting(&ct.reply_src_ep(), &ct.reply_dst_ep());
    assert!(!orig.is_empty(), "no journey for {ct:?}\n{}", trace.dump());
    assert!(
        !reply.is_empty(),
        "no reply journey for {ct:?}\n{}",
        trace.dump()
    );
    (orig, reply)
}

/// Every NAT step of `journeys` names `rule` and `service` (`None`: no service).
fn assert_attribution(journeys: &[&JourneyLine], point: &str, rule: &str, service: Option<&str>) {
    for j in journeys {
        for s in nat_steps(j).iter().filter(|s| point_name(s.point) == point) {
            assert_eq!(s.rule.as_deref(), Some(rule), "rule of {point} step: {j:?}");
            assert_eq!(
                s.service.as_deref(),
                service,
                "service of {point} step: {j:?}"
            );
        }
    }
}

fn tcp_from(ns: &str, addr: &str) -> String {
    tcp_request(ns, addr).unwrap_or_else(|e| panic!("tcp {addr} from {ns}: {e:#}"))
}

/// pod → ClusterIP: DNAT to a backend by its KUBE-SEP chain, no SNAT; the backend sees the pod.
fn cluster_ip(variant: Variant) {
    let _lab = LabGuard::with_variant(variant);
    let (ubuntu, vip) = (variant.ubuntu(), WHEREAMI_CLUSTER_IP.to_string());
    let mut seen = String::new();
    let trace = trace_ubuntu(variant, || seen = tcp_from(&ubuntu.netns(), &vip));
    let ct = ct_entry(&ubuntu.ip.to_string(), &vip);
    let backend = ct.reply_src.clone();
    assert_eq!(ct.reply_dst, ubuntu.ip.to_string(), "no SNAT: {ct:?}");
    assert_eq!(
        seen,
        format!("client={}", ct.orig_src_ep()),
        "the backend saw the pod"
    );
    assert!(lab::server_log(&netns_of(variant, &backend)).contains(&ct.orig_src_ep()));

    let (orig, reply) = flow(&trace, &ct);
    let (pod_if, backend_if, mid) = (
        ubuntu.host_if,
        host_if_of(variant, &backend),
        middle(variant),
    );
    for j in &orig {
        assert_path(j, pod_if, &[("dnat", false)], backend_if, &mid);
        assert_eq!(nat_steps(j)[0].dst, ct.reply_src_ep(), "{j:?}");
    }
    for j in &reply {
        assert_path(j, backend_if, &[("dnat", true)], pod_if, &mid);
    }
    let sep = sep_chain(variant, "default/whereami", &ct.reply_src_ep());
    assert_attribution(&orig, "dnat", &sep, Some("default/whereami"));
    assert_attribution(&reply, "dnat", &sep, Some("default/whereami"));
}

/// pod → a host beyond the node, masqueraded by the variant's rule: the host sees the node.
fn masqueraded(variant: Variant, host: &ExternalHost) {
    let _lab = LabGuard::with_variant(variant);
    let (ubuntu, dst) = (variant.ubuntu(), host.addr().to_string());
    let mut seen = String::new();
    let trace = trace_ubuntu(variant, || seen = tcp_from(&ubuntu.netns(), &dst));
    let ct = ct_entry(&ubuntu.ip.to_string(), &dst);
    assert_eq!(
        ct.reply_dst,
        NODE_IP.to_string(),
        "MASQUERADE to the node: {ct:?}"
    );
    assert_eq!(
        seen,
        format!("client={}", ct.reply_dst_ep()),
        "the host saw the node"
    );
    let (orig, mut reply) = flow(&trace, &ct);
    reply.extend(trace.starting_at_nat(&ct.reply_src_ep(), &ct.reply_dst_ep()));
    let mid = middle(variant);
    assert_masqueraded(&orig, (ubuntu.host_if, "eth0"), &[("snat", false)], &mid);
    for j in &orig {
        assert_eq!(nat_steps(j)[0].src, ct.reply_dst_ep(), "{j:?}");
    }
    assert_masqueraded(&reply, ("eth0", ubuntu.host_if), &[("snat", true)], &mid);
    let chain = variant.masquerade_chain();
    assert_attribution(&orig, "snat", chain, None);
    assert_attribution(&reply, "snat", chain, None);
    // The why names what the destination is not in: ip-masq-agent's nonMasqueradeCIDRs (the
    // VNet), kubenet's --non-masquerade-cidr (the cluster CIDR).
    let outside = match variant {
        Variant::AzureBridge | Variant::AzureTransparent => Some("10.13.0.0/16"),
        Variant::Kubenet => Some("10.244.0.0/16"),
        Variant::Calico => None,
    };
    if let Some(cidr) = outside {
        for j in &orig {
            let why = nat_steps(j)[0].why.clone().unwrap_or_default();
            assert!(why.contains(cidr), "why must name {cidr}: {j:?}");
        }
    }
    if variant == Variant::Calico {
        // Calico's decision is the ipsets': the why names the pool set the address is not in.
        for j in &orig {
            let why = nat_steps(j)[0].why.clone().unwrap_or_default();
            assert!(
                why.contains("cali40all-ipam-pools"),
                "why must name Calico's ipset: {j:?}"
            );
        }
    }
}

/// pod → VNet host: no SNAT (ip-masq-agent's nonMasqueradeCIDRs, Calico's pool ipset), except
/// on kubenet, where the pods are not VNet addresses and kubenet's rule masquerades.
fn vnet_host(variant: Variant) {
    if variant.masquerades_inside_vnet() {
        return masqueraded(variant, &VNET_HOST);
    }
    let _lab = LabGuard::with_variant(variant);
    let (ubuntu, dst) = (variant.ubuntu(), VNET_HOST.addr().to_string());
    let mut seen = String::new();
    let trace = trace_ubuntu(variant, || seen = tcp_from(&ubuntu.netns(), &dst));
    let ct = ct_entry(&ubuntu.ip.to_string(), &dst);
    assert_eq!(
        ct.reply_dst,
        ubuntu.ip.to_string(),
        "no SNAT inside the VNet: {ct:?}"
    );
    assert_eq!(
        seen,
        format!("client={}", ct.orig_src_ep()),
        "the VNet host saw the pod"
    );
    let (orig, reply) = flow(&trace, &ct);
    let mid = middle(variant);
    for j in &orig {
        assert_path(j, ubuntu.host_if, &[], "eth0", &mid);
    }
    for j in &reply {
        assert_path(j, "eth0", &[], ubuntu.host_if, &mid);
    }
    // The journey says why it left untranslated, with the variant's rule: ip-masq-agent's
    // RETURN for the VNet, Calico's MASQUERADE passed over because of its pool ipset.
    for j in &orig {
        let last = j.steps.last().expect("steps");
        assert_eq!(
            last.rule.as_deref(),
            Some(variant.masquerade_chain()),
            "{j:?}"
        );
        let why = last.why.as_deref().unwrap_or("");
        assert!(why.starts_with("no SNAT"), "why of the last step: {j:?}");
        if variant == Variant::Calico {
            assert!(
                why.contains("cali40all-ipam-pools"),
                "why must name Calico's ipset: {j:?}"
            );
        }
    }
}

/// Internet host → the externalTrafficPolicy=Local VIP: DNAT to a local endpoint by the Local
/// service's KUBE-SEP chain (via KUBE-XLB), no SNAT: the backend sees the real client.
fn local_policy(variant: Variant) {
    let _lab = LabGuard::with_variant(variant);
    let (client, vip) = (INET_HOST.ip.to_string(), WHEREAMI_LOCAL_LB_VIP.to_string());
    let mut seen = String::new();
    let trace = traced(variant, &["--pod-ip", &client], &[], || {
        seen = tcp_from(INET_HOST.netns, &vip);
    });
    let ct = ct_entry(&client, &vip);
    let backend = ct.reply_src.clone();
    assert_eq!(ct.reply_dst, client, "Local policy: no SNAT: {ct:?}");
    assert_eq!(
        seen,
        format!("client={}", ct.orig_src_ep()),
        "the backend saw the real client"
    );
    assert!(lab::server_log(&netns_of(variant, &backend)).contains(&ct.orig_src_ep()));

    let (orig, reply) = flow(&trace, &ct);
    let (backend_if, mid) = (host_if_of(variant, &backend), middle(variant));
    for j in &orig {
        assert_path(j, "eth0", &[("dnat", false)], backend_if, &mid);
    }
    for j in &reply {
        assert_path(j, backend_if, &[("dnat", true)], "eth0", &mid);
    }
    let sep = sep_chain(variant, "default/whereami-local", &ct.reply_src_ep());
    assert_attribution(&orig, "dnat", &sep, Some("default/whereami-local"));
    for j in &orig {
        let why = nat_steps(j)[0].why.clone().unwrap_or_default();
        assert!(
            why.contains("externalTrafficPolicy=Local"),
            "why of the Local DNAT: {j:?}"
        );
    }
    assert_attribution(&reply, "dnat", &sep, Some("default/whereami-local"));
}

macro_rules! variant_tests {
    ($($module:ident => $variant:expr),* $(,)?) => {$(
        mod $module {
            use crate::*;

            #[test]
            fn pod_to_cluster_ip_is_dnated_by_its_kube_sep_chain() {
                cluster_ip($variant);
            }

            #[test]
            fn pod_to_internet_is_masqueraded_by_the_cni_rule() {
                masqueraded($variant, &INET_HOST);
            }

            #[test]
            fn pod_to_peered_vnet_is_masqueraded_by_the_cni_rule() {
                masqueraded($variant, &PEER_HOST);
            }

            #[test]
            fn pod_to_vnet_host_keeps_its_address_except_on_kubenet() {
                vnet_host($variant);
            }

            #[test]
            fn local_policy_vip_is_dnated_without_snat() {
                local_policy($variant);
            }
        }
    )*};
}

/// Named `variants::<variant>::…` so that `cargo xtask integration-test -- variants` runs them.
mod variants {
    variant_tests! {
        azure_bridge => Variant::AzureBridge,
        azure_transparent => Variant::AzureTransparent,
        kubenet => Variant::Kubenet,
        calico => Variant::Calico,
    }
}
