//! The explain stage of drop steps: a journey that ended in a drop gets its drop step's
//! `rule`, `why` and `service` from the drop replay ([`crate::drops::why::why`]) over the node's
//! filter-type rules, read at the first drop of the session and again at a later drop when
//! they changed since: the nftables generation moved (asked at most every
//! [`ASK_EVERY`]), or the NAT rules' poller ([`super::Explainer`]) saw a change it detects by
//! content (ipsets, iptables-legacy). The packet's way out (interface, next hop) comes from
//! the node's route towards it.

use std::{
    net::IpAddr,
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use crate::{
    drops::why::{DropFacts, DropRules, Lookup, Routes, lookup, why},
    journey::{Attribution, Ending, Journey, Point, StepKind},
    rules::genid,
    util::tuple::dst_ip,
};

/// How often, at most, a drop asks whether the nftables generation moved.
pub const ASK_EVERY: Duration = Duration::from_millis(50);

/// How the explainer reaches the node (replaced in tests).
#[derive(Clone, Copy)]
struct Node {
    generation: fn() -> Option<u32>,
    load: fn() -> DropRules,
    route: Lookup,
}

impl std::fmt::Debug for Node {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Node")
    }
}

impl Default for Node {
    fn default() -> Self {
        Self {
            generation: genid::current,
            load: DropRules::load,
            route: lookup,
        }
    }
}

/// The rules in use and what they were read at.
#[derive(Debug)]
struct Read {
    rules: DropRules,
    /// The nftables generation just before the read.
    generation: Option<u32>,
    /// The poller's count of changes just before the read.
    changes: u64,
    /// When the generation was last asked.
    asked: Instant,
}

/// Names the drops of the journeys it is given.
#[derive(Debug, Default)]
pub struct DropExplainer {
    /// The node's rules, read at the first drop (most sessions see none).
    read: Option<Read>,
    local_addrs: Vec<IpAddr>,
    /// The NAT rules' poller's count of the changes it saw.
    changes: Option<Arc<AtomicU64>>,
    routes: Routes,
    node: Node,
}

impl DropExplainer {
    #[must_use]
    pub fn new(local_addrs: Vec<IpAddr>) -> Self {
        Self {
            local_addrs,
            ..Self::default()
        }
    }

    /// Re-reads the rules also when the NAT rules' poller counts a change in `changes`
    /// ([`super::Explainer::changes`]).
    #[must_use]
    pub fn watching(mut self, changes: Option<Arc<AtomicU64>>) -> Self {
        self.changes = changes;
        self
    }

    /// Fills the attribution of `j`'s drop step, when it ended in one and the replay has
    /// something to say.
    pub fn explain(&mut self, j: &mut Journey) {
        if j.ending != Ending::Dropped {
            return;
        }
        let in_iface = j.steps.first().and_then(|s| s.iface()).map(str::to_owned);
        let Some(last) = j.steps.last() else {
            return;
        };
        let Some(dropped) = last.dropped() else {
            return;
        };
        let route = self.routes.get(self.node.route, dst_ip(&last.tuple));
        let facts = DropFacts {
            tuple: last.tuple,
            reason: dropped.reason.to_string(),
            location: Some(dropped.location.to_string()).filter(|l| l != "unknown"),
            in_iface,
            out_iface: route.as_ref().map(|r| r.dev.clone()),
            next_hop: route.map(|r| r.next_hop),
            traversal: None,
            local_addrs: self.local_addrs.clone(),
            ct_state: None,
        };
        let Some(answer) = why(self.rules(), &facts) else {
            return;
        };
        if let Some(step) = j.steps.last_mut().filter(|s| s.point() == Point::Drop) {
            if let StepKind::Drop(dropped) = &mut step.kind {
                dropped.class = answer.class;
            }
            step.attribution = Some(Arc::new(Attribution {
                rule: answer.rule.unwrap_or_default(),
                service: answer.service,
                why: Some(answer.why),
            }));
        }
    }

    /// The rules, read now when none were read yet or they changed since.
    fn rules(&mut self) -> &DropRules {
        let changes = self
            .changes
            .as_ref()
            .map_or(0, |c| c.load(Ordering::Relaxed));
        let node = self.node;
        let stale = self.read.as_mut().is_none_or(|read| {
            if read.changes != changes {
                return true;
            }
            if read.asked.elapsed() < ASK_EVERY {
                return false;
            }
            read.asked = Instant::now();
            read.generation.is_some() && (node.generation)() != read.generation
        });
        if stale {
            // The generation before the read: a change during it shows as a new one.
            let generation = (node.generation)();
            self.read = Some(Read {
                rules: (node.load)(),
                generation,
                changes,
                asked: Instant::now(),
            });
        }
        &self.read.as_ref().expect("read above").rules
    }
}

#[cfg(test)]
mod tests;
