//! The lab's IPv6 half (`cargo xtask lab up --dual-stack`): a dual-stack AKS node, added to a
//! running lab of the `azure-bridge` variant, whose IPv4 side stays as it was.
//!
//! Pods get a ULA address beside their IPv4 one ([`pod_ip6`], in `fd13:76::/64`), wired as
//! Azure CNI bridge mode wires IPv4: a `/128` on the pod's `eth0`, its default route via the
//! VNet router's address pinned to the bridge's MAC, so every packet a pod sends is routed by
//! the node, and a permanent neighbour per pod on `azure0`. The node (`fd13:76::4` on
//! `azure0`) runs the ip6tables nat table of `nat-rules6.txt`: the IPv6 `ClusterIPs` of kube-proxy
//! for `default/whereami` ([`WHEREAMI6_CLUSTER_IP`]) and kube-dns ([`DNS6_CLUSTER_IP`]), and
//! ip-masq-agent's MASQUERADE of everything outside `fd13::/16`, such as the internet host's
//! [`INET6_HOST`] (`2001:db8:113::80`, a documentation address). Every lab server also
//! answers over IPv6 ([`V6_SERVER_SUFFIX`]: a second server per namespace, bound to `::`,
//! its own log), with the client address it saw. The state file lists both addresses of each
//! pod. Marked by [`MARKER`]; taken down with the rest of the lab.

use std::{
    fs,
    net::{Ipv6Addr, SocketAddrV6},
};

use anyhow::{Context as _, Result, ensure};
use xtask_common::cmd::{output, output_with_input};

use super::{
    api,
    netns::{in_ns, ip, sysctl},
    servers,
    topology::{
        BRIDGE, BRIDGE_MAC, INET_HOST, NODE_NS, PODS, Pod, STATE_FILE, Server, VNET_NODE_IF,
        VNET_NS, Variant, mac_string,
    },
};

/// The ip6tables nat table of the dual-stack node (`ip6tables-save -t nat` format).
pub const NAT_RULES6: &str = include_str!("nat-rules6.txt");
/// Where the loaded IPv6 nat table is written; its presence marks the IPv6 half as built.
pub const MARKER: &str = "/run/pktrace-lab/nat-rules6.txt";
/// The pods' IPv6 subnet (Azure CNI dual-stack pods: one ULA `/64` per node here).
pub const POD6_SUBNET: (Ipv6Addr, u8) = (Ipv6Addr::new(0xfd13, 0x76, 0, 0, 0, 0, 0, 0), 64);
/// The node's IPv6 address (on `azure0`).
pub const NODE6_IP: Ipv6Addr = Ipv6Addr::new(0xfd13, 0x76, 0, 0, 0, 0, 0, 4);
/// The pods' IPv6 gateway: the VNet router's address on the node link.
pub const GATEWAY6_IP: Ipv6Addr = Ipv6Addr::new(0xfd13, 0x76, 0, 0, 0, 0, 0, 1);
/// IPv6 ClusterIP of `default/whereami`.
pub const WHEREAMI6_CLUSTER_IP: SocketAddrV6 =
    SocketAddrV6::new(Ipv6Addr::new(0xfd00, 0x10, 0, 0, 0, 0, 0, 0x9f3a), 80, 0, 0);
/// IPv6 ClusterIP of `kube-system/kube-dns` (UDP).
pub const DNS6_CLUSTER_IP: SocketAddrV6 =
    SocketAddrV6::new(Ipv6Addr::new(0xfd00, 0x10, 0, 0, 0, 0, 0, 0xa), 53, 0, 0);
/// The internet host's IPv6 address (masqueraded: outside `fd13::/16`).
pub const INET6_HOST: SocketAddrV6 = SocketAddrV6::new(
    Ipv6Addr::new(0x2001, 0xdb8, 0x113, 0, 0, 0, 0, 0x80),
    80,
    0,
    0,
);
/// The internet host's namespace (its IPv6 server logs under it, [`server_log6`]).
pub const INET6_HOST_NS: &str = INET_HOST.netns;
/// The VNet router's address on the internet host's link.
pub const INET6_ROUTER: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0x113, 0, 0, 0, 0, 1);
/// The IPv6 server of namespace `ns` runs and logs under `ns` + this.
pub const V6_SERVER_SUFFIX: &str = "-v6";

