//! The lab's optional second node (`cargo xtask lab up --nodes 2`): `pkt-node2`, an AKS node
//! in another subnet of the same VNet, wired like the default node (Azure CNI bridge mode:
//! `azure0` holding `eth0` and one `azv…` veth per pod, node IP on `azure0`), with one backend
//! pod whose IP is a VNet address routed to node 2 by the VNet router (`pkt-vnet`).
//!
//! Both nodes get the service `default/whereami-remote` (kube-proxy programs every service on
//! every node); its only endpoint is the pod on node 2, so a pod on node 1 reaching its
//! ClusterIP is DNATed on node 1 and arrives at node 2 already addressed to the pod, from the
//! client pod's own IP (no SNAT inside the VNet). Added to a running lab of any variant; taken
//! down with the rest of the lab (`lab down`).

use std::net::{Ipv4Addr, SocketAddrV4};

use anyhow::{Context as _, Result, ensure};
use xtask_common::cmd::{command, output, output_with_input};

use super::{
    netns::{self, in_ns, ip, sysctl},
    servers,
    topology::{NODE_NS, NODE_UPLINK, Pod, Server, VNET_NS, mac_for, mac_string},
    wiring::{NAT_RULES, node_sysctls},
};

/// The second node's namespace.
pub const NODE2_NS: &str = "pkt-node2";
/// Node 2's IP (on its `azure0`), in its own subnet of the VNet.
pub const NODE2_IP: Ipv4Addr = Ipv4Addr::new(10, 13, 77, 4);
/// Node 2's subnet (its node and its pods).
pub const NODE2_SUBNET: (Ipv4Addr, u8) = (Ipv4Addr::new(10, 13, 77, 0), 24);
/// Node 2's gateway (the VNet router's address on its link).
pub const NODE2_GATEWAY: Ipv4Addr = Ipv4Addr::new(10, 13, 77, 1);
/// The VNet router's interface facing node 2.
pub const VNET_NODE2_IF: &str = "node2";
/// MAC of the VNet router's `node2` interface.
pub const VNET_NODE2_MAC: [u8; 6] = [0x12, 0x34, 0x56, 0x78, 0x9a, 0xbd];
/// MAC of node 2's `eth0`.
pub const NODE2_UPLINK_MAC: [u8; 6] = [0x00, 0x0d, 0x3a, 0x28, 0xbd, 0x12];
/// Node 2's bridge.
pub const NODE2_BRIDGE: &str = "azure0";

/// The backend pod on node 2 (`pkt-pod-whereami-remote-…`), a VNet address.
pub const REMOTE_BACKEND: Pod = Pod {
    namespace: "default",
    name: "whereami-remote-7c9d6b5f4-m4k8z",
    ip: Ipv4Addr::new(10, 13, 77, 31),
    host_if: "azv5e0c71d3a2f",
    server: Server::Tcp(80),
};
/// ClusterIP of `default/whereami-remote`: one endpoint, [`REMOTE_BACKEND`] on node 2.
pub const REMOTE_CLUSTER_IP: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(10, 0, 88, 21), 80);
/// Its kube-proxy service chain.
pub const REMOTE_SVC_CHAIN: &str = "KUBE-SVC-QW5NRT2XKP7ZMD4E";
/// Its only endpoint's chain (the DNAT to the pod on node 2).
pub const REMOTE_SEP_CHAIN: &str = "KUBE-SEP-H2LKR6VNQ3TYWB5A";

/// kube-proxy's rules for `default/whereami-remote` (`iptables-restore --noflush` input):
/// inserted at the head of `KUBE-SERVICES`, ahead of the node-ports rule that must stay last.
#[must_use]
pub fn remote_service_rules() -> String {
    let (vip, port) = (REMOTE_CLUSTER_IP.ip(), REMOTE_CLUSTER_IP.port());
    let backend = REMOTE_BACKEND.ip;
    let (svc, sep) = (REMOTE_SVC_CHAIN, REMOTE_SEP_CHAIN);
    let name = "default/whereami-remote";
    format!(
        "*nat\n\
         :{svc} - [0:0]\n\
         :{sep} - [0:0]\n\
         -I KUBE-SERVICES 1 -d {vip}/32 -p tcp -m comment --comment \"{name}: cluster IP\" -m tcp --dport {port} -j {svc}\n\
         -I KUBE-SERVICES 1 ! -s 10.13.76.0/24 -d {vip}/32 -p tcp -m comment --comment \"{name}: cluster IP\" -m tcp --dport {port} -j KUBE-MARK-MASQ\n\
         -A {svc} -m comment --comment \"{name}:\" -j {sep}\n\
         -A {sep} -s {backend}/32 -m comment --comment \"{name}:\" -j KUBE-MARK-MASQ\n\
         -A {sep} -p tcp -m comment --comment \"{name}:\" -m tcp -j DNAT --to-destination {backend}:{port}\n\
         COMMIT\n"
    )
}

