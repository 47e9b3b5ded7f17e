//! Connections that got no answer: a connection's first packet (a TCP SYN, a UDP datagram, an
//! ICMP echo request) whose journey left the node, and no packet of the connection came back
//! within [`WAIT_NS`].
//!
//! A connection is known by its first packet's tuple as it left the node, after NAT: a reply
//! comes back to that tuple, so the reply's journey as it entered the node, reversed, is the
//! key (NAT undoes its translation after that; the join table needs no help). A TCP reset or any
//! other packet back answers it, and so does an ICMP error from the destination (matched by
//! addresses: the error's quoted header is not in the fingerprint, so an error answers the
//! connection between those two hosts whose packet went out last, if it is waiting). Answered
//! and reported connections are
//! remembered for [`REMEMBER_NS`], so that a SYN's retransmits or a one-way UDP stream are
//! reported once; an answered UDP or echo flow waits again at its next packet out, so each
//! request of a request/answer exchange is followed.
//!
//! Memory is bounded by construction: the table holds at most its byte capacity (entries and
//! their place in the time queues); past it, the oldest remembered connections are forgotten
//! first, then the oldest waiting ones, which are counted ([`Unanswered::evicted`]). Waiting is
//! measured on the kernel's clock: by the events' times as they are joined, and by the clock
//! read now when the node is quiet ([`Unanswered::tick`]).

use std::{
    collections::{HashMap, VecDeque},
    rc::Rc,
    sync::Arc,
};

use foldhash::fast::RandomState;
use tracer_common::{PROTO_TCP, Tuple};

use super::model::{Attribution, Ending, Journey, PacketKind, Point, Step};

/// How long a connection waits for its answer before it is reported.
pub const WAIT_NS: u64 = 3_000_000_000;
/// How long an answered or reported connection is remembered (a SYN is retransmitted for about
/// two minutes).
pub const REMEMBER_NS: u64 = 120_000_000_000;
/// The table's default capacity.
pub const DEFAULT_BYTES: usize = 4 << 20;

/// A connection whose first packet left the node and got no answer in [`WAIT_NS`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NoAnswer {
    /// The first packet as it entered the node (before NAT).
    pub entered: Tuple,
    /// The first packet as it left the node (after NAT).
    pub left: Tuple,
    /// The interface it left by, when known.
    pub iface: Option<Rc<str>>,
    /// The kernel's monotonic clock when it left.
    pub left_ktime_ns: u64,
    /// The wall clock when it left, nanoseconds since the Unix epoch.
    pub left_unix_ns: i128,
    /// How long it waited before it was reported (at least [`WAIT_NS`]).
    pub waited_ns: u64,
    /// The rule and service of the first packet's NAT, when named (the DNAT's first).
    pub attribution: Option<Arc<Attribution>>,
}

/// What answered a connection that was not a reply of its own protocol.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Refusals {
    /// TCP resets.
    pub reset: u64,
    /// ICMP errors (unreachable, time exceeded…).
    pub icmp_error: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Waiting,
    Answered,
    Reported,
}

#[derive(Debug)]
struct Entry {
    /// Tells this entry's place in the queues from an older one of the same key.
    seq: u64,
    state: State,
    entered: Tuple,
    iface: Option<Rc<str>>,
    left_ktime_ns: u64,
    /// When its latest packet left (a retransmit, the next datagram).
    last_out_ktime_ns: u64,
    attribution: Option<Arc<Attribution>>,
}

/// Bytes an entry costs in the table (key, value, and the hash table's slack at 7/8 load).
const ENTRY_BYTES: usize = (size_of::<Tuple>() + size_of::<Entry>() + 1) * 8 / 7;
/// Bytes a place in a queue costs.
const SLOT_BYTES: usize = size_of::<(Tuple, u64, u64)>();

/// The connections waiting for an answer, and those remembered.
#[derive(Debug)]
pub struct Unanswered {
    table: HashMap<Tuple, Entry, RandomState>,
    /// Waiting connections, oldest first: (key, seq).
    waiting: VecDeque<(Tuple, u64)>,
    /// Answered or reported connections, oldest first: (key, seq, since).
    remembered: VecDeque<(Tuple, u64, u64)>,
    next_seq: u64,
    cap_bytes: usize,
    /// Wall clock minus the kernel's monotonic clock, in nanoseconds.
    wall_offset_ns: i128,
    evicted: u64,
    refusals: Refusals,
    /// Reports due, not yet taken ([`Self::take_due`]).
    due: Vec<NoAnswer>,
}

