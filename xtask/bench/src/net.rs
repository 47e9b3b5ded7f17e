//! The bench's own simulated node, shaped like the lab's (see `DESIGN.md`, "The lab") but in
//! namespaces named `pkt-b*`, so it never collides with the lab or with the tests that use it:
//!
//! ```text
//!  pkt-bcli  eth0 ─ azvbe000000046 ─┐
//!  pkt-bsrv  eth0 ─ azvbe000000026 ─┼─ azure0 (bridge, 10.13.77.4) ─ eth0 ─ node  pkt-bout
//!  pkt-bidle eth0 ─ azvbe000000007 ─┘   pkt-bnode: ClusterIP DNAT,          (VNet router and
//!                                       ip-masq-agent MASQUERADE             outside host)
//! ```
//!
//! [`BenchNet`] owns every namespace it creates: dropping it kills the processes inside them and
//! deletes them. Nothing touches the root namespace.

use std::{fmt::Write as _, net::Ipv4Addr};

use anyhow::{Context as _, Result, ensure};
use pktrace_lab::{
    netns::{self, in_ns, ip, sysctl},
    servers::kill_all_in,
};
use xtask_common::cmd::{command, output, output_with_input};

/// Prefix of every namespace the bench creates (the lab's are `pkt-node`, `pkt-pod-*`, …).
pub const NS_PREFIX: &str = "pkt-b";
/// The node.
pub const NODE_NS: &str = "pkt-bnode";
/// The VNet router and the outside host beyond the node's `eth0`.
pub const OUT_NS: &str = "pkt-bout";
/// Scratch namespace holding the peers of the extra veths of the start-up measurement.
pub const VETHS_NS: &str = "pkt-b-veths";
/// The node's bridge, its uplink and the router's interface facing the node.
const BRIDGE: &str = "azure0";
const UPLINK: &str = "eth0";
const ROUTER_IF: &str = "node";
/// The node IP (on the bridge) and the VNet gateway.
pub const NODE_IP: Ipv4Addr = Ipv4Addr::new(10, 13, 77, 4);
const GATEWAY_IP: Ipv4Addr = Ipv4Addr::new(10, 13, 77, 1);
/// The pod subnet's prefix length.
const POD_PREFIX: u8 = 24;
const BRIDGE_MAC: &str = "02:42:0a:0d:4d:04";
const ROUTER_MAC: &str = "12:34:56:78:9a:bc";
/// The backend's ClusterIP (DNAT, TCP and UDP 5201) and the outside host (MASQUERADE).
pub const CLUSTER_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 160, 10);
pub const OUTSIDE_IP: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 80);
/// iperf3's port, on the backend pod and on the outside host.
pub const IPERF_PORT: u16 = 5201;
/// A port nothing listens on at the outside host: [`send_masqueraded`]'s datagram.
pub const CLOSED_PORT: u16 = 9;
/// [`send_masqueraded`]'s source port from `pod`: one per pod (40,000 + the address's last
/// byte), since MASQUERADE gives every pod the node's address and keeps a source port only
/// while no other flow to the same place holds it (UDP entries live 30 s). Without
/// `--random-fully`, as in [`NAT_RULES`], the masqueraded flow is then the node's address and
/// this port to [`CLOSED_PORT`] of the outside host.
#[must_use]
pub fn masq_sport(pod: BenchPod) -> u16 {
    40_000 + u16::from(pod.ip.octets()[3])
}
/// The twin: a client and a server namespace joined by a veth pair, outside the node, which
/// no tracer sees. Its TCP stream runs beside a measured one on the same CPU
/// ([`super::paired`]): what the machine does to both cancels in their ratio.
pub const TWIN_CLIENT_NS: &str = "pkt-btwc";
pub const TWIN_SERVER_NS: &str = "pkt-btws";
pub const TWIN_CLIENT_IP: Ipv4Addr = Ipv4Addr::new(10, 99, 0, 1);
pub const TWIN_SERVER_IP: Ipv4Addr = Ipv4Addr::new(10, 99, 0, 2);
/// Interfaces pktrace attaches to in the bench (its default list).
pub const INTERFACES: &str = "eth0,azure0,azv*";
/// kube-proxy + ip-masq-agent nat rules of the node.
const NAT_RULES: &str = include_str!("nat-rules.txt");

/// A pod of the bench node.
#[derive(Clone, Copy, Debug)]
pub struct BenchPod {
    pub netns: &'static str,
    pub ip: Ipv4Addr,
    /// Host-side veth (`azv` + 11 hex digits, like Azure CNI's).
    pub host_if: &'static str,
}

impl BenchPod {
    fn mac(&self) -> String {
        let o = self.ip.octets();
        format!("02:42:{:02x}:{:02x}:{:02x}:{:02x}", o[0], o[1], o[2], o[3])
    }
}