/// Whether node 2 is there (its namespace and its backend's server).
#[must_use]
pub fn is_up() -> bool {
    netns::exists(NODE2_NS) && servers::is_running(&REMOTE_BACKEND.netns())
}

/// The namespaces node 2 adds to the lab.
#[must_use]
pub fn namespaces() -> [String; 2] {
    [NODE2_NS.to_owned(), REMOTE_BACKEND.netns()]
}

/// Adds node 2 to the running lab (does nothing if it is there; rebuilds a partial one).
/// The caller holds the lab lock.
///
/// # Errors
/// If a partial node 2 cannot be removed, or building it fails.
pub fn up() -> Result<()> {
    if is_up() {
        eprintln!("lab: node 2 ({NODE2_NS}) already up");
        return Ok(());
    }
    remove()?;
    build().or_else(|err| {
        eprintln!("lab: setting up node 2 failed; removing it");
        remove()?;
        Err(err)
    })?;
    eprintln!(
        "lab: node 2 up ({NODE2_NS}, node IP {NODE2_IP}; pod {} {} behind ClusterIP {REMOTE_CLUSTER_IP})",
        REMOTE_BACKEND.full_name(),
        REMOTE_BACKEND.ip
    );
    Ok(())
}

/// Removes node 2 (its processes, namespaces, the VNet route and node 1's service rules go
/// with them or are left to the lab's teardown).
fn remove() -> Result<()> {
    for ns in namespaces() {
        if netns::exists(&ns) {
            servers::kill_all_in(&ns)?;
            netns::delete(&ns).with_context(|| format!("deleting namespace {ns}"))?;
        }
    }
    Ok(())
}

fn build() -> Result<()> {
    for ns in namespaces() {
        netns::create(&ns).with_context(|| format!("creating namespace {ns}"))?;
    }
    node().context("setting up node 2 (pkt-node2)")?;
    pod_link(&REMOTE_BACKEND).context("wiring the pod on node 2")?;
    vnet_link().context("connecting node 2 to the VNet router")?;
    // kube-proxy's table on node 2 (no NAT for the DNATed packet arriving there), and the new
    // service on both nodes.
    output_with_input(&mut in_ns(NODE2_NS, "iptables-restore", ["-w"]), NAT_RULES)
        .context("loading the nat rules into pkt-node2")?;
    for ns in [NODE_NS, NODE2_NS] {
        let rules = remote_service_rules();
        output_with_input(
            &mut in_ns(ns, "iptables-restore", ["-w", "--noflush"]),
            &rules,
        )
        .with_context(|| format!("adding default/whereami-remote to {ns}"))?;
        let loaded = output(&mut in_ns(ns, "iptables-save", ["-t", "nat"]))?;
        ensure!(
            loaded.contains(REMOTE_SEP_CHAIN),
            "default/whereami-remote is missing from {ns}'s nat table"
        );
    }
    servers::start(&REMOTE_BACKEND.netns(), REMOTE_BACKEND.server)?;
    Ok(())
}

fn node() -> Result<()> {
    node_sysctls(NODE2_NS)?;
    let bridge_mac = mac_string(mac_for(NODE2_IP));
    ip(
        NODE2_NS,
        &format!("link add {NODE2_BRIDGE} address {bridge_mac} type bridge"),
    )?;
    sysctl(
        NODE2_NS,
        &format!("net.ipv4.conf.{NODE2_BRIDGE}.send_redirects"),
        "0",
    )?;
    ip(NODE2_NS, &format!("link set {NODE2_BRIDGE} up"))?;
    let (_, prefix) = NODE2_SUBNET;
    ip(
        NODE2_NS,
        &format!("addr add {NODE2_IP}/{prefix} dev {NODE2_BRIDGE}"),
    )
}

