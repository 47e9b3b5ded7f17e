//! Every nat table the kernel runs, read from the node: iptables' legacy and nft backends
//! (both, when both hold rules: the kernel runs both), native nftables tables, and the
//! ipsets their rules test. [`crate::explain`] asks them in the kernel's order.

use std::{
    collections::hash_map::DefaultHasher,
    hash::{Hash as _, Hasher as _},
};

use tracer_common::{FAMILY_IPV4, FAMILY_IPV6};

use super::{NatRules, ipset::IpSets, nft};

/// The nat tables of the node, in the order the kernel runs them.
#[derive(Clone, Debug, Default)]
pub struct Ruleset {
    pub tables: Vec<NatRules>,
    /// What loading could not do or had to guess, one line each, for the user.
    pub notes: Vec<String>,
}

/// A rule source the node uses that could not be read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lost {
    /// The tool, e.g. `nft`: the line is said once per tool.
    pub tool: String,
    /// `nft: not installed; nftables rules … will not be named`.
    pub line: String,
}

/// What the node's tools printed (read by `read`): the input of [`Ruleset::from_raw`], hashed
/// to see changes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Raw {
    /// `(label, iptables-save text)`.
    pub dumps: Vec<(String, String)>,
    /// `nft -j list table …` of each native table (`nft -j list ruleset` works too).
    pub nft_json: Vec<String>,
    /// `ipset save`.
    pub ipsets: Option<String>,
    pub notes: Vec<String>,
    /// Sources the node uses that could not be read.
    pub lost: Vec<Lost>,
    /// Some source answered (even with no rules).
    pub any_source: bool,
}

/// Tables iptables-nft and ebtables-nft make (read through `iptables-nft-save`, or not nat).
const XT_TABLES: [&str; 7] = [
    "filter", "nat", "mangle", "raw", "security", "broute", "arp",
];

/// `(family, name)` of the tables `nft list tables` shows that are not iptables-nft's: the
/// only ones worth dumping as JSON (a whole kube-proxy iptables ruleset in JSON costs
/// ~0.75 s and 140 MB of nft's memory at 16k rules).
pub(crate) fn parse_tables(text: &str) -> Vec<(String, String)> {
    text.lines()
        .filter_map(
            |l| match l.split_whitespace().collect::<Vec<_>>().as_slice() {
                ["table", family, name] => Some(((*family).to_owned(), (*name).to_owned())),
                _ => None,
            },
        )
        .filter(|(family, name)| {
            let xt = matches!(family.as_str(), "ip" | "ip6" | "arp" | "bridge");
            !(xt && XT_TABLES.contains(&name.as_str()))
        })
        .collect()
}

impl Ruleset {
    /// Parses what the tools printed.
    #[must_use]
    pub fn from_raw(raw: &Raw) -> Self {
        let mut set = Self {
            tables: Vec::new(),
            notes: raw.notes.clone(),
        };
        let mut iptables_nft = false;
        for (label, text) in &raw.dumps {
            let mut table = NatRules::parse(text);
            table.label.clone_from(label);
            let v6 = label.starts_with("ip6");
            table.family = Some(if v6 { FAMILY_IPV6 } else { FAMILY_IPV4 });
            iptables_nft |= label.ends_with("-nft") || label == "iptables";
            set.tables.push(table);
        }
        let per_family = |f| set.tables.iter().filter(|t| t.family == Some(f)).count();
        if per_family(FAMILY_IPV4) > 1 || per_family(FAMILY_IPV6) > 1 {
            set.notes.push(
                "both iptables-legacy and iptables-nft hold nat rules and the kernel runs both; \
                 pktrace evaluates legacy first (the kernel's order is the order they were loaded)"
                    .into(),
            );
        }
        for json in &raw.nft_json {
            match nft::parse(json, iptables_nft) {
                Ok(tables) => set.tables.extend(tables),
                Err(e) => set.notes.push(format!("native nftables rules unread: {e}")),
            }
        }
        // Stable: at equal priority the iptables tables stay first.
        set.tables.sort_by_key(|t| {
            t.bases_of(super::Hook::Postrouting)
                .first()
                .map_or(0, |&(p, _)| p)
        });
        if let Some(text) = &raw.ipsets {
            let sets = IpSets::parse(text);
            for table in set.tables.iter_mut().filter(|t| t.uses_ipsets()) {
                table.ipsets = sets.clone();
            }
        }
        set
    }

    /// The tables whose hooks packets of IP version `family` pass ([`NatRules::family`]),
    /// in the kernel's order.
    pub fn of_family(&self, family: u8) -> impl Iterator<Item = &NatRules> {
        self.tables.iter().filter(move |t| t.sees(family))
    }

    /// True when a rule tests an ipset.
    #[must_use]
    pub fn uses_ipsets(&self) -> bool {
        self.tables.iter().any(NatRules::uses_ipsets)
    }

    /// `iptables-nft (31 rules)`, … for the start-up line.
    #[must_use]
    pub fn describe(&self) -> String {
        let parts: Vec<String> = self
            .tables
            .iter()
            .map(|t| format!("{} ({} rules)", t.label, t.rule_count()))
            .collect();
        parts.join(", ")
    }
}

/// A fingerprint of the rules (not of the counters iptables-save prints with them).
#[must_use]
pub fn fingerprint(set: &Ruleset) -> u64 {
    let mut h = DefaultHasher::new();
    format!("{:?}", set.tables).hash(&mut h);
    h.finish()
}

#[cfg(test)]
mod tests {
    #[test]
    fn native_tables_are_the_ones_iptables_nft_did_not_make() {
        let text = "table ip nat\ntable ip filter\ntable ip6 nat\ntable ip kube-proxy\n\
                    table inet calico\ntable bridge filter\ntable ip6 kube-proxy\ntable inet nat\n";
        let got = super::parse_tables(text);
        let names: Vec<String> = got.iter().map(|(f, n)| format!("{f} {n}")).collect();
        assert_eq!(
            names,
            ["ip kube-proxy", "inet calico", "ip6 kube-proxy", "inet nat"]
        );
    }
}
