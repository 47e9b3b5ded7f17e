//! The node's filter-type tables, as a drop replay walks them: iptables' `raw`, `mangle`
//! and `filter` tables (from `iptables-save`, legacy or nft backend) and native nftables
//! tables with `type filter` base chains (from `nft -j list ruleset` or `list table`), with
//! the ipsets their rules test.

use crate::rules::{Hook, NatRules, ipset::IpSets, nft};

/// The iptables tables that can drop, with the priority of their chains
/// (`NF_IP_PRI_RAW`, `NF_IP_PRI_MANGLE`, `NF_IP_PRI_FILTER`).
const IPTABLES: [(&str, i32); 3] = [("raw", -300), ("mangle", -150), ("filter", 0)];

/// One table a drop replay walks.
#[derive(Clone, Debug)]
pub struct DropTable {
    pub rules: NatRules,
    /// The iptables table (`filter`, `raw`, `mangle`); `None` for a native nftables table,
    /// whose base chains are in `rules.bases`.
    pub iptables: Option<&'static str>,
}

impl DropTable {
    /// The chains the kernel enters on `hook`, with their priorities.
    #[must_use]
    pub fn entries(&self, hook: Hook) -> Vec<(i32, &str)> {
        let Some(table) = self.iptables else {
            return self.rules.bases_of(hook);
        };
        let priority = IPTABLES
            .iter()
            .find(|(t, _)| *t == table)
            .map_or(0, |&(_, p)| p);
        let (_, name) = hook.builtin();
        self.rules
            .chain(name)
            .map(|_| vec![(priority, name)])
            .unwrap_or_default()
    }

    /// How a rule of this table is introduced: nothing for iptables' filter table, `raw `
    /// for another iptables table, `nft table ip kube-proxy ` for a native one.
    #[must_use]
    pub fn prefix(&self) -> String {
        match self.iptables {
            Some("filter") => String::new(),
            Some(t) => format!("{t} "),
            None => format!("{} ", self.rules.label),
        }
    }
}

/// Every filter-type table of the node.
#[derive(Clone, Debug, Default)]
pub struct DropRules {
    pub tables: Vec<DropTable>,
    /// What could not be read, one line each, for the user.
    pub notes: Vec<String>,
}

impl DropRules {
    /// From what the tools printed: `iptables` holds `(label, iptables-save text)` pairs
    /// (whole dumps, or `-t filter`, `-t raw`, `-t mangle` ones; text without `*table`
    /// headers, as `iptables -S` prints, is the filter table), `nft_json` the output of
    /// `nft -j list ruleset` or `list table` (iptables-nft's own tables are skipped when an
    /// iptables dump was given), `ipsets` the output of `ipset save`.
    #[must_use]
    pub fn parse(iptables: &[(&str, &str)], nft_json: &[&str], ipsets: Option<&str>) -> Self {
        let mut out = Self::default();
        for (label, text) in iptables {
            // `iptables -S` has no `*table` headers: its lines are the filter table's.
            let headed = text.lines().any(|l| l.trim_start().starts_with('*'));
            for (table, _) in IPTABLES
                .into_iter()
                .filter(|&(t, _)| headed || t == "filter")
            {
                let mut rules = NatRules::parse_table(text, table);
                if rules.rule_count() == 0 && rules.policies.is_empty() {
                    continue;
                }
                rules.label = format!("{label} {table}");
                out.tables.push(DropTable {
                    rules,
                    iptables: Some(table),
                });
            }
        }
        for json in nft_json {
            match nft::parse_filter(json, !iptables.is_empty()) {
                Ok(tables) => out.tables.extend(tables.into_iter().map(|rules| DropTable {
                    rules,
                    iptables: None,
                })),
                Err(e) => out.notes.push(format!("native nftables rules unread: {e}")),
            }
        }
        if let Some(text) = ipsets {
            let sets = IpSets::parse(text);
            for table in out.tables.iter_mut().filter(|t| t.rules.uses_ipsets()) {
                table.rules.ipsets = sets.clone();
            }
        }
        out
    }
}
