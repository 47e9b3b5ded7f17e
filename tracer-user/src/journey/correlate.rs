//! Joins kernel events into journeys.
//!
//! tc programs cannot see the kernel's skb address, so events are joined by a fingerprint that
//! NAT does not change (IP id plus TCP seq/ack/flags, ICMP sequence or UDP length and leading
//! payload, see `tracer_common::parse`), constrained by the NAT mapping: an event joins an open
//! journey with the same fingerprint only when the packet it saw is the packet that journey
//! currently holds (a tc event's tuple, or a NAT event's tuple *before* the rewrite). Two flows
//! never share a tuple, so concurrency cannot merge journeys; an ingress on an edge interface
//! (pod veth or uplink) always starts a new journey and an egress on one ends it, so
//! retransmits and reused skbs cannot either.

use std::{
    collections::{HashMap, VecDeque},
    rc::Rc,
};

use foldhash::fast::RandomState;
use tracer_common::{FAMILY_IPV4, Fingerprint, NatSeen, Observation, TcHook, TcSeen, Tuple, flag};

use self::conntrack::complete_nat;
use super::model::{Ending, Journey, NatChange, NatPoint, PacketKind, Step, StepKind};
pub use crate::interfaces::roles::HostIf;
use crate::{drops::DropNames, nat::conntrack::NatTable};

/// Limits of the join table. Past either, the oldest open journeys are closed early (as
/// [`Ending::TimedOut`], counted in [`Correlator::evicted`]).
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// A journey with no event for this long is closed as timed out.
    pub idle_timeout_ns: u64,
    /// Most journeys kept open at once.
    pub max_open: usize,
    /// Most bytes the open journeys may hold, as [`budget::journey_bytes`] counts them (their
    /// steps, their slots, the map's and the eviction order's room for them).
    pub max_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            idle_timeout_ns: 1_000_000_000,
            max_open: 65_536,
            max_bytes: budget::DEFAULT_BYTES,
        }
    }
}

/// Most step lists and join-table slots kept for reuse (a burst's worth; the rest are freed).
const SPARE: usize = 1024;
/// Room for the steps of a usual journey (pod veth, bridge, NAT, bridge, veth or uplink: 4–6,
/// about 150 bytes each), so that appending seldom reallocates; kept small because up to
/// `Limits::max_open` journeys may be open at once.
const STEPS: usize = 6;

/// An attached interface as the join table keeps it: its name shared by every step on it.
#[derive(Clone, Debug)]
struct Known {
    name: Rc<str>,
    edge: bool,
}

