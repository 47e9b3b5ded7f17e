//! The lab's addresses, names and MACs: one place for the simulated AKS node's topology, so
//! the lab builder, the state file and the integration tests agree.
//!
//! The node `pkt-node` has a bridge `azure0` (the node IP) holding `eth0` and one `azv…` veth
//! per pod; `pkt-vnet` is the VNet's router in front of `eth0`, with three hosts behind it.

use std::net::{Ipv4Addr, SocketAddrV4};

/// Directory holding the lab's state: state file, nat rules, server logs and pids.
pub const LAB_DIR: &str = "/run/pktrace-lab";
/// The Azure CNI state file of the lab's pods (the real `azure-vnet.json` format).
pub const STATE_FILE: &str = "/run/pktrace-lab/azure-vnet.json";
/// The nat table loaded into the node namespace (`iptables-save -t nat` format).
pub const NAT_RULES_FILE: &str = "/run/pktrace-lab/nat-rules.txt";
/// Prefix of every network namespace the lab creates.
pub const NS_PREFIX: &str = "pkt-";
/// Prefix of the pods' namespaces: `pkt-pod-<pod name>`.
pub const POD_NS_PREFIX: &str = "pkt-pod-";

/// The AKS node's namespace.
pub const NODE_NS: &str = "pkt-node";
/// The VNet router's namespace.
pub const VNET_NS: &str = "pkt-vnet";
/// The node's bridge (Azure CNI bridge mode).
pub const BRIDGE: &str = "azure0";
/// The bridge's MAC address; pods send everything to it.
pub const BRIDGE_MAC: [u8; 6] = [0x02, 0x42, 0x0a, 0x0d, 0x4c, 0x04];
/// The node's uplink (a veth into `pkt-vnet`, enslaved to the bridge).
pub const NODE_UPLINK: &str = "eth0";
/// MAC of the node's `eth0` (the state file's external interface MAC).
pub const NODE_UPLINK_MAC: [u8; 6] = [0x00, 0x0d, 0x3a, 0x28, 0xbd, 0x02];
/// The node's IP (on `azure0`).
pub const NODE_IP: Ipv4Addr = Ipv4Addr::new(10, 13, 76, 4);
/// The pod subnet and its prefix length.
pub const POD_SUBNET: (Ipv4Addr, u8) = (Ipv4Addr::new(10, 13, 76, 0), 24);
/// The subnet's gateway (the VNet router's address on the node link).
pub const GATEWAY_IP: Ipv4Addr = Ipv4Addr::new(10, 13, 76, 1);
/// The VNet router's interface facing the node.
pub const VNET_NODE_IF: &str = "node";
/// MAC of the VNet router's `node` interface (Azure's gateway MAC).
pub const VNET_NODE_MAC: [u8; 6] = [0x12, 0x34, 0x56, 0x78, 0x9a, 0xbc];
/// The VNet's address space: ip-masq-agent does not masquerade inside it.
pub const VNET_CIDR: (Ipv4Addr, u8) = (Ipv4Addr::new(10, 13, 0, 0), 16);

/// ClusterIP of `default/whereami`.
pub const WHEREAMI_CLUSTER_IP: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(10, 0, 159, 58), 80);
/// LoadBalancer VIP of `default/whereami` (floating IP, delivered to the node).
pub const WHEREAMI_LB_VIP: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(203, 0, 113, 251), 80);
/// ClusterIP of `kube-system/kube-dns` (UDP).
pub const DNS_CLUSTER_IP: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 10), 53);

/// What a lab host listens on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Server {
    /// Nothing (the client pod).
    None,
    /// A TCP server on this port.
    Tcp(u16),
    /// A UDP responder on this port.
    Udp(u16),
}

/// A pod of the lab.
#[derive(Clone, Copy, Debug)]
pub struct Pod {
    /// Kubernetes namespace.
    pub namespace: &'static str,
    /// Pod name.
    pub name: &'static str,
    /// Pod IP.
    pub ip: Ipv4Addr,
    /// Host-side veth name (in `pkt-node`, enslaved to `azure0`).
    pub host_if: &'static str,
    /// What the pod serves.
    pub server: Server,
}

impl Pod {
    /// The network namespace of the pod: `pkt-pod-<name>`.
    #[must_use]
    pub fn netns(&self) -> String {
        format!("{POD_NS_PREFIX}{}", self.name)
    }

    /// The pod's MAC (on its `eth0`), derived from its IP.
    #[must_use]
    pub fn mac(&self) -> [u8; 6] {
        mac_for(self.ip)
    }

    /// `namespace/name`.
    #[must_use]
    pub fn full_name(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }
}

/// The MAC the lab gives an address in the pod subnet: `02:42:0a:0d:4c:<last octet>`.
#[must_use]
pub const fn mac_for(ip: Ipv4Addr) -> [u8; 6] {
    let o = ip.octets();
    [0x02, 0x42, o[0], o[1], o[2], o[3]]
}

