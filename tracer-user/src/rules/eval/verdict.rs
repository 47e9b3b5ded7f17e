//! One walk of a filter-type chain (filter, raw, mangle, or an nftables `type filter` base
//! chain) for a packet the kernel dropped: rules in order, jumps, gotos and returns, `MARK`
//! applied on the way, verdict maps followed, ending at the first `DROP` or `REJECT`
//! ([`DropHit`]), at an `ACCEPT`, or at the end of the chain (where its policy applies).
//!
//! Conditions pktrace cannot check are decided in the direction of the drop the kernel
//! reported: assumed to hold for a rule that drops or jumps (noted in the hit), assumed not
//! to hold for a rule that would accept or return (also noted). A rule that drops only
//! under an assumption is still named, with the assumption said; a walk in which no rule
//! drops names none. The conntrack state, unless the caller knows it, is taken as `NEW`.

use std::ptr;

use super::{Fact, Truth, Walk, conds::iface_match};
use crate::rules::{Cond, MapRef, Rule, Target, Test};

/// What the drop walk knows of the packet beyond [`super::PacketCtx`].
#[derive(Clone, Copy, Debug, Default)]
pub struct Seen<'a> {
    /// The interface the packet came in by (`-i`, `iifname`), when known.
    pub in_iface: Option<&'a str>,
    /// The packet's conntrack state as iptables names it (`NEW`, `ESTABLISHED`, `RELATED`,
    /// `INVALID`, `UNTRACKED`); `None`: taken as `NEW`, and said when a rule tests it.
    pub ct_state: Option<&'a str>,
}

/// The rule (or chain policy) that dropped the packet.
#[derive(Clone, Debug)]
pub struct DropHit<'a> {
    pub chain: &'a str,
    /// 0-based index of the rule in `chain`; `None` when the chain's policy dropped it.
    pub index: Option<usize>,
    pub rule: Option<&'a Rule>,
    /// `DROP` or `REJECT`.
    pub verdict: String,
    /// Chains entered from the base chain, outermost first, ending with `chain`.
    pub path: Vec<&'a str>,
    /// The jumping rules that led here (chain, 0-based index), outermost first.
    pub jumps: Vec<(&'a str, usize)>,
    /// Comments of the verdict-map elements that led here (kube-proxy names the service).
    pub map_comments: Vec<&'a str>,
    /// The packet's state for the conditions of the dropping rule.
    pub facts: Vec<Fact>,
    /// What was assumed on the way.
    pub notes: Vec<String>,
}

/// How a walk of one base chain ended.
#[derive(Clone, Debug)]
pub enum Verdict<'a> {
    Dropped(DropHit<'a>),
    /// An `ACCEPT` (or a verdict that hands the packet elsewhere: `QUEUE`, …): this base
    /// chain let it go.
    Accepted,
    /// The end of the base chain without a verdict; its policy is the caller's to apply.
    Passed,
}

enum Flow<'a> {
    Return,
    Done(Verdict<'a>),
}

/// The drop walk: a [`Walk`] for the conditions, and the chain stack of this replay.
pub struct DropWalk<'a> {
    walk: Walk<'a>,
    seen: Seen<'a>,
    stack: Vec<&'a str>,
    jumps: Vec<(&'a str, usize)>,
    maps: Vec<&'a str>,
    budget: usize,
}

impl<'a> DropWalk<'a> {
    /// A drop walk over `walk`'s table, packet, context and mark.
    #[must_use]
    pub const fn new(walk: Walk<'a>, seen: Seen<'a>) -> Self {
        Self {
            walk,
            seen,
            stack: Vec::new(),
            jumps: Vec::new(),
            maps: Vec::new(),
            budget: super::MAX_RULES,
        }
    }

    /// The mark after the walk (rules may set it; later tables see it).
    #[must_use]
    pub const fn mark(&self) -> u32 {
        self.walk.mark
    }

