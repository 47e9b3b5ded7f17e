//! Rule attribution: which iptables nat rule did each NAT step, and for which Kubernetes
//! service (kube-proxy in iptables mode, ip-masq-agent, anything else in the nat table).
//!
//! - DNAT: the rules whose `--to-destination` covers the rewritten destination are the
//!   candidates; the nat PREROUTING (then OUTPUT) chain is replayed for the packet as it was
//!   before, following the `statistic` branch that leads to a candidate, which yields the path
//!   (`KUBE-SERVICES → KUBE-SVC-… → KUBE-SEP-…`) and the marks set on the way (KUBE-MARK-MASQ).
//! - SNAT: the nat POSTROUTING chain is evaluated for the packet before the step; the first
//!   `MASQUERADE`/`SNAT` reached is the answer.
//! - Replies: the reverse translation is explained by the original direction's rule.
//!
//! Conditions pktrace cannot check (ipsets, connmark, unknown interfaces, …) are assumed to
//! hold, and the `why` text says so.

mod eval;
mod host;
mod rules;

use std::{
    collections::HashSet,
    fmt::Write as _,
    io,
    process::{Command, Stdio},
};

pub use eval::PacketCtx;
use eval::{Hit, Steer, Walk, render_facts};
pub use rules::NatRules;
use rules::{BUILTIN, NatTo, Rule, Target, Test, in_range};
use tracer_common::{PROTO_TCP, PROTO_UDP, Tuple};

use crate::journey::{Attribution, Journey, Point, Step, dst_ip};

/// Commands tried in order for the nat table (nft-based distributions may keep kube-proxy's
/// rules in the legacy backend, or the other way round).
const SAVE_COMMANDS: [&str; 3] = ["iptables-save", "iptables-legacy-save", "iptables-nft-save"];

/// Why the nat table could not be read; the caller reports it once and traces on without
/// attribution.
#[derive(Debug, thiserror::Error)]
pub enum ExplainError {
    /// None of the commands exists.
    #[error(
        "cannot read the nat table: none of {tried} is installed; install iptables to see \
         which rule did each NAT step (tracing goes on without it)"
    )]
    NotInstalled { tried: String },
    /// A command ran and failed.
    #[error(
        "`{command} -t nat` failed ({status}): {stderr}; run as root (CAP_NET_ADMIN) to see \
         which rule did each NAT step (tracing goes on without it)"
    )]
    Failed {
        command: String,
        status: String,
        stderr: String,
    },
    /// A command exists but could not be started.
    #[error("cannot run `{command} -t nat`: {err}; rule attribution is off (tracing goes on)")]
    Spawn { command: String, err: io::Error },
}

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

impl NatRules {
    /// Reads the nat table with `iptables-save -t nat` (then the legacy and nft variants),
    /// taking the first that shows rules.
    ///
    /// # Errors
    /// No variant is installed, or all failed (usually: not root).
    pub fn load() -> Result<Self, ExplainError> {
        Self::load_with(&SAVE_COMMANDS)
    }

    fn load_with(commands: &[&str]) -> Result<Self, ExplainError> {
        let (mut failure, mut empty) = (None, None);
        // In pktrace's container image there is no iptables: then the node's own, if any.
        let local = commands.iter().map(|&c| (c.to_owned(), Command::new(c)));
        let on_host = commands.iter().filter_map(|&c| host::command(c));
        for (command, mut cmd) in local.chain(on_host) {
            let out = match cmd.args(["-t", "nat"]).stdin(Stdio::null()).output() {
                Ok(out) => out,
                Err(err) if err.kind() == io::ErrorKind::NotFound => continue,
                Err(err) => {
                    failure.get_or_insert(ExplainError::Spawn { command, err });
                    continue;
                }
            };
            if !out.status.success() {
                let stderr = String::from_utf8_lossy(&out.stderr);
                let stderr = crate::output::safe(stderr.lines().next().unwrap_or("").trim());
                let status = out.status.to_string();
                failure.get_or_insert(ExplainError::Failed {
                    command,
                    status,
                    stderr,
                });
                continue;
            }
            let rules = Self::parse(&String::from_utf8_lossy(&out.stdout));
            if rules.rule_count() > 0 {
                return Ok(rules);
            }
            empty.get_or_insert(rules);
        }
        let tried = commands.join(", ");
        empty.ok_or_else(|| failure.unwrap_or(ExplainError::NotInstalled { tried }))
    }

