//! Reading the node's rule sources (`iptables-legacy-save`, `iptables-nft-save` or
//! `iptables-save`, `nft`, `ipset`), and saying which could not be read while the node uses
//! them: one stderr line per source and process, however often the rules are re-read.
//!
//! A source is said to be lost when its tool fails, or is missing while the kernel shows
//! what it would have read: a legacy nat table (`/proc/net/ip_tables_names`), iptables-nft's
//! `ip`/`ip6 nat` tables or native nftables tables (kube-proxy's nftables mode, Calico)
//! among the kernel's nftables tables. A missing tool with nothing of its kind in the kernel
//! is not applicable and not said. When the kernel cannot be asked, a missing iptables is
//! said (nat rules are the rule, not the exception) and a missing `nft` is not.

use std::fmt::Write as _;

use super::{
    ExplainError, NatRules, kernel_tables,
    ruleset::{Lost, Raw, Ruleset, parse_tables},
    source::{self, Output},
};
use crate::diag::Said;

/// The legacy backend's tables, as the kernel lists them: without `nat` here, reading it would
/// only create an empty one.
const LEGACY_TABLES: &str = "/proc/net/ip_tables_names";
/// The legacy backend's IPv6 tables.
const LEGACY_TABLES6: &str = "/proc/net/ip6_tables_names";

/// What `nft` reads: kube-proxy's nftables mode, Calico's nftables dataplane, …
pub const NFT_LOST: &str = "nftables rules (kube-proxy nftables mode) will not be named";
/// What `iptables-save` reads.
pub const IPTABLES_LOST: &str =
    "iptables nat rules (kube-proxy iptables mode, ip-masq-agent) will not be named";
const LEGACY_LOST: &str =
    "the legacy iptables nat table's rules (the kernel holds one) will not be named";
/// What `ip6tables-save` reads.
pub const IP6TABLES_LOST: &str =
    "ip6tables nat rules (kube-proxy's IPv6 services, ip-masq-agent) will not be named";
const IPSET_LOST: &str = "`-m set` matches (Calico, kube-proxy) are assumed to hold";

impl Lost {
    fn new(tool: &str, err: &ExplainError, lost: &str) -> Self {
        Self {
            tool: tool.to_owned(),
            line: format!("{tool}: {}; {lost}", err.reason()),
        }
    }
}

/// Runs a tool with arguments.
pub type Run<'a> = &'a dyn Fn(&str, &[&str]) -> Result<Output, ExplainError>;

/// The node as the reader sees it: its tools and what its kernel holds.
pub struct Node<'a> {
    /// Runs a tool (pktrace's own, else the node's: [`super::source::run`]).
    pub run: Run<'a>,
    /// The legacy backend holds a nat table.
    pub legacy_nat: bool,
    /// The legacy backend holds an IPv6 nat table.
    pub legacy_nat6: bool,
    /// The kernel's nftables tables `(family, name)`; `None`: it cannot be asked.
    pub kernel_tables: Option<Vec<(String, String)>>,
}

impl Node<'_> {
    /// Whether the kernel holds iptables-nft's nat tables (`None`: cannot tell).
    fn xt_nat(&self) -> Option<bool> {
        let tables = self.kernel_tables.as_ref()?;
        Some(
            tables
                .iter()
                .any(|(f, n)| (f == "ip" || f == "ip6") && n == "nat"),
        )
    }

    /// Whether the kernel holds ip6tables-nft's nat table (`None`: cannot tell).
    fn xt_nat6(&self) -> Option<bool> {
        let tables = self.kernel_tables.as_ref()?;
        Some(tables.iter().any(|(f, n)| f == "ip6" && n == "nat"))
    }
}

/// Whether the legacy backend holds a nat table here.
#[must_use]
pub fn legacy_in_use() -> bool {
    holds_nat(LEGACY_TABLES)
}

/// Whether the legacy backend's table list `path` names a nat table.
fn holds_nat(path: &str) -> bool {
    std::fs::read_to_string(path).is_ok_and(|t| t.lines().any(|l| l.trim() == "nat"))
}

