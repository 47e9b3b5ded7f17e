//! One nat table as the evaluator walks it: its chains in dump order, its base chains (where
//! the kernel enters it, by hook and priority), nftables sets and maps, the node's ipsets, and
//! an index built on first use.

use std::{collections::HashMap, net::IpAddr, sync::OnceLock};

use super::{MapRef, Rule, SetRef, Target, Test, Val};
use crate::rules::ipset::IpSets;

/// Chains the kernel calls; the rest are reached by jumps.
pub const BUILTIN: [&str; 4] = ["PREROUTING", "INPUT", "OUTPUT", "POSTROUTING"];

/// A netfilter hook a table sits on (the nat table on all but `Forward`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Hook {
    Prerouting,
    Input,
    Forward,
    Output,
    Postrouting,
}

impl Hook {
    /// The iptables built-in chain and its nat priority (`NF_IP_PRI_NAT_DST`/`_SRC`;
    /// `FORWARD`, where nat has no chain, at the filter priority 0).
    #[must_use]
    pub const fn builtin(self) -> (i32, &'static str) {
        match self {
            Self::Prerouting => (-100, "PREROUTING"),
            Self::Input => (100, "INPUT"),
            Self::Forward => (0, "FORWARD"),
            Self::Output => (-100, "OUTPUT"),
            Self::Postrouting => (100, "POSTROUTING"),
        }
    }
}

/// A base chain: where the kernel enters the table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Base {
    pub hook: Hook,
    pub priority: i32,
    pub chain: String,
}

/// One nat table: iptables' (legacy or nft backend) or a native nftables table.
#[derive(Clone, Debug, Default)]
pub struct NatRules {
    /// Where the rules come from, for messages (`iptables-nft`, `nft table ip kube-proxy`).
    pub label: String,
    /// Base chains; empty means iptables' built-in ones.
    pub bases: Vec<Base>,
    /// The IP version of the packets the table's hooks see ([`tracer_common::FAMILY_IPV4`],
    /// `FAMILY_IPV6`: iptables' and ip6tables' tables, nftables `ip` and `ip6`); `None` for
    /// both (nftables `inet`, or not known).
    pub family: Option<u8>,
    chains: Vec<Chain>,
    by_name: HashMap<String, usize>,
    /// nftables named sets: elements, each a concatenation of values.
    pub nft_sets: HashMap<String, Vec<Vec<Val>>>,
    /// nftables named verdict maps.
    pub nft_maps: HashMap<String, Vec<(Vec<Val>, Target)>>,
    /// The comment of each element of a named verdict map, in the order of `nft_maps`
    /// (kube-proxy names the service of a `no-endpoint-services` element there).
    pub nft_map_comments: HashMap<String, Vec<Option<String>>>,
    /// Chain policies other than `ACCEPT` (`:FORWARD DROP`, nft `policy drop`), by chain.
    pub policies: HashMap<String, String>,
    /// Each rule as the dump wrote it (`-A FORWARD -s … -j DROP`), by chain, in rule
    /// order: kept for tables other than nat, whose rules a drop names.
    pub texts: HashMap<String, Vec<String>>,
    /// The node's ipsets, for `-m set` (empty when none were read).
    pub ipsets: IpSets,
    /// Built on first use: what decisions look up instead of scanning every rule.
    index: Lazy,
    /// Lines that were neither comments, chain declarations nor rules of the nat table.
    pub skipped_lines: usize,
}

/// Lookups over the whole table, built once per table.
#[derive(Clone, Debug, Default)]
pub struct Index {
    /// DNAT rules (chain index, rule index) by their one target address.
    pub dnat_by_ip: HashMap<IpAddr, Vec<(usize, usize)>>,
    /// DNAT rules to an address range.
    pub dnat_ranged: Vec<(usize, usize)>,
    /// For each chain name, the indexes of the chains that jump or go to it.
    pub parents: HashMap<String, Vec<usize>>,
}

/// The index, left out of `Debug` (fingerprints compare rules, not caches).
#[derive(Clone, Default)]
struct Lazy(OnceLock<Index>);

impl std::fmt::Debug for Lazy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Lazy")
    }
}

/// A chain and its rules, in order.
#[derive(Clone, Debug, Default)]
pub struct Chain {
    pub name: String,
    pub rules: Vec<Rule>,
}

