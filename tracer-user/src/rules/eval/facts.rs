//! The packet's state for the `why` line: one [`Fact`] per condition of the rule that applied
//! (prefixes it lies outside grouped per address), rendered by [`render_facts`].

use std::{collections::HashSet, fmt::Write as _, net::IpAddr};

use super::Walk;
use crate::{
    rules::{Cond, Rule, SetRef, Target, Test, in_range},
    util::tuple::{dst_ip, src_ip},
};

/// One thing the packet is, stated for the `why` line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fact {
    /// `who` lies outside `net` (grouped per address when printed).
    NotIn {
        who: IpAddr,
        net: String,
        /// What the rule's owner calls these prefixes (`nonMasqueradeCIDRs`).
        label: Option<&'static str>,
    },
    Text(String),
}

/// `203.0.113.80 not in nonMasqueradeCIDRs 10.13.0.0/16, 168.63.129.16/32; mark 0x4000
/// (KUBE-MARK-MASQ), src 10.13.76.46 in ipset X`: prefixes grouped per address and label,
/// then the other facts.
pub fn render_facts(facts: &[Fact]) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut grouped: Vec<(IpAddr, Option<&str>, Vec<&str>)> = Vec::new();
    for fact in facts {
        match fact {
            Fact::NotIn { who, net, label } => {
                match grouped.iter_mut().find(|(w, l, _)| w == who && l == label) {
                    Some((_, _, nets)) => nets.push(net),
                    None => grouped.push((*who, *label, vec![net])),
                }
            }
            Fact::Text(t) if !parts.contains(t) => parts.push(t.clone()),
            Fact::Text(_) => {}
        }
    }
    let not_in = grouped.into_iter().map(|(who, label, nets)| {
        let label = label.map(|l| format!("{l} ")).unwrap_or_default();
        format!("{who} not in {label}{}", nets.join(", "))
    });
    let mut out: Vec<String> = not_in.collect();
    if !parts.is_empty() {
        out.push(parts.join(", "));
    }
    out.join("; ")
}

/// What the component that wrote `rule` calls the prefixes it exempts from masquerading,
/// from its comment (ip-masq-agent's `nonMasqueradeCIDRs`, kubelet's kubenet
/// `--non-masquerade-cidr`).
pub fn cidr_label(rule: &Rule) -> Option<&'static str> {
    let comment = rule.comment.as_deref()?;
    if comment.starts_with("ip-masq-agent") {
        Some("nonMasqueradeCIDRs")
    } else if comment.starts_with("kubenet") {
        Some("non-masquerade-cidr")
    } else {
        None
    }
}

