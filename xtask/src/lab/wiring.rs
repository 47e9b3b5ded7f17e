//! Builds the lab's namespaces, links, addresses, routes, neighbours, sysctls and nat rules:
//! an AKS node with Azure CNI in bridge mode, its pods, and the VNet beyond `eth0`.
//!
//! Pods have a `/32` and a permanent neighbour for their gateway pointing at the bridge's
//! MAC (what Azure CNI's ARP-reply rules achieve), so everything a pod sends is routed by the
//! node's IP stack, where kube-proxy's nat rules apply; no `br_netfilter` is needed.

use std::fs;

use anyhow::{Context as _, Result, ensure};

use super::{
    netns::{self, in_ns, ip, sysctl},
    topology::{
        BRIDGE, BRIDGE_MAC, EXTERNAL_HOSTS, ExternalHost, GATEWAY_IP, NAT_RULES_FILE, NODE_IP,
        NODE_NS, NODE_UPLINK, NODE_UPLINK_MAC, POD_SUBNET, PODS, Pod, VNET_NODE_IF, VNET_NODE_MAC,
        VNET_NS, WHEREAMI_LB_VIP, mac_string, namespaces,
    },
};
use crate::cmd::{command, output, output_with_input};

/// The kube-proxy + ip-masq-agent nat table the node gets (`iptables-save -t nat` format).
pub const NAT_RULES: &str = include_str!("nat-rules.txt");

/// Creates every namespace and wires them; expects none of them to exist.
pub fn build() -> Result<()> {
    for ns in namespaces() {
        netns::create(&ns).with_context(|| format!("creating namespace {ns}"))?;
    }
    node().context("setting up the node (pkt-node)")?;
    vnet().context("setting up the VNet router (pkt-vnet)")?;
    for pod in PODS {
        pod_link(&pod).with_context(|| format!("wiring pod {}", pod.full_name()))?;
    }
    for host in EXTERNAL_HOSTS {
        host_link(&host).with_context(|| format!("wiring host {}", host.netns))?;
    }
    load_nat_rules().context("loading the nat rules into pkt-node")
}

/// The per-namespace br_netfilter switch for IPv4.
pub const BRIDGE_NF_CALL_IPTABLES: &str = "net.bridge.bridge-nf-call-iptables";

/// True when the kernel has br_netfilter (built in, or a module someone already loaded).
#[must_use]
pub fn bridge_netfilter_available() -> bool {
    std::path::Path::new("/proc/sys/net/bridge/bridge-nf-call-iptables").exists()
}

/// The sysctls of a node namespace (the lab's and the bench's): it routes, sends no
/// redirects, does no reverse-path filtering, and, like an AKS node, passes bridged IPv4
/// traffic through iptables (br_netfilter) where the kernel has it. The module is never loaded
/// (that would change the root namespace's bridges); the namespace's own switch is pinned when
/// it exists, so the node behaves the same whatever the machine's default. Set these before
/// creating interfaces: they inherit the defaults.
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

fn node() -> Result<()> {
    node_sysctls(NODE_NS)?;
    let (bridge_mac, prefix) = (mac_string(BRIDGE_MAC), POD_SUBNET.1);
    ip(
        NODE_NS,
        &format!("link add {BRIDGE} address {bridge_mac} type bridge"),
    )?;
    sysctl(
        NODE_NS,
        &format!("net.ipv4.conf.{BRIDGE}.send_redirects"),
        "0",
    )?;
    ip(
        NODE_NS,
        &format!("addr add {NODE_IP}/{prefix} dev {BRIDGE}"),
    )?;
    ip(NODE_NS, &format!("link set {BRIDGE} up"))?;
    ip(
        NODE_NS,
        &format!("link add {NODE_UPLINK} type veth peer name {VNET_NODE_IF} netns {VNET_NS}"),
    )?;
    let uplink_mac = mac_string(NODE_UPLINK_MAC);
    ip(
        NODE_NS,
        &format!("link set {NODE_UPLINK} address {uplink_mac} master {BRIDGE} up"),
    )?;
    ip(
        NODE_NS,
        &format!("route add default via {GATEWAY_IP} dev {BRIDGE}"),
    )
}

fn vnet() -> Result<()> {
    sysctl(VNET_NS, "net.ipv4.ip_forward", "1")?;
    let (subnet, prefix) = POD_SUBNET;
    let vip = WHEREAMI_LB_VIP.ip();
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
    // The LoadBalancer's floating IP: Azure delivers it to the node unchanged.
    ip(
        VNET_NS,
        &format!("route add {vip}/32 via {NODE_IP} dev {VNET_NODE_IF}"),
    )
}

/// Wires one pod's namespace to the node (its veth, address, routes, neighbours, FDB).
pub fn pod_link(pod: &Pod) -> Result<()> {
    let (ns, host_if, pod_ip) = (pod.netns(), pod.host_if, pod.ip);
    let (mac, bridge_mac) = (mac_string(pod.mac()), mac_string(BRIDGE_MAC));
    ip(
        NODE_NS,
        &format!("link add {host_if} type veth peer name eth0 netns {ns}"),
    )?;
    ip(NODE_NS, &format!("link set {host_if} master {BRIDGE} up"))?;
    ip(&ns, &format!("link set eth0 address {mac} up"))?;
    ip(&ns, &format!("addr add {pod_ip}/32 dev eth0"))?;
    ip(
        &ns,
        &format!("route add default via {GATEWAY_IP} dev eth0 onlink"),
    )?;
    ip(
        &ns,
        &format!("neigh add {GATEWAY_IP} lladdr {bridge_mac} dev eth0 nud permanent"),
    )?;
    ip(
        NODE_NS,
        &format!("neigh add {pod_ip} lladdr {mac} dev {BRIDGE} nud permanent"),
    )?;
    // A static FDB entry: frames for the pod never flood out of eth0 into the VNet.
    let fdb = format!("-n {NODE_NS} fdb replace {mac} dev {host_if} master static");
    output(&mut command("bridge", fdb.split_whitespace()))?;
    Ok(())
}

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

fn load_nat_rules() -> Result<()> {
    fs::write(NAT_RULES_FILE, NAT_RULES).with_context(|| format!("writing {NAT_RULES_FILE}"))?;
    // The rules go on stdin: `iptables-restore -w FILE` takes FILE as the wait time.
    output_with_input(&mut in_ns(NODE_NS, "iptables-restore", ["-w"]), NAT_RULES)?;
    let loaded = output(&mut in_ns(NODE_NS, "iptables-save", ["-t", "nat"]))?;
    ensure!(
        loaded.contains("KUBE-SERVICES"),
        "iptables-restore loaded nothing:\n{loaded}"
    );
    Ok(())
}
