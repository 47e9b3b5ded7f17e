//! The explain stage of drop steps: a journey that ended in a drop gets its drop step's
//! `rule`, `why` and `service` from the drop replay ([`super::drop::why`]) over the node's
//! filter-type rules, read once at the first drop of the session.

use std::{net::IpAddr, sync::Arc};

use super::drop::{DropFacts, DropRules, why};
use crate::journey::{Attribution, Ending, Journey, Point};

/// Names the drops of the journeys it is given.
#[derive(Debug, Default)]
pub struct DropExplainer {
    /// The node's rules, read at the first drop (most sessions see none).
    rules: Option<DropRules>,
    local_addrs: Vec<IpAddr>,
}

impl DropExplainer {
    #[must_use]
    pub const fn new(local_addrs: Vec<IpAddr>) -> Self {
        Self {
            rules: None,
            local_addrs,
        }
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
        let facts = DropFacts {
            tuple: last.tuple,
            reason: dropped.reason.to_string(),
            location: Some(dropped.location.to_string()).filter(|l| l != "unknown"),
            in_iface,
            out_iface: None,
            traversal: None,
            local_addrs: self.local_addrs.clone(),
            ct_state: None,
        };
        let rules = self.rules.get_or_insert_with(DropRules::load);
        let Some(answer) = why(rules, &facts) else {
            return;
        };
        if let Some(step) = j.steps.last_mut().filter(|s| s.point() == Point::Drop) {
            step.attribution = Some(Arc::new(Attribution {
                rule: answer.rule.unwrap_or_default(),
                service: answer.service,
                why: Some(answer.why),
            }));
        }
    }
}