    /// Attributes one NAT step; `None` for tc steps and when no rule explains the rewrite.
    #[must_use]
    #[cfg(test)]
    pub fn attribute(&self, step: &Step, ctx: &PacketCtx) -> Option<Attribution> {
        self.decide(step, ctx).map(|d| d.attribution(step.reply))
    }

    /// Attributes every NAT step of a journey (leaving steps no rule explains as they are).
    /// DNAT steps go first: the mark their rules set (KUBE-MARK-MASQ) is carried into the
    /// SNAT evaluation, so `ctx.mark` may be the mark the packet arrived with.
    pub fn attribute_journey(&self, journey: &mut Journey, ctx: &PacketCtx) {
        let mut snat_ctx = ctx.clone();
        for point in [Point::Dnat, Point::Snat] {
            for step in journey.steps.iter_mut().filter(|s| s.point == point) {
                let ctx = if point == Point::Dnat { ctx } else { &snat_ctx };
                let Some(decision) = self.decide(step, ctx) else {
                    continue;
                };
                step.attribution = Some(decision.attribution(step.reply));
                if point == Point::Dnat {
                    snat_ctx.mark = decision.mark;
                }
            }
        }
    }

    fn decide(&self, step: &Step, ctx: &PacketCtx) -> Option<NatDecision> {
        let orig = step.orig?;
        if !step.reply {
            return match step.point {
                Point::Dnat => self.dnat_decision(&orig, &step.tuple, ctx),
                Point::Snat => self.snat_decision(&orig, ctx),
                Point::Ingress | Point::Egress => None,
            };
        }
        // The reply's translation undoes the original's: rebuild the original direction.
        let ctx = PacketCtx {
            out_iface: None,
            ..ctx.clone()
        };
        match step.point {
            Point::Dnat => self.dnat_decision(&step.tuple.reversed(), &orig.reversed(), &ctx),
            Point::Snat => self.snat_decision(&step.tuple.reversed(), &ctx),
            Point::Ingress | Point::Egress => None,
        }
    }

    /// The `MASQUERADE`/`SNAT` rule nat POSTROUTING applies to `pre` (the packet before
    /// SNAT), or `None` when the packet leaves untranslated (`RETURN`, `ACCEPT`, end of chain).
    #[must_use]
    pub fn snat_decision(&self, pre: &Tuple, ctx: &PacketCtx) -> Option<NatDecision> {
        let hit = Walk::new(self, ctx, *pre, None).run("POSTROUTING")?;
        if !matches!(hit.rule.target, Target::Masquerade | Target::Snat(_)) {
            return None;
        }
        let facts = match (render_facts(&hit.facts), hit.notes.is_empty()) {
            (f, _) if !f.is_empty() => format!(": {f}"),
            (_, true) => ": every packet reaching it".to_owned(),
            (_, false) => String::new(),
        };
        let (target, chain, n) = (hit.rule.target.name(), hit.chain, hit.index + 1);
        let why = format!("{target} by {chain} rule {n}{facts}{}", assumed(&hit.notes));
        Some(decision(&hit, None, why))
    }

