//! Rule attribution: which iptables nat rule did each NAT step, and for which Kubernetes
//! service (kube-proxy in iptables mode, ip-masq-agent, anything else in the nat table).
//!
//! - DNAT: the rules whose `--to-destination` covers the rewritten destination are the
//!   candidates; the nat PREROUTING (then OUTPUT) chain is replayed for the packet as it was
//!   before, following the `statistic` branch that leads to a candidate, which yields the path
//!   (`KUBE-SERVICES → KUBE-SVC-… → KUBE-SEP-…`) and the marks set on the way (KUBE-MARK-MASQ).
//! - SNAT: the nat POSTROUTING chain is evaluated for the packet before the step; the first
//!   `MASQUERADE`/`SNAT` reached is the answer.
//! - Replies: the reverse translation is explained by the original direction's rule. A
//!   source translation seen without the step that marked its connection (a reply's journey
//!   holding only the un-SNAT) is replayed with each mark the rules set, and says so.
//!
//! Conditions pktrace cannot check (ipsets, connmark, unknown interfaces, …) are assumed to
//! hold, and the `why` text says so.

mod decide;
mod drop_step;
mod session;

use std::{fmt::Write as _, sync::Arc};

pub use drop_step::DropExplainer;
pub use session::Explainer;
use tracer_common::Tuple;

use crate::{
    journey::{Attribution, Journey, Point, Step},
    rules::{PacketCtx, Rule, Test, eval::Hit},
    util::tuple::src_ip,
};

/// What the table says about one NAT step.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NatDecision {
    /// Chain of the rule that did it, e.g. `KUBE-SEP-6HBOEI5FVFTJNRJ3` or `IP-MASQ-AGENT`.
    pub chain: String,
    /// 1-based position of the rule in `chain`.
    pub rule_index: usize,
    /// `DNAT`, `SNAT` or `MASQUERADE`.
    pub target: String,
    /// Chains entered from the hook, outermost first, ending with `chain`.
    pub path: Vec<String>,
    /// Kubernetes service `namespace/name`, from kube-proxy's comments.
    pub service: Option<String>,
    /// One line for people.
    pub why: String,
    /// The packet mark after the rules on the path (e.g. 0x4000 from KUBE-MARK-MASQ).
    pub mark: u32,
}

impl NatDecision {
    /// As a step's attribution; `reply` marks the reverse translation.
    #[must_use]
    pub fn attribution(&self, reply: bool) -> Attribution {
        let why = if reply {
            format!("reverse of {}", self.why)
        } else {
            self.why.clone()
        };
        Attribution {
            rule: self.chain.clone(),
            service: self.service.clone(),
            why: Some(why),
        }
    }
}

/// Attribution of NAT steps by a nat table (or several, in the kernel's order).
pub trait Attribute {
    /// The `MASQUERADE`/`SNAT` rule nat POSTROUTING applies to `pre` (the packet before
    /// SNAT), or `None` when the packet leaves untranslated.
    fn snat_decision(&self, pre: &Tuple, ctx: &PacketCtx) -> Option<NatDecision>;

    /// Why nat POSTROUTING leaves `pre` untranslated; `None` when it does translate.
    fn no_snat_decision(&self, pre: &Tuple, ctx: &PacketCtx) -> Option<NatDecision>;

    /// The DNAT rule that rewrote `pre` into `post`, with the path that led to it.
    fn dnat_decision(&self, pre: &Tuple, post: &Tuple, ctx: &PacketCtx) -> Option<NatDecision>;

    /// Attributes one NAT step; `None` for tc steps and when no rule explains the rewrite.
    #[must_use]
    #[cfg(test)]
    fn attribute(&self, step: &Step, ctx: &PacketCtx) -> Option<Attribution> {
        self.decide(step, ctx).map(|d| d.attribution(step.reply()))
    }

    /// Attributes every NAT step of a journey (leaving steps no rule explains as they are).
    /// DNAT steps go first: the mark their rules set (KUBE-MARK-MASQ) is carried into the
    /// SNAT evaluation, so `ctx.mark` may be the mark the packet arrived with.
    fn attribute_journey(&self, journey: &mut Journey, ctx: &PacketCtx) {
        let mut snat_ctx = ctx.clone();
        for point in [Point::Dnat, Point::Snat] {
            for step in journey.steps.iter_mut().filter(|s| s.point() == point) {
                let ctx = if point == Point::Dnat { ctx } else { &snat_ctx };
                let Some(decision) = self.decide(step, ctx) else {
                    continue;
                };
                step.attribution = Some(Arc::new(decision.attribution(step.reply())));
                if point == Point::Dnat {
                    snat_ctx.mark = decision.mark;
                }
            }
        }
        self.explain_no_snat(journey, &snat_ctx);
    }

