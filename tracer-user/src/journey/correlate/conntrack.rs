//! The join with `--nat-hook conntrack`: no NAT events come from the kernel, so the NAT steps
//! of a journey are put in from the mappings conntrack reported ([`NatTable`]).
//!
//! A tc event whose packet no open journey holds is looked up in the table: when it is a
//! packet NAT made (the `i`-th tuple of a connection's chain), the journey holding an earlier
//! packet of that chain (nearest first), with the same fingerprint, gets the NAT steps in
//! between (`latency_ns` none: conntrack does not time them), then the tc step. Their time is
//! the tc event's: the rewrite happened between the two hops, conntrack does not say when.
//! A journey that ends (idle or on exit) holding a packet NAT would still rewrite gets the
//! remaining steps ([`complete_nat`]): conntrack reports an entry once its first packet went
//! through every NAT hook, and every packet of the connection goes through the same ones.
//! A packet NAT made that no journey holds an earlier form of starts its journey with the NAT
//! steps that made it (its earlier hops were not seen: the kernel follows a translated flow
//! only once user space has read conntrack's report, see the README).

use tracer_common::{TcSeen, Tuple};

use super::{Correlator, JoinKey, Open, wire_id};
use crate::{
    journey::model::{Journey, NatChange, NatPoint, Step, StepKind},
    nat::conntrack::{Chain, NatTable, Translation},
};

impl From<Translation> for NatPoint {
    fn from(t: Translation) -> Self {
        match t {
            Translation::Dnat => Self::Dnat,
            Translation::Snat => Self::Snat,
        }
    }
}

/// The NAT steps that take `chain.tuples[from]` to `chain.tuples[to]`, at `ktime`.
fn steps_between(chain: &Chain, from: usize, to: usize, ktime: u64, ip: Option<u32>) -> Vec<Step> {
    (from..to)
        .map(|i| Step {
            kind: StepKind::Nat(NatChange {
                point: chain.hops[i].translation.into(),
                orig: chain.tuples[i],
                reply: chain.hops[i].reply,
                latency_ns: None,
            }),
            tuple: chain.tuples[i + 1],
            ktime_ns: ktime,
            wire_id: ip,
            attribution: None,
        })
        .collect()
}

/// Appends to a journey that ends the NAT steps its packet had still to go through.
pub(super) fn complete_nat(table: Option<&NatTable>, o: &mut Open) {
    let Some((chain, pos)) = table.and_then(|t| t.place(&o.current)) else {
        return;
    };
    if pos + 1 >= chain.len {
        return;
    }
    let ip = o.steps.last().and_then(|s| s.wire_id);
    o.steps
        .extend(steps_between(&chain, pos, chain.len - 1, o.last_ktime, ip));
    o.current = chain.tuples[chain.len - 1];
}

impl Correlator {
    /// Joins through conntrack's NAT mappings from here on ([`Self::nat_table_mut`] feeds
    /// them).
    pub fn use_conntrack(&mut self) {
        self.nat_table.get_or_insert_with(NatTable::default);
    }

    /// The NAT mappings, when joining through conntrack.
    pub fn nat_table_mut(&mut self) -> Option<&mut NatTable> {
        self.nat_table.as_mut()
    }

    /// The open journey holding an earlier packet of the NAT chain `ev`'s packet belongs to,
    /// with the NAT steps in between appended; its index.
    pub(super) fn find_through_nat(&mut self, key: JoinKey, ev: &TcSeen) -> Option<usize> {
        let (chain, pos) = self.nat_table.as_ref()?.place(&ev.tuple)?;
        let (from, idx) = (0..pos)
            .rev()
            .find_map(|j| Some((j, self.find(key, &chain.tuples[j])?)))?;
        let open = self.open.get_mut(&key)?.get_mut(idx)?;
        for step in steps_between(
            &chain,
            from,
            pos,
            ev.ktime_ns,
            Some(wire_id(&ev.tuple, ev.fp)),
        ) {
            let at = open.steps.partition_point(|s| s.ktime_ns <= step.ktime_ns);
            open.steps.insert(at, step);
        }
        open.current = ev.tuple;
        Some(idx)
    }

    /// The NAT steps that made `ev`'s packet, when it is one NAT made (for a journey that
    /// starts with it).
    pub(super) fn nat_steps_before(&self, ev: &TcSeen) -> Vec<Step> {
        match self.nat_table.as_ref().and_then(|t| t.place(&ev.tuple)) {
            Some((chain, pos)) if pos > 0 => {
                steps_between(&chain, 0, pos, ev.ktime_ns, Some(wire_id(&ev.tuple, ev.fp)))
            }
            _ => Vec::new(),
        }
    }