impl Walk<'_> {
    /// The packet's state for condition `cond`, as a fact (none for dull ones); `label`
    /// names the rule's prefixes.
    pub fn fact(&self, cond: &Cond, label: Option<&'static str>) -> Option<Fact> {
        let (src, dst) = (src_ip(&self.pkt), dst_ip(&self.pkt));
        Some(match &cond.test {
            Test::Src(net) | Test::Dst(net) => {
                let who = if matches!(cond.test, Test::Src(_)) {
                    src
                } else {
                    dst
                };
                let named = label.map(|l| format!("{l} ")).unwrap_or_default();
                let shown = format!("{named}{net}");
                placed(who, net.contains(who), shown, net.to_string(), label)
            }
            Test::Range {
                dst: is_dst,
                lo,
                hi,
            } => {
                let who = if *is_dst { dst } else { src };
                let net = format!("{lo}-{hi}");
                placed(who, in_range(who, *lo, *hi), net.clone(), net, label)
            }
            Test::Mark { value, mask } if self.mark & mask == *value => {
                Fact::Text(format!("mark {value:#x}{}", self.marker(*value)))
            }
            Test::Mark { value, .. } => Fact::Text(format!("no mark {value:#x}")),
            Test::AddrType { dst: is_dst, kind } => {
                let who = if *is_dst { dst } else { src };
                let is = self.addr_type(who, kind)?;
                Fact::Text(format!("{who} {} {kind}", if is { "is" } else { "not" }))
            }
            Test::OutIface(pat) | Test::InIface(pat) => {
                let dir = if matches!(cond.test, Test::OutIface(_)) {
                    "out"
                } else {
                    "in"
                };
                Fact::Text(format!(
                    "{dir} {}{pat}",
                    if cond.negated { "not " } else { "" }
                ))
            }
            Test::Dport(_) => Fact::Text(format!("dport {}", self.pkt.dport)),
            Test::InSet { .. } | Test::Set(_) => return self.set_fact(&cond.test),
            _ => return None,
        })
    }

    /// The packet's membership of a named nftables set or an ipset, as a fact; `None` for an
    /// inline set or a membership pktrace cannot tell.
    fn set_fact(&self, test: &Test) -> Option<Fact> {
        Some(match test {
            Test::InSet {
                keys,
                set: SetRef::Named(name),
            } => {
                let is = self.in_set(keys, &SetRef::Named(name.clone()))?;
                let vals: Vec<String> = keys
                    .iter()
                    .filter_map(|k| self.key(k).map(|v| v.to_string()))
                    .collect();
                let keys: Vec<String> = keys
                    .iter()
                    .map(|k| format!("{k:?}").to_lowercase())
                    .collect();
                Fact::Text(format!(
                    "{} {} {} set @{name}",
                    keys.join("."),
                    vals.join("."),
                    if is { "in" } else { "not in" }
                ))
            }
            Test::Set(m) => {
                let probe = self.probe();
                let is = self.rules.ipsets.test(m, &probe).ok()?;
                Fact::Text(format!(
                    "{} {} {} ipset {}",
                    m.flags(),
                    m.values(&probe),
                    if is { "in" } else { "not in" },
                    m.name
                ))
            }
            _ => return None,
        })
    }

    /// Facts for every condition of a rule that matched.
    pub(super) fn facts(&self, rule: &Rule) -> Vec<Fact> {
        let label = cidr_label(rule);
        rule.conds
            .iter()
            .filter_map(|c| self.fact(c, label))
            .collect()
    }

    /// ` (KUBE-MARK-MASQ)` when a chain sets these mark bits (clears then sets them; a plain
    /// toggle such as kube-proxy's `--set-xmark 0x4000/0x0` does not count).
    fn marker(&self, bits: u32) -> String {
        let setter = self.rules.chains().find(|c| {
            c.rules.iter().any(|r| matches!(r.target, Target::Mark { clear, xor } if bits != 0 && clear & xor & bits == bits))
        });
        setter.map(|c| format!(" ({})", c.name)).unwrap_or_default()
    }
}

/// `who in <shown>` when `inside`, else `who` outside `net` (grouped per address when printed).
#[expect(
    clippy::needless_pass_by_value,
    reason = "both callers build `shown` for this call (one as a clone of `net`); a borrow would save no copy"
)]
fn placed(
    who: IpAddr,
    inside: bool,
    shown: String,
    net: String,
    label: Option<&'static str>,
) -> Fact {
    if inside {
        Fact::Text(format!("{who} in {shown}"))
    } else {
        Fact::NotIn { who, net, label }
    }
}

/// Different unchecked conditions a `why` line lists before "… and N more".
const NOTES_SHOWN: usize = 8;

/// ` [assumed: …]` for conditions that were not checked, or nothing. Linear in the notes: a
/// hostile dump can make a walk collect one per rule it passes (issue 6).
pub fn assumed(notes: &[String]) -> String {
    let mut seen = HashSet::new();
    let unique: Vec<&str> = notes
        .iter()
        .map(String::as_str)
        .filter(|n| seen.insert(*n))
        .collect();
    if unique.is_empty() {
        return String::new();
    }
    let mut text = unique[..unique.len().min(NOTES_SHOWN)].join("; ");
    if unique.len() > NOTES_SHOWN {
        let _ = write!(text, "; … and {} more", unique.len() - NOTES_SHOWN);
    }
    format!(" [assumed: {text}]")
}
