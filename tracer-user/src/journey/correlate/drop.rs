//! The join of a drop: the kernel freed a traced packet as dropped. It joins the open journey
//! holding that packet (same fingerprint, the journey's current tuple) and ends it
//! ([`Ending::Dropped`]). A packet dropped just after it left through an edge interface (into
//! a pod, whose own stack dropped it: a closed port) joins the journey that left, while that
//! journey still waits in the queue of completed ones; otherwise the drop is a journey of its
//! own.

use tracer_common::DropSeen;

use super::{Correlator, JoinKey, finish, ip_id};
use crate::journey::model::{DropStep, Ending, Step, StepKind};

/// How many of the newest completed journeys a drop looks through.
const RECENT: usize = 64;

impl Correlator {
    pub(super) fn push_drop(&mut self, ev: &DropSeen) {
        let Some(names) = self.drop_names.as_mut() else {
            return;
        };
        if !names.reasons().is_drop(ev.reason) {
            return;
        }
        let step = Step {
            kind: StepKind::Drop(DropStep {
                reason: names.reasons().name(ev.reason),
                location: names.location(ev.location),
            }),
            tuple: ev.tuple,
            ktime_ns: ev.ktime_ns,
            ip_id: ip_id(&ev.tuple, ev.fp),
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
        let recent = self.done.iter_mut().rev().take(RECENT).find(|j| {
            j.ending == Ending::Left
                && j.steps
                    .last()
                    .is_some_and(|s| s.tuple == step.tuple && s.ip_id == step.ip_id)
        });
        if let Some(j) = recent {
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
