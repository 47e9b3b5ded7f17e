//! Builds the lab's namespaces, links, addresses, routes, neighbours, sysctls, ipsets and nat
//! rules: an AKS node wired as one of the [`Variant`]s, its pods, and the VNet beyond `eth0`.
//!
//! In every variant what a pod sends to another address is routed by the node's IP stack,
//! where the nat rules apply: bridge mode pins the pods' gateway to the bridge's MAC, kubenet
//! routes via `cbr0`'s address, transparent mode and Calico route `/32`s over the veths.

use std::fs;

use anyhow::{Context as _, Result, ensure};
use xtask_common::cmd::{command, output, output_with_input};

use super::{
    netns::{self, in_ns, ip, sysctl},
    topology::{
        BRIDGE_MAC, CALICO_HOST_MAC, EXTERNAL_HOSTS, ExternalHost, GATEWAY_IP, IPSETS_FILE,
        NAT_RULES_FILE, NODE_IP, NODE_NS, NODE_UPLINK, NODE_UPLINK_MAC, POD_SUBNET, Pod,
        VNET_NODE_IF, VNET_NODE_MAC, VNET_NS, Variant, WHEREAMI_LB_VIP, WHEREAMI_LOCAL_LB_VIP,
        mac_string, namespaces,
    },
};

/// The kube-proxy + ip-masq-agent nat table of the Azure CNI variants (`iptables-save -t nat`
/// format).
pub const NAT_RULES: &str = include_str!("nat-rules.txt");
/// kubenet's nat table: kube-proxy + kubelet's `--non-masquerade-cidr` rule.
pub const NAT_RULES_KUBENET: &str = include_str!("nat-rules-kubenet.txt");
/// Azure CNI + Calico's nat table: kube-proxy + Calico's chains.
pub const NAT_RULES_CALICO: &str = include_str!("nat-rules-calico.txt");
/// Calico's IP pool ipsets (`ipset save` format).
pub const IPSETS_CALICO: &str = include_str!("ipsets-calico.txt");

/// The nat table of `variant` (`iptables-save -t nat` format).
#[must_use]
pub const fn nat_rules(variant: Variant) -> &'static str {
    match variant {
        Variant::AzureBridge | Variant::AzureTransparent => NAT_RULES,
        Variant::Kubenet => NAT_RULES_KUBENET,
        Variant::Calico => NAT_RULES_CALICO,
    }
}

/// The ipsets `variant` loads before its nat table, if any.
#[must_use]
pub const fn ipsets(variant: Variant) -> Option<&'static str> {
    match variant {
        Variant::Calico => Some(IPSETS_CALICO),
        _ => None,
    }
}

/// Creates every namespace and wires them as `variant`; expects none of them to exist.
///
/// # Errors
/// If a namespace cannot be created or wired.
pub fn build(variant: Variant) -> Result<()> {
    for ns in namespaces() {
        netns::create(&ns).with_context(|| format!("creating namespace {ns}"))?;
    }
    node(variant).context("setting up the node (pkt-node)")?;
    vnet(variant).context("setting up the VNet router (pkt-vnet)")?;
    for pod in variant.pods() {
        pod_link(variant, pod).with_context(|| format!("wiring pod {}", pod.full_name()))?;
    }
    for host in EXTERNAL_HOSTS {
        host_link(&host).with_context(|| format!("wiring host {}", host.netns))?;
    }
    load_nat_rules(variant).context("loading the nat rules into pkt-node")
}

/// The per-namespace `br_netfilter` switch for IPv4.
pub const BRIDGE_NF_CALL_IPTABLES: &str = "net.bridge.bridge-nf-call-iptables";

/// True when the kernel has `br_netfilter` (built in, or a module someone already loaded).
#[must_use]
pub fn bridge_netfilter_available() -> bool {
    std::path::Path::new("/proc/sys/net/bridge/bridge-nf-call-iptables").exists()
}

/// The sysctls of a node namespace (the lab's and the bench's): it routes, sends no
/// redirects, does no reverse-path filtering, and, like an AKS node, passes bridged IPv4
/// traffic through iptables (`br_netfilter`) where the kernel has it. The module is never loaded
/// (that would change the root namespace's bridges); the namespace's own switch is pinned when
/// it exists, so the node behaves the same whatever the machine's default. Set these before
/// creating interfaces: they inherit the defaults.
///
/// # Errors
/// If a sysctl cannot be set.
pub fn node_sysctls(ns: &str) -> Result<()> {
    for (key, value) in [
        ("net.ipv4.ip_forward", "1"),
        ("net.ipv4.conf.all.send_redirects", "0"),
        ("net.ipv4.conf.default.send_redirects", "0"),
        ("net.ipv4.conf.all.rp_filter", "0"),
        ("net.ipv4.conf.default.rp_filter", "0"),
    ] {
        sysctl(ns, key, value)?;
    }
    if bridge_netfilter_available() {
        sysctl(ns, BRIDGE_NF_CALL_IPTABLES, "1")?;
    }
    Ok(())
}