impl NatRules {
    pub(super) fn chain_mut(&mut self, name: &str) -> &mut Chain {
        let i = *self.by_name.entry(name.to_owned()).or_insert_with(|| {
            self.chains.push(Chain {
                name: name.to_owned(),
                rules: Vec::new(),
            });
            self.chains.len() - 1
        });
        &mut self.chains[i]
    }

    /// Whether packets of IP version `family` pass through this table ([`Self::family`]).
    #[must_use]
    pub fn sees(&self, family: u8) -> bool {
        self.family.is_none_or(|f| f == family)
    }

    /// The chain called `name`, if declared or used.
    #[must_use]
    pub fn chain(&self, name: &str) -> Option<&Chain> {
        self.by_name.get(name).and_then(|&i| self.chains.get(i))
    }

    /// Every chain, in the order of the dump.
    pub fn chains(&self) -> impl Iterator<Item = &Chain> {
        self.chains.iter()
    }

    /// The base chains on `hook`, in priority order.
    #[must_use]
    pub fn bases_of(&self, hook: Hook) -> Vec<(i32, &str)> {
        if self.bases.is_empty() {
            let (priority, chain) = hook.builtin();
            return vec![(priority, chain)];
        }
        let mut out: Vec<(i32, &str)> = self
            .bases
            .iter()
            .filter(|b| b.hook == hook)
            .map(|b| (b.priority, b.chain.as_str()))
            .collect();
        out.sort_by_key(|&(p, _)| p);
        out
    }

    /// The table's index, built on first use.
    pub fn index(&self) -> &Index {
        self.index.0.get_or_init(|| self.build_index())
    }

    /// The chain at `index` in dump order.
    #[must_use]
    pub fn chain_at(&self, index: usize) -> Option<&Chain> {
        self.chains.get(index)
    }

    fn build_index(&self) -> Index {
        let mut index = Index::default();
        for (ci, chain) in self.chains.iter().enumerate() {
            for (ri, rule) in chain.rules.iter().enumerate() {
                let mut targets: Vec<&Target> = vec![&rule.target];
                if let Target::Vmap { map, .. } = &rule.target {
                    targets.extend(self.map_elems(map).unwrap_or(&[]).iter().map(|(_, t)| t));
                }
                for target in targets {
                    match target {
                        Target::Dnat(Some(to)) if to.lo == to.hi => {
                            index.dnat_by_ip.entry(to.lo).or_default().push((ci, ri));
                        }
                        Target::Dnat(Some(_)) => index.dnat_ranged.push((ci, ri)),
                        Target::Jump(n) | Target::Goto(n) => {
                            let parents = index.parents.entry(n.clone()).or_default();
                            if parents.last() != Some(&ci) {
                                parents.push(ci);
                            }
                        }
                        _ => {}
                    }
                }
            }
        }
        index
    }

    /// Elements of a set reference.
    #[must_use]
    pub fn set_elems<'a>(&'a self, set: &'a SetRef) -> Option<&'a [Vec<Val>]> {
        match set {
            SetRef::Named(n) => self.nft_sets.get(n).map(Vec::as_slice),
            SetRef::Inline(e) => Some(e),
        }
    }

    /// Elements of a verdict map reference.
    #[must_use]
    pub fn map_elems<'a>(&'a self, map: &'a MapRef) -> Option<&'a [(Vec<Val>, Target)]> {
        match map {
            MapRef::Named(n) => self.nft_maps.get(n).map(Vec::as_slice),
            MapRef::Inline(e) => Some(e),
        }
    }

    /// Adds a chain (nftables tables are built, not parsed from text).
    pub fn push_rule(&mut self, chain: &str, rule: Rule) {
        self.chain_mut(chain).rules.push(rule);
    }

    /// Declares a chain without rules.
    pub fn declare(&mut self, chain: &str) {
        self.chain_mut(chain);
    }

    /// True when a rule tests an ipset (then the sets are worth reading).
    #[must_use]
    pub fn uses_ipsets(&self) -> bool {
        self.chains
            .iter()
            .flat_map(|c| &c.rules)
            .any(|r| r.conds.iter().any(|c| matches!(c.test, Test::Set(_))))
    }

    /// Number of rules in the table.
    #[must_use]
    pub fn rule_count(&self) -> usize {
        self.chains.iter().map(|c| c.rules.len()).sum()
    }
}
