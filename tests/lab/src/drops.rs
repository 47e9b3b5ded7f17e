//! The lab's failure scenarios: what makes the node drop a pod's packet, each added to the
//! running lab by a guard and removed again when the guard drops, so the lab's own traffic
//! (and `cargo xtask demo`) never meets them. The root tests (`tests/tests/drops.rs`) use them.
//!
//! - [`Scenario::NoEndpoints`]: kube-proxy's filter-table rules for a service without
//!   endpoints (iptables mode, `pkg/proxy/iptables/proxier.go`): `KUBE-SERVICES` reached from
//!   `INPUT`, `FORWARD` and `OUTPUT` for new connections, and a `REJECT` commented
//!   `"<ns>/<svc>:<port> has no endpoints"` for the ClusterIP [`NO_ENDPOINTS_IP`].
//! - [`Scenario::AdminDrop`]: a plain `DROP` an administrator put in `FORWARD` for TCP and UDP
//!   to the VNet host's port [`ADMIN_DROP_PORT`].
//! - [`Scenario::NoRoute`]: a `throw` route for [`NO_ROUTE_NET`] in the node's main table, so
//!   a packet the node forwards there has no route (`ENETUNREACH`: `ip_error`). Only where the
//!   node routes pod traffic (not the bridge variant, whose pods' gateway is beyond `eth0`).
//! - [`Scenario::AdminReject`]: an administrator's `REJECT` in `FORWARD` for TCP to the VNet
//!   host's port [`ADMIN_REJECT_PORT`] (the tests add it while pktrace runs).
//! - [`Scenario::CalicoPolicy`] (calico variant): the filter table felix writes for a
//!   Kubernetes `NetworkPolicy` that denies ubuntu's ingress to one whereami pod
//!   (`drops/calico-policy-filter.txt`, its ipset in `drops/calico-policy-ipsets.txt`).
//! - [`Scenario::NoNeighbour`]: [`NO_NEIGHBOUR_IP`], an address of the node's connected
//!   subnet that nobody holds: the node's ARP probes go unanswered. Nothing is added; its
//!   neighbour entry is flushed before and after, so each use starts from a fresh probe.

mod calico;

use anyhow::Result;
pub use calico::{CALICO_DENIED_CHAIN, CALICO_DENY_COMMENT, CALICO_POLICY};
use xtask_common::cmd::output;

use super::{netns::in_ns, topology::NODE_NS};

/// The ClusterIP of `default/web-gone`, a service without endpoints.
pub const NO_ENDPOINTS_IP: &str = "10.0.77.77";
/// Its port.
pub const NO_ENDPOINTS_PORT: u16 = 80;
/// kube-proxy's comment on its REJECT rule.
pub const NO_ENDPOINTS_COMMENT: &str = "default/web-gone:http has no endpoints";
/// The VNet host port an administrator's rule drops.
pub const ADMIN_DROP_PORT: u16 = 5555;
/// The VNet host the administrator's rule is about.
pub const ADMIN_DROP_HOST: &str = "10.13.1.4";
/// The network the node has no route to (a documentation range).
pub const NO_ROUTE_NET: &str = "198.51.100.0/24";
/// The VNet host port an administrator's `REJECT` rule refuses.
pub const ADMIN_REJECT_PORT: u16 = 5556;
/// An address of the pod subnet (connected to the node) that no pod or host holds.
pub const NO_NEIGHBOUR_IP: &str = "10.13.76.99";

/// A failure scenario of the lab node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scenario {
    NoEndpoints,
    AdminDrop,
    NoRoute,
    AdminReject,
    CalicoPolicy,
    NoNeighbour,
}