    /// The DNAT rule that rewrote `pre` into `post`, found among the rules whose
    /// `--to-destination` covers `post`'s destination, with the path that led to it.
    #[must_use]
    pub fn dnat_decision(&self, pre: &Tuple, post: &Tuple, ctx: &PacketCtx) -> Option<NatDecision> {
        let candidates = self.dnat_candidates(post);
        let first = *candidates.first()?;
        let steer = Steer {
            reaching: self.reaching(&candidates),
            candidates,
        };
        for hook in ["PREROUTING", "OUTPUT"] {
            let Some(hit) = Walk::new(self, ctx, *pre, Some(&steer)).run(hook) else {
                continue;
            };
            if steer.candidates.contains(&(hit.chain, hit.index)) {
                return Some(self.dnat_from_hit(&hit));
            }
        }
        self.dnat_without_replay(first, pre, ctx.mark)
    }

    /// DNAT rules that could have produced `post`'s destination.
    fn dnat_candidates(&self, post: &Tuple) -> Vec<(&str, usize)> {
        let ip = dst_ip(post);
        let covers = |to: &NatTo| match post.proto {
            PROTO_TCP | PROTO_UDP => to.covers(ip, post.dport),
            _ => in_range(ip, to.lo, to.hi),
        };
        let mut out = Vec::new();
        for chain in self.chains() {
            for (i, rule) in chain.rules.iter().enumerate() {
                if matches!(&rule.target, Target::Dnat(Some(to)) if covers(to))
                    && proto_allows(rule, post.proto)
                {
                    out.push((chain.name.as_str(), i));
                }
            }
        }
        out
    }