    /// Starts a journey with `nat` then `step` (a tc step on an edge that leaves ends it).
    pub(super) fn start_after(
        &mut self,
        key: JoinKey,
        nat: Vec<Step>,
        step: Step,
        now: Tuple,
        hop: Option<(u64, u32)>,
        leaving: bool,
    ) {
        if nat.is_empty() {
            if leaving {
                let steps = self.steps_with(step);
                self.done.push(Journey {
                    steps,
                    ending: super::Ending::Left,
                });
            } else {
                self.start(key, step, now, hop);
            }
            return;
        }
        let mut steps = nat;
        steps.push(step);
        if leaving {
            self.done.push(Journey {
                steps,
                ending: super::Ending::Left,
            });
            return;
        }
        let mut rest = steps.into_iter();
        let Some(first) = rest.next() else { return };
        self.start(key, first, now, hop);
        if let Some(open) = self.open.get_mut(&key).and_then(|l| l.last_mut()) {
            open.steps.extend(rest);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use tracer_common::{Fingerprint, Observation, PROTO_TCP, kind};

    use super::*;
    use crate::{
        journey::{
            correlate::{
                HostIf, Limits,
                tests::{take, tc_seen},
            },
            model::{Ending, Point, tuple},
        },
        nat::conntrack::CtEntry,
    };

    const CLIENT: u32 = 10;
    const BACKEND: u32 = 11;

    fn t(src: &str, dst: &str) -> Tuple {
        tuple(PROTO_TCP, src.parse().unwrap(), dst.parse().unwrap())
    }

    /// The lab's LoadBalancer VIP with KUBE-MARK-MASQ, as conntrack reports it.
    fn lb() -> CtEntry {
        CtEntry {
            orig: t("10.13.76.46:41234", "203.0.113.251:80"),
            reply: t("10.13.76.26:80", "10.13.76.4:5000"),
        }
    }

    fn correlator() -> Correlator {
        let ifaces: HashMap<u32, HostIf> =
            [(CLIENT, "azv47c3ee9d512"), (BACKEND, "azva4124965a9b")]
                .into_iter()
                .map(|(i, n)| {
                    (
                        i,
                        HostIf {
                            name: n.into(),
                            edge: true,
                        },
                    )
                })
                .collect();
        let mut c = Correlator::new(ifaces, Limits::default());
        c.use_conntrack();
        c.nat_table_mut().unwrap().insert(lb());
        c
    }

    fn tc(k: u8, ifindex: u32, tuple: Tuple, n: u32, at: u64) -> Observation {
        let fp = Fingerprint {
            ip_id: n,
            a: n,
            b: 0,
            c: 0,
        };
        Observation::Tc(tc_seen(k, ifindex, tuple, fp, at))
    }

    fn shape(j: &Journey) -> Vec<(Point, bool, Option<u64>)> {
        j.steps
            .iter()
            .map(|s| (s.point(), s.reply(), s.latency_ns()))
            .collect()
    }

    #[test]
    fn nat_steps_come_from_conntrack_between_the_tc_hops_untimed() {
        use Point::{Dnat, Egress, Ingress, Snat};
        let (e, mut c) = (lb(), correlator());
        c.push(&tc(kind::TC_INGRESS, CLIENT, e.orig, 1, 100));
        c.push(&tc(kind::TC_EGRESS, BACKEND, e.reply.reversed(), 1, 200));
        c.push(&tc(kind::TC_INGRESS, BACKEND, e.reply, 2, 300));
        c.push(&tc(kind::TC_EGRESS, CLIENT, e.orig.reversed(), 2, 400));
        let done = take(&mut c);
        let [out, back] = &done[..] else {
            panic!("{done:#?}")
        };
        assert_eq!(
            shape(out),
            [
                (Ingress, false, None),
                (Dnat, false, None),
                (Snat, false, None),
                (Egress, false, None)
            ]
        );
        assert_eq!(out.steps[1].orig(), Some(&e.orig));
        assert_eq!(out.steps[2].tuple, e.reply.reversed());
        assert_eq!(
            out.steps[1].ktime_ns, 200,
            "the rewrite is dated by the next hop"
        );
        assert_eq!(
            shape(back),
            [
                (Ingress, false, None),
                (Snat, true, None),
                (Dnat, true, None),
                (Egress, false, None)
            ]
        );
        assert_eq!(back.steps[2].tuple, e.orig.reversed());
    }

    use Point::{Dnat, Egress, Ingress, Snat};
    #[test]
    fn packets_seen_only_on_one_side_of_the_nat_still_get_its_steps() {
        let (e, mut c) = (lb(), correlator());
        // A first packet whose translated form the kernel did not follow yet: completed on exit.
        c.push(&tc(kind::TC_INGRESS, CLIENT, e.orig, 3, 100));
        // A reply seen only once un-NATed: starts with the NAT steps that made it.
        c.push(&tc(kind::TC_EGRESS, CLIENT, e.orig.reversed(), 4, 150));
        c.flush();
        let done = take(&mut c);
        // Handed out by their first step's time: the first packet's (100) before the reply's.
        let [first, reply] = &done[..] else {
            panic!("{done:#?}")
        };
        assert_eq!(
            shape(reply),
            [
                (Snat, true, None),
                (Dnat, true, None),
                (Egress, false, None)
            ]
        );
        assert_eq!(reply.steps[0].orig(), Some(&e.reply));
        assert_eq!(first.ending, Ending::Flushed);
        assert_eq!(
            shape(first),
            [
                (Ingress, false, None),
                (Dnat, false, None),
                (Snat, false, None)
            ]
        );
        // Another fingerprint never joins: a packet of the same flow is its own journey.
        c.push(&tc(kind::TC_INGRESS, CLIENT, e.orig, 5, 500));
        c.push(&tc(kind::TC_EGRESS, BACKEND, e.reply.reversed(), 6, 600));
        let done = take(&mut c);
        assert_eq!(done.len(), 1);
        assert_eq!(done[0].steps[0].point(), Dnat, "{done:#?}");
    }
}