/// A pod's IPv6 address: the subnet's, ending in the last octet of its IPv4 address.
#[must_use]
pub const fn pod_ip6(pod: &Pod) -> Ipv6Addr {
    let last = pod.ip.octets()[3] as u16;
    Ipv6Addr::new(0xfd13, 0x76, 0, 0, 0, 0, 0, last)
}

/// The pod of IPv6 address `ip`, if any.
#[must_use]
pub fn pod_by_ip6(ip: Ipv6Addr) -> Option<Pod> {
    PODS.iter().find(|p| pod_ip6(p) == ip).copied()
}

/// The log of the IPv6 server of namespace `ns` (`tcp client=[…]:…` lines).
#[must_use]
pub fn server_log6(ns: &str) -> String {
    fs::read_to_string(servers::log_path(&v6_key(ns))).unwrap_or_default()
}

fn v6_key(ns: &str) -> String {
    format!("{ns}{V6_SERVER_SUFFIX}")
}

/// Namespaces with a server, and what it serves (the pods' and the internet host's).
fn v6_servers() -> Vec<(String, Server)> {
    let pods = PODS
        .iter()
        .filter(|p| p.server != Server::None)
        .map(|p| (p.netns(), p.server));
    pods.chain([(INET_HOST.netns.to_owned(), Server::Tcp(INET6_HOST.port()))])
        .collect()
}

/// Whether the IPv6 half is built and its servers run.
#[must_use]
pub fn is_up() -> bool {
    std::path::Path::new(MARKER).exists()
        && v6_servers()
            .iter()
            .all(|(ns, _)| servers::is_running_as(&v6_key(ns), ns))
}

/// Adds the IPv6 half to the running lab of `variant` (does nothing if it is there). The
/// caller holds the lab lock.
///
/// # Errors
/// If the lab runs another variant than `azure-bridge`, was half made dual-stack before (take
/// it down), or a step fails.
pub fn up(variant: Variant) -> Result<()> {
    ensure!(
        variant == Variant::AzureBridge,
        "--dual-stack is built on the azure-bridge variant, not {variant}"
    );
    if is_up() {
        eprintln!("lab: already dual-stack");
        return Ok(());
    }
    ensure!(
        !std::path::Path::new(MARKER).exists(),
        "the lab's IPv6 half is partial: run `cargo xtask lab down` and up again"
    );
    build().context("adding IPv6 to the lab (--dual-stack)")?;
    eprintln!(
        "lab: dual-stack (pods in {}/{}, ClusterIP {WHEREAMI6_CLUSTER_IP}, DNS {DNS6_CLUSTER_IP}, \
         internet host {INET6_HOST})",
        POD6_SUBNET.0, POD6_SUBNET.1
    );
    Ok(())
}

fn build() -> Result<()> {
    node6()?;
    vnet6()?;
    for pod in &PODS {
        pod6(pod).with_context(|| format!("wiring pod {} for IPv6", pod.full_name()))?;
    }
    inet6()?;
    settle_neighbours()?;
    output_with_input(&mut in_ns(NODE_NS, "ip6tables-restore", ["-w"]), NAT_RULES6)
        .context("loading the IPv6 nat rules into pkt-node")?;
    let loaded = output(&mut in_ns(NODE_NS, "ip6tables-save", ["-t", "nat"]))?;
    ensure!(
        loaded.contains("KUBE-SERVICES"),
        "ip6tables-restore loaded nothing:\n{loaded}"
    );
    add_state_file_ips()?;
    add_api_ips()?;
    for (ns, server) in v6_servers() {
        // `::` only: the IPv4 server holds the port on 0.0.0.0.
        sysctl(&ns, "net.ipv6.bindv6only", "1")?;
        let (proto, port) = match server {
            Server::Tcp(port) => ("--tcp", port),
            Server::Udp(port) => ("--udp", port),
            Server::None => continue,
        };
        let key = v6_key(&ns);
        let log = servers::log_path(&key).display().to_string();
        let args = [
            "lab",
            "serve",
            proto,
            &port.to_string(),
            "--bind",
            "::",
            "--log",
            &log,
        ];
        servers::spawn(&key, &ns, args.map(str::to_owned).to_vec())?;
    }
    fs::write(MARKER, NAT_RULES6).with_context(|| format!("writing {MARKER}"))
}

