//! The join of a drop: the kernel freed a traced packet as dropped. It joins the open journey
//! holding that packet (same fingerprint, the journey's current tuple) and ends it
//! ([`Ending::Dropped`]). A packet dropped just after it left through an edge interface (into
//! a pod, whose own stack dropped it: a closed port) joins the journey that left, while that
//! journey still waits in the queue of completed ones; otherwise the drop is a journey of its
//! own. Which frees are drops, and their names, are the drop names' ([`crate::drops`]); a
//! site record (the kernel's name for a drop location, ahead of that location's first drop)
//! is learnt by them, and names those drops without a kallsyms pass.

use tracer_common::{DropSeen, SiteSeen};

use super::{Correlator, JoinKey, finish, wire_id};
use crate::{
    drops::{Decoded, FailureClass},
    journey::model::{DropStep, Ending, Step, StepKind},
};

/// How many of the newest completed journeys a drop looks through.
const RECENT: usize = 64;

impl Correlator {
    /// The kernel's name for a drop location, which names the drops from it that follow.
    pub(super) fn learn_site(&mut self, site: &SiteSeen) {
        if let (Some(names), Some(name)) = (self.drop_names.as_mut(), site.name()) {
            names.learn(site.location, name);
        }
    }

    pub(super) fn push_drop(&mut self, ev: &DropSeen) {
        let Some(names) = self.drop_names.as_mut() else {
            return;
        };
        let Some(Decoded {
            reason,
            location,
            purged,
        }) = names.decode(ev)
        else {
            return;
        };
        let step = Step {
            kind: StepKind::Drop(DropStep {
                class: FailureClass::of_drop(&reason, &location),
                reason,
                location,
                after_leaving: false,
            }),
            tuple: ev.tuple,
            ktime_ns: ev.ktime_ns,
            wire_id: Some(wire_id(&ev.tuple, ev.fp)),
            attribution: None,
        };
        let key = JoinKey {
            fp: ev.fp,
            proto: ev.tuple.proto,
        };
        if let Some(idx) = self.find(key, &ev.tuple) {
            let id = self.append(key, idx, step, ev.tuple, None);
            let open = self.remove(key, id);
            self.done.push(finish(open, Ending::Dropped));
            return;
        }
        if purged {
            return;
        }
        let recent = self.done.iter_mut().rev().take(RECENT).find(|j| {
            j.ending == Ending::Left
                && j.steps
                    .last()
                    .is_some_and(|s| s.tuple == step.tuple && s.wire_id == step.wire_id)
        });
        if let Some(j) = recent {
            let mut step = step;
            if let StepKind::Drop(d) = &mut step.kind {
                d.after_leaving = true;
            }
            j.steps.push(step);
            j.ending = Ending::Dropped;
            return;
        }
        let steps = self.steps_with(step);
        self.done.push(super::Journey {
            steps,
            ending: Ending::Dropped,
        });
    }
}
