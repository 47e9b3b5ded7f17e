//! The decisions of one nat table: which rule DNATed or SNATed a packet, or why none did; and
//! of the node's tables ([`Ruleset`]), asked in the kernel's order.

use std::{collections::HashSet, fmt::Write as _};

use tracer_common::{PROTO_TCP, PROTO_UDP, Tuple};

use super::{Attribute, NatDecision, decision, proto_allows};
use crate::{
    rules::{
        BUILTIN, Hook, NatRules, NatTo, PacketCtx, Rule, Ruleset, Target, Test,
        eval::{Hit, Miss, Steer, Walk, assumed, cidr_label, render_facts},
        in_range,
        nft::service_of_chain,
        service_of,
    },
    util::tuple::dst_ip,
};

impl Attribute for NatRules {
    fn snat_decision(&self, pre: &Tuple, ctx: &PacketCtx) -> Option<NatDecision> {
        Self::snat_decision(self, pre, ctx)
    }

    fn no_snat_decision(&self, pre: &Tuple, ctx: &PacketCtx) -> Option<NatDecision> {
        Self::no_snat_decision(self, pre, ctx)
    }

    fn dnat_decision(&self, pre: &Tuple, post: &Tuple, ctx: &PacketCtx) -> Option<NatDecision> {
        Self::dnat_decision(self, pre, post, ctx)
    }

    fn marks_set(&self) -> Vec<u32> {
        let mut marks: Vec<u32> = self
            .chains()
            .flat_map(|c| &c.rules)
            .filter_map(|r| match r.target {
                // Bits the rule turns on whatever the packet carried (clear, then set).
                Target::Mark { clear, xor } if clear & xor != 0 => Some(clear & xor),
                _ => None,
            })
            .collect();
        marks.sort_unstable();
        marks.dedup();
        marks
    }
}

