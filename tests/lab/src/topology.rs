//! The lab's addresses, names and MACs: one place for the simulated AKS node's topology, so
//! the lab builder, the state file and the integration tests agree.
//!
//! The lab comes in four CNI variants ([`Variant`]); the namespaces, pod names and hosts are
//! the same in all of them, the node's wiring, pod addresses, host interface names and nat
//! rules differ. In the default (`azure-bridge`) the node `pkt-node` has a bridge `azure0`
//! (the node IP) holding `eth0` and one `azv…` veth per pod; `pkt-vnet` is the VNet's router
//! in front of `eth0`, with three hosts behind it.

use std::net::{Ipv4Addr, SocketAddrV4};

/// Directory holding the lab's state: state file, nat rules, server logs and pids.
pub const LAB_DIR: &str = "/run/pktrace-lab";
/// The Azure CNI state file of the lab's pods (the real `azure-vnet.json` format).
pub const STATE_FILE: &str = "/run/pktrace-lab/azure-vnet.json";
/// The nat table loaded into the node namespace (`iptables-save -t nat` format).
pub const NAT_RULES_FILE: &str = "/run/pktrace-lab/nat-rules.txt";
/// The ipsets loaded into the node namespace (`ipset save` format; calico only).
pub const IPSETS_FILE: &str = "/run/pktrace-lab/ipsets.txt";
/// The variant the running lab was built as (one line, [`Variant::name`]).
pub const VARIANT_FILE: &str = "/run/pktrace-lab/variant";
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
/// ClusterIP of `default/whereami-local` (externalTrafficPolicy=Local).
pub const WHEREAMI_LOCAL_CLUSTER_IP: SocketAddrV4 =
    SocketAddrV4::new(Ipv4Addr::new(10, 0, 12, 96), 80);
/// LoadBalancer VIP of `default/whereami-local` (externalTrafficPolicy=Local: KUBE-XLB, no
/// KUBE-MARK-MASQ for external clients, so backends see the real client address).
pub const WHEREAMI_LOCAL_LB_VIP: SocketAddrV4 =
    SocketAddrV4::new(Ipv4Addr::new(203, 0, 113, 252), 80);
/// The gateway address of routed pods (Azure CNI transparent mode, Calico): link-local,
/// answered by the host side of the pod's veth.
pub const ROUTED_POD_GATEWAY: Ipv4Addr = Ipv4Addr::new(169, 254, 1, 1);
/// The MAC Calico gives every `cali…` host interface.
pub const CALICO_HOST_MAC: [u8; 6] = [0xee; 6];
/// kubenet's bridge.
pub const KUBENET_BRIDGE: &str = "cbr0";
/// kubenet's pod CIDR on this node (the bridge `cbr0` holds `.1`).
pub const KUBENET_POD_CIDR: (Ipv4Addr, u8) = (Ipv4Addr::new(10, 244, 0, 0), 24);
/// kubenet's cluster CIDR (kubelet `--non-masquerade-cidr`).
pub const KUBENET_CLUSTER_CIDR: (Ipv4Addr, u8) = (Ipv4Addr::new(10, 244, 0, 0), 16);
/// kubenet's gateway for the pods (on `cbr0`).
pub const KUBENET_GATEWAY: Ipv4Addr = Ipv4Addr::new(10, 244, 0, 1);
/// Calico's IP pool (its ipsets `cali40masq-ipam-pools`/`cali40all-ipam-pools`): the VNet, as
/// on AKS with Azure CNI + Calico.
pub const CALICO_POOL: (Ipv4Addr, u8) = VNET_CIDR;

/// How the node wires its pods: the CNI set-ups of AKS nodes the lab simulates.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Variant {
    /// Azure CNI in bridge mode: `azure0` holds `eth0` and the `azv…` veths (the node IP is
    /// on `azure0`); ip-masq-agent.
    #[default]
    AzureBridge,
    /// Azure CNI in transparent mode (today's AKS default): no bridge, node IP on `eth0`, a
    /// `/32` route per pod via its `azv…` veth, pod gateway 169.254.1.1 as a static
    /// neighbour; ip-masq-agent.
    AzureTransparent,
    /// kubenet: bridge `cbr0` with the pod CIDR, `veth…` host interfaces, pods in
    /// 10.244.0.0/24 behind the node, kubelet's `--non-masquerade-cidr` MASQUERADE rule.
    Kubenet,
    /// Azure CNI + Calico: routed `cali…` host interfaces (gateway 169.254.1.1 by proxy ARP,
    /// `/32` routes), Calico's nat chains and ipsets instead of ip-masq-agent.
    Calico,
}

/// Every variant, the default first.
pub const VARIANTS: [Variant; 4] = [
    Variant::AzureBridge,
    Variant::AzureTransparent,
    Variant::Kubenet,
    Variant::Calico,
];

