//! The node's rules as pktrace reads and replays them.
//!
//! - Readers: `iptables-save` text (`parse`), native nftables from `nft -j` (`nft`),
//!   `ipset save` (`ipset`); the tools run, pktrace's own first, then the node's
//!   (`source`, `host`), and which sources the node uses (`read`: the legacy and nft
//!   backends, the kernel's nftables tables asked over nfnetlink in `kernel_tables`, the
//!   nftables generation in `genid`).
//! - The model: one rule (`model`: conditions and target; kube-proxy's service comments),
//!   one table (`table`: chains, base chains, sets and maps), every nat table of the node in
//!   the kernel's order ([`ruleset`]).
//! - The evaluator (`eval`): a nat or filter-type table walked for one packet the way
//!   netfilter does.
//!
//! Parsing never fails: matches pktrace does not model are kept as [`Test::Unknown`] with
//! their tokens, lines it cannot read are counted and skipped.

mod addr;
pub(crate) mod eval;
pub(crate) mod genid;
mod host;
pub(crate) mod ipset;
pub(crate) mod kernel_tables;
mod model;
pub(crate) mod nft;
mod parse;
pub(crate) mod read;
pub mod ruleset;
pub(crate) mod source;
mod table;

use std::io;

pub use addr::{Cidr, NatTo, in_range};
pub use eval::PacketCtx;
pub use model::{Cond, Key, MapKey, MapRef, Rule, SetRef, Target, Test, Val, service_of};
pub use ruleset::Ruleset;
pub use table::{BUILTIN, Base, Hook, NatRules};

/// The rules of one `iptables-save` dump (tests of the modules that read services).
#[cfg(test)]
pub(crate) fn ruleset_from_iptables(dump: &str) -> Ruleset {
    Ruleset::from_raw(&ruleset::Raw {
        dumps: vec![("iptables".into(), dump.into())],
        ..ruleset::Raw::default()
    })
}

/// Why the node's NAT rules (or ipsets) could not be read; the caller reports it once and
/// traces on with less attribution.
#[derive(Debug, thiserror::Error)]
pub enum ExplainError {
    /// None of the commands exists.
    #[error(
        "none of {tried} is installed (here or on the node); install it to see which rule did \
         each NAT step (tracing goes on without it)"
    )]
    NotInstalled { tried: String },
    /// A command ran and failed.
    #[error(
        "`{command}` failed ({status}): {stderr}; run as root (CAP_NET_ADMIN) to see which \
         rule did each NAT step (tracing goes on without it)"
    )]
    Failed {
        command: String,
        status: String,
        stderr: String,
    },
    /// A command exists but could not be started.
    #[error("cannot run `{command}`: {err}; rule attribution is off (tracing goes on)")]
    Spawn { command: String, err: io::Error },
}

impl ExplainError {
    /// What went wrong, without the advice: `not installed`, `` `nft list tables` failed
    /// (exit status: 1): … ``.
    #[must_use]
    pub fn reason(&self) -> String {
        match self {
            Self::NotInstalled { .. } => "not installed".into(),
            Self::Failed {
                command,
                status,
                stderr,
            } => format!("`{command}` failed ({status}): {stderr}"),
            Self::Spawn { command, err } => format!("cannot run `{command}`: {err}"),
        }
    }
}