fn node(variant: Variant) -> Result<()> {
    node_sysctls(NODE_NS)?;
    ip(
        NODE_NS,
        &format!("link add {NODE_UPLINK} type veth peer name {VNET_NODE_IF} netns {VNET_NS}"),
    )?;
    let uplink_mac = mac_string(NODE_UPLINK_MAC);
    ip(
        NODE_NS,
        &format!("link set {NODE_UPLINK} address {uplink_mac}"),
    )?;
    let prefix = POD_SUBNET.1;
    // Where the node IP lives: on azure0 in bridge mode (eth0 is one of its ports), on eth0
    // otherwise.
    let node_if = match variant {
        Variant::AzureBridge => {
            let bridge = variant.bridge().unwrap_or_default();
            let bridge_mac = mac_string(BRIDGE_MAC);
            ip(
                NODE_NS,
                &format!("link add {bridge} address {bridge_mac} type bridge"),
            )?;
            sysctl(
                NODE_NS,
                &format!("net.ipv4.conf.{bridge}.send_redirects"),
                "0",
            )?;
            ip(NODE_NS, &format!("link set {bridge} up"))?;
            ip(NODE_NS, &format!("link set {NODE_UPLINK} master {bridge}"))?;
            bridge
        }
        Variant::Kubenet => {
            let bridge = variant.bridge().unwrap_or_default();
            let (_, pod_prefix) = variant.pod_cidr();
            let gateway = variant.pod_gateway();
            ip(NODE_NS, &format!("link add {bridge} type bridge"))?;
            sysctl(
                NODE_NS,
                &format!("net.ipv4.conf.{bridge}.send_redirects"),
                "0",
            )?;
            ip(
                NODE_NS,
                &format!("addr add {gateway}/{pod_prefix} dev {bridge}"),
            )?;
            ip(NODE_NS, &format!("link set {bridge} up"))?;
            NODE_UPLINK
        }
        Variant::AzureTransparent | Variant::Calico => NODE_UPLINK,
    };
    ip(
        NODE_NS,
        &format!("addr add {NODE_IP}/{prefix} dev {node_if}"),
    )?;
    ip(NODE_NS, &format!("link set {NODE_UPLINK} up"))?;
    ip(
        NODE_NS,
        &format!("route add default via {GATEWAY_IP} dev {node_if}"),
    )
}

fn vnet(variant: Variant) -> Result<()> {
    sysctl(VNET_NS, "net.ipv4.ip_forward", "1")?;
    let (subnet, prefix) = POD_SUBNET;
    let mac = mac_string(VNET_NODE_MAC);
    ip(
        VNET_NS,
        &format!("link set {VNET_NODE_IF} address {mac} up"),
    )?;
    ip(
        VNET_NS,
        &format!("addr add {GATEWAY_IP}/32 dev {VNET_NODE_IF}"),
    )?;
    ip(
        VNET_NS,
        &format!("route add {NODE_IP} dev {VNET_NODE_IF} scope link"),
    )?;
    ip(
        VNET_NS,
        &format!("route add {subnet}/{prefix} via {NODE_IP} dev {VNET_NODE_IF}"),
    )?;
    if variant == Variant::Kubenet {
        // AKS's route table for kubenet: the node's pod CIDR via the node.
        let (pods, pod_prefix) = variant.pod_cidr();
        ip(
            VNET_NS,
            &format!("route add {pods}/{pod_prefix} via {NODE_IP} dev {VNET_NODE_IF}"),
        )?;
    }
    // The LoadBalancers' floating IPs: Azure delivers them to the node unchanged.
    for vip in [WHEREAMI_LB_VIP.ip(), WHEREAMI_LOCAL_LB_VIP.ip()] {
        ip(
            VNET_NS,
            &format!("route add {vip}/32 via {NODE_IP} dev {VNET_NODE_IF}"),
        )?;
    }
    Ok(())
}