impl NatRules {
    /// Every postrouting base chain in priority order, the mark carried along: the first
    /// NAT rule reached, or why none was (the misses merged).
    #[expect(clippy::result_large_err, reason = "one per decision, moved once")]
    pub(super) fn postrouting<'a>(
        &'a self,
        pre: &Tuple,
        ctx: &'a PacketCtx,
    ) -> Result<Hit<'a>, Miss<'a>> {
        let mut merged = Miss {
            mark: ctx.mark,
            ..Miss::default()
        };
        for (_, base) in self.bases_of(Hook::Postrouting) {
            let walk = Walk::new(self, ctx, *pre, None).with_mark(merged.mark);
            let miss = match walk.verdict(base) {
                Ok(hit) => return Ok(hit),
                Err(miss) => miss,
            };
            merged.returned = miss.returned.or(merged.returned);
            merged.skipped.extend(miss.skipped);
            merged.stopped = miss.stopped.or(merged.stopped);
            merged.notes.extend(miss.notes);
            merged.mark = miss.mark;
        }
        Err(merged)
    }

    /// The `MASQUERADE`/`SNAT` rule nat POSTROUTING applies to `pre` (the packet before
    /// SNAT), or `None` when the packet leaves untranslated (`RETURN`, `ACCEPT`, end of chain).
    #[must_use]
    pub fn snat_decision(&self, pre: &Tuple, ctx: &PacketCtx) -> Option<NatDecision> {
        let hit = self.postrouting(pre, ctx).ok()?;
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

    /// Why nat POSTROUTING leaves `pre` untranslated: the `RETURN` taken (ip-masq-agent's
    /// nonMasqueradeCIDRs, …) and the NAT rules passed over for a telling reason (no
    /// KUBE-MARK-MASQ mark, an ipset, a destination prefix). `None` when it does translate.
    #[must_use]
    pub fn no_snat_decision(&self, pre: &Tuple, ctx: &PacketCtx) -> Option<NatDecision> {
        let miss = self.postrouting(pre, ctx).err()?;
        let probe = Walk::new(self, ctx, *pre, None);
        let mut parts = Vec::new();
        let mut rule = None;
        if let Some((chain, index, facts)) = &miss.returned {
            let facts = render_facts(facts);
            let facts = if facts.is_empty() {
                String::new()
            } else {
                format!(": {facts}")
            };
            parts.push(format!("RETURN by {chain} rule {}{facts}", index + 1));
            rule = Some((*chain, *index, "RETURN"));
        }
        let telling = miss
            .skipped
            .iter()
            .filter_map(|&(chain, index, r, failed)| {
                let failed = failed?;
                let tells = matches!(
                    failed.test,
                    Test::Mark { .. } | Test::Set(_) | Test::Dst(_) | Test::Range { dst: true, .. }
                );
                let fact = probe.fact(failed, cidr_label(r))?;
                tells.then(|| (chain, index, r, render_facts(&[fact])))
            });
        for (chain, index, r, fact) in telling.take(3) {
            let target = r.target.name();
            parts.push(format!(
                "{target} by {chain} rule {} passed over: {fact}",
                index + 1
            ));
            rule.get_or_insert((chain, index, "none"));
        }
        if let Some((chain, index)) = miss.stopped {
            parts.push(format!("nat table left at {chain} rule {}", index + 1));
            rule.get_or_insert((chain, index, "none"));
        }
        let (chain, index, target) = rule.unwrap_or(("POSTROUTING", 0, "none"));
        if parts.is_empty() {
            parts.push("no nat POSTROUTING rule applies".into());
        }
        Some(NatDecision {
            chain: chain.to_owned(),
            rule_index: index + 1,
            target: target.to_owned(),
            path: Vec::new(),
            service: None,
            why: format!("no SNAT: {}{}", parts.join("; "), assumed(&miss.notes)),
            mark: miss.mark,
        })
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
        let mut hooks = self.bases_of(Hook::Prerouting);
        hooks.extend(self.bases_of(Hook::Output));
        for (_, hook) in hooks {
            let Some(hit) = Walk::new(self, ctx, *pre, Some(&steer)).run(hook) else {
                continue;
            };
            if steer.candidates.contains(&(hit.chain, hit.index)) {
                return Some(self.dnat_from_hit(&hit, ctx.mark));
            }
        }
        self.dnat_without_replay(first, pre, ctx.mark)
    }

    /// DNAT rules that could have produced `post`'s destination, in dump order.
    fn dnat_candidates(&self, post: &Tuple) -> Vec<(&str, usize)> {
        let ip = dst_ip(post);
        let covers = |to: &NatTo| match post.proto {
            PROTO_TCP | PROTO_UDP => to.covers(ip, post.dport),
            _ => in_range(ip, to.lo, to.hi),
        };
        let index = self.index();
        let exact = index.dnat_by_ip.get(&ip).map_or(&[][..], Vec::as_slice);
        let mut found: Vec<(usize, usize)> = exact
            .iter()
            .chain(&index.dnat_ranged)
            .copied()
            .filter(|&(ci, ri)| {
                self.chain_at(ci)
                    .and_then(|c| c.rules.get(ri))
                    .is_some_and(|rule| {
                        matches!(&rule.target, Target::Dnat(Some(to)) if covers(to))
                            && proto_allows(rule, post.proto)
                    })
            })
            .collect();
        found.sort_unstable();
        found.dedup();
        found
            .into_iter()
            .filter_map(|(ci, ri)| self.chain_at(ci).map(|c| (c.name.as_str(), ri)))
            .collect()
    }

    /// Chains from which a jump path leads to one of the candidates' chains.
    fn reaching<'a>(&'a self, candidates: &[(&'a str, usize)]) -> HashSet<&'a str> {
        let index = self.index();
        let mut set: HashSet<&str> = candidates.iter().map(|&(c, _)| c).collect();
        let mut todo: Vec<&str> = set.iter().copied().collect();
        while let Some(name) = todo.pop() {
            for &ci in index.parents.get(name).map_or(&[][..], Vec::as_slice) {
                if let Some(parent) = self.chain_at(ci)
                    && set.insert(parent.name.as_str())
                {
                    todo.push(parent.name.as_str());
                }
            }
        }
        set
    }

    fn dnat_from_hit(&self, hit: &Hit<'_>, entry_mark: u32) -> NatDecision {
        let service = service_of(hit.rule)
            .or_else(|| {
                hit.jumps
                    .iter()
                    .rev()
                    .find_map(|&(c, i)| self.rule_at(c, i).and_then(service_of))
            })
            .or_else(|| hit.path.iter().rev().find_map(|c| service_of_chain(c)));
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
        // kube-proxy's externalTrafficPolicy=Local chains (KUBE-XLB before 1.24, KUBE-SVL
        // after): local endpoints only, and no mark for masquerade on the way.
        let local = hit
            .path
            .iter()
            .any(|c| c.starts_with("KUBE-XLB-") || c.starts_with("KUBE-SVL-"));
        if local && hit.mark == entry_mark {
            parts.push(
                "externalTrafficPolicy=Local: not marked for SNAT, client address kept".into(),
            );
        }
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
        Some(self.dnat_from_hit(&hit, mark))
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

impl Attribute for Ruleset {
    fn snat_decision(&self, pre: &Tuple, ctx: &PacketCtx) -> Option<NatDecision> {
        let mut ctx = ctx.clone();
        for table in self.of_family(pre.family) {
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
            .of_family(pre.family)
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
        self.of_family(pre.family)
            .find_map(|t| t.dnat_decision(pre, post, ctx))
    }

    fn marks_set(&self) -> Vec<u32> {
        let mut marks: Vec<u32> = self.tables.iter().flat_map(Attribute::marks_set).collect();
        marks.sort_unstable();
        marks.dedup();
        marks
    }
}