    /// Chains from which a jump path leads to one of the candidates' chains.
    fn reaching<'a>(&'a self, candidates: &[(&'a str, usize)]) -> HashSet<&'a str> {
        let mut set: HashSet<&str> = candidates.iter().map(|&(c, _)| c).collect();
        loop {
            let before = set.len();
            for chain in self.chains() {
                let jumps_in = chain.rules.iter().any(|r| match &r.target {
                    Target::Jump(n) | Target::Goto(n) => set.contains(n.as_str()),
                    _ => false,
                });
                if jumps_in {
                    set.insert(chain.name.as_str());
                }
            }
            if set.len() == before {
                return set;
            }
        }
    }

    fn dnat_from_hit(&self, hit: &Hit<'_>) -> NatDecision {
        let service = service_of(hit.rule).or_else(|| {
            hit.jumps
                .iter()
                .rev()
                .find_map(|&(c, i)| self.rule_at(c, i).and_then(service_of))
        });
        let mut parts: Vec<String> = Vec::new();
        let via: Vec<&str> = hit
            .path
            .iter()
            .copied()
            .filter(|c| !BUILTIN.contains(c) && *c != "KUBE-SERVICES" && *c != hit.chain)
            .collect();
        match (&service, via.is_empty()) {
            (Some(s), true) => parts.push(format!("service {s}")),
            (Some(s), false) => parts.push(format!("service {s} via {}", via.join(" → "))),
            (None, false) => parts.push(format!("via {}", via.join(" → "))),
            (None, true) => {}
        }
        parts.extend(self.endpoints(hit));
        let dnat_rules = self.chain(hit.chain).map_or(0, |c| {
            c.rules
                .iter()
                .filter(|r| matches!(r.target, Target::Dnat(_)))
                .count()
        });
        let mut why = format!("DNAT by {}", hit.chain);
        if dnat_rules > 1 || BUILTIN.contains(&hit.chain) {
            let _ = write!(why, " rule {}", hit.index + 1);
        }
        if !parts.is_empty() {
            let _ = write!(why, " ({})", parts.join(", "));
        }
        why.push_str(&assumed(&hit.notes));
        decision(hit, service, why)
    }

    /// `1 of 2 endpoints`: the position of the hit's chain among the endpoint chains its
    /// parent (a KUBE-SVC chain) spreads over.
    fn endpoints(&self, hit: &Hit<'_>) -> Option<String> {
        let &(parent, _) = hit.jumps.last()?;
        if BUILTIN.contains(&parent) || parent == "KUBE-SERVICES" {
            return None;
        }
        let is_endpoint = |name: &str| {
            name.starts_with("KUBE-SEP-")
                || self
                    .chain(name)
                    .is_some_and(|c| c.rules.iter().any(|r| matches!(r.target, Target::Dnat(_))))
        };
        let endpoints: Vec<&str> = self
            .chain(parent)?
            .rules
            .iter()
            .filter_map(|r| match &r.target {
                Target::Jump(n) | Target::Goto(n) if is_endpoint(n) => Some(n.as_str()),
                _ => None,
            })
            .collect();
        let k = endpoints.iter().position(|&e| e == hit.chain)? + 1;
        Some(if endpoints.len() == 1 {
            "its only endpoint".into()
        } else {
            format!("{k} of {} endpoints", endpoints.len())
        })
    }

    /// When the replay did not reach a candidate (rules changed, or conditions pktrace cannot
    /// see): the first candidate, with the jumps that lead to it found backwards.
    fn dnat_without_replay(
        &self,
        (chain, index): (&str, usize),
        pre: &Tuple,
        mark: u32,
    ) -> Option<NatDecision> {
        let rule = self.rule_at(chain, index)?;
        let mut jumps: Vec<(&str, usize)> = Vec::new();
        let mut current = chain;
        while jumps.len() < 8 && !BUILTIN.contains(&current) {
            let Some(parent) = self.parent_of(current, pre, &jumps) else {
                break;
            };
            jumps.insert(0, parent);
            current = parent.0;
        }
        let mut path: Vec<&str> = jumps.iter().map(|&(c, _)| c).collect();
        path.push(chain);
        let notes = vec!["path found backwards, not replayed".to_owned()];
        let hit = Hit {
            chain,
            index,
            rule,
            path,
            jumps,
            facts: Vec::new(),
            notes,
            mark,
        };
        Some(self.dnat_from_hit(&hit))
    }

    /// A rule jumping to `chain` whose destination tests (if any) admit `pre`.
    fn parent_of<'a>(
        &'a self,
        chain: &str,
        pre: &Tuple,
        seen: &[(&str, usize)],
    ) -> Option<(&'a str, usize)> {
        let dst = dst_ip(pre);
        let admits = |r: &Rule| {
            r.conds
                .iter()
                .all(|c| !matches!(&c.test, Test::Dst(n) if n.contains(dst) == c.negated))
        };
        self.chains().find_map(|c| {
            let name = c.name.as_str();
            if name == chain || seen.iter().any(|&(s, _)| s == name) {
                return None;
            }
            let i = c.rules.iter().position(|r| {
                matches!(&r.target, Target::Jump(n) | Target::Goto(n) if n == chain) && admits(r)
            })?;
            Some((name, i))
        })
    }

    fn rule_at(&self, chain: &str, index: usize) -> Option<&Rule> {
        self.chain(chain)?.rules.get(index)
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

/// Different unchecked conditions a `why` line lists before "… and N more".
const NOTES_SHOWN: usize = 8;

/// ` [assumed: …]` for conditions that were not checked, or nothing. Linear in the notes: a
/// hostile dump can make a walk collect one per rule it passes (issue 6).
fn assumed(notes: &[String]) -> String {
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

/// False when the rule's `-p` excludes `proto`.
fn proto_allows(rule: &Rule, proto: u8) -> bool {
    rule.conds.iter().all(|c| match c.test {
        Test::Proto(p) => (p == 0 || p == proto) != c.negated,
        _ => true,
    })
}

/// `default/whereami` from kube-proxy comments such as `default/whereami:`,
/// `kube-system/kube-dns:dns cluster IP` or `default/whereami: loadbalancer IP`.
fn service_of(rule: &Rule) -> Option<String> {
    let word = rule.comment.as_deref()?.split_whitespace().next()?;
    let name = word.split(':').next()?;
    let (ns, svc) = name.split_once('/')?;
    let valid = |s: &str| {
        !s.is_empty()
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.')
    };
    (valid(ns) && valid(svc)).then(|| name.to_owned())
}

#[cfg(test)]
mod hostile_tests;
#[cfg(test)]
mod tests;
