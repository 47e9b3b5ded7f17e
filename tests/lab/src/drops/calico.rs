//! The Calico policy scenario: felix's filter table for one Kubernetes `NetworkPolicy`,
//! `default/whereami-ingress`, which selects whereami pod `qfq2k` and admits only pods
//! labelled `role=frontend` (none runs), so the client `ubuntu` is dropped at the pod's
//! endpoint chain while the other whereami pod, without a policy, is reached.

use anyhow::{Context as _, Result};
use xtask_common::cmd::output_with_input;

use super::{node, strings};
use crate::{netns::in_ns, topology::NODE_NS};

/// The filter table felix writes for the policy (`iptables-save` format).
const FILTER: &str = include_str!("calico-policy-filter.txt");
/// The policy's ipset (`ipset save` format).
const IPSETS: &str = include_str!("calico-policy-ipsets.txt");
/// The policy, as Kubernetes names it.
pub const CALICO_POLICY: &str = "default/whereami-ingress";
/// The endpoint chain of the selected pod, where the drop happens.
pub const CALICO_DENIED_CHAIN: &str = "cali-tw-calia4124965a9b";
/// felix's comment on that chain's drop.
pub const CALICO_DENY_COMMENT: &str = "Drop if no policies passed packet";

/// Loads the ipset and the chains into the node's namespace; `undo` gets, in the order of
/// adding, what removes them again.
pub(super) fn add(undo: &mut Vec<(&'static str, Vec<String>)>) -> Result<()> {
    output_with_input(&mut in_ns(NODE_NS, "ipset", ["restore", "-exist"]), IPSETS)
        .context("loading the policy's ipset")?;
    for name in IPSETS.lines().filter_map(|l| l.strip_prefix("create ")) {
        let name = name.split_whitespace().next().unwrap_or_default();
        undo.push(("ipset", strings(&["destroy", name])));
    }
    let chains: Vec<&str> = FILTER
        .lines()
        .filter_map(|l| l.strip_prefix(':')?.split_whitespace().next())
        .filter(|c| c.starts_with("cali-"))
        .collect();
    // Deleted last (the undo runs backwards): flushed first, then removed.
    for chain in &chains {
        undo.push(("iptables", strings(&["-w", "-X", chain])));
    }
    for chain in &chains {
        undo.push(("iptables", strings(&["-w", "-F", chain])));
    }
    for rule in FILTER.lines().filter_map(|l| l.strip_prefix("-A FORWARD ")) {
        let mut args = strings(&["-w", "-D", "FORWARD"]);
        args.extend(words(rule));
        undo.push(("iptables", args));
    }
    output_with_input(
        &mut in_ns(NODE_NS, "iptables-restore", ["-w", "--noflush"]),
        FILTER,
    )
    .context("loading Calico's filter chains")?;
    // The chains exist now: say so (a failure above leaves only the ipset to remove).
    node("iptables", &strings(&["-w", "-S", CALICO_DENIED_CHAIN]))?;
    Ok(())
}

/// The words of a rule line, double-quoted ones kept whole (`--comment "a b"`).
fn words(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut word = String::new();
    let (mut quoted, mut any) = (false, false);
    for c in line.chars() {
        match c {
            '"' => {
                quoted = !quoted;
                any = true;
            }
            c if c.is_whitespace() && !quoted => {
                if any {
                    out.push(std::mem::take(&mut word));
                }
                any = false;
            }
            c => {
                word.push(c);
                any = true;
            }
        }
    }
    if any {
        out.push(word);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rule_words_keep_quoted_comments_whole() {
        assert_eq!(
            words(r#"-m comment --comment "Policy explicitly accepted packet." -j ACCEPT"#),
            [
                "-m",
                "comment",
                "--comment",
                "Policy explicitly accepted packet.",
                "-j",
                "ACCEPT"
            ]
        );
    }

    #[test]
    fn the_table_holds_the_policy_and_its_drop() {
        let forward: Vec<&str> = FILTER
            .lines()
            .filter(|l| l.starts_with("-A FORWARD "))
            .collect();
        assert_eq!(forward.len(), 3, "{forward:?}");
        let drop = format!("-A {CALICO_DENIED_CHAIN} ");
        assert!(FILTER.lines().any(|l| l.starts_with(&drop)
            && l.contains(CALICO_DENY_COMMENT)
            && l.ends_with("-j DROP")));
        let (ns, name) = CALICO_POLICY.split_once('/').unwrap();
        assert!(FILTER.contains(&format!("\"Policy {ns}/knp.default.{name} ingress\"")));
        let set = IPSETS
            .lines()
            .next()
            .unwrap()
            .split_whitespace()
            .nth(1)
            .unwrap();
        assert!(FILTER.contains(&format!("--match-set {set} src")));
    }
}
