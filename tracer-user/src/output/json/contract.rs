//! The JSON lines contract of DESIGN.md as types: every line `pktrace -o json` and
//! `pktrace merge` write, and what their readers (`merge`, the integration tests) parse. The
//! field names and their order live here only: the hand-written journey writer
//! (`write.rs` beside this file) is tested to write the bytes serde writes for [`JourneyLine`].
//!
//! Readers parse a line with [`Line::parse`]; line types they do not know are
//! [`Line::Unknown`], and step fields they do not know are kept in [`StepLine::extra`] (so that
//! `merge` passes them on).

use std::collections::BTreeMap;

use serde::{Deserialize, Deserializer, Serialize};
use serde_json::{Map, Value};

/// One line, by its `type`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Line {
    Journey(JourneyLine),
    /// Events the kernel could not deliver (written at once, while tracing).
    Loss(LossLine),
    /// Journeys closed early because the join table was full.
    Evicted(EvictedLine),
    /// Followed flows forgotten because their table was full.
    EvictedFlows(EvictedFlowsLine),
    /// A connection whose first packet left the node and got no answer in time.
    NoAnswer(NoAnswerLine),
    /// Connections no longer awaited because their table was full.
    EvictedConnections(EvictedConnectionsLine),
    /// Last line of a trace.
    Summary(SummaryLine),
    /// Last line of `pktrace merge`.
    Merge(MergeLine),
    /// A line type this version does not know (readers skip it).
    #[serde(other)]
    Unknown,
}

impl Line {
    /// Parses one line.
    ///
    /// # Errors
    /// The line is not JSON, not an object, or a known type lacks a field of the contract.
    pub fn parse(line: &str) -> serde_json::Result<Self> {
        serde_json::from_str(line)
    }
}

/// A journey: one packet's steps through the node (or, from `merge`, through several nodes).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct JourneyLine {
    /// `tcp`, `udp`, `icmp`, `icmp6`, or the protocol's number.
    pub proto: String,
    /// The traced pod as `namespace/name` (with `--pod-ip`: the address; with `--svc`: the
    /// service, kept for readers of `pod`).
    pub pod: String,
    /// With `--svc`: the traced service as `namespace/name`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub svc: Option<String>,
    /// `merge`: the nodes the journey crossed, in order.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nodes: Option<Vec<String>>,
    /// In time order.
    pub steps: Vec<StepLine>,
    /// Why the journey was closed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ending: Option<Ending>,
    /// A dropped journey's failure class (`no_socket`, `no_endpoints`, …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub class: Option<String>,
    /// Time from the first step to the last.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transit_ns: Option<u64>,
    /// The kernel's monotonic clock at the first step (what `merge` aligns nodes by).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_ktime_ns: Option<u64>,
}

impl JourneyLine {
    /// The journey line in a JSON object; `None` for a line of another type, or of none, which
    /// is not read further (readers skip what they do not need).
    ///
    /// # Errors
    /// A journey line lacks a field of the contract or has one of the wrong type.
    pub fn from_object(object: Map<String, Value>) -> serde_json::Result<Option<Self>> {
        if object.get("type").and_then(Value::as_str) != Some("journey") {
            return Ok(None);
        }
        serde_json::from_value(Value::Object(object)).map(Some)
    }
}

/// Where a step was seen, and why a journey was closed: the journey model's own enums, whose
/// serde names are the contract's (`ingress`, `dnat`, `timed_out`, …).
pub use crate::journey::{Ending, Point};

/// One step of a journey. `Option<Option<_>>`: outer `None` leaves the key out (it does not
/// belong to this kind of step), inner `None` is `null` (it belongs but is unknown).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StepLine {
    pub point: Point,
    /// tc steps: the interface's name (`null` when it was gone before it could be read).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[serde(deserialize_with = "present")]
    pub iface: Option<Option<String>>,
    /// The packet after this point: `ip:port` (ICMP: `ip`; IPv6: `[ip]:port`).
    pub src: String,
    pub dst: String,
    /// NAT steps: the packet before the translation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub orig_src: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub orig_dst: Option<String>,
    /// NAT steps: true for the reverse translation of a reply.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reply: Option<bool>,
    /// NAT steps: time in the NAT step (`null` when the hook cannot measure it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[serde(deserialize_with = "present")]
    pub latency_ns: Option<Option<u64>>,
    /// Drop steps: the kernel's drop reason without `SKB_DROP_REASON_` (`NO_SOCKET`), and the
    /// kernel function that dropped the packet (`tcp_v4_rcv`, `unknown` when hidden).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub location: Option<String>,
    /// Since the journey's first step (`merge`: on the aligned clock).
    pub t_ns: u64,
    /// The hook saw the packet at or before `t_ns` (a connection's first packet on the uplink,
    /// emitted at its DNAT).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub t_at_or_before: bool,
    /// IPv4: the packet's IP id (what `merge` joins nodes by).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ip_id: Option<u32>,
    /// IPv6: the digest of what the wire keeps of the packet, which NAT leaves alone
    /// (`tracer_common::Fingerprint::wire_hash`: the flow label with the TCP sequence numbers,
    /// flags and window, or the UDP or ICMPv6 length and leading payload); what `merge` joins
    /// IPv6 packets by, having no IP id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wire_hash: Option<u32>,
    /// Attribution, when known: the rule (chain and rule), the Kubernetes service, and why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub why: Option<String>,
    /// `merge`: the node the step was seen on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// `merge`: on the first step of each node after the first, the one-way delay from the
    /// node before (on the aligned clocks; may be slightly negative within their error).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wire_ns: Option<i64>,
    /// Fields this version does not know (written by a newer pktrace), kept as they are.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl StepLine {
    /// A step with its point, packet and time, and no other field.
    #[must_use]
    pub fn new(point: Point, src: String, dst: String, t_ns: u64) -> Self {
        Self {
            point,
            iface: None,
            src,
            dst,
            orig_src: None,
            orig_dst: None,
            reply: None,
            latency_ns: None,
            reason: None,
            location: None,
            t_ns,
            t_at_or_before: false,
            ip_id: None,
            wire_hash: None,
            rule: None,
            service: None,
            why: None,
            node: None,
            wire_ns: None,
            extra: Map::new(),
        }
    }
}