fn node6() -> Result<()> {
    sysctl(NODE_NS, "net.ipv6.conf.all.forwarding", "1")?;
    let prefix = POD6_SUBNET.1;
    ip(
        NODE_NS,
        &format!("addr add {NODE6_IP}/{prefix} dev {BRIDGE} nodad"),
    )?;
    ip(
        NODE_NS,
        &format!("route add default via {GATEWAY6_IP} dev {BRIDGE}"),
    )
}

fn vnet6() -> Result<()> {
    sysctl(VNET_NS, "net.ipv6.conf.all.forwarding", "1")?;
    ip(
        VNET_NS,
        &format!("addr add {GATEWAY6_IP}/128 dev {VNET_NODE_IF} nodad"),
    )?;
    ip(
        VNET_NS,
        &format!("route add {NODE6_IP}/128 dev {VNET_NODE_IF}"),
    )?;
    // The pods behind the node, as for IPv4: routed to the node, never answered on the link.
    let (subnet, prefix) = POD6_SUBNET;
    ip(
        VNET_NS,
        &format!("route add {subnet}/{prefix} via {NODE6_IP} dev {VNET_NODE_IF}"),
    )
}

fn pod6(pod: &Pod) -> Result<()> {
    let (ns, addr) = (pod.netns(), pod_ip6(pod));
    // A redirect from the node (it forwards hairpin traffic out of the interface it came in
    // by) would send a pod's packets to another pod directly, around the node's NAT.
    for key in [
        "net.ipv6.conf.all.accept_redirects",
        "net.ipv6.conf.eth0.accept_redirects",
    ] {
        sysctl(&ns, key, "0")?;
    }
    ip(&ns, &format!("addr add {addr}/128 dev eth0 nodad"))?;
    ip(
        &ns,
        &format!("route add default via {GATEWAY6_IP} dev eth0 onlink"),
    )?;
    let bridge_mac = mac_string(BRIDGE_MAC);
    ip(
        &ns,
        &format!("neigh add {GATEWAY6_IP} lladdr {bridge_mac} dev eth0 nud permanent"),
    )?;
    let mac = mac_string(pod.mac());
    ip(
        NODE_NS,
        &format!("neigh add {addr} lladdr {mac} dev {BRIDGE} nud permanent"),
    )
}

fn inet6() -> Result<()> {
    let host = INET_HOST;
    ip(
        VNET_NS,
        &format!("addr add {INET6_ROUTER}/64 dev {} nodad", host.router_if),
    )?;
    ip(
        host.netns,
        &format!("addr add {}/64 dev eth0 nodad", INET6_HOST.ip()),
    )?;
    ip(host.netns, &format!("route add default via {INET6_ROUTER}"))
}

/// Resolves each link's IPv6 neighbours beyond the node (node ↔ VNet router, router ↔
/// internet host) by one ping each way, until it answers (bounded), before any test traffic:
/// on freshly made links the first resolution can take about a second, and a connection's
/// SYN-ACK waiting on it makes the client send its SYN again, which the server's kernel then
/// frees as a duplicate (a real drop, but one of the lab's making, not of the traffic's).
fn settle_neighbours() -> Result<()> {
    let pairs = [
        (NODE_NS, GATEWAY6_IP),
        (VNET_NS, NODE6_IP),
        (INET_HOST.netns, INET6_ROUTER),
        (VNET_NS, *INET6_HOST.ip()),
    ];
    ping6_each(&pairs)
}

/// Pings each address from its namespace over IPv6 until it answers (at most 5 tries of 2 s
/// each), so the link neighbours are resolved before traffic.
///
/// # Errors
/// An address that never answers.
pub(super) fn ping6_each(pairs: &[(&str, Ipv6Addr)]) -> Result<()> {
    for (ns, to) in pairs {
        let to = to.to_string();
        let answered = (0..5).any(|_| {
            in_ns(ns, "ping", ["-6", "-n", "-q", "-c", "1", "-W", "2", &to])
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        });
        ensure!(answered, "{to} does not answer ping -6 from {ns}");
    }
    Ok(())
}

/// Adds each pod's IPv6 address to its `IPAddresses` in the state file, after its IPv4 one,
/// as Azure CNI writes a dual-stack pod.
fn add_state_file_ips() -> Result<()> {
    let text = fs::read_to_string(STATE_FILE).with_context(|| format!("reading {STATE_FILE}"))?;
    fs::write(STATE_FILE, with_ipv6(&text)?).with_context(|| format!("writing {STATE_FILE}"))
}

