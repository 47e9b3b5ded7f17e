//! Walking the nat table for one packet, the way netfilter does: rules in order, jumps and
//! returns, `MARK` applied on the way, stopping at the first NAT target. Conditions pktrace
//! cannot check are assumed to match and noted, so the answer says what it assumed.

use std::{collections::HashSet, net::IpAddr};

use tracer_common::{PROTO_TCP, PROTO_UDP, Tuple};

use super::{
    ipset::Probe,
    rules::{Cond, Key, MapKey, MapRef, NatRules, Rule, SetRef, Target, Test, Val, in_range},
};
use crate::journey::{dst_ip, src_ip};

/// Deepest chain nesting followed (iptables itself stops loops; a dump might not).
const MAX_DEPTH: usize = 32;
/// Most rules evaluated per walk, so a hostile dump cannot make one take long.
const MAX_RULES: usize = 200_000;
/// SCTP carries ports too.
const PROTO_SCTP: u8 = 132;

/// What the walker knows about the packet beyond its tuple.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PacketCtx {
    /// `skb->mark` when the packet entered the nat hook.
    pub mark: u32,
    /// The node's own addresses (`addrtype LOCAL`, together with 127.0.0.0/8 and `::1`).
    pub local_addrs: Vec<IpAddr>,
    /// Interface the packet leaves by (`-o`), when known. `-i` matches are always assumed:
    /// the nat hooks pktrace replays (POSTROUTING, and PREROUTING for DNAT) are explained
    /// from the tuple alone.
    pub out_iface: Option<String>,
    /// The traced addresses: a journey without SNAT is explained ("no SNAT: …") when it
    /// starts at one of them or was DNATed (an original-direction packet either way).
    pub sources: Vec<IpAddr>,
}

/// Where a walk reached a NAT target.
#[derive(Clone, Debug)]
pub(super) struct Hit<'a> {
    pub chain: &'a str,
    /// 0-based index of the rule in `chain`.
    pub index: usize,
    pub rule: &'a Rule,
    /// Chains entered from the hook, outermost first, ending with `chain`.
    pub path: Vec<&'a str>,
    /// The jumping rules that led here (chain, 0-based index), outermost first.
    pub jumps: Vec<(&'a str, usize)>,
    /// Why the rule applied, for people.
    pub facts: Vec<Fact>,
    /// Conditions assumed to hold.
    pub notes: Vec<String>,
    /// The mark after the walk (rules on the way may set it).
    pub mark: u32,
}

/// One thing the packet is, stated for the `why` line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Fact {
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
pub(super) fn render_facts(facts: &[Fact]) -> String {
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
pub(super) fn cidr_label(rule: &Rule) -> Option<&'static str> {
    let comment = rule.comment.as_deref()?;
    if comment.starts_with("ip-masq-agent") {
        Some("nonMasqueradeCIDRs")
    } else if comment.starts_with("kubenet") {
        Some("non-masquerade-cidr")
    } else {
        None
    }
}