impl Unanswered {
    /// An empty table of at most `cap_bytes`; `wall_offset_ns` turns the kernel's clock into
    /// the wall clock.
    #[must_use]
    pub fn new(cap_bytes: usize, wall_offset_ns: i128) -> Self {
        Self {
            table: HashMap::default(),
            waiting: VecDeque::new(),
            remembered: VecDeque::new(),
            next_seq: 0,
            cap_bytes,
            wall_offset_ns,
            evicted: 0,
            refusals: Refusals::default(),
            due: Vec::new(),
        }
    }

    /// Waiting connections forgotten because the table was full.
    #[must_use]
    pub const fn evicted(&self) -> u64 {
        self.evicted
    }

    /// Connections answered by a reset or an ICMP error.
    #[must_use]
    pub const fn refusals(&self) -> Refusals {
        self.refusals
    }

    /// Connections waiting for an answer now.
    #[must_use]
    pub fn waiting(&self) -> u64 {
        self.table
            .values()
            .filter(|e| e.state == State::Waiting)
            .count() as u64
    }

    /// Takes the connections found unanswered so far, oldest first.
    pub fn take_due(&mut self) -> Vec<NoAnswer> {
        std::mem::take(&mut self.due)
    }

    /// Takes any journey: one coming back on a waiting connection answers it. Returns true when
    /// the journey belongs to a connection the table knows in the other direction (it is then
    /// no opening of its own).
    pub fn answer(&mut self, j: &Journey) -> bool {
        if self.table.is_empty() {
            return false;
        }
        let Some(kind) = j.steps.iter().find_map(Step::packet_kind) else {
            return false;
        };
        if kind == PacketKind::IcmpError {
            return self.icmp_error(j);
        }
        let Some(first) = j.steps.first() else {
            return false;
        };
        let key = entered(first).reversed();
        let Some(e) = self.table.get_mut(&key) else {
            return false;
        };
        if e.state != State::Waiting {
            return true;
        }
        if kind == PacketKind::Reset {
            self.refusals.reset += 1;
        }
        let at = j.steps.last().map_or(0, |s| s.ktime_ns);
        self.answered(key, at);
        true
    }

    /// Marks the waiting connection `key` answered at `at`: TCP is forgotten (a new SYN of the
    /// same tuple is a new connection), others are remembered.
    fn answered(&mut self, key: Tuple, at: u64) {
        if key.proto == PROTO_TCP {
            self.table.remove(&key);
            return;
        }
        if let Some(e) = self.table.get_mut(&key) {
            e.state = State::Answered;
            self.remembered.push_back((key, e.seq, at));
        }
    }

    /// An ICMP error from the destination of connections of the host it goes to answers the
    /// one whose packet went out last (the one that made the error), when it is waiting.
    fn icmp_error(&mut self, j: &Journey) -> bool {
        let (Some(first), Some(last)) = (j.steps.first(), j.steps.last()) else {
            return false;
        };
        let from = entered(first);
        let (sender, to_node, to_pod) = (from.saddr, from.daddr, last.tuple.daddr);
        let latest = self
            .table
            .iter()
            .filter(|(left, e)| {
                left.family == from.family
                    && (left.daddr == sender || e.entered.daddr == sender)
                    && (left.saddr == to_node || e.entered.saddr == to_pod)
            })
            .max_by_key(|(_, e)| e.last_out_ktime_ns)
            .map(|(left, e)| (*left, e.state));
        match latest {
            Some((key, State::Waiting)) => {
                self.refusals.icmp_error += 1;
                self.answered(key, last.ktime_ns);
                true
            }
            Some(_) => true,
            None => false,
        }
    }

    /// Takes a journey that is shown: a connection's first packet that left the node starts
    /// waiting ([`is_opening`]); a retransmit, or a packet of a flow known either way, does not.
    pub fn open(&mut self, j: &Journey) {
        if !is_opening(j) {
            return;
        }
        let (Some(first), Some(last)) = (j.steps.first(), left_by(j)) else {
            return;
        };
        let key = last.tuple;
        if self.table.contains_key(&key.reversed()) {
            return;
        }
        let seq = self.next_seq;
        match self.table.get_mut(&key) {
            Some(e) if e.state == State::Answered => {
                e.state = State::Waiting;
                e.seq = seq;
                e.left_ktime_ns = last.ktime_ns;
                e.last_out_ktime_ns = last.ktime_ns;
            }
            Some(e) => {
                e.last_out_ktime_ns = e.last_out_ktime_ns.max(last.ktime_ns);
                return;
            }
            None => {
                self.table.insert(
                    key,
                    Entry {
                        seq,
                        state: State::Waiting,
                        entered: *entered(first),
                        iface: last.shared_iface().cloned(),
                        left_ktime_ns: last.ktime_ns,
                        last_out_ktime_ns: last.ktime_ns,
                        attribution: nat_attribution(j),
                    },
                );
            }
        }
        self.next_seq += 1;
        self.waiting.push_back((key, seq));
        self.keep_within_capacity();
    }