impl Ruleset {
    /// Reads and parses the node's rules.
    ///
    /// # Errors
    /// See `Raw::read`.
    pub fn load() -> Result<Self, ExplainError> {
        let raw = Raw::read()?;
        report(&raw.lost);
        Ok(Self::from_raw(&raw))
    }
}

impl Raw {
    /// Reads the node's nat rules (and ipsets when rules test them): [`Raw::read_from`] on
    /// this node.
    ///
    /// # Errors
    /// No tool could be run at all (none installed, or all failed: usually not root).
    pub fn read() -> Result<Self, ExplainError> {
        Self::read_from(&Node {
            run: &source::run,
            legacy_nat: legacy_in_use(),
            legacy_nat6: holds_nat(LEGACY_TABLES6),
            kernel_tables: kernel_tables::list(),
        })
    }
}

impl Raw {
    /// Reads the node's nat rules (and ipsets when rules test them); what could not be read
    /// goes to `lost`.
    ///
    /// # Errors
    /// No tool could be run at all (none installed, or all failed: usually not root).
    pub fn read_from(node: &Node<'_>) -> Result<Self, ExplainError> {
        let mut raw = Self::default();
        let mut failure = None;
        let mut found = false;
        if node.legacy_nat {
            match (node.run)("iptables-legacy-save", &["-t", "nat"]) {
                Ok(out) => found |= raw.keep("iptables-legacy", out),
                Err(e) => {
                    raw.lost
                        .push(Lost::new("iptables-legacy-save", &e, LEGACY_LOST));
                    failure.get_or_insert(e);
                }
            }
        }
        raw.read_iptables(node, found, &mut failure);
        raw.read_ip6tables(node);
        raw.read_nft(node, &mut failure);
        if raw.dumps.is_empty() && raw.nft_json.is_empty() {
            if let Some(failure) = failure {
                return Err(failure);
            }
            if !raw.any_source {
                return Err(ExplainError::NotInstalled {
                    tried: "iptables-save, iptables-legacy-save, iptables-nft-save, nft".into(),
                });
            }
        }
        if Ruleset::from_raw(&raw).uses_ipsets() {
            let read = (node.run)("ipset", &["save"])
                .or_else(|_| (node.run)("ipset", &["list", "-o", "save"]));
            match read {
                Ok(out) => raw.ipsets = Some(out.stdout),
                Err(e) => raw.lost.push(Lost::new("ipset", &e, IPSET_LOST)),
            }
        }
        Ok(raw)
    }

    /// Keeps a dump that holds rules; true: the source answered.
    fn keep(&mut self, label: &str, out: Output) -> bool {
        self.any_source = true;
        if NatRules::parse(&out.stdout).rule_count() > 0 {
            self.dumps.push((label.to_owned(), out.stdout));
        }
        true
    }

    /// iptables-nft's nat table, through `iptables-nft-save`, else (iptables 1.6, one
    /// backend) `iptables-save` unless the legacy backend was read already.
    fn read_iptables(
        &mut self,
        node: &Node<'_>,
        legacy_read: bool,
        failure: &mut Option<ExplainError>,
    ) {
        let args = ["-t", "nat"];
        let (tool, res) = match (node.run)("iptables-nft-save", &args) {
            Err(ExplainError::NotInstalled { .. }) if !legacy_read => {
                ("iptables-save", (node.run)("iptables-save", &args))
            }
            other => ("iptables-nft-save", other),
        };
        let label = if tool == "iptables-save" {
            "iptables"
        } else {
            "iptables-nft"
        };
        match res {
            Ok(out) => {
                self.keep(label, out);
            }
            Err(e @ ExplainError::NotInstalled { .. }) => {
                // Missing: said when the kernel holds iptables-nft's nat table, or cannot tell
                // and nothing else read iptables rules.
                let used = node.xt_nat().unwrap_or(!legacy_read);
                if used {
                    self.lost.push(Lost::new(tool, &e, IPTABLES_LOST));
                }
            }
            Err(e) => {
                self.any_source = true;
                self.lost.push(Lost::new(tool, &e, IPTABLES_LOST));
                failure.get_or_insert(e);
            }
        }
    }