/// The pod that makes the traffic (traced with `--pod-ip`).
pub const CLIENT: BenchPod = BenchPod {
    netns: "pkt-bcli",
    ip: Ipv4Addr::new(10, 13, 77, 46),
    host_if: "azvbe000000046",
};
/// The iperf3 server behind the ClusterIP.
pub const BACKEND: BenchPod = BenchPod {
    netns: "pkt-bsrv",
    ip: Ipv4Addr::new(10, 13, 77, 26),
    host_if: "azvbe000000026",
};
/// A pod without traffic: tracing it puts the client's packets outside the filter.
pub const OTHER: BenchPod = BenchPod {
    netns: "pkt-bidle",
    ip: Ipv4Addr::new(10, 13, 77, 7),
    host_if: "azvbe000000007",
};
const PODS: [BenchPod; 3] = [CLIENT, BACKEND, OTHER];

/// Sends one UDP datagram from `pod` to a closed port of the outside host, through the node's
/// MASQUERADE: when pktrace traces `pod`, its NAT programs then follow the masqueraded flow
/// (the node's address and the outside host), as they do on a node whose traced pod talks to
/// the outside. The outside host answers with an ICMP port unreachable.
/// The datagram leaves from [`masq_sport`].
pub fn send_masqueraded(pod: BenchPod) -> Result<()> {
    std::thread::scope(|s| s.spawn(move || send_from(pod)).join())
        .map_err(|_| anyhow::anyhow!("the datagram's thread panicked"))?
        .with_context(|| format!("sending a datagram from {} to {OUTSIDE_IP}", pod.netns))
}

/// Runs in a thread of its own, which moves into the pod's network namespace.
fn send_from(pod: BenchPod) -> Result<()> {
    netns::enter_on_this_thread(pod.netns)?;
    let socket = std::net::UdpSocket::bind((pod.ip, masq_sport(pod)))?;
    socket.send_to(b"pktrace-bench\n", (OUTSIDE_IP, CLOSED_PORT))?;
    Ok(())
}

/// The bench's namespaces; dropping this kills their processes and deletes them.
#[must_use = "the namespaces are deleted when the guard is dropped"]
pub struct BenchNet {
    namespaces: Vec<String>,
}

impl BenchNet {
    /// Builds the node, its pods and the outside; on failure, removes what was built.
    pub fn build() -> Result<Self> {
        let mut net = Self {
            namespaces: Vec::new(),
        };
        for ns in [NODE_NS, OUT_NS, TWIN_CLIENT_NS, TWIN_SERVER_NS]
            .into_iter()
            .chain(PODS.iter().map(|p| p.netns))
        {
            net.create(ns)?;
        }
        net.wire().context("wiring the bench node")?;
        Ok(net)
    }

    fn create(&mut self, ns: &str) -> Result<()> {
        ensure!(ns.starts_with(NS_PREFIX), "{ns} is not a bench namespace");
        netns::create(ns).with_context(|| format!("creating namespace {ns}"))?;
        self.namespaces.push(ns.to_owned());
        // No IPv6 autoconfiguration chatter on the measured interfaces.
        for key in ["all", "default"] {
            sysctl(ns, &format!("net.ipv6.conf.{key}.disable_ipv6"), "1")?;
        }
        Ok(())
    }

    #[expect(
        clippy::unused_self,
        reason = "a step of the network's build, kept on it beside the others"
    )]
    fn wire(&self) -> Result<()> {
        node()?;
        outside()?;
        for pod in &PODS {
            pod_link(pod).with_context(|| format!("wiring pod {}", pod.netns))?;
        }
        twin().context("wiring the twin")?;
        output_with_input(&mut in_ns(NODE_NS, "iptables-restore", ["-w"]), NAT_RULES)
            .context("loading the nat rules into the bench node")?;
        Ok(())
    }

    /// Adds `count` veth pairs `azvbf…` to the node (up, on the bridge like pod veths), their
    /// peers in [`VETHS_NS`]; [`Self::remove_veths`] or the drop removes them.
    pub fn add_veths(&mut self, count: usize) -> Result<()> {
        self.create(VETHS_NS)?;
        let (mut node, mut peers) = (String::new(), String::new());
        for i in 0..count {
            let name = extra_veth(i);
            let _ = write!(
                node,
                "link add {name} type veth peer name p{i} netns {VETHS_NS}\n\
                 link set {name} master {BRIDGE} up\n"
            );
            let _ = writeln!(peers, "link set p{i} up");
        }
        output_with_input(&mut command("ip", ["-n", NODE_NS, "-batch", "-"]), &node)
            .context("adding veths to the bench node")?;
        output_with_input(&mut command("ip", ["-n", VETHS_NS, "-batch", "-"]), &peers)
            .context("setting the veth peers up")?;
        Ok(())
    }

    /// Deletes the extra veths (with their scratch namespace).
    pub fn remove_veths(&mut self) -> Result<()> {
        self.namespaces.retain(|ns| ns != VETHS_NS);
        remove(VETHS_NS)
    }
}

impl Drop for BenchNet {
    fn drop(&mut self) {
        for ns in self.namespaces.iter().rev() {
            if let Err(err) = remove(ns) {
                eprintln!("bench: removing namespace {ns} failed: {err:#}");
            }
        }
    }
}