impl From<HostIf> for Known {
    fn from(i: HostIf) -> Self {
        Self {
            name: i.name.into(),
            edge: i.edge,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct JoinKey {
    fp: Fingerprint,
    proto: u8,
}

#[derive(Debug)]
struct Open {
    id: u64,
    /// The packet as the journey's last step left it.
    current: Tuple,
    last_ktime: u64,
    /// The interface of the latest tc step: (its time, ifindex).
    last_if: Option<(u64, u32)>,
    steps: Vec<Step>,
}

/// The join table. Its maps hash with foldhash (seeded per process: the keys come from
/// packets), and the step lists and slots of finished journeys are reused, so that a packet's
/// journey costs no allocation once the table is warm.
#[derive(Debug)]
pub struct Correlator {
    ifaces: HashMap<u32, Known, RandomState>,
    open: HashMap<JoinKey, Vec<Open>, RandomState>,
    /// Empty slot lists of keys that closed, for keys that open.
    spare_slots: Vec<Vec<Open>>,
    /// Empty step lists of journeys that were handed out ([`Self::drain_done`]).
    spare_steps: Vec<Vec<Step>>,
    /// Completed journeys not yet handed out ([`Self::drain_done`]), oldest first.
    done: Vec<Journey>,
    /// Open journeys in creation order, for eviction: (id, key).
    order: VecDeque<(u64, JoinKey)>,
    open_count: usize,
    next_id: u64,
    limits: Limits,
    evicted: u64,
    /// What the open journeys hold, as [`budget::journey_bytes`] counts it.
    bytes: usize,
    /// With `--nat-hook conntrack`: the NAT mappings conntrack reported, which put the NAT
    /// steps into journeys (no NAT events come from the kernel then; see [`conntrack`]).
    nat_table: Option<NatTable>,
    /// Names for drops; without them drop observations are ignored ([`crate::drops`]).
    drop_names: Option<DropNames>,
}

impl Correlator {
    #[must_use]
    pub fn new(ifaces: HashMap<u32, HostIf>, limits: Limits) -> Self {
        Self {
            ifaces: ifaces.into_iter().map(|(i, h)| (i, h.into())).collect(),
            open: HashMap::default(),
            spare_slots: Vec::new(),
            spare_steps: Vec::new(),
            done: Vec::new(),
            order: VecDeque::new(),
            open_count: 0,
            next_id: 0,
            limits,
            evicted: 0,
            bytes: 0,
            nat_table: None,
            drop_names: None,
        }
    }

    /// Joins drops from now on, naming them with `names`.
    pub fn set_drop_names(&mut self, names: DropNames) {
        self.drop_names = Some(names);
    }

    /// Journeys closed early because the table was full.
    #[must_use]
    pub const fn evicted(&self) -> u64 {
        self.evicted
    }

    /// What the open journeys hold, in bytes as [`budget::journey_bytes`] counts it.
    #[cfg(test)]
    #[must_use]
    pub const fn open_bytes(&self) -> usize {
        self.bytes
    }

    /// Journeys currently open.
    #[cfg(test)]
    #[must_use]
    pub const fn open_count(&self) -> usize {
        self.open_count
    }

    /// True when completed journeys wait in the queue ([`Self::drain_done`]).
    #[must_use]
    pub fn has_done(&self) -> bool {
        !self.done.is_empty()
    }

    /// Hands each completed journey to `f`, oldest first (by its first step's time: another
    /// CPU's records may come a batch later than this CPU's, so the order they were completed
    /// in is not the order they began), then takes its step list back for a later journey. Stops calling `f` at its first error, which it returns; the journeys
    /// left are dropped all the same (the queue is empty after the call).
    ///
    /// # Errors
    /// The first error of `f`.
    pub fn drain_done<E>(
        &mut self,
        mut f: impl FnMut(&mut Journey) -> Result<(), E>,
    ) -> Result<(), E> {
        let mut done = std::mem::take(&mut self.done);
        // Stable, and adaptive: the queue is mostly in order already.
        done.sort_by_key(|j| j.steps.first().map_or(0, |s| s.ktime_ns));
        let mut result = Ok(());
        for mut j in done.drain(..) {
            if result.is_ok() {
                result = f(&mut j);
            }
            self.recycle(std::mem::take(&mut j.steps));
        }
        // The emptied queue keeps its room for the next batch.
        self.done = done;
        result
    }

    /// Takes back the steps of a journey that was handed out, for a later journey.
    fn recycle(&mut self, mut steps: Vec<Step>) {
        if self.spare_steps.len() < SPARE && (STEPS..=2 * STEPS).contains(&steps.capacity()) {
            steps.clear();
            self.spare_steps.push(steps);
        }
    }

    /// A step list with `first` in it, reused when one is spare.
    fn steps_with(&mut self, first: Step) -> Vec<Step> {
        let mut steps = self
            .spare_steps
            .pop()
            .unwrap_or_else(|| Vec::with_capacity(STEPS));
        steps.push(first);
        steps
    }

    /// Takes one observation; the journeys it completes (and any it evicts) join the queue of
    /// completed journeys ([`Self::drain_done`]).
    pub fn push(&mut self, obs: &Observation) {
        match obs {
            Observation::Tc(tc) => self.push_tc(tc),
            Observation::Nat(nat) => self.push_nat(nat),
            Observation::Drop(d) => self.push_drop(d),
            Observation::Site(s) => self.learn_site(s),
        }
    }

    fn push_tc(&mut self, ev: &TcSeen) {
        let key = JoinKey {
            fp: ev.fp,
            proto: ev.tuple.proto,
        };
        let ingress = ev.hook == TcHook::Ingress;
        let (name, edge) = self.iface(ev.ifindex);
        let step = Step {
            kind: StepKind::Tc {
                hook: ev.hook,
                iface: Some(name),
                time_bound: ev.flags & flag::TC_CLAIMED != 0,
                packet: PacketKind::of(ev.tuple.proto, &ev.fp),
            },
            tuple: ev.tuple,
            ktime_ns: ev.ktime_ns,
            wire_id: Some(wire_id(&ev.tuple, ev.fp)),
            attribution: None,
        };
        let hop = Some((ev.ktime_ns, ev.ifindex));
        let entering = ingress && edge;
        let leaving = !ingress && edge;
        let found = if entering {
            None
        } else {
            self.find(key, &ev.tuple)
                .or_else(|| self.find_through_nat(key, ev))
        };
        if let Some(idx) = found {
            let open = self.append(key, idx, step, ev.tuple, hop);
            if leaving {
                let open = self.remove(key, open);
                self.done.push(finish(open, Ending::Left));
            }
        } else {
            let nat = self.nat_steps_before(ev);
            self.start_after(key, nat, step, ev.tuple, hop, leaving);
        }
    }

    fn push_nat(&mut self, ev: &NatSeen) {
        let key = JoinKey {
            fp: ev.fp,
            proto: ev.after.proto,
        };
        let step = nat_step(ev);
        match self.find(key, &ev.before) {
            Some(idx) => {
                self.append(key, idx, step, ev.after, None);
            }
            None => self.start(key, step, ev.after, None),
        }
    }

    /// The interface's name and whether it is an edge; `if<index>` (an edge) when unknown.
    fn iface(&self, ifindex: u32) -> (Rc<str>, bool) {
        match self.ifaces.get(&ifindex) {
            Some(k) => (Rc::clone(&k.name), k.edge),
            None => (format!("if{ifindex}").into(), true),
        }
    }

    /// The open journey with this key whose packet currently is `tuple` (the newest first).
    fn find(&self, key: JoinKey, tuple: &Tuple) -> Option<usize> {
        self.open
            .get(&key)?
            .iter()
            .rposition(|o| o.current == *tuple)
    }

    /// Appends a step in time order; returns the journey's id.
    fn append(
        &mut self,
        key: JoinKey,
        idx: usize,
        step: Step,
        now: Tuple,
        hop: Option<(u64, u32)>,
    ) -> u64 {
        let Some(open) = self.open.get_mut(&key).and_then(|v| v.get_mut(idx)) else {
            return u64::MAX;
        };
        open.current = now;
        open.last_ktime = open.last_ktime.max(step.ktime_ns);
        if hop.is_some_and(|(t, _)| open.last_if.is_none_or(|(last, _)| t >= last)) {
            open.last_if = hop;
        }
        let at = open.steps.partition_point(|s| s.ktime_ns <= step.ktime_ns);
        let room = open.steps.capacity();
        open.steps.insert(at, step);
        let (id, grown) = (open.id, open.steps.capacity() - room);
        self.bytes += grown * size_of::<Step>();
        id
    }

    fn start(&mut self, key: JoinKey, step: Step, now: Tuple, hop: Option<(u64, u32)>) {
        self.make_room();
        let id = self.next_id;
        self.next_id += 1;
        let open = Open {
            id,
            current: now,
            last_ktime: step.ktime_ns,
            last_if: hop,
            steps: self.steps_with(step),
        };
        self.bytes += budget::journey_bytes(open.steps.capacity());
        let spare = &mut self.spare_slots;
        self.open
            .entry(key)
            // why: most keys hold one journey; `push` on an empty list makes room for four.
            .or_insert_with(|| spare.pop().unwrap_or_else(|| Vec::with_capacity(1)))
            .push(open);
        self.order.push_back((id, key));
        self.open_count += 1;
    }

    fn remove(&mut self, key: JoinKey, id: u64) -> Option<Open> {
        let list = self.open.get_mut(&key)?;
        let pos = list.iter().position(|o| o.id == id)?;
        let open = list.remove(pos);
        if list.is_empty()
            && let Some(list) = self.open.remove(&key)
            && self.spare_slots.len() < SPARE
            && list.capacity() <= 4
        {
            self.spare_slots.push(list);
        }
        self.open_count -= 1;
        self.bytes -= budget::journey_bytes(open.steps.capacity());
        Some(open)
    }

    /// Names (or renames) an attached interface.
    pub fn set_iface(&mut self, ifindex: u32, iface: HostIf) {
        self.ifaces.insert(ifindex, iface.into());
    }

    /// An interface vanished: closes the open journeys whose latest hop was on it (as
    /// [`Ending::InterfaceGone`], into the queue of completed journeys) and forgets its name. Feed the events already collected
    /// first, so that a journey that moved on is not closed.
    pub fn interface_gone(&mut self, ifindex: u32) {
        let (mut closed, mut freed) = (0, 0);
        let done = &mut self.done;
        self.open.retain(|_, list| {
            list.retain_mut(|o| {
                if o.last_if.is_none_or(|(_, i)| i != ifindex) {
                    return true;
                }
                freed += budget::journey_bytes(o.steps.capacity());
                done.push(finish(
                    Some(std::mem::replace(o, empty_open())),
                    Ending::InterfaceGone,
                ));
                closed += 1;
                false
            });
            !list.is_empty()
        });
        self.open_count -= closed;
        self.bytes -= freed;
        self.ifaces.remove(&ifindex);
    }

    /// Closes journeys idle since before `now_ktime - idle_timeout`.
    pub fn expire(&mut self, now_ktime: u64) {
        let deadline = now_ktime.saturating_sub(self.limits.idle_timeout_ns);
        let (mut closed, mut freed) = (0, 0);
        let table = self.nat_table.as_ref();
        let done = &mut self.done;
        self.open.retain(|_, list| {
            list.retain_mut(|o| {
                if o.last_ktime >= deadline {
                    return true;
                }
                freed += budget::journey_bytes(o.steps.capacity());
                complete_nat(table, o);
                done.push(finish(
                    Some(std::mem::replace(o, empty_open())),
                    Ending::TimedOut,
                ));
                closed += 1;
                false
            });
            !list.is_empty()
        });
        self.open_count -= closed;
        self.bytes -= freed;
        // Journeys that left normally stay in `order` until here; drop them.
        if closed > 0 || self.order.len() > 2 * self.open_count + SPARE {
            self.compact_order();
        }
    }

    /// Closes every open journey (on exit).
    pub fn flush(&mut self) {
        let mut all: Vec<Open> = self.open.drain().flat_map(|(_, v)| v).collect();
        all.sort_by_key(|o| o.id);
        for o in &mut all {
            complete_nat(self.nat_table.as_ref(), o);
        }
        self.done
            .extend(all.into_iter().map(|o| finish(Some(o), Ending::Flushed)));
        self.order.clear();
        self.open_count = 0;
        self.bytes = 0;
    }
}

fn empty_open() -> Open {
    Open {
        id: u64::MAX,
        current: Tuple::default(),
        last_ktime: 0,
        last_if: None,
        steps: Vec::new(),
    }
}

fn finish(open: Option<Open>, ending: Ending) -> Journey {
    Journey {
        steps: open.map(|o| o.steps).unwrap_or_default(),
        ending,
    }
}

/// Turns a NAT observation into a step. The hook tells the manipulation
/// ([`NatSeen::manips_dst`]); the conntrack direction tells whether it is a rule's translation
/// or the reverse translation of a reply.
fn nat_step(ev: &NatSeen) -> Step {
    let reply = ev.is_reply();
    let point = if ev.manips_dst() == reply {
        NatPoint::Snat
    } else {
        NatPoint::Dnat
    };
    Step {
        kind: StepKind::Nat(NatChange {
            point,
            orig: ev.before,
            reply,
            latency_ns: ev.latency_ns(),
        }),
        tuple: ev.after,
        ktime_ns: ev.ktime_ns,
        wire_id: Some(wire_id(&ev.after, ev.fp)),
        attribution: None,
    }
}

/// The packet's identity on the wire ([`Step::wire_id`]): IPv4 its identification field (the
/// fingerprint's `ip_id`); IPv6, whose fingerprint holds the flow label there, the digest of
/// the whole fingerprint.
fn wire_id(tuple: &Tuple, fp: Fingerprint) -> u32 {
    if tuple.family == FAMILY_IPV4 {
        fp.ip_id
    } else {
        fp.wire_hash()
    }
}

pub mod budget;
mod conntrack;
mod drop;
#[cfg(test)]
mod drop_tests;
#[cfg(test)]
mod tests;