/// Why a walk ended without NAT.
#[derive(Clone, Debug, Default)]
pub(super) struct Miss<'a> {
    /// The last `RETURN` taken (chain, 0-based index, why it matched).
    pub returned: Option<(&'a str, usize, Vec<Fact>)>,
    /// NAT rules passed over, with the first condition that failed, in walk order.
    pub skipped: Vec<(&'a str, usize, &'a Rule, Option<&'a Cond>)>,
    /// A rule that ended the table without NAT (`ACCEPT`, …).
    pub stopped: Option<(&'a str, usize)>,
    pub notes: Vec<String>,
    /// The mark after the walk.
    pub mark: u32,
}

/// Whether a condition holds: known, or assumed with the reason.
enum Truth {
    Known(bool),
    Assumed(String),
}

enum Flow<'a> {
    /// End of chain or `RETURN`: the caller goes on.
    Return,
    /// The table is done with this packet: NAT at this rule, or no NAT.
    Done(Option<Hit<'a>>),
}

/// Steering for a DNAT replay: the DNAT rules the observed rewrite could come from, and the
/// chains that lead to them (so random `statistic` splits follow the branch that was taken).
pub(super) struct Steer<'a> {
    pub candidates: Vec<(&'a str, usize)>,
    pub reaching: HashSet<&'a str>,
}

/// One walk of the table for one packet.
pub(super) struct Walk<'a> {
    rules: &'a NatRules,
    ctx: &'a PacketCtx,
    pkt: Tuple,
    mark: u32,
    steer: Option<&'a Steer<'a>>,
    stack: Vec<&'a str>,
    jumps: Vec<(&'a str, usize)>,
    notes: Vec<String>,
    budget: usize,
    miss: Miss<'a>,
}

impl<'a> Walk<'a> {
    /// A walk of `pkt` (before the NAT step) starting with `ctx.mark`.
    pub fn new(
        rules: &'a NatRules,
        ctx: &'a PacketCtx,
        pkt: Tuple,
        steer: Option<&'a Steer<'a>>,
    ) -> Self {
        Self {
            rules,
            ctx,
            pkt,
            mark: ctx.mark,
            steer,
            stack: Vec::new(),
            jumps: Vec::new(),
            notes: Vec::new(),
            budget: MAX_RULES,
            miss: Miss::default(),
        }
    }

    /// Starts with `mark` instead of the context's (rules of an earlier chain set it).
    #[must_use]
    pub fn with_mark(mut self, mark: u32) -> Self {
        self.mark = mark;
        self
    }

    /// Walks hook chain `hook` (e.g. `POSTROUTING`); the NAT rule reached, if any.
    pub fn run(self, hook: &'a str) -> Option<Hit<'a>> {
        self.verdict(hook).ok()
    }

    /// Walks hook chain `hook`: the NAT rule reached, or why none was.
    #[expect(clippy::result_large_err, reason = "one per walk, moved once")]
    pub fn verdict(mut self, hook: &'a str) -> Result<Hit<'a>, Miss<'a>> {
        match self.chain(hook) {
            Flow::Done(Some(hit)) => Ok(hit),
            Flow::Done(None) | Flow::Return => {
                let mut miss = self.miss;
                miss.notes = self.notes;
                miss.mark = self.mark;
                Err(miss)
            }
        }
    }

    fn chain(&mut self, name: &'a str) -> Flow<'a> {
        let Some(chain) = self.rules.chain(name) else {
            return Flow::Return;
        };
        if self.stack.len() >= MAX_DEPTH || self.stack.contains(&name) {
            return Flow::Return;
        }
        self.stack.push(name);
        let flow = self.rules_of(name, &chain.rules);
        self.stack.pop();
        flow
    }

    fn rules_of(&mut self, name: &'a str, rules: &'a [Rule]) -> Flow<'a> {
        // Why the RETURN rules passed over did not apply: the reason a later rule is reached.
        let mut passed: Vec<Fact> = Vec::new();
        for (index, rule) in rules.iter().enumerate() {
            self.budget = match self.budget.checked_sub(1) {
                Some(b) => b,
                None => return Flow::Done(None),
            };
            let failed = match self.check(name, index, rule) {
                Ok(assumed) => {
                    self.notes.extend(assumed);
                    None
                }
                Err(failed) => Some(failed),
            };
            if let Some(failed) = failed {
                match rule.target {
                    Target::Return => {
                        passed.extend(failed.and_then(|c| self.fact(c, cidr_label(rule))));
                    }
                    Target::Dnat(_) | Target::Snat(_) | Target::Masquerade => {
                        self.miss.skipped.push((name, index, rule, failed));
                    }
                    _ => {}
                }
                continue;
            }
            let target = match &rule.target {
                Target::Vmap { keys, map } => match self.vmap(keys, map) {
                    Some(t) => t,
                    None => continue,
                },
                t => t,
            };
            match target {
                Target::Return => {
                    self.miss.returned = Some((name, index, self.facts(rule)));
                    return Flow::Return;
                }
                Target::None => {}
                Target::Mark { clear, xor } => self.mark = (self.mark & !clear) ^ xor,
                Target::Jump(next) | Target::Goto(next) => {
                    if self.rules.chain(next).is_none() {
                        self.notes
                            .push(format!("target {next} is not modelled; assumed to go on"));
                        continue;
                    }
                    self.jumps.push((name, index));
                    let flow = self.chain(next);
                    self.jumps.pop();
                    match flow {
                        Flow::Done(hit) => return Flow::Done(hit),
                        Flow::Return if matches!(rule.target, Target::Goto(_)) => {
                            return Flow::Return;
                        }
                        Flow::Return => {}
                    }
                }
                Target::Dnat(_) | Target::Snat(_) | Target::Masquerade => {
                    let facts = if passed.is_empty() {
                        self.facts(rule)
                    } else {
                        passed
                    };
                    return Flow::Done(Some(self.hit(name, index, rule, facts)));
                }
                Target::Stop(_) => {
                    self.miss.stopped = Some((name, index));
                    return Flow::Done(None);
                }
                // A map whose verdict is another map: nft does not allow it.
                Target::Vmap { .. } => {}
            }
        }
        Flow::Return
    }

    fn hit(&mut self, chain: &'a str, index: usize, rule: &'a Rule, facts: Vec<Fact>) -> Hit<'a> {
        Hit {
            chain,
            index,
            rule,
            path: self.stack.clone(),
            jumps: self.jumps.clone(),
            facts,
            notes: std::mem::take(&mut self.notes),
            mark: self.mark,
        }
    }

    /// `Ok(notes)` when every condition holds (notes for assumed ones), else `Err` with the
    /// first condition that failed.
    fn check(
        &self,
        chain: &str,
        index: usize,
        rule: &'a Rule,
    ) -> Result<Vec<String>, Option<&'a Cond>> {
        let mut notes = Vec::new();
        for cond in &rule.conds {
            match self.truth(chain, index, rule, cond) {
                Truth::Known(true) => {}
                Truth::Known(false) => return Err(Some(cond)),
                Truth::Assumed(why) => notes.push(why),
            }
        }
        Ok(notes)
    }

    fn truth(&self, chain: &str, index: usize, rule: &Rule, cond: &Cond) -> Truth {
        let (src, dst) = (src_ip(&self.pkt), dst_ip(&self.pkt));
        let known = match &cond.test {
            Test::Src(net) => net.contains(src),
            Test::Dst(net) => net.contains(dst),
            Test::Proto(p) => *p == 0 || *p == self.pkt.proto,
            Test::InIface(pat) => {
                return self.iface(None, "-i", pat, cond.negated);
            }
            Test::OutIface(pat) => {
                return self.iface(self.ctx.out_iface.as_deref(), "-o", pat, cond.negated);
            }
            Test::Dport(ranges) => has_ports(self.pkt.proto) && in_ports(ranges, self.pkt.dport),
            Test::Sport(ranges) => has_ports(self.pkt.proto) && in_ports(ranges, self.pkt.sport),
            Test::Mark { value, mask } => self.mark & mask == *value,
            Test::AddrType { dst: is_dst, kind } => {
                match self.addr_type(if *is_dst { dst } else { src }, kind) {
                    Some(b) => b,
                    None => return Truth::Assumed(format!("addrtype {kind} not checked")),
                }
            }
            Test::Range {
                dst: is_dst,
                lo,
                hi,
            } => in_range(if *is_dst { dst } else { src }, *lo, *hi),
            Test::Statistic => return self.statistic(chain, index, rule),
            Test::Set(m) => match self.rules.ipsets.test(m, &self.probe()) {
                Ok(b) => b,
                Err(why) => return Truth::Assumed(why),
            },
            Test::InSet { keys, set } => match self.in_set(keys, set) {
                Some(b) => b,
                None => return Truth::Assumed(format!("set lookup on {keys:?} not checked")),
            },
            // A new connection's ct mark is 0, whatever the mask.
            Test::CtMark { value, .. } => *value == 0,
            Test::Unknown(text) => return Truth::Assumed(format!("`{text}` not checked")),
        };
        Truth::Known(known != cond.negated)
    }

    /// The packet's value of an nftables key; `None` when pktrace cannot know it.
    fn key(&self, key: &Key) -> Option<KeyVal<'_>> {
        Some(match key {
            Key::Saddr => KeyVal::Ip(src_ip(&self.pkt)),
            Key::Daddr => KeyVal::Ip(dst_ip(&self.pkt)),
            Key::L4proto => KeyVal::Num(u64::from(self.pkt.proto)),
            Key::Sport if has_ports(self.pkt.proto) => KeyVal::Num(u64::from(self.pkt.sport)),
            Key::Dport if has_ports(self.pkt.proto) => KeyVal::Num(u64::from(self.pkt.dport)),
            // Without ports the field is missing: nothing matches it.
            Key::Sport | Key::Dport => KeyVal::Missing,
            Key::Mark => KeyVal::Num(u64::from(self.mark)),
            Key::Oifname => KeyVal::Str(self.ctx.out_iface.as_deref()?),
            Key::Iifname | Key::Other(_) => return None,
        })
    }

    /// Whether the concatenation of `keys` is an element of `set`.
    fn in_set(&self, keys: &[Key], set: &SetRef) -> Option<bool> {
        let elems = self.rules.set_elems(set)?;
        let vals: Vec<KeyVal<'_>> = keys.iter().map(|k| self.key(k)).collect::<Option<_>>()?;
        Some(elems.iter().any(|e| elem_matches(e, &vals)))
    }

    /// The verdict a verdict map gives the packet (`None`: no element, the rule goes on).
    /// Random maps (`numgen`) follow the steering like `statistic`.
    fn vmap(&mut self, keys: &MapKey, map: &'a MapRef) -> Option<&'a Target> {
        let Some(elems) = self.rules.map_elems(map) else {
            self.notes
                .push(format!("verdict map {map:?} not found; assumed no verdict"));
            return None;
        };
        match keys {
            MapKey::Random => {
                let steered = self.steer.and_then(|steer| {
                    elems.iter().find(|(_, t)| {
                        matches!(t, Target::Jump(n) | Target::Goto(n) if steer.reaching.contains(n.as_str()))
                    })
                });
                if steered.is_none() {
                    self.notes
                        .push("random `numgen` verdict assumed to be the first".into());
                }
                steered.or_else(|| elems.first()).map(|(_, t)| t)
            }
            MapKey::Fields(keys) => {
                let Some(vals) = keys.iter().map(|k| self.key(k)).collect::<Option<Vec<_>>>()
                else {
                    self.notes.push(format!(
                        "verdict map on {keys:?} not checked; assumed no verdict"
                    ));
                    return None;
                };
                elems
                    .iter()
                    .find(|(e, _)| elem_matches(e, &vals))
                    .map(|(_, t)| t)
            }
        }
    }

    /// The packet as the ipset test sees it.
    fn probe(&self) -> Probe<'_> {
        Probe {
            src: src_ip(&self.pkt),
            dst: dst_ip(&self.pkt),
            sport: self.pkt.sport,
            dport: self.pkt.dport,
            proto: self.pkt.proto,
            mark: self.mark,
            in_iface: None,
            out_iface: self.ctx.out_iface.as_deref(),
        }
    }

    fn iface(&self, name: Option<&str>, flag: &str, pat: &str, negated: bool) -> Truth {
        match name {
            Some(name) => Truth::Known(iface_match(pat, name) != negated),
            None => Truth::Assumed(format!(
                "interface unknown for `{}{flag} {pat}`",
                if negated { "! " } else { "" }
            )),
        }
    }

    /// `statistic` is random: in a DNAT replay it holds exactly on the branch that led to the
    /// observed rewrite; elsewhere it is assumed.
    fn statistic(&self, chain: &str, index: usize, rule: &Rule) -> Truth {
        let Some(steer) = self.steer else {
            return Truth::Assumed("random `statistic` match assumed to hold".into());
        };
        Truth::Known(match &rule.target {
            Target::Jump(next) | Target::Goto(next) => steer.reaching.contains(next.as_str()),
            _ => steer
                .candidates
                .iter()
                .any(|&(c, i)| c == chain && i == index),
        })
    }

    fn addr_type(&self, ip: IpAddr, kind: &str) -> Option<bool> {
        let local = ip.is_loopback() || self.ctx.local_addrs.contains(&ip);
        let broadcast = ip == IpAddr::from([255, 255, 255, 255]);
        match kind {
            "LOCAL" => Some(local),
            "MULTICAST" => Some(ip.is_multicast()),
            "BROADCAST" if broadcast => Some(true),
            "UNICAST" => Some(!ip.is_multicast() && !broadcast),
            _ => None,
        }
    }

    /// The packet's state for condition `cond`, as a fact (none for dull ones); `label`
    /// names the rule's prefixes.
    pub(super) fn fact(&self, cond: &Cond, label: Option<&'static str>) -> Option<Fact> {
        let (src, dst) = (src_ip(&self.pkt), dst_ip(&self.pkt));
        Some(match &cond.test {
            Test::Src(net) | Test::Dst(net) => {
                let who = if matches!(cond.test, Test::Src(_)) {
                    src
                } else {
                    dst
                };
                let named = label.map(|l| format!("{l} ")).unwrap_or_default();
                if net.contains(who) {
                    Fact::Text(format!("{who} in {named}{net}"))
                } else {
                    Fact::NotIn {
                        who,
                        net: net.to_string(),
                        label,
                    }
                }
            }
            Test::Range {
                dst: is_dst,
                lo,
                hi,
            } => {
                let who = if *is_dst { dst } else { src };
                if in_range(who, *lo, *hi) {
                    Fact::Text(format!("{who} in {lo}-{hi}"))
                } else {
                    Fact::NotIn {
                        who,
                        net: format!("{lo}-{hi}"),
                        label,
                    }
                }
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
    fn facts(&self, rule: &Rule) -> Vec<Fact> {
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

/// A packet value an nftables key yields.
#[derive(Clone, Copy, Debug)]
enum KeyVal<'a> {
    Ip(IpAddr),
    Num(u64),
    Str(&'a str),
    /// The packet has no such field (ports of ICMP).
    Missing,
}

impl std::fmt::Display for KeyVal<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Ip(ip) => write!(f, "{ip}"),
            Self::Num(n) => write!(f, "{n}"),
            Self::Str(s) => write!(f, "{s}"),
            Self::Missing => write!(f, "-"),
        }
    }
}

/// Whether one set element (a concatenation) holds the packet's values.
fn elem_matches(elem: &[Val], vals: &[KeyVal<'_>]) -> bool {
    elem.len() == vals.len()
        && elem.iter().zip(vals).all(|(e, v)| match (e, v) {
            (Val::Net(net), KeyVal::Ip(ip)) => net.contains(*ip),
            (Val::Range(lo, hi), KeyVal::Ip(ip)) => in_range(*ip, *lo, *hi),
            (Val::Num(lo, hi), KeyVal::Num(n)) => (*lo..=*hi).contains(n),
            (Val::Str(pat), KeyVal::Str(name)) => match pat.strip_suffix('*') {
                Some(prefix) => name.starts_with(prefix),
                None => pat == name,
            },
            _ => false,
        })
}

/// iptables interface match: exact, or a prefix when the pattern ends with `+`.
fn iface_match(pat: &str, name: &str) -> bool {
    match pat.strip_suffix('+') {
        Some(prefix) => name.starts_with(prefix),
        None => pat == name,
    }
}

const fn has_ports(proto: u8) -> bool {
    matches!(proto, PROTO_TCP | PROTO_UDP | PROTO_SCTP)
}

fn in_ports(ranges: &[(u16, u16)], port: u16) -> bool {
    ranges.iter().any(|&(lo, hi)| (lo..=hi).contains(&port))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interface_patterns() {
        let cases = [
            ("eth0", "eth0", true),
            ("eth+", "eth1", true),
            ("eth+", "azure0", false),
            ("+", "x", true),
            ("docker0", "docker01", false),
        ];
        for (pat, name, want) in cases {
            assert_eq!(iface_match(pat, name), want, "{pat} {name}");
        }
    }

    #[test]
    fn facts_render_grouped() {
        let ip: IpAddr = "203.0.113.80".parse().unwrap();
        let cases: Vec<(Vec<Fact>, &str)> = vec![
            (vec![], ""),
            (
                vec![
                    Fact::NotIn {
                        who: ip,
                        net: "10.13.0.0/16".into(),
                        label: Some("nonMasqueradeCIDRs"),
                    },
                    Fact::NotIn {
                        who: ip,
                        net: "168.63.129.16/32".into(),
                        label: Some("nonMasqueradeCIDRs"),
                    },
                ],
                "203.0.113.80 not in nonMasqueradeCIDRs 10.13.0.0/16, 168.63.129.16/32",
            ),
            (
                vec![
                    Fact::Text("mark 0x4000".into()),
                    Fact::Text("mark 0x4000".into()),
                    Fact::NotIn {
                        who: ip,
                        net: "a".into(),
                        label: None,
                    },
                ],
                "203.0.113.80 not in a; mark 0x4000",
            ),
        ];
        for (facts, want) in cases {
            assert_eq!(render_facts(&facts), want);
        }
    }
}
