//! Node 2's IPv6 half, for a lab with both nodes and node 1 dual-stack
//! ([`super::up_two_nodes_dual_stack`]): node 2 gets `fd13:77::4` on its `azure0` (a subnet
//! of its own, as its IPv4 side has), its backend pod [`REMOTE_BACKEND6`] beside its IPv4
//! address, wired as [`super::dualstack`] wires node 1's pods, and the VNet router routes
//! `fd13:77::/64` to node 2. A pod on node 1 reaches the backend's IPv6 address directly, with
//! no NAT on either node (ip-masq-agent leaves `fd13::/16` alone): the packet crosses the wire
//! as it left the pod, which is what `pktrace merge` joins by. The backend also answers over
//! IPv6 (its own server bound to `::`, logging under its namespace + `-v6`).

use std::net::Ipv6Addr;

use anyhow::{Context as _, Result, ensure};

use super::{
    dualstack,
    netns::{ip, sysctl},
    node2::{self, NODE2_BRIDGE, NODE2_IP, NODE2_NS, REMOTE_BACKEND, VNET_NODE2_IF},
    servers,
    topology::{VNET_NS, mac_for, mac_string},
};

/// Node 2's IPv6 address (on its `azure0`).
pub const NODE2_IP6: Ipv6Addr = Ipv6Addr::new(0xfd13, 0x77, 0, 0, 0, 0, 0, 4);
/// Node 2's IPv6 subnet (its node and its pods).
pub const NODE2_SUBNET6: (Ipv6Addr, u8) = (Ipv6Addr::new(0xfd13, 0x77, 0, 0, 0, 0, 0, 0), 64);
/// Node 2's IPv6 gateway: the VNet router's address on node 2's link.
pub const NODE2_GATEWAY6: Ipv6Addr = Ipv6Addr::new(0xfd13, 0x77, 0, 0, 0, 0, 0, 1);
/// The IPv6 address of the backend pod on node 2 (its IPv4 one ends in 31 = 0x1f).
pub const REMOTE_BACKEND6: Ipv6Addr = Ipv6Addr::new(0xfd13, 0x77, 0, 0, 0, 0, 0, 0x1f);
/// The port the backend's IPv6 server listens on.
pub const REMOTE_PORT6: u16 = 80;

/// The server key (and log name) of the backend's IPv6 server.
fn server_key() -> String {
    format!("{}{}", REMOTE_BACKEND.netns(), dualstack::V6_SERVER_SUFFIX)
}

/// Whether node 2's IPv6 half is there (the backend's IPv6 server runs).
#[must_use]
pub fn is_up() -> bool {
    servers::is_running_as(&server_key(), &REMOTE_BACKEND.netns())
}

/// The backend's IPv6 server log (`tcp client=[…]:…` lines).
#[must_use]
pub fn server_log6() -> String {
    dualstack::server_log6(&REMOTE_BACKEND.netns())
}

/// Adds node 2's IPv6 half (does nothing if it is there). The caller holds the lab lock.
///
/// # Errors
/// If node 2 or node 1's IPv6 half is not up, or a step fails.
pub fn up() -> Result<()> {
    ensure!(node2::is_up(), "node 2 is not up: `lab up --nodes 2` first");
    ensure!(dualstack::is_up(), "node 1 is not dual-stack");
    if is_up() {
        return Ok(());
    }
    build().context("adding IPv6 to node 2")?;
    eprintln!(
        "lab: node 2 dual-stack ({NODE2_IP6}; pod {} {REMOTE_BACKEND6})",
        REMOTE_BACKEND.full_name()
    );
    Ok(())
}

fn build() -> Result<()> {
    sysctl(NODE2_NS, "net.ipv6.conf.all.forwarding", "1")?;
    let prefix = NODE2_SUBNET6.1;
    ip(
        NODE2_NS,
        &format!("addr add {NODE2_IP6}/{prefix} dev {NODE2_BRIDGE} nodad"),
    )?;
    ip(
        NODE2_NS,
        &format!("route add default via {NODE2_GATEWAY6} dev {NODE2_BRIDGE}"),
    )?;
    vnet()?;
    pod()?;
    settle()?;
    let ns = REMOTE_BACKEND.netns();
    sysctl(&ns, "net.ipv6.bindv6only", "1")?;
    let log = servers::log_path(&server_key()).display().to_string();
    let port = REMOTE_PORT6.to_string();
    let args = [
        "lab", "serve", "--tcp", &port, "--bind", "::", "--log", &log,
    ];
    servers::spawn(&server_key(), &ns, args.map(str::to_owned).to_vec())?;
    Ok(())
}

fn vnet() -> Result<()> {
    ip(
        VNET_NS,
        &format!("addr add {NODE2_GATEWAY6}/128 dev {VNET_NODE2_IF} nodad"),
    )?;
    ip(
        VNET_NS,
        &format!("route add {NODE2_IP6}/128 dev {VNET_NODE2_IF}"),
    )?;
    let (subnet, prefix) = NODE2_SUBNET6;
    ip(
        VNET_NS,
        &format!("route add {subnet}/{prefix} via {NODE2_IP6} dev {VNET_NODE2_IF}"),
    )
}

fn pod() -> Result<()> {
    let ns = REMOTE_BACKEND.netns();
    for key in [
        "net.ipv6.conf.all.accept_redirects",
        "net.ipv6.conf.eth0.accept_redirects",
    ] {
        sysctl(&ns, key, "0")?;
    }
    ip(
        &ns,
        &format!("addr add {REMOTE_BACKEND6}/128 dev eth0 nodad"),
    )?;
    ip(
        &ns,
        &format!("route add default via {NODE2_GATEWAY6} dev eth0 onlink"),
    )?;
    let bridge_mac = mac_string(mac_for(NODE2_IP));
    ip(
        &ns,
        &format!("neigh add {NODE2_GATEWAY6} lladdr {bridge_mac} dev eth0 nud permanent"),
    )?;
    let mac = mac_string(REMOTE_BACKEND.mac());
    ip(
        NODE2_NS,
        &format!("neigh add {REMOTE_BACKEND6} lladdr {mac} dev {NODE2_BRIDGE} nud permanent"),
    )
}

/// Resolves node 2's link neighbours both ways (bounded), before any test traffic.
fn settle() -> Result<()> {
    dualstack::ping6_each(&[(NODE2_NS, NODE2_GATEWAY6), (VNET_NS, NODE2_IP6)])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node2s_ipv6_addresses_are_its_own_subnet_inside_the_unmasqueraded_range() {
        let (net, prefix) = NODE2_SUBNET6;
        let mask = u128::MAX << (128 - prefix);
        for addr in [NODE2_IP6, NODE2_GATEWAY6, REMOTE_BACKEND6] {
            assert_eq!(u128::from(addr) & mask, u128::from(net), "{addr}");
            // ip-masq-agent's fd13::/16: no NAT between the nodes.
            assert_eq!(addr.segments()[0], 0xfd13, "{addr}");
        }
        let (net1, _) = dualstack::POD6_SUBNET;
        assert_ne!(u128::from(net1) & mask, u128::from(net));
        assert_eq!(
            REMOTE_BACKEND6.segments()[7],
            u16::from(REMOTE_BACKEND.ip.octets()[3])
        );
    }
}