    /// Reports the connections that waited [`WAIT_NS`] by `now_ktime`, and forgets those
    /// remembered for [`REMEMBER_NS`].
    pub fn tick(&mut self, now_ktime: u64) {
        while let Some(&(key, seq)) = self.waiting.front() {
            let Some(e) = self
                .table
                .get_mut(&key)
                .filter(|e| e.seq == seq && e.state == State::Waiting)
            else {
                self.waiting.pop_front();
                continue;
            };
            let waited_ns = now_ktime.saturating_sub(e.left_ktime_ns);
            if waited_ns < WAIT_NS {
                break;
            }
            e.state = State::Reported;
            self.due.push(NoAnswer {
                entered: e.entered,
                left: key,
                iface: e.iface.clone(),
                left_ktime_ns: e.left_ktime_ns,
                left_unix_ns: self.wall_offset_ns + i128::from(e.left_ktime_ns),
                waited_ns,
                attribution: e.attribution.clone(),
            });
            self.waiting.pop_front();
            self.remembered.push_back((key, seq, now_ktime));
        }
        while let Some(&(key, seq, since)) = self.remembered.front() {
            if now_ktime.saturating_sub(since) < REMEMBER_NS {
                break;
            }
            self.remembered.pop_front();
            self.forget_remembered(key, seq);
        }
    }

    /// Removes `key` if it is still the remembered entry `seq`.
    fn forget_remembered(&mut self, key: Tuple, seq: u64) {
        if self
            .table
            .get(&key)
            .is_some_and(|e| e.seq == seq && e.state != State::Waiting)
        {
            self.table.remove(&key);
        }
    }

    /// The bytes the table and its queues hold.
    fn bytes(&self) -> usize {
        self.table.len() * ENTRY_BYTES + (self.waiting.len() + self.remembered.len()) * SLOT_BYTES
    }

    /// Forgets the oldest remembered connections, then the oldest waiting ones (counted),
    /// until the table is within its capacity.
    fn keep_within_capacity(&mut self) {
        while self.bytes() > self.cap_bytes {
            if let Some((key, seq, _)) = self.remembered.pop_front() {
                self.forget_remembered(key, seq);
            } else if let Some((key, seq)) = self.waiting.pop_front() {
                if self
                    .table
                    .get(&key)
                    .is_some_and(|e| e.seq == seq && e.state == State::Waiting)
                {
                    self.table.remove(&key);
                    self.evicted += 1;
                }
            } else {
                self.table.clear();
            }
        }
    }
}

/// True for the journey of a connection's first packet (a TCP SYN, a UDP datagram, an echo
/// request) that left the node by an interface: the uplink or a pod's veth (and was perhaps
/// dropped beyond it, in a namespace of the same kernel).
#[must_use]
pub fn is_opening(j: &Journey) -> bool {
    left_by(j).is_some()
        && j.steps
            .iter()
            .find_map(Step::packet_kind)
            .is_some_and(PacketKind::opens)
}

/// The egress step by which the journey left the node: its last step when it ended `left`,
/// the one before the drop when it was dropped after leaving.
fn left_by(j: &Journey) -> Option<&Step> {
    let (last, before) = match j.steps.as_slice() {
        [.., before, last] => (last, Some(before)),
        [last] => (last, None),
        [] => return None,
    };
    let egress = |s: &&Step| s.point() == Point::Egress;
    match j.ending {
        Ending::Left => Some(last).filter(egress),
        Ending::Dropped if last.dropped().is_some_and(|d| d.after_leaving) => before.filter(egress),
        _ => None,
    }
}

/// The packet as it entered: a NAT step's packet before it, else the step's.
fn entered(first: &Step) -> &Tuple {
    first.orig().unwrap_or(&first.tuple)
}

/// The named rule of the journey's NAT: one with a service first (the DNAT), else the first.
fn nat_attribution(j: &Journey) -> Option<Arc<Attribution>> {
    let named = || {
        j.steps
            .iter()
            .filter(|s| s.nat().is_some())
            .filter_map(|s| s.attribution.as_ref())
    };
    named()
        .find(|a| a.service.is_some())
        .or_else(|| named().next())
        .cloned()
}

#[cfg(test)]
mod tests;