impl Variant {
    /// The name `lab up --variant` takes.
    #[must_use]
    pub const fn name(self) -> &'static str {
        match self {
            Self::AzureBridge => "azure-bridge",
            Self::AzureTransparent => "azure-transparent",
            Self::Kubenet => "kubenet",
            Self::Calico => "calico",
        }
    }

    /// The variant called `name`.
    #[must_use]
    pub fn from_name(name: &str) -> Option<Self> {
        VARIANTS.into_iter().find(|v| v.name() == name.trim())
    }

    /// The pods, client first.
    #[must_use]
    pub const fn pods(self) -> &'static [Pod; 4] {
        match self {
            Self::AzureBridge | Self::AzureTransparent => &PODS,
            Self::Kubenet => &KUBENET_PODS,
            Self::Calico => &CALICO_PODS,
        }
    }

    /// The client pod `default/ubuntu`.
    #[must_use]
    pub const fn ubuntu(self) -> Pod {
        self.pods()[0]
    }

    /// The pod called `name`, if any.
    #[must_use]
    pub fn pod(self, name: &str) -> Option<Pod> {
        self.pods().iter().find(|p| p.name == name).copied()
    }

    /// The pod with address `ip`, if any.
    #[must_use]
    pub fn pod_by_ip(self, ip: Ipv4Addr) -> Option<Pod> {
        self.pods().iter().find(|p| p.ip == ip).copied()
    }

    /// The bridge holding the pod veths, if the CNI uses one.
    #[must_use]
    pub const fn bridge(self) -> Option<&'static str> {
        match self {
            Self::AzureBridge => Some(BRIDGE),
            Self::Kubenet => Some(KUBENET_BRIDGE),
            Self::AzureTransparent | Self::Calico => None,
        }
    }

    /// The pods' subnet on this node.
    #[must_use]
    pub const fn pod_cidr(self) -> (Ipv4Addr, u8) {
        match self {
            Self::Kubenet => KUBENET_POD_CIDR,
            _ => POD_SUBNET,
        }
    }

    /// The pods' default gateway.
    #[must_use]
    pub const fn pod_gateway(self) -> Ipv4Addr {
        match self {
            Self::AzureBridge => GATEWAY_IP,
            Self::Kubenet => KUBENET_GATEWAY,
            Self::AzureTransparent | Self::Calico => ROUTED_POD_GATEWAY,
        }
    }

    /// The Azure CNI state file, for the variants that run Azure CNI (not kubenet).
    #[must_use]
    pub const fn state_file(self) -> Option<&'static str> {
        match self {
            Self::Kubenet => None,
            _ => Some(STATE_FILE),
        }
    }

    /// Azure CNI's network mode in the state file (`bridge` or `transparent`).
    #[must_use]
    pub const fn cni_mode(self) -> &'static str {
        match self {
            Self::AzureBridge => "bridge",
            _ => "transparent",
        }
    }

    /// The nat chain holding the MASQUERADE rule for pod traffic leaving the cluster.
    #[must_use]
    pub const fn masquerade_chain(self) -> &'static str {
        match self {
            Self::AzureBridge | Self::AzureTransparent => "IP-MASQ-AGENT",
            Self::Kubenet => "POSTROUTING",
            Self::Calico => "cali-nat-outgoing",
        }
    }

    /// Whether pod traffic to the VNet host is masqueraded (kubenet: pods are not VNet
    /// addresses).
    #[must_use]
    pub const fn masquerades_inside_vnet(self) -> bool {
        matches!(self, Self::Kubenet)
    }
}

impl std::fmt::Display for Variant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

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
/// Every pod of the lab, client first (Azure CNI: bridge and transparent modes).
pub const PODS: [Pod; 4] = [UBUNTU, WHEREAMI_QFQ2K, WHEREAMI_J7BPW, COREDNS];

/// The pods with Calico's host interfaces (`cali` + 11 hex digits); same addresses.
pub const CALICO_PODS: [Pod; 4] = [
    Pod {
        host_if: "cali47c3ee9d512",
        ..UBUNTU
    },
    Pod {
        host_if: "calia4124965a9b",
        ..WHEREAMI_QFQ2K
    },
    Pod {
        host_if: "cali1a68ecb6fb1",
        ..WHEREAMI_J7BPW
    },
    Pod {
        host_if: "cali3cd1b2db354",
        ..COREDNS
    },
];

/// The pods on kubenet: addresses from the node's pod CIDR, `veth…` host interfaces.
pub const KUBENET_PODS: [Pod; 4] = [
    Pod {
        ip: Ipv4Addr::new(10, 244, 0, 46),
        host_if: "veth3f2a9c1d",
        ..UBUNTU
    },
    Pod {
        ip: Ipv4Addr::new(10, 244, 0, 26),
        host_if: "veth8b0e4a77",
        ..WHEREAMI_QFQ2K
    },
    Pod {
        ip: Ipv4Addr::new(10, 244, 0, 7),
        host_if: "veth51c6d2e0",
        ..WHEREAMI_J7BPW
    },
    Pod {
        ip: Ipv4Addr::new(10, 244, 0, 17),
        host_if: "veth0d9f3b62",
        ..COREDNS
    },
];

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
    fn variants_are_named_and_consistent() {
        for v in VARIANTS {
            assert_eq!(Variant::from_name(v.name()), Some(v));
            let (net, prefix) = v.pod_cidr();
            let mask = u32::MAX << (32 - prefix);
            for pod in v.pods() {
                assert_eq!(u32::from(pod.ip) & mask, u32::from(net), "{v}: {}", pod.ip);
                assert!(pod.host_if.len() <= 15, "{}", pod.host_if);
            }
            let prefix = match v {
                Variant::AzureBridge | Variant::AzureTransparent => "azv",
                Variant::Kubenet => "veth",
                Variant::Calico => "cali",
            };
            assert!(
                v.pods().iter().all(|p| p.host_if.starts_with(prefix)),
                "{v}"
            );
            assert_eq!(v.ubuntu().name, "ubuntu");
            // Same pod names (and so namespaces) in every variant.
            let names: Vec<_> = v.pods().iter().map(|p| p.name).collect();
            assert_eq!(names, PODS.map(|p| p.name));
        }
        assert_eq!(Variant::default(), Variant::AzureBridge);
        assert_eq!(Variant::from_name("flannel"), None);
    }

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
