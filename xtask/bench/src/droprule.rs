//! The drop stream's rule: the backend pod's own firewall drops the iperf3 data datagrams
//! (`INPUT -p udp --dport 5201 -m length --length 64:65535 -j DROP` in its namespace, not the
//! node's), so every datagram of [`super::iperf::Stream::UdpDropped`] crosses the node like the
//! UDP DNAT stream and then runs the kernel's drop tracepoint once, where pktrace's drop
//! program sees it. iperf3's 4-byte UDP "connect" datagram (32 bytes of IP) passes: without it
//! the client never starts sending.

use anyhow::Result;
use pktrace_lab::netns::in_ns;
use xtask_common::cmd::run;

use super::net::{BACKEND, IPERF_PORT};

/// The rule in the backend's namespace; deleted when dropped.
#[must_use = "the rule is deleted when the guard is dropped"]
pub struct DropRule {
    ns: &'static str,
}

/// The rule's arguments after `-I`/`-D`.
fn rule() -> [String; 12] {
    [
        "INPUT".into(),
        "-p".into(),
        "udp".into(),
        "--dport".into(),
        IPERF_PORT.to_string(),
        "-m".into(),
        "length".into(),
        "--length".into(),
        "64:65535".into(),
        "-j".into(),
        "DROP".into(),
        "-w".into(),
    ]
}

impl DropRule {
    /// Inserts the rule in the backend pod's namespace.
    ///
    /// # Errors
    /// `iptables` failed.
    pub fn add() -> Result<Self> {
        let ns = BACKEND.netns;
        run(&mut in_ns(
            ns,
            "iptables",
            std::iter::once("-I".to_owned()).chain(rule()),
        ))?;
        Ok(Self { ns })
    }
}

impl Drop for DropRule {
    fn drop(&mut self) {
        let deleted = run(&mut in_ns(
            self.ns,
            "iptables",
            std::iter::once("-D".to_owned()).chain(rule()),
        ));
        if let Err(err) = deleted {
            eprintln!(
                "bench: could not delete the drop stream's rule in {}: {err:#}",
                self.ns
            );
        }
    }
}
