//! Every nat table the kernel runs, read from the node: iptables' legacy and nft backends
//! (both, when both hold rules: the kernel runs both), native nftables tables, and the
//! ipsets their rules test. Decisions go through the tables in the kernel's order.

use std::{
    collections::hash_map::DefaultHasher,
    hash::{Hash as _, Hasher as _},
};

use tracer_common::Tuple;

use super::{
    Attribute, ExplainError, NatDecision, PacketCtx, ipset::IpSets, nft, rules::NatRules, source,
};

/// The legacy backend's tables, as the kernel lists them: without `nat` here, reading it would
/// only create an empty one.
const LEGACY_TABLES: &str = "/proc/net/ip_tables_names";

/// The nat tables of the node, in the order the kernel runs them.
#[derive(Clone, Debug, Default)]
pub struct Ruleset {
    pub tables: Vec<NatRules>,
    /// What loading could not do or had to guess, one line each, for the user.
    pub notes: Vec<String>,
}

/// What the node's tools printed: the input of [`Ruleset::from_raw`], hashed to see changes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Raw {
    /// `(label, iptables-save text)`.
    pub dumps: Vec<(String, String)>,
    /// `nft -j list ruleset`.
    pub nft_json: Option<String>,
    /// `ipset save`.
    pub ipsets: Option<String>,
    pub notes: Vec<String>,
}

impl Raw {
    /// Reads the node's nat rules (and ipsets when rules test them).
    ///
    /// # Errors
    /// No tool could be run at all (none installed, or all failed: usually not root).
    pub fn read() -> Result<Self, ExplainError> {
        let mut raw = Self::default();
        let mut failure = None;
        let mut keep =
            |label: &str, res: Result<source::Output, ExplainError>, raw: &mut Self| match res {
                Ok(out) if NatRules::parse(&out.stdout).rule_count() > 0 => {
                    raw.dumps.push((label.to_owned(), out.stdout));
                    true
                }
                Ok(_) => true,
                Err(ExplainError::NotInstalled { .. }) => false,
                Err(e) => {
                    failure.get_or_insert(e);
                    true
                }
            };
        let legacy_in_use = std::fs::read_to_string(LEGACY_TABLES)
            .is_ok_and(|t| t.lines().any(|l| l.trim() == "nat"));
        let mut found = false;
        if legacy_in_use {
            found |= keep(
                "iptables-legacy",
                source::run("iptables-legacy-save", &["-t", "nat"]),
                &mut raw,
            );
        }
        found |= keep(
            "iptables-nft",
            source::run("iptables-nft-save", &["-t", "nat"]),
            &mut raw,
        );
        if !found {
            // Older iptables (1.6) has one `iptables-save` and no backend variants.
            found |= keep(
                "iptables",
                source::run("iptables-save", &["-t", "nat"]),
                &mut raw,
            );
        }
        match source::run("nft", &["-j", "list", "ruleset"]) {
            Ok(out) => {
                raw.nft_json = Some(out.stdout);
                found = true;
            }
            Err(ExplainError::NotInstalled { .. }) => {}
            Err(e) if raw.dumps.is_empty() => {
                failure.get_or_insert(e);
            }
            Err(e) => raw.notes.push(format!("native nftables rules unread: {e}")),
        }
        if raw.dumps.is_empty() && raw.nft_json.is_none() {
            if let Some(failure) = failure {
                return Err(failure);
            }
            if !found {
                return Err(ExplainError::NotInstalled {
                    tried: "iptables-save, iptables-legacy-save, iptables-nft-save, nft".into(),
                });
            }
        }
        if Ruleset::from_raw(&raw).uses_ipsets() {
            let read = source::run("ipset", &["save"])
                .or_else(|_| source::run("ipset", &["list", "-o", "save"]));
            match read {
                Ok(out) => raw.ipsets = Some(out.stdout),
                Err(e) => raw
                    .notes
                    .push(format!("ipsets unread, `-m set` matches are assumed: {e}")),
            }
        }
        Ok(raw)
    }
}

impl Ruleset {
    /// Reads and parses the node's rules.
    ///
    /// # Errors
    /// See [`Raw::read`].
    pub fn load() -> Result<Self, ExplainError> {
        Raw::read().map(|raw| Self::from_raw(&raw))
    }

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
            iptables_nft |= label == "iptables-nft" || label == "iptables";
            set.tables.push(table);
        }
        if set.tables.len() > 1 {
            set.notes.push(
                "both iptables-legacy and iptables-nft hold nat rules and the kernel runs both; \
                 pktrace evaluates legacy first (the kernel's order is the order they were loaded)"
                    .into(),
            );
        }
        if let Some(json) = &raw.nft_json {
            match nft::parse(json, iptables_nft) {
                Ok(tables) => set.tables.extend(tables),
                Err(e) => set.notes.push(format!("native nftables rules unread: {e}")),
            }
        }
        // Stable: at equal priority the iptables tables stay first.
        set.tables.sort_by_key(|t| {
            t.bases_of(super::rules::Hook::Postrouting)
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

impl Attribute for Ruleset {
    fn snat_decision(&self, pre: &Tuple, ctx: &PacketCtx) -> Option<NatDecision> {
        let mut ctx = ctx.clone();
        for table in &self.tables {
            match table.postrouting(pre, &ctx) {
                Ok(_) => return table.snat_decision(pre, &ctx),
                Err(miss) => ctx.mark = miss.mark,
            }
        }
        None
    }

    fn no_snat_decision(&self, pre: &Tuple, ctx: &PacketCtx) -> Option<NatDecision> {
        if self.snat_decision(pre, ctx).is_some() {
            return None;
        }
        let answers: Vec<NatDecision> = self
            .tables
            .iter()
            .filter_map(|t| t.no_snat_decision(pre, ctx))
            .collect();
        let telling = answers.iter().rposition(|d| {
            d.target != "none" || !d.why.contains("no nat POSTROUTING rule applies")
        });
        telling
            .or(answers.len().checked_sub(1))
            .map(|i| answers[i].clone())
    }

    fn dnat_decision(&self, pre: &Tuple, post: &Tuple, ctx: &PacketCtx) -> Option<NatDecision> {
        self.tables
            .iter()
            .find_map(|t| t.dnat_decision(pre, post, ctx))
    }
}