impl Scenario {
    /// `iptables` argument lists (`-w` added) that add the scenario, in order.
    fn iptables_up(self) -> Vec<Vec<String>> {
        let split = |s: &str| s.split_whitespace().map(str::to_owned).collect::<Vec<_>>();
        match self {
            Self::NoEndpoints => {
                let mut rules = vec![split("-N KUBE-SERVICES")];
                for chain in ["INPUT", "FORWARD", "OUTPUT"] {
                    let mut r = split(&format!("-I {chain} -m conntrack --ctstate NEW -m comment"));
                    r.extend(["--comment".into(), "kubernetes service portals".into()]);
                    r.extend(split("-j KUBE-SERVICES"));
                    rules.push(r);
                }
                let mut reject = split(&format!(
                    "-A KUBE-SERVICES -d {NO_ENDPOINTS_IP}/32 -p tcp -m comment"
                ));
                reject.extend(["--comment".into(), NO_ENDPOINTS_COMMENT.into()]);
                reject.extend(split(&format!(
                    "-m tcp --dport {NO_ENDPOINTS_PORT} -j REJECT --reject-with icmp-port-unreachable"
                )));
                rules.push(reject);
                rules
            }
            Self::AdminDrop => ["tcp", "udp"]
                .into_iter()
                .map(|p| {
                    split(&format!(
                        "-I FORWARD -d {ADMIN_DROP_HOST}/32 -p {p} --dport {ADMIN_DROP_PORT} -j DROP"
                    ))
                })
                .collect(),
            Self::AdminReject => vec![split(&format!(
                "-I FORWARD -d {ADMIN_DROP_HOST}/32 -p tcp --dport {ADMIN_REJECT_PORT} -j REJECT \
                 --reject-with icmp-port-unreachable"
            ))],
            Self::NoRoute | Self::CalicoPolicy | Self::NoNeighbour => Vec::new(),
        }
    }

    /// Turns an `iptables` argument list that added a rule or chain into the one that
    /// removes it.
    fn undo(args: &[String]) -> Vec<String> {
        let mut out = args.to_vec();
        if let Some(op) = out.first_mut() {
            *op = match op.as_str() {
                "-N" => "-X".into(),
                _ => "-D".into(),
            };
        }
        out
    }
}

/// A scenario added to the lab node; dropping it removes it (errors then are ignored: the
/// lab's `down` removes the namespace anyway).
#[derive(Debug)]
pub struct Added {
    /// `(program, arguments)` run in the node's namespace to undo it, in order.
    undo: Vec<(&'static str, Vec<String>)>,
}

/// Runs `program args…` in the node's namespace.
fn node(program: &str, args: &[String]) -> Result<String> {
    output(&mut in_ns(NODE_NS, program, args))
}

fn strings(args: &[&str]) -> Vec<String> {
    args.iter().map(|&a| a.to_owned()).collect()
}

/// Adds `scenario` to the running lab's node.
///
/// # Errors
/// If a rule or route cannot be added (what was added before it is removed again).
pub fn add(scenario: Scenario) -> Result<Added> {
    let mut added = Added { undo: Vec::new() };
    match scenario {
        Scenario::NoRoute => {
            node("ip", &strings(&["route", "add", "throw", NO_ROUTE_NET]))?;
            added
                .undo
                .push(("ip", strings(&["route", "del", "throw", NO_ROUTE_NET])));
        }
        Scenario::NoNeighbour => {
            let flush = strings(&["neigh", "flush", "to", NO_NEIGHBOUR_IP]);
            node("ip", &flush)?;
            added.undo.push(("ip", flush));
        }
        Scenario::CalicoPolicy => calico::add(&mut added.undo)?,
        _ => {
            for args in scenario.iptables_up() {
                let with_wait: Vec<String> = std::iter::once("-w".to_owned())
                    .chain(args.iter().cloned())
                    .collect();
                node("iptables", &with_wait)?;
                let mut undo = Scenario::undo(&args);
                undo.insert(0, "-w".into());
                added.undo.push(("iptables", undo));
            }
        }
    }
    Ok(added)
}

impl Drop for Added {
    fn drop(&mut self) {
        // The reverse order of adding: rules first, then their chains and sets.
        for (program, args) in self.undo.iter().rev() {
            let _ = node(program, args);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_rule_is_undone_by_its_own_delete() {
        let rules = Scenario::NoEndpoints.iptables_up();
        assert_eq!(rules[0], ["-N", "KUBE-SERVICES"]);
        assert_eq!(Scenario::undo(&rules[0]), ["-X", "KUBE-SERVICES"]);
        let reject = rules.last().unwrap();
        assert!(reject.contains(&NO_ENDPOINTS_COMMENT.to_owned()));
        assert_eq!(Scenario::undo(reject)[0], "-D");
        assert_eq!(Scenario::undo(reject)[1..], reject[1..]);
        for r in Scenario::AdminDrop.iptables_up() {
            assert_eq!(r[0], "-I");
            assert_eq!(Scenario::undo(&r)[0], "-D");
        }
    }
}