/// Wires one pod's namespace to the node as `variant` does (its veth, address, routes,
/// neighbours, FDB).
///
/// # Errors
/// If an `ip` or `bridge` command or a sysctl fails.
pub fn pod_link(variant: Variant, pod: &Pod) -> Result<()> {
    let (ns, host_if, pod_ip) = (pod.netns(), pod.host_if, pod.ip);
    let mac = mac_string(pod.mac());
    let gateway = variant.pod_gateway();
    ip(
        NODE_NS,
        &format!("link add {host_if} type veth peer name eth0 netns {ns}"),
    )?;
    ip(&ns, &format!("link set eth0 address {mac} up"))?;
    match variant {
        Variant::AzureBridge => {
            // A /32 and a permanent neighbour for the gateway pointing at the bridge's MAC
            // (what Azure CNI's ARP-reply rules achieve).
            let bridge = variant.bridge().unwrap_or_default();
            let bridge_mac = mac_string(BRIDGE_MAC);
            ip(NODE_NS, &format!("link set {host_if} master {bridge} up"))?;
            ip(&ns, &format!("addr add {pod_ip}/32 dev eth0"))?;
            ip(
                &ns,
                &format!("route add default via {gateway} dev eth0 onlink"),
            )?;
            ip(
                &ns,
                &format!("neigh add {gateway} lladdr {bridge_mac} dev eth0 nud permanent"),
            )?;
            ip(
                NODE_NS,
                &format!("neigh add {pod_ip} lladdr {mac} dev {bridge} nud permanent"),
            )?;
            // A static FDB entry: frames for the pod never flood out of eth0 into the VNet.
            let fdb = format!("-n {NODE_NS} fdb replace {mac} dev {host_if} master static");
            output(&mut command("bridge", fdb.split_whitespace()))?;
        }
        Variant::Kubenet => {
            let bridge = variant.bridge().unwrap_or_default();
            let (_, prefix) = variant.pod_cidr();
            ip(NODE_NS, &format!("link set {host_if} master {bridge} up"))?;
            ip(&ns, &format!("addr add {pod_ip}/{prefix} dev eth0"))?;
            ip(&ns, &format!("route add default via {gateway} dev eth0"))?;
        }
        Variant::AzureTransparent | Variant::Calico => {
            // Routed: a /32 towards the pod via its host veth; the pod reaches 169.254.1.1 on
            // its link. Azure CNI (transparent) pins the gateway as a static neighbour with the
            // host veth's MAC; Calico answers its ARP by proxy ARP on the cali interface.
            if variant == Variant::Calico {
                let host_mac = mac_string(CALICO_HOST_MAC);
                ip(NODE_NS, &format!("link set {host_if} address {host_mac}"))?;
                sysctl(NODE_NS, &format!("net.ipv4.conf.{host_if}.proxy_arp"), "1")?;
                sysctl(
                    NODE_NS,
                    &format!("net.ipv4.neigh.{host_if}.proxy_delay"),
                    "0",
                )?;
            }
            sysctl(
                NODE_NS,
                &format!("net.ipv4.conf.{host_if}.send_redirects"),
                "0",
            )?;
            ip(NODE_NS, &format!("link set {host_if} up"))?;
            ip(
                NODE_NS,
                &format!("route add {pod_ip}/32 dev {host_if} scope link"),
            )?;
            ip(&ns, &format!("addr add {pod_ip}/32 dev eth0"))?;
            ip(&ns, &format!("route add {gateway}/32 dev eth0 scope link"))?;
            ip(&ns, &format!("route add default via {gateway} dev eth0"))?;
            if variant == Variant::AzureTransparent {
                let host_mac = host_if_mac(host_if)?;
                ip(
                    &ns,
                    &format!("neigh add {gateway} lladdr {host_mac} dev eth0 nud permanent"),
                )?;
            }
        }
    }
    Ok(())
}

/// The MAC of `name` in the node namespace.
fn host_if_mac(name: &str) -> Result<String> {
    let out = output(&mut command(
        "ip",
        ["-n", NODE_NS, "-br", "link", "show", "dev", name],
    ))?;
    out.split_whitespace()
        .nth(2)
        .map(str::to_owned)
        .with_context(|| format!("no MAC in `ip -br link show dev {name}`: {out}"))
}

#[expect(
    clippy::similar_names,
    reason = "`router_if` and `router_ip`: the router's interface and address, alike on purpose"
)]
fn host_link(host: &ExternalHost) -> Result<()> {
    let (ns, router_if) = (host.netns, host.router_if);
    let (ip_addr, router_ip, prefix) = (host.ip, host.router_ip, host.prefix);
    ip(
        VNET_NS,
        &format!("link add {router_if} type veth peer name eth0 netns {ns}"),
    )?;
    ip(
        VNET_NS,
        &format!("addr add {router_ip}/{prefix} dev {router_if}"),
    )?;
    ip(VNET_NS, &format!("link set {router_if} up"))?;
    // The internet host's /24 holds the LoadBalancer VIP: answer its ARP for addresses the
    // router sends elsewhere (the VIP, via the node), as an upstream router would.
    sysctl(
        VNET_NS,
        &format!("net.ipv4.conf.{router_if}.proxy_arp"),
        "1",
    )?;
    ip(ns, &format!("addr add {ip_addr}/{prefix} dev eth0"))?;
    ip(ns, "link set eth0 up")?;
    ip(ns, &format!("route add default via {router_ip}"))
}

fn load_nat_rules(variant: Variant) -> Result<()> {
    if let Some(sets) = ipsets(variant) {
        fs::write(IPSETS_FILE, sets).with_context(|| format!("writing {IPSETS_FILE}"))?;
        output_with_input(&mut in_ns(NODE_NS, "ipset", ["restore"]), sets)?;
    }
    let rules = nat_rules(variant);
    fs::write(NAT_RULES_FILE, rules).with_context(|| format!("writing {NAT_RULES_FILE}"))?;
    // The rules go on stdin: `iptables-restore -w FILE` takes FILE as the wait time.
    output_with_input(&mut in_ns(NODE_NS, "iptables-restore", ["-w"]), rules)?;
    let loaded = output(&mut in_ns(NODE_NS, "iptables-save", ["-t", "nat"]))?;
    ensure!(
        loaded.contains("KUBE-SERVICES"),
        "iptables-restore loaded nothing:\n{loaded}"
    );
    Ok(())
}