    /// Walks base chain `entry`.
    pub fn run(&mut self, entry: &'a str) -> Verdict<'a> {
        match self.chain(entry) {
            Flow::Done(v) => v,
            Flow::Return => Verdict::Passed,
        }
    }

    fn chain(&mut self, name: &'a str) -> Flow<'a> {
        let Some(chain) = self.walk.rules.chain(name) else {
            return Flow::Return;
        };
        if self.stack.len() >= super::MAX_DEPTH || self.stack.contains(&name) {
            return Flow::Return;
        }
        self.stack.push(name);
        let mut flow = Flow::Return;
        for (index, rule) in chain.rules.iter().enumerate() {
            let Some(budget) = self.budget.checked_sub(1) else {
                flow = Flow::Done(Verdict::Passed);
                break;
            };
            self.budget = budget;
            if let Some(f) = self.rule(name, index, rule) {
                flow = f;
                break;
            }
        }
        self.stack.pop();
        flow
    }

    /// One rule: the flow when it ends the chain or the walk, `None` when the walk goes on.
    fn rule(&mut self, name: &'a str, index: usize, rule: &'a Rule) -> Option<Flow<'a>> {
        let assumed = self.check(name, index, rule)?;
        let (target, map_comment) = match &rule.target {
            Target::Vmap { keys, map } => {
                let target = self.walk.vmap(keys, map)?;
                (target, self.map_comment(map, target))
            }
            t => (t, None),
        };
        match target {
            Target::Stop(v) if v == "DROP" || v == "REJECT" => {
                self.walk.notes.extend(assumed);
                self.maps.extend(map_comment);
                let hit = self.hit(name, index, rule, v);
                Some(Flow::Done(Verdict::Dropped(hit)))
            }
            Target::Stop(_) | Target::Return if !assumed.is_empty() => {
                self.walk.notes.extend(
                    assumed
                        .iter()
                        .map(|a| format!("{a}: assumed not to hold at {name} rule {}", index + 1)),
                );
                None
            }
            Target::Stop(_) => Some(Flow::Done(Verdict::Accepted)),
            Target::Return => Some(Flow::Return),
            Target::Mark { clear, xor } => {
                self.walk.mark = (self.walk.mark & !clear) ^ xor;
                None
            }
            Target::Jump(next) | Target::Goto(next) => {
                self.walk.notes.extend(assumed);
                self.follow(name, index, rule, next, map_comment)
            }
            _ => None,
        }
    }

    /// Follows a jump or goto: the flow when the walk is done or a goto returns.
    fn follow(
        &mut self,
        name: &'a str,
        index: usize,
        rule: &'a Rule,
        next: &'a str,
        map_comment: Option<&'a str>,
    ) -> Option<Flow<'a>> {
        self.walk.rules.chain(next)?;
        self.jumps.push((name, index));
        let maps = self.maps.len();
        self.maps.extend(map_comment);
        let flow = self.chain(next);
        self.jumps.pop();
        match flow {
            Flow::Done(v) => Some(Flow::Done(v)),
            Flow::Return => {
                self.maps.truncate(maps);
                matches!(rule.target, Target::Goto(_)).then_some(Flow::Return)
            }
        }
    }

    fn hit(&mut self, chain: &'a str, index: usize, rule: &'a Rule, verdict: &str) -> DropHit<'a> {
        DropHit {
            chain,
            index: Some(index),
            rule: Some(rule),
            verdict: verdict.to_owned(),
            path: self.stack.clone(),
            jumps: self.jumps.clone(),
            map_comments: self.maps.clone(),
            facts: self.walk.facts(rule),
            notes: std::mem::take(&mut self.walk.notes),
        }
    }

    /// The hit for a base chain whose policy dropped the packet.
    #[must_use]
    pub fn policy_hit(&mut self, chain: &'a str, policy: &str) -> DropHit<'a> {
        DropHit {
            chain,
            index: None,
            rule: None,
            verdict: policy.to_owned(),
            path: vec![chain],
            jumps: Vec::new(),
            map_comments: Vec::new(),
            facts: Vec::new(),
            notes: std::mem::take(&mut self.walk.notes),
        }
    }

    /// The comment of the named map's element that gave `target`.
    fn map_comment(&self, map: &'a MapRef, target: &'a Target) -> Option<&'a str> {
        let MapRef::Named(name) = map else {
            return None;
        };
        let elems = self.walk.rules.map_elems(map)?;
        let i = elems.iter().position(|(_, t)| ptr::eq(t, target))?;
        self.walk
            .rules
            .nft_map_comments
            .get(name)?
            .get(i)?
            .as_deref()
    }

    /// `Some(assumptions)` when every condition holds or is assumed to; `None` when one is
    /// known not to.
    fn check(&self, chain: &str, index: usize, rule: &Rule) -> Option<Vec<String>> {
        let mut assumed = Vec::new();
        for cond in &rule.conds {
            match self.truth(chain, index, rule, cond) {
                Truth::Known(true) => {}
                Truth::Known(false) => return None,
                Truth::Assumed(why) => assumed.push(why),
            }
        }
        Some(assumed)
    }

    fn truth(&self, chain: &str, index: usize, rule: &Rule, cond: &Cond) -> Truth {
        match &cond.test {
            Test::InIface(pat) => match self.seen.in_iface {
                Some(name) => Truth::Known(iface_match(pat, name) != cond.negated),
                None => Truth::Assumed(format!(
                    "in interface unknown for `{}-i {pat}`",
                    if cond.negated { "! " } else { "" }
                )),
            },
            Test::Unknown(text) => match ct_states(text) {
                Some(states) => self.ct_truth(&states, cond.negated),
                None => self.walk.truth(chain, index, rule, cond),
            },
            _ => self.walk.truth(chain, index, rule, cond),
        }
    }

    /// A `--ctstate`/`--state` match against the known (or assumed `NEW`) state.
    fn ct_truth(&self, states: &[&str], negated: bool) -> Truth {
        let state = self.seen.ct_state.unwrap_or("NEW");
        let holds = states.iter().any(|s| s.eq_ignore_ascii_case(state)) != negated;
        if self.seen.ct_state.is_some() {
            return Truth::Known(holds);
        }
        if holds {
            Truth::Assumed(format!(
                "conntrack state taken as NEW for `{}--ctstate {}`",
                if negated { "! " } else { "" },
                states.join(",")
            ))
        } else {
            Truth::Known(false)
        }
    }
}

/// The states of an unknown condition that is a conntrack state match
/// (`-m conntrack --ctstate A,B`, `-m state --state A,B`).
fn ct_states(text: &str) -> Option<Vec<&str>> {
    let rest = text
        .strip_prefix("-m conntrack --ctstate ")
        .or_else(|| text.strip_prefix("-m state --state "))?;
    Some(rest.split_whitespace().next()?.split(',').collect())
}
