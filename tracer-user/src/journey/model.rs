//! What the collector rebuilds: a packet's [`Journey`] through the node as a list of [`Step`]s.

use std::{net::SocketAddr, rc::Rc, sync::Arc};

use tracer_common::{PROTO_TCP, PROTO_UDP, TcHook, Tuple};

pub use super::packet::PacketKind;
use crate::{
    drops::FailureClass,
    util::tuple::{dst_ip, proto_name, src_ip},
};

/// Where in the node a step was observed (serde names: the JSON lines contract's).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Point {
    /// tc ingress of an interface.
    Ingress,
    /// tc egress of an interface.
    Egress,
    /// Destination NAT (or, with `reply`, the reverse translation of a reply to a DNATed flow).
    Dnat,
    /// Source NAT (or, with `reply`, the reverse translation of a reply to a SNATed flow).
    Snat,
    /// The kernel dropped the packet (`skb:kfree_skb`).
    Drop,
}

impl Point {
    /// The name used in the JSON lines contract.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Ingress => "ingress",
            Self::Egress => "egress",
            Self::Dnat => "dnat",
            Self::Snat => "snat",
            Self::Drop => "drop",
        }
    }

    /// True for the NAT points.
    #[must_use]
    pub const fn is_nat(self) -> bool {
        matches!(self, Self::Dnat | Self::Snat)
    }
}

/// Which iptables rule did a NAT step, when [`crate::explain`] could tell.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Attribution {
    /// Chain (and rule) that did it, e.g. `KUBE-SEP-6HBOEI5FVFTJNRJ3`.
    pub rule: String,
    /// Kubernetes service `namespace/name` from kube-proxy's comment, when there is one.
    pub service: Option<String>,
    /// One line for people: why this rule applied.
    pub why: Option<String>,
}

/// The NAT points.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum NatPoint {
    Dnat,
    Snat,
}

impl From<NatPoint> for Point {
    fn from(p: NatPoint) -> Self {
        match p {
            NatPoint::Dnat => Self::Dnat,
            NatPoint::Snat => Self::Snat,
        }
    }
}

impl From<TcHook> for Point {
    fn from(h: TcHook) -> Self {
        match h {
            TcHook::Ingress => Self::Ingress,
            TcHook::Egress => Self::Egress,
        }
    }
}

/// What a NAT step changed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NatChange {
    pub point: NatPoint,
    /// The packet before the step (the step's `tuple` is after it).
    pub orig: Tuple,
    /// True when this is the reverse translation of a reply packet.
    pub reply: bool,
    /// Time spent in the NAT step, `None` when the hook cannot measure it.
    pub latency_ns: Option<u64>,
}

/// What kind of observation a step is, and what only that kind carries.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StepKind {
    /// A tc hook of an interface.
    Tc {
        hook: TcHook,
        /// Interface name; `None` when unknown. Shared with the join table's name of the
        /// interface: a step costs no copy of it.
        iface: Option<Rc<str>>,
        /// True when the hook saw the packet at or before the step's `ktime_ns` rather than
        /// at it: the uplink ingress of a connection's first packet, which the NAT program
        /// emitted when DNAT made it a traced pod's, with the NAT step's start as its time
        /// (`flag::TC_CLAIMED`).
        time_bound: bool,
        /// What the packet is to its connection (an opening, a reset, an ICMP error…): what
        /// [`super::unanswered`] pairs connections and their answers by.
        packet: PacketKind,
    },
    /// A NAT step.
    Nat(NatChange),
    /// The kernel dropped the packet: the journey's last step. Its rule, why and service,
    /// when the drop stage names them, are the step's `attribution`.
    Drop(DropStep),
}

/// Why and where the kernel dropped a packet, as names of the running kernel.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DropStep {
    /// `enum skb_drop_reason`'s name without `SKB_DROP_REASON_` (`NO_SOCKET`), from the kernel's
    /// BTF; `NOT_SPECIFIED` where the kernel gives none, the number where BTF has no name.
    pub reason: Rc<str>,
    /// The kernel function the free was called from (`tcp_v4_rcv`), `unknown` when the
    /// addresses are hidden (`kptr_restrict`) or not in `/proc/kallsyms`.
    pub location: Rc<str>,
    /// The packet had left the node by an edge interface (the journey's step before is that
    /// egress) and was dropped beyond it, in a namespace of the same kernel: a pod's stack, or
    /// in a lab the host behind the uplink.
    pub after_leaving: bool,
    /// What kind of failure it was: by the reason and the function when joined, refined by
    /// the rule that dropped it when the drop stage names one.
    pub class: FailureClass,
}