    /// The IPv6 nat tables of iptables' backends (a dual-stack node's kube-proxy and
    /// ip-masq-agent write both families), labelled `ip6tables-legacy`/`ip6tables-nft`: the
    /// legacy one when the kernel holds it; iptables-nft's when the kernel holds `ip6 nat`, or
    /// cannot tell (then a missing or failing tool is not said). Never the read's failure: IPv4's
    /// sources decide that.
    fn read_ip6tables(&mut self, node: &Node<'_>) {
        let args = ["-t", "nat"];
        if node.legacy_nat6 {
            match (node.run)("ip6tables-legacy-save", &args) {
                Ok(out) => {
                    self.keep("ip6tables-legacy", out);
                }
                Err(e) => self
                    .lost
                    .push(Lost::new("ip6tables-legacy-save", &e, IP6TABLES_LOST)),
            }
        }
        let held = node.xt_nat6();
        if held == Some(false) {
            return;
        }
        let (tool, res) = match (node.run)("ip6tables-nft-save", &args) {
            Err(ExplainError::NotInstalled { .. }) if !node.legacy_nat6 => {
                ("ip6tables-save", (node.run)("ip6tables-save", &args))
            }
            other => ("ip6tables-nft-save", other),
        };
        match res {
            Ok(out) => {
                self.keep("ip6tables-nft", out);
            }
            // The kernel cannot say whether the table exists: a tool that is missing, or fails
            // on a table that does not, is nothing lost.
            Err(_) if held.is_none() => {}
            Err(e) => self.lost.push(Lost::new(tool, &e, IP6TABLES_LOST)),
        }
    }

    /// Native nftables tables (not iptables-nft's), each as `nft -j list table`.
    fn read_nft(&mut self, node: &Node<'_>, failure: &mut Option<ExplainError>) {
        let native = node
            .kernel_tables
            .as_ref()
            .map(|t| parse_tables(&render(t)));
        if native.as_ref().is_some_and(Vec::is_empty) {
            // The kernel holds none: nothing for nft to read, whether it is there or not.
            self.any_source = true;
            return;
        }
        let tables = match (node.run)("nft", &["list", "tables"]) {
            Ok(out) => parse_tables(&out.stdout),
            Err(e @ ExplainError::NotInstalled { .. }) => {
                if let Some(native) = native {
                    let (family, name) = &native[0];
                    let held = format!("{NFT_LOST} (the kernel holds table {family} {name})");
                    self.lost.push(Lost::new("nft", &e, &held));
                }
                return;
            }
            Err(e) => {
                self.any_source = true;
                self.lost.push(Lost::new("nft", &e, NFT_LOST));
                failure.get_or_insert(e);
                return;
            }
        };
        self.any_source = true;
        for (family, name) in tables {
            match (node.run)("nft", &["-j", "list", "table", &family, &name]) {
                Ok(out) => self.nft_json.push(out.stdout),
                Err(e) => {
                    let lost = format!("the rules of table {family} {name} will not be named");
                    self.lost.push(Lost::new("nft", &e, &lost));
                }
            }
        }
    }
}

/// `(family, name)` pairs as `nft list tables` prints them.
fn render(tables: &[(String, String)]) -> String {
    tables.iter().fold(String::new(), |mut out, (f, n)| {
        let _ = writeln!(out, "table {f} {n}");
        out
    })
}

/// Tools already said in this process.
static SAID: Said = Said::new();

/// Says each lost source on stderr, once per tool and process.
pub fn report(lost: &[Lost]) {
    for line in first_time(&SAID, lost) {
        crate::diag::line(line);
    }
}

/// The lines of `lost` whose tool `said` does not hold yet (and now holds).
fn first_time(said: &Said, lost: &[Lost]) -> Vec<String> {
    lost.iter()
        .filter(|l| said.first(&l.tool))
        .map(|l| l.line.clone())
        .collect()
}

#[cfg(test)]
mod tests;