/// The name of extra veth `i`: `azvbf` and 9 hex digits (an Azure CNI-like `azv` + 11 hex).
#[must_use]
pub fn extra_veth(i: usize) -> String {
    format!("azvbf{i:09x}")
}

/// Removes every `pkt-b*` namespace left by an earlier run that died (call with the bench
/// lock held); returns how many there were.
pub fn remove_stale() -> Result<usize> {
    let stale: Vec<String> = netns::list()?
        .into_iter()
        .filter(|ns| ns.starts_with(NS_PREFIX))
        .collect();
    for ns in &stale {
        remove(ns)?;
    }
    Ok(stale.len())
}

/// Kills every process in `ns`, then deletes it.
fn remove(ns: &str) -> Result<()> {
    ensure!(
        ns.starts_with(NS_PREFIX),
        "refusing to remove {ns}: not a bench namespace"
    );
    if !netns::exists(ns) {
        return Ok(());
    }
    kill_all_in(ns)?;
    netns::delete(ns)
}

fn node() -> Result<()> {
    pktrace_lab::wiring::node_sysctls(NODE_NS)?;
    ip(
        NODE_NS,
        &format!("link add {BRIDGE} address {BRIDGE_MAC} type bridge"),
    )?;
    ip(
        NODE_NS,
        &format!("addr add {NODE_IP}/{POD_PREFIX} dev {BRIDGE}"),
    )?;
    ip(NODE_NS, &format!("link set {BRIDGE} up"))?;
    ip(
        NODE_NS,
        &format!("link add {UPLINK} type veth peer name {ROUTER_IF} netns {OUT_NS}"),
    )?;
    ip(NODE_NS, &format!("link set {UPLINK} master {BRIDGE} up"))?;
    ip(
        NODE_NS,
        &format!("route add default via {GATEWAY_IP} dev {BRIDGE}"),
    )
}

fn outside() -> Result<()> {
    ip(
        OUT_NS,
        &format!("link set {ROUTER_IF} address {ROUTER_MAC} up"),
    )?;
    ip(OUT_NS, &format!("addr add {GATEWAY_IP}/32 dev {ROUTER_IF}"))?;
    ip(OUT_NS, &format!("addr add {OUTSIDE_IP}/32 dev lo"))?;
    ip(
        OUT_NS,
        &format!("route add {NODE_IP} dev {ROUTER_IF} scope link"),
    )?;
    ip(
        OUT_NS,
        &format!("route add 10.13.77.0/{POD_PREFIX} via {NODE_IP} dev {ROUTER_IF}"),
    )
}

fn twin() -> Result<()> {
    ip(
        TWIN_CLIENT_NS,
        &format!("link add eth0 type veth peer name eth0 netns {TWIN_SERVER_NS}"),
    )?;
    for (ns, addr) in [
        (TWIN_CLIENT_NS, TWIN_CLIENT_IP),
        (TWIN_SERVER_NS, TWIN_SERVER_IP),
    ] {
        ip(ns, &format!("addr add {addr}/30 dev eth0"))?;
        ip(ns, "link set eth0 up")?;
        ip(ns, "link set lo up")?;
    }
    Ok(())
}

fn pod_link(pod: &BenchPod) -> Result<()> {
    let (ns, host_if, pod_ip, mac) = (pod.netns, pod.host_if, pod.ip, pod.mac());
    ip(
        NODE_NS,
        &format!("link add {host_if} type veth peer name eth0 netns {ns}"),
    )?;
    ip(NODE_NS, &format!("link set {host_if} master {BRIDGE} up"))?;
    ip(ns, &format!("link set eth0 address {mac} up"))?;
    ip(ns, &format!("addr add {pod_ip}/32 dev eth0"))?;
    ip(
        ns,
        &format!("route add default via {GATEWAY_IP} dev eth0 onlink"),
    )?;
    ip(
        ns,
        &format!("neigh add {GATEWAY_IP} lladdr {BRIDGE_MAC} dev eth0 nud permanent"),
    )?;
    ip(
        NODE_NS,
        &format!("neigh add {pod_ip} lladdr {mac} dev {BRIDGE} nud permanent"),
    )?;
    let fdb = format!("-n {NODE_NS} fdb replace {mac} dev {host_if} master static");
    output(&mut command("bridge", fdb.split_whitespace()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_stay_out_of_the_labs_way() {
        for pod in PODS {
            assert!(pod.netns.starts_with(NS_PREFIX), "{}", pod.netns);
            assert!(!pod.netns.starts_with("pkt-pod-"));
            assert_eq!(pod.host_if.len(), 14);
            assert!(pod.host_if[3..].chars().all(|c| c.is_ascii_hexdigit()));
        }
        for ns in [NODE_NS, OUT_NS, VETHS_NS, TWIN_CLIENT_NS, TWIN_SERVER_NS] {
            assert!(ns.starts_with(NS_PREFIX));
        }
        assert_eq!(extra_veth(249), "azvbf0000000f9");
        assert_eq!(CLIENT.mac(), "02:42:0a:0d:4d:2e");
        assert_eq!(masq_sport(CLIENT), 40_046);
        assert_ne!(masq_sport(CLIENT), masq_sport(OTHER));
    }
}