/// One observation of the packet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Step {
    pub kind: StepKind,
    /// The packet as seen after this point.
    pub tuple: Tuple,
    /// Kernel monotonic time of the observation.
    pub ktime_ns: u64,
    /// The packet's identity on the wire, which NAT leaves alone: IPv4 its identification
    /// field; IPv6 (no IP id outside fragments) [`tracer_common::Fingerprint::wire_hash`], a
    /// digest of its TCP sequence numbers, or its UDP or ICMPv6 length and leading payload.
    /// With the tuple it joins a drop to the journey that just left with that packet, and one
    /// node's uplink egress to the next node's ingress in `pktrace merge`.
    pub wire_id: Option<u32>,
    /// Which rule did it: a NAT step's rule, or on the last egress step the rule that left the
    /// packet untranslated. Shared with the attribution cache: every packet of a connection
    /// gets the same answer without a copy of its text.
    pub attribution: Option<Arc<Attribution>>,
}

impl Step {
    /// Where the step was observed.
    #[must_use]
    pub const fn point(&self) -> Point {
        match &self.kind {
            StepKind::Tc { hook, .. } => match hook {
                TcHook::Ingress => Point::Ingress,
                TcHook::Egress => Point::Egress,
            },
            StepKind::Nat(n) => match n.point {
                NatPoint::Dnat => Point::Dnat,
                NatPoint::Snat => Point::Snat,
            },
            StepKind::Drop(_) => Point::Drop,
        }
    }

    /// tc steps: the interface's name, when known.
    #[must_use]
    pub fn iface(&self) -> Option<&str> {
        self.shared_iface().map(|i| &**i)
    }

    /// tc steps: the interface's name as the join table shares it.
    #[must_use]
    pub const fn shared_iface(&self) -> Option<&Rc<str>> {
        match &self.kind {
            StepKind::Tc { iface, .. } => iface.as_ref(),
            StepKind::Nat(_) | StepKind::Drop(_) => None,
        }
    }

    /// NAT steps: what the step changed.
    #[must_use]
    pub const fn nat(&self) -> Option<&NatChange> {
        match &self.kind {
            StepKind::Nat(n) => Some(n),
            StepKind::Tc { .. } | StepKind::Drop(_) => None,
        }
    }

    /// Drop steps: why and where.
    #[must_use]
    pub const fn dropped(&self) -> Option<&DropStep> {
        match &self.kind {
            StepKind::Drop(d) => Some(d),
            _ => None,
        }
    }

    /// NAT steps: the packet before the step.
    #[must_use]
    pub fn orig(&self) -> Option<&Tuple> {
        self.nat().map(|n| &n.orig)
    }

    /// True for a NAT step that is the reverse translation of a reply packet.
    #[must_use]
    pub fn reply(&self) -> bool {
        self.nat().is_some_and(|n| n.reply)
    }

    /// NAT steps: time spent in the step, when measured.
    #[must_use]
    pub fn latency_ns(&self) -> Option<u64> {
        self.nat().and_then(|n| n.latency_ns)
    }

    /// tc steps: what the packet is to its connection.
    #[must_use]
    pub const fn packet_kind(&self) -> Option<PacketKind> {
        match &self.kind {
            StepKind::Tc { packet, .. } => Some(*packet),
            StepKind::Nat(_) | StepKind::Drop(_) => None,
        }
    }

    /// True for a tc step the hook saw at or before `ktime_ns` rather than at it.
    #[must_use]
    pub const fn time_bound(&self) -> bool {
        matches!(
            self.kind,
            StepKind::Tc {
                time_bound: true,
                ..
            }
        )
    }
}

/// How a journey ended (serde names: the JSON lines contract's).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Ending {
    /// The packet left the node (egress on a pod veth or the uplink).
    Left,
    /// No more events came for it before the time-out: delivered locally, dropped, or its
    /// last events were lost.
    TimedOut,
    /// The collector stopped (exit) while the journey was open.
    Flushed,
    /// The interface of its last step vanished (pod deleted) while it was open.
    InterfaceGone,
    /// The kernel dropped the packet (its last step is the drop).
    Dropped,
}

/// One packet's pass through the node, steps in time order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Journey {
    pub steps: Vec<Step>,
    pub ending: Ending,
}

impl Journey {
    /// Protocol name for output: `tcp`, `udp`, `icmp`, `icmp6` (as tcpdump and the JSON
    /// contract say) or the number.
    #[must_use]
    pub fn proto(&self) -> String {
        self.steps
            .first()
            .map_or_else(String::new, |s| proto_name(s.tuple.proto))
    }

    /// Every packet the journey shows: each step's as it was after the step and, for a NAT
    /// step, before it (what a filter expression is matched against).
    pub fn packets(&self) -> impl Iterator<Item = &Tuple> {
        self.steps
            .iter()
            .flat_map(|s| std::iter::once(&s.tuple).chain(s.orig()))
    }