/// Formats a MAC as `aa:bb:cc:dd:ee:ff`.
#[must_use]
pub fn mac_string(mac: [u8; 6]) -> String {
    mac.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

/// The client pod `default/ubuntu`.
pub const UBUNTU: Pod = Pod {
    namespace: "default",
    name: "ubuntu",
    ip: Ipv4Addr::new(10, 13, 76, 46),
    host_if: "azv47c3ee9d512",
    server: Server::None,
};
/// First whereami backend (KUBE-SEP-6HBOEI5FVFTJNRJ3).
pub const WHEREAMI_QFQ2K: Pod = Pod {
    namespace: "default",
    name: "whereami-564765b89-qfq2k",
    ip: Ipv4Addr::new(10, 13, 76, 26),
    host_if: "azva4124965a9b",
    server: Server::Tcp(80),
};
/// Second whereami backend (KUBE-SEP-IJTMGMPNVALZGJZD).
pub const WHEREAMI_J7BPW: Pod = Pod {
    namespace: "default",
    name: "whereami-564765b89-j7bpw",
    ip: Ipv4Addr::new(10, 13, 76, 7),
    host_if: "azv1a68ecb6fb1",
    server: Server::Tcp(80),
};
/// The kube-dns-like UDP responder (KUBE-SEP-DNSA5WQ4ZDRJQTVF).
pub const COREDNS: Pod = Pod {
    namespace: "kube-system",
    name: "coredns-5d8c9f7b4-x2lqm",
    ip: Ipv4Addr::new(10, 13, 76, 17),
    host_if: "azv3cd1b2db354",
    server: Server::Udp(53),
};
/// Every pod of the lab, client first.
pub const PODS: [Pod; 4] = [UBUNTU, WHEREAMI_QFQ2K, WHEREAMI_J7BPW, COREDNS];

/// A host beyond the node's `eth0`, behind the VNet router.
#[derive(Clone, Copy, Debug)]
pub struct ExternalHost {
    /// Its network namespace.
    pub netns: &'static str,
    /// The router's interface towards it (in `pkt-vnet`).
    pub router_if: &'static str,
    /// The router's address on that link.
    pub router_ip: Ipv4Addr,
    /// The host's address (on its `eth0`).
    pub ip: Ipv4Addr,
    /// Prefix length of the link.
    pub prefix: u8,
    /// Its TCP server's port.
    pub tcp_port: u16,
}

impl ExternalHost {
    /// The address of its TCP server.
    #[must_use]
    pub const fn addr(&self) -> SocketAddrV4 {
        SocketAddrV4::new(self.ip, self.tcp_port)
    }
}

/// A VM in another subnet of the same VNet (no SNAT towards it).
pub const VNET_HOST: ExternalHost = ExternalHost {
    netns: "pkt-vnethost",
    router_if: "vnethost",
    router_ip: Ipv4Addr::new(10, 13, 1, 1),
    ip: Ipv4Addr::new(10, 13, 1, 4),
    prefix: 24,
    tcp_port: 80,
};
/// A host in a peered VNet (masqueraded: outside 10.13.0.0/16).
pub const PEER_HOST: ExternalHost = ExternalHost {
    netns: "pkt-peer",
    router_if: "peer",
    router_ip: Ipv4Addr::new(10, 14, 1, 1),
    ip: Ipv4Addr::new(10, 14, 1, 4),
    prefix: 24,
    tcp_port: 80,
};
/// An internet host on a documentation address (masqueraded).
pub const INET_HOST: ExternalHost = ExternalHost {
    netns: "pkt-inet",
    router_if: "inet",
    router_ip: Ipv4Addr::new(203, 0, 113, 1),
    ip: Ipv4Addr::new(203, 0, 113, 80),
    prefix: 24,
    tcp_port: 80,
};
/// Every host behind the VNet router.
pub const EXTERNAL_HOSTS: [ExternalHost; 3] = [VNET_HOST, PEER_HOST, INET_HOST];

/// Every namespace of the lab, in creation order.
#[must_use]
pub fn namespaces() -> Vec<String> {
    let mut all = vec![NODE_NS.to_owned(), VNET_NS.to_owned()];
    all.extend(EXTERNAL_HOSTS.iter().map(|h| h.netns.to_owned()));
    all.extend(PODS.iter().map(Pod::netns));
    all
}

/// The namespaces that run a server, with what they serve.
#[must_use]
pub fn servers() -> Vec<(String, Server)> {
    let pods = PODS
        .iter()
        .filter(|p| p.server != Server::None)
        .map(|p| (p.netns(), p.server));
    let hosts = EXTERNAL_HOSTS
        .iter()
        .map(|h| (h.netns.to_owned(), Server::Tcp(h.tcp_port)));
    pods.chain(hosts).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_fit_the_kernel_limits() {
        for pod in PODS {
            assert!(pod.host_if.len() <= 15, "{}", pod.host_if);
            assert!(pod.host_if.starts_with("azv"));
            assert!(pod.netns().starts_with(POD_NS_PREFIX));
        }
        for host in EXTERNAL_HOSTS {
            assert!(host.router_if.len() <= 15);
            assert!(host.netns.starts_with(NS_PREFIX));
        }
    }

    #[test]
    fn macs_derive_from_the_pod_ip() {
        assert_eq!(mac_string(UBUNTU.mac()), "02:42:0a:0d:4c:2e");
        assert_eq!(mac_string(WHEREAMI_J7BPW.mac()), "02:42:0a:0d:4c:07");
        assert_eq!(mac_for(NODE_IP), BRIDGE_MAC);
        assert_eq!(UBUNTU.netns(), "pkt-pod-ubuntu");
    }

    #[test]
    fn servers_cover_backends_and_hosts() {
        let servers = servers();
        assert_eq!(servers.len(), 6);
        assert!(servers.contains(&("pkt-pod-coredns-5d8c9f7b4-x2lqm".into(), Server::Udp(53))));
        assert_eq!(namespaces().len(), 9);
    }
}