/// A key that is present is `Some`, even when its value is `null` (serde's default for an
/// `Option` takes `null` for absent).
#[expect(
    clippy::option_option,
    reason = "absent vs null: the contract tells them apart"
)]
fn present<'de, D: Deserializer<'de>, T: Deserialize<'de>>(
    d: D,
) -> Result<Option<Option<T>>, D::Error> {
    Option::<T>::deserialize(d).map(Some)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LossLine {
    /// Lost since the last loss line.
    pub lost: u64,
    /// Lost since the start.
    pub lost_total: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EvictedLine {
    pub journeys: u64,
    pub journeys_total: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EvictedFlowsLine {
    pub flows: u64,
    pub flows_total: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EvictedConnectionsLine {
    pub connections: u64,
    pub connections_total: u64,
}

/// A connection of the traced pod (or to it) whose first packet left the node and got no
/// answer: no packet back, no reset, no ICMP error, in `waited_ms`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NoAnswerLine {
    /// `tcp`, `udp`, `icmp`, `icmpv6`.
    pub proto: String,
    /// As in journey lines.
    pub pod: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub svc: Option<String>,
    /// The first packet as it left the node (after NAT).
    pub src: String,
    pub dst: String,
    /// As it entered the node, when NAT changed it (SNAT: `orig_src`, DNAT: `orig_dst`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub orig_src: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub orig_dst: Option<String>,
    /// The interface it left by (`null` when unknown).
    pub iface: Option<String>,
    /// When it left, on the wall clock: RFC 3339, UTC, microseconds.
    pub left_at: String,
    /// When it left, on the kernel's monotonic clock (journeys' `start_ktime_ns`).
    pub left_ktime_ns: u64,
    /// How long pktrace waited for an answer before it wrote this line.
    pub waited_ms: u64,
    /// The first packet's NAT rule and service, when named.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service: Option<String>,
    /// The failure class: `no_answer`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub class: Option<String>,
    /// What happened and what to look at, in one sentence.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub why: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SummaryLine {
    pub journeys: u64,
    pub events: u64,
    pub lost_events: u64,
    /// Ring-buffer records that were no event (a pktrace build mismatch): 0.
    pub bad_records: u64,
    pub evicted_journeys: u64,
    pub evicted_flows: u64,
    pub nat: NatStats,
    /// Journeys' `transit_ns`.
    pub transit: Stats,
    /// Journeys that ended in a drop, by reason (left out when none did).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub drops: BTreeMap<String, u64>,
    /// Failures by class: dropped journeys' `class` and `no_answer` for the connections
    /// reported unanswered (left out when there were none).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub classes: BTreeMap<String, u64>,
    /// Connections reported unanswered (`no_answer` lines).
    #[serde(default)]
    pub no_answer: u64,
    /// Connections still waiting for their answer at exit, for less than the wait: not
    /// reported (left out when none).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub no_answer_waiting: u64,
    /// Connections answered by a refusal, by kind (`reset`, `icmp_error`; left out when none).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub refused: BTreeMap<String, u64>,
    /// Waiting connections forgotten because their table was full (left out when none).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub evicted_connections: u64,
}

#[expect(
    clippy::trivially_copy_pass_by_ref,
    reason = "serde's skip_serializing_if passes a reference"
)]
const fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// NAT steps' `latency_ns`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NatStats {
    pub dnat: Stats,
    pub snat: Stats,
}

/// Count and percentiles of durations: `null` percentiles when steps were counted but none
/// was timed (the conntrack NAT hook cannot time a step).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stats {
    pub count: u64,
    pub p50_ns: Option<u64>,
    pub p99_ns: Option<u64>,
    pub max_ns: Option<u64>,
}

/// `merge`'s last line: counts, and how each node's clock was aligned.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MergeLine {
    pub journeys_in: u64,
    pub journeys_out: u64,
    /// Output journeys that cross more than one node.
    pub cross_node: u64,
    pub links: u64,
    /// Departure/arrival pairs with the same packet on the wire, before linking.
    pub candidates: u64,
    pub nodes: Vec<MergeNode>,
    pub pairs: Vec<MergePair>,
}

/// One input node of `merge`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MergeNode {
    pub node: String,
    pub file: String,
    /// Its journey lines.
    pub journeys: u64,
    /// The node whose clock it is aligned to.
    pub reference: String,
    /// Its clock minus the reference's.
    pub offset_ns: i64,
    /// How: `reference`, `two-way` or `one-way` (an upper bound).
    pub clock: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_ns: Option<i64>,
    /// The node it was aligned through, when not directly to the reference.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub via: Option<String>,
}

/// The offset between two nodes' clocks, from the packets between them.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MergePair {
    pub a: String,
    pub b: String,
    /// b's clock minus a's.
    pub offset_ns: i64,
    /// Half the smallest round trip (`null` with traffic one way only).
    pub error_ns: Option<i64>,
    pub samples_ab: u64,
    pub samples_ba: u64,
}