    /// The failure class of a journey that ended in a drop (its drop step's); `None` for
    /// any other ending.
    #[must_use]
    pub fn failure(&self) -> Option<FailureClass> {
        if self.ending != Ending::Dropped {
            return None;
        }
        self.steps.last().and_then(Step::dropped).map(|d| d.class)
    }

    /// Nanoseconds between the first and the last step.
    #[must_use]
    pub fn transit_ns(&self) -> u64 {
        match (self.steps.first(), self.steps.last()) {
            (Some(a), Some(b)) => b.ktime_ns.saturating_sub(a.ktime_ns),
            _ => 0,
        }
    }
}

/// An endpoint as the JSON contract writes it: `ip:port`, `[ip]:port` for IPv6, and the bare
/// address for ICMP (and any protocol without ports).
#[must_use]
pub fn endpoint(t: &Tuple, source: bool) -> String {
    let (addr, port) = if source {
        (src_ip(t), t.sport)
    } else {
        (dst_ip(t), t.dport)
    };
    match t.proto {
        PROTO_TCP | PROTO_UDP => SocketAddr::new(addr, port).to_string(),
        _ => addr.to_string(),
    }
}

/// Builds a tuple from addresses and ports.
#[cfg(test)]
#[must_use]
pub fn tuple(proto: u8, src: SocketAddr, dst: SocketAddr) -> Tuple {
    let mut t = Tuple {
        proto,
        ..Tuple::default()
    };
    for (addr, out) in [(src.ip(), &mut t.saddr), (dst.ip(), &mut t.daddr)] {
        match addr {
            std::net::IpAddr::V4(a) => {
                out[..4].copy_from_slice(&a.octets());
                t.family = tracer_common::FAMILY_IPV4;
            }
            std::net::IpAddr::V6(a) => {
                *out = a.octets();
                t.family = tracer_common::FAMILY_IPV6;
            }
        }
    }
    t.sport = src.port();
    t.dport = dst.port();
    t
}

/// Steps made up for tests.
#[cfg(test)]
impl Step {
    /// A tc step at `point` (ingress or egress).
    #[must_use]
    pub fn tc_at(point: Point, iface: Option<&str>, tuple: Tuple, ktime_ns: u64) -> Self {
        let hook = match point {
            Point::Ingress => TcHook::Ingress,
            Point::Egress => TcHook::Egress,
            Point::Dnat | Point::Snat | Point::Drop => panic!("{point:?} is no tc point"),
        };
        Self {
            kind: StepKind::Tc {
                hook,
                iface: iface.map(Into::into),
                time_bound: false,
                packet: PacketKind::Other,
            },
            tuple,
            ktime_ns,
            wire_id: None,
            attribution: None,
        }
    }

    /// A NAT step at `point` (DNAT or SNAT) from `orig` to `tuple`, not a reply.
    #[must_use]
    pub fn nat_at(point: Point, orig: Tuple, tuple: Tuple, ktime_ns: u64) -> Self {
        let point = match point {
            Point::Dnat => NatPoint::Dnat,
            Point::Snat => NatPoint::Snat,
            Point::Ingress | Point::Egress | Point::Drop => panic!("{point:?} is no NAT point"),
        };
        Self {
            kind: StepKind::Nat(NatChange {
                point,
                orig,
                reply: false,
                latency_ns: None,
            }),
            tuple,
            ktime_ns,
            wire_id: None,
            attribution: None,
        }
    }

    /// A drop step of the packet `tuple`.
    #[must_use]
    pub fn drop_at(reason: &str, location: &str, tuple: Tuple, ktime_ns: u64) -> Self {
        Self {
            kind: StepKind::Drop(DropStep {
                reason: reason.into(),
                location: location.into(),
                after_leaving: false,
                class: FailureClass::of_drop(reason, location),
            }),
            tuple,
            ktime_ns,
            wire_id: None,
            attribution: None,
        }
    }

    /// A NAT step's change, to alter it.
    pub fn nat_mut(&mut self) -> &mut NatChange {
        match &mut self.kind {
            StepKind::Nat(n) => n,
            StepKind::Tc { .. } | StepKind::Drop(_) => panic!("only a NAT step has a NAT change"),
        }
    }

    /// A tc step's interface, to alter it.
    pub fn iface_mut(&mut self) -> &mut Option<Rc<str>> {
        match &mut self.kind {
            StepKind::Tc { iface, .. } => iface,
            StepKind::Nat(_) | StepKind::Drop(_) => panic!("only a tc step has an interface"),
        }
    }

    /// Sets what a tc step's packet is to its connection.
    pub fn set_packet_kind(&mut self, kind: PacketKind) {
        if let StepKind::Tc { packet, .. } = &mut self.kind {
            *packet = kind;
        }
    }

    /// Marks a tc step as seen at or before its time.
    pub fn set_time_bound(&mut self) {
        if let StepKind::Tc { time_bound, .. } = &mut self.kind {
            *time_bound = true;
        }
    }
}