/// The pod's veth on node 2's bridge, as Azure CNI bridge mode wires it (see
/// `wiring::pod_link`).
fn pod_link(pod: &Pod) -> Result<()> {
    let (ns, host_if, pod_ip) = (pod.netns(), pod.host_if, pod.ip);
    let mac = mac_string(pod.mac());
    let bridge_mac = mac_string(mac_for(NODE2_IP));
    ip(
        NODE2_NS,
        &format!("link add {host_if} type veth peer name eth0 netns {ns}"),
    )?;
    ip(&ns, &format!("link set eth0 address {mac} up"))?;
    ip(
        NODE2_NS,
        &format!("link set {host_if} master {NODE2_BRIDGE} up"),
    )?;
    ip(&ns, &format!("addr add {pod_ip}/32 dev eth0"))?;
    ip(
        &ns,
        &format!("route add default via {NODE2_GATEWAY} dev eth0 onlink"),
    )?;
    ip(
        &ns,
        &format!("neigh add {NODE2_GATEWAY} lladdr {bridge_mac} dev eth0 nud permanent"),
    )?;
    ip(
        NODE2_NS,
        &format!("neigh add {pod_ip} lladdr {mac} dev {NODE2_BRIDGE} nud permanent"),
    )?;
    let fdb = format!("-n {NODE2_NS} fdb replace {mac} dev {host_if} master static");
    output(&mut command("bridge", fdb.split_whitespace()))?;
    Ok(())
}

fn vnet_link() -> Result<()> {
    ip(
        NODE2_NS,
        &format!("link add {NODE_UPLINK} type veth peer name {VNET_NODE2_IF} netns {VNET_NS}"),
    )?;
    let uplink_mac = mac_string(NODE2_UPLINK_MAC);
    ip(
        NODE2_NS,
        &format!("link set {NODE_UPLINK} address {uplink_mac}"),
    )?;
    ip(
        NODE2_NS,
        &format!("link set {NODE_UPLINK} master {NODE2_BRIDGE} up"),
    )?;
    ip(
        NODE2_NS,
        &format!("route add default via {NODE2_GATEWAY} dev {NODE2_BRIDGE}"),
    )?;
    let mac = mac_string(VNET_NODE2_MAC);
    ip(
        VNET_NS,
        &format!("link set {VNET_NODE2_IF} address {mac} up"),
    )?;
    ip(
        VNET_NS,
        &format!("addr add {NODE2_GATEWAY}/32 dev {VNET_NODE2_IF}"),
    )?;
    ip(
        VNET_NS,
        &format!("route add {NODE2_IP} dev {VNET_NODE2_IF} scope link"),
    )?;
    // Azure CNI pod IPs are VNet addresses: the subnet (node 2 and its pods) via node 2.
    let (subnet, prefix) = NODE2_SUBNET;
    ip(
        VNET_NS,
        &format!("route add {subnet}/{prefix} via {NODE2_IP} dev {VNET_NODE2_IF}"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::{NS_PREFIX, POD_NS_PREFIX, POD_SUBNET, PODS};

    #[test]
    fn node2_is_a_lab_namespace_apart_from_node1() {
        assert!(NODE2_NS.starts_with(NS_PREFIX));
        assert!(REMOTE_BACKEND.netns().starts_with(POD_NS_PREFIX));
        assert!(REMOTE_BACKEND.host_if.len() <= 15);
        let (net, prefix) = NODE2_SUBNET;
        let mask = u32::MAX << (32 - prefix);
        for addr in [NODE2_IP, NODE2_GATEWAY, REMOTE_BACKEND.ip] {
            assert_eq!(u32::from(addr) & mask, u32::from(net), "{addr}");
        }
        let (net1, prefix1) = POD_SUBNET;
        let mask1 = u32::MAX << (32 - prefix1);
        assert_ne!(u32::from(REMOTE_BACKEND.ip) & mask1, u32::from(net1));
        assert!(PODS.iter().all(|p| p.name != REMOTE_BACKEND.name));
    }

    #[test]
    fn the_service_has_one_endpoint_on_node2() {
        let rules = remote_service_rules();
        assert!(rules.starts_with("*nat\n") && rules.ends_with("COMMIT\n"));
        let dnat: Vec<&str> = rules.lines().filter(|l| l.contains("DNAT")).collect();
        assert_eq!(dnat.len(), 1);
        assert!(
            dnat[0].contains("--to-destination 10.13.77.31:80"),
            "{}",
            dnat[0]
        );
        assert!(rules.contains("-d 10.0.88.21/32"));
        // The existing services' ClusterIPs stay untouched.
        assert!(!NAT_RULES.contains("10.0.88.21"));
        assert!(!NAT_RULES.contains(REMOTE_SEP_CHAIN));
    }
}