    /// For an original-direction journey that leaves without SNAT: why not, on its last
    /// egress step.
    fn explain_no_snat(&self, journey: &mut Journey, ctx: &PacketCtx) {
        let steps = &journey.steps;
        if steps
            .iter()
            .any(|s| s.point() == Point::Snat || (s.point().is_nat() && s.reply()))
        {
            return;
        }
        let dnat = steps.iter().rfind(|s| s.point() == Point::Dnat);
        let Some(first) = steps.first() else { return };
        let pre = dnat.map_or(first.tuple, |s| s.tuple);
        if dnat.is_none() && !ctx.sources.contains(&src_ip(&first.tuple)) {
            return;
        }
        let Some(egress) = journey
            .steps
            .iter_mut()
            .rfind(|s| s.point() == Point::Egress)
        else {
            return;
        };
        let ctx = PacketCtx {
            out_iface: egress.iface().map(str::to_owned),
            ..ctx.clone()
        };
        if let Some(d) = self.no_snat_decision(&pre, &ctx) {
            egress.attribution = Some(Arc::new(Attribution {
                rule: d.chain,
                service: None,
                why: Some(d.why),
            }));
        }
    }

    /// The mark bits rules of the table set (`MARK --set-xmark`, `meta mark set`), as the
    /// values a packet may carry after them.
    fn marks_set(&self) -> Vec<u32>;

    fn decide(&self, step: &Step, ctx: &PacketCtx) -> Option<NatDecision> {
        let orig = *step.orig()?;
        if !step.reply() {
            return match step.point() {
                Point::Dnat => self.dnat_decision(&orig, &step.tuple, ctx),
                Point::Snat => self.observed_snat(&orig, ctx),
                Point::Ingress | Point::Egress | Point::Drop => None,
            };
        }
        // The reply's translation undoes the original's: rebuild the original direction.
        let ctx = PacketCtx {
            out_iface: None,
            ..ctx.clone()
        };
        match step.point() {
            Point::Dnat => self.dnat_decision(&step.tuple.reversed(), &orig.reversed(), &ctx),
            Point::Snat => self.observed_snat(&step.tuple.reversed(), &ctx),
            Point::Ingress | Point::Egress | Point::Drop => None,
        }
    }

    /// The rule of a source translation the kernel did (a SNAT step, or a reply's
    /// un-SNAT). With the mark the journey gave, else with each mark the rules set: a
    /// journey without the step that marked the connection (a reply whose un-DNAT is in
    /// another journey, an original-direction SNAT seen alone) still did translate, so a
    /// mark-gated MASQUERADE (KUBE-MARK-MASQ → KUBE-POSTROUTING) is the answer, and its
    /// `why` says the mark was assumed.
    fn observed_snat(&self, pre: &Tuple, ctx: &PacketCtx) -> Option<NatDecision> {
        if let Some(d) = self.snat_decision(pre, ctx) {
            return Some(d);
        }
        self.marks_set().into_iter().find_map(|bits| {
            let marked = PacketCtx {
                mark: ctx.mark | bits,
                ..ctx.clone()
            };
            let mut d = self.snat_decision(pre, &marked)?;
            let _ = write!(
                d.why,
                " [assumed: mark {bits:#x} set on the connection's first packet by the \
                 rules that marked it, outside this journey]"
            );
            Some(d)
        })
    }
}

fn decision(hit: &Hit<'_>, service: Option<String>, why: String) -> NatDecision {
    NatDecision {
        chain: hit.chain.to_owned(),
        rule_index: hit.index + 1,
        target: hit.rule.target.name().to_owned(),
        path: hit.path.iter().map(|&c| c.to_owned()).collect(),
        service,
        why,
        mark: hit.mark,
    }
}

/// False when the rule's `-p` excludes `proto`.
fn proto_allows(rule: &Rule, proto: u8) -> bool {
    rule.conds.iter().all(|c| match c.test {
        Test::Proto(p) => (p == 0 || p == proto) != c.negated,
        _ => true,
    })
}

#[cfg(test)]
mod hostile_tests;
#[cfg(test)]
mod ip6_tests;
#[cfg(test)]
mod reply_tests;
#[cfg(test)]
mod seed_tests;
#[cfg(test)]
mod tests;
