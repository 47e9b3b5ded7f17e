//! Reading the node's filter-type tables for drop replays: `iptables-legacy-save` (when the
//! legacy backend holds a table), `iptables-nft-save` (else `iptables-save`), the native
//! nftables tables one by one (`nft -j list table`), and `ipset save` when rules test sets.
//! A source that cannot be read becomes a note; the rest is still used.

use super::DropRules;
use crate::rules::{ExplainError, read::Run, ruleset::parse_tables, source};

/// The legacy backend's tables, as the kernel lists them.
const LEGACY_TABLES: &str = "/proc/net/ip_tables_names";

impl DropRules {
    /// Reads this node's rules (see [`DropRules::read_from`]).
    #[must_use]
    pub fn load() -> Self {
        let legacy = std::fs::read_to_string(LEGACY_TABLES).is_ok_and(|t| {
            t.lines()
                .any(|l| matches!(l.trim(), "filter" | "raw" | "mangle"))
        });
        Self::read_from(&source::run, legacy)
    }

    /// Reads the rules through `run`; `legacy`: the legacy backend holds a filter, raw or
    /// mangle table. What fails is said in `notes`.
    #[must_use]
    pub fn read_from(run: Run<'_>, legacy: bool) -> Self {
        let mut notes = Vec::new();
        let mut dumps: Vec<(&str, String)> = Vec::new();
        let mut keep =
            |label, res: Result<source::Output, ExplainError>, notes: &mut Vec<String>| match res {
                Ok(out) => dumps.push((label, out.stdout)),
                Err(ExplainError::NotInstalled { .. }) => {}
                Err(e) => notes.push(format!("{label}: {}", e.reason())),
            };
        if legacy {
            keep(
                "iptables-legacy",
                run("iptables-legacy-save", &[]),
                &mut notes,
            );
        }
        match run("iptables-nft-save", &[]) {
            Err(ExplainError::NotInstalled { .. }) if !legacy => {
                keep("iptables", run("iptables-save", &[]), &mut notes);
            }
            other => keep("iptables-nft", other, &mut notes),
        }
        let mut json = Vec::new();
        if let Ok(out) = run("nft", &["list", "tables"]) {
            for (family, name) in parse_tables(&out.stdout) {
                match run("nft", &["-j", "list", "table", &family, &name]) {
                    Ok(out) => json.push(out.stdout),
                    Err(e) => notes.push(format!("nft table {family} {name}: {}", e.reason())),
                }
            }
        }
        let texts: Vec<(&str, &str)> = dumps.iter().map(|(l, t)| (*l, t.as_str())).collect();
        let jsons: Vec<&str> = json.iter().map(String::as_str).collect();
        let mut rules = Self::parse(&texts, &jsons, None);
        if rules.tables.iter().any(|t| t.rules.uses_ipsets()) {
            match run("ipset", &["save"]) {
                Ok(out) => rules = Self::parse(&texts, &jsons, Some(&out.stdout)),
                Err(e) => notes.push(format!(
                    "ipset: {}; `-m set` matches are assumed to hold",
                    e.reason()
                )),
            }
        }
        rules.notes.extend(notes);
        rules
    }
}
