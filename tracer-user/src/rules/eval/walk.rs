//! One walk of the nat table for one packet: chains entered in order, jumps and returns,
//! `MARK` applied on the way, ending at the first NAT target ([`Hit`]) or without NAT
//! ([`Miss`], with the rules passed over and why).

use std::{collections::HashSet, net::IpAddr};

use tracer_common::Tuple;

use super::{Fact, MAX_DEPTH, MAX_RULES, cidr_label};
use crate::{
    rules::{Cond, NatRules, Rule, Target},
    traced::TracedAddrs,
};

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
    pub sources: TracedAddrs,
}

/// Where a walk reached a NAT target.
#[derive(Clone, Debug)]
pub struct Hit<'a> {
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

/// Why a walk ended without NAT.
#[derive(Clone, Debug, Default)]
pub struct Miss<'a> {
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
pub(super) enum Truth {
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
pub struct Steer<'a> {
    pub candidates: Vec<(&'a str, usize)>,
    pub reaching: HashSet<&'a str>,
}

/// One walk of the table for one packet.
pub struct Walk<'a> {
    pub(super) rules: &'a NatRules,
    pub(super) ctx: &'a PacketCtx,
    pub(super) pkt: Tuple,
    pub(super) mark: u32,
    pub(super) steer: Option<&'a Steer<'a>>,
    stack: Vec<&'a str>,
    jumps: Vec<(&'a str, usize)>,
    pub(super) notes: Vec<String>,
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
            if !self.matches(name, index, rule, &mut passed) {
                continue;
            }
            let target = match &rule.target {
                Target::Vmap { keys, map } => match self.vmap(keys, map) {
                    Some(t) => t,
                    None => continue,
                },
                t => t,
            };
            if let Some(flow) = self.take(name, index, rule, target, &mut passed) {
                return flow;
            }
        }
        Flow::Return
    }

    /// Whether every condition of `rule` holds (notes kept for assumed ones). When one fails,
    /// a `RETURN` rule adds why to `passed` and a NAT rule is recorded as skipped.
    fn matches(
        &mut self,
        name: &'a str,
        index: usize,
        rule: &'a Rule,
        passed: &mut Vec<Fact>,
    ) -> bool {
        let failed = match self.check(name, index, rule) {
            Ok(assumed) => {
                self.notes.extend(assumed);
                return true;
            }
            Err(failed) => failed,
        };
        match rule.target {
            Target::Return => {
                passed.extend(failed.and_then(|c| self.fact(c, cidr_label(rule))));
            }
            Target::Dnat(_) | Target::Snat(_) | Target::Masquerade => {
                self.miss.skipped.push((name, index, rule, failed));
            }
            _ => {}
        }
        false
    }

    /// What the matching `rule` does with its `target` (a verdict map's verdict, or its own):
    /// the walk's flow when this rule ends the chain or the table, `None` when it goes on.
    #[expect(
        clippy::match_same_arms,
        reason = "one arm per target kind: each says what that target does to the walk"
    )]
    fn take(
        &mut self,
        name: &'a str,
        index: usize,
        rule: &'a Rule,
        target: &'a Target,
        passed: &mut Vec<Fact>,
    ) -> Option<Flow<'a>> {
        match target {
            Target::Return => {
                self.miss.returned = Some((name, index, self.facts(rule)));
                return Some(Flow::Return);
            }
            Target::None => {}
            Target::Mark { clear, xor } => self.mark = (self.mark & !clear) ^ xor,
            Target::Jump(next) | Target::Goto(next) => return self.jump(name, index, rule, next),
            Target::Dnat(_) | Target::Snat(_) | Target::Masquerade => {
                let facts = if passed.is_empty() {
                    self.facts(rule)
                } else {
                    std::mem::take(passed)
                };
                return Some(Flow::Done(Some(self.hit(name, index, rule, facts))));
            }
            Target::Stop(_) => {
                self.miss.stopped = Some((name, index));
                return Some(Flow::Done(None));
            }
            // A map whose verdict is another map: nft does not allow it.
            Target::Vmap { .. } => {}
        }
        None
    }

    /// Follows `rule`'s jump or goto to chain `next`: the flow when the table is done or a goto
    /// returns, `None` when the walk goes on after the rule.
    fn jump(
        &mut self,
        name: &'a str,
        index: usize,
        rule: &'a Rule,
        next: &'a str,
    ) -> Option<Flow<'a>> {
        if self.rules.chain(next).is_none() {
            self.notes
                .push(format!("target {next} is not modelled; assumed to go on"));
            return None;
        }
        self.jumps.push((name, index));
        let flow = self.chain(next);
        self.jumps.pop();
        match flow {
            Flow::Done(hit) => Some(Flow::Done(hit)),
            Flow::Return if matches!(rule.target, Target::Goto(_)) => Some(Flow::Return),
            Flow::Return => None,
        }
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
}