/// Adds each pod's IPv6 address to the fake API server's pod table (its `status.podIPs`).
fn add_api_ips() -> Result<()> {
    let path = api::PODS_FILE;
    let text = fs::read_to_string(path).with_context(|| format!("reading {path}"))?;
    let mut table: serde_json::Value = serde_json::from_str(&text)?;
    for row in table.as_array_mut().into_iter().flatten() {
        let pod = PODS
            .iter()
            .find(|p| row["ip"].as_str() == Some(&p.ip.to_string()));
        if let Some(pod) = pod {
            row["ip6"] = pod_ip6(pod).to_string().into();
        }
    }
    let tmp = format!("{path}.tmp");
    fs::write(&tmp, serde_json::to_string_pretty(&table)?)?;
    fs::rename(&tmp, path).with_context(|| format!("replacing {path}"))
}

/// `text` (a rendered lab state file) with each pod's IPv6 address beside its IPv4 one.
fn with_ipv6(text: &str) -> Result<String> {
    let mut out = text.to_owned();
    // A `/64` mask, base64 of 8 bytes of ones then 8 of zeros, as Go's json writes `net.IPMask`.
    let mask = "//////////8AAAAAAAAAAA==";
    for pod in &PODS {
        let v4 = format!("\"IP\": \"{}\",", pod.ip);
        let at = out
            .find(&v4)
            .with_context(|| format!("{} is not in {STATE_FILE}", pod.ip))?;
        let close = out[at..]
            .find('}')
            .map(|i| at + i + 1)
            .context("an IPAddresses entry without its end")?;
        let indent = out[..at].rsplit('\n').next().unwrap_or_default().len();
        let pad = " ".repeat(indent);
        let outer = " ".repeat(indent.saturating_sub(2));
        let entry = format!(
            ",\n{outer}{{\n{pad}\"IP\": \"{}\",\n{pad}\"Mask\": \"{mask}\"\n{outer}}}",
            pod_ip6(pod)
        );
        out.insert_str(close, &entry);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use std::time::UNIX_EPOCH;

    use super::*;
    use crate::state_file;

    #[test]
    fn pod_addresses_are_in_the_subnet_and_distinct() {
        let (net, prefix) = POD6_SUBNET;
        let mask = u128::MAX << (128 - prefix);
        let mut seen = Vec::new();
        for pod in &PODS {
            let a = pod_ip6(pod);
            assert_eq!(a.to_bits() & mask, net.to_bits(), "{a}");
            assert_eq!(pod_by_ip6(a).map(|p| p.name), Some(pod.name));
            assert!(!seen.contains(&a));
            seen.push(a);
        }
        for a in [NODE6_IP, GATEWAY6_IP] {
            assert_eq!(a.to_bits() & mask, net.to_bits(), "{a}");
        }
        // Public-looking addresses only from the documentation prefix.
        assert_eq!(INET6_HOST.ip().segments()[..2], [0x2001, 0xdb8]);
    }

    #[test]
    fn the_rules_name_every_pod_address_and_service() {
        for pod in PODS.iter().filter(|p| p.server != Server::None) {
            assert!(
                NAT_RULES6.contains(&format!("--to-destination [{}]:", pod_ip6(pod))),
                "{}",
                pod.name
            );
        }
        assert!(NAT_RULES6.contains(&format!("-d {}/128", WHEREAMI6_CLUSTER_IP.ip())));
        assert!(NAT_RULES6.contains(&format!("-d {}/128", DNS6_CLUSTER_IP.ip())));
        assert!(NAT_RULES6.contains("-j MASQUERADE"));
    }

    #[test]
    fn the_state_file_gets_both_addresses_of_each_pod() {
        let text = state_file::render_variant(Variant::AzureBridge, UNIX_EPOCH);
        let dual = with_ipv6(&text).unwrap();
        let doc: serde_json::Value = serde_json::from_str(&dual).expect("still JSON");
        let text = doc.to_string();
        for pod in &PODS {
            assert!(text.contains(&pod_ip6(pod).to_string()), "{}", pod.name);
            assert!(text.contains(&pod.ip.to_string()), "{}", pod.name);
        }
    }
}
