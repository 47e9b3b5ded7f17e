//! The property "one packet, one journey": every packet the node forwarded for the traced
//! subject, as a capture of every interface saw it ([`crate::capture`]), is exactly one journey
//! of pktrace, from its first hop to its last, with a NAT step for each rewrite.
//!
//! Captured frames are grouped into packets without pktrace: by the conntrack entry whose
//! tuples (before or after NAT, in either direction) the frame's tuple is one of, the IPv4 id
//! and the L4 fingerprint (TCP seq/ack/flags, UDP length). A frame is matched to a journey's
//! tc step by the interface, the direction, the tuple at that hop and the IPv4 id.

use std::{
    collections::{BTreeSet, HashMap},
    fmt,
    fmt::Write as _,
    net::Ipv4Addr,
};

use tracer_user::output::json::contract::{JourneyLine, Point, StepLine};

use crate::{capture::Record, trace::CtEntry};

/// One packet's pass through the node: its frames in capture order.
#[derive(Clone, Debug)]
pub struct Packet {
    pub frames: Vec<Record>,
}

/// Which connection and direction a frame belongs to.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Flow {
    /// A conntrack entry (its index) and whether the frame is a reply.
    Tracked(usize, bool),
    /// No entry: the tuple as it is.
    Plain(String, String),
}

fn proto_name(proto: u8) -> &'static str {
    match proto {
        6 => "tcp",
        17 => "udp",
        1 => "icmp",
        _ => "other",
    }
}

fn flow_of(r: &Record, ct: &[CtEntry]) -> Flow {
    let (src, dst) = (r.src_ep(), r.dst_ep());
    for (i, e) in ct
        .iter()
        .enumerate()
        .filter(|(_, e)| e.proto == proto_name(r.proto))
    {
        let orig = [e.orig_src_ep(), e.reply_dst_ep()].contains(&src)
            && [e.orig_dst_ep(), e.reply_src_ep()].contains(&dst);
        let reply = [e.reply_src_ep(), e.orig_dst_ep()].contains(&src)
            && [e.reply_dst_ep(), e.orig_src_ep()].contains(&dst);
        if orig || reply {
            return Flow::Tracked(i, !orig);
        }
    }
    Flow::Plain(src, dst)
}

/// The packets the node forwarded (received on one interface, sent on another; `lo` left out)
/// that touch one of `subject`'s addresses at some hop, from the frames of a capture. A
/// frame seen twice on one interface in one direction starts another packet (a retransmit
/// with the same id and fingerprint, such as a SYN-ACK's id 0).
///
/// # Panics
/// Never: a frame is pushed onto a list just made non-empty.
#[must_use]
#[expect(
    clippy::implicit_hasher,
    reason = "the callers' maps use the default hasher"
)]
pub fn forwarded(
    frames: &[Record],
    ct: &[CtEntry],
    names: &HashMap<u32, String>,
    subject: &[Ipv4Addr],
) -> Vec<Packet> {
    type Key = (u8, Flow, u16, (u32, u32, u8));
    let mut groups: HashMap<Key, Vec<Vec<Record>>> = HashMap::new();
    let mut sorted: Vec<&Record> = frames
        .iter()
        .filter(|r| names.get(&r.ifindex).is_some_and(|n| n != "lo"))
        .collect();
    sorted.sort_by_key(|r| r.t_us);
    for r in sorted {
        let key = (r.proto, flow_of(r, ct), r.ip_id, r.l4);
        let list = groups.entry(key).or_default();
        let repeat = list.last().is_some_and(|p| {
            p.iter()
                .any(|o| o.ifindex == r.ifindex && o.outgoing == r.outgoing)
        });
        if list.is_empty() || repeat {
            list.push(Vec::new());
        }
        list.last_mut().expect("pushed").push(r.clone());
    }
    let mut out: Vec<Packet> = groups
        .into_values()
        .flatten()
        .filter(|f| f.iter().any(|r| !r.outgoing) && f.iter().any(|r| r.outgoing))
        .filter(|f| {
            f.iter()
                .any(|r| subject.contains(&r.src) || subject.contains(&r.dst))
        })
        .map(|frames| Packet { frames })
        .collect();
    out.sort_by_key(|p| p.frames[0].t_us);
    out
}

/// (interface, egress, src, dst, IPv4 id) of a frame or a journey's tc step.
type HopKey = (String, bool, String, String, u64);

fn frame_key(r: &Record, names: &HashMap<u32, String>) -> HopKey {
    let name = names.get(&r.ifindex).cloned().unwrap_or_default();
    (name, r.outgoing, r.src_ep(), r.dst_ep(), u64::from(r.ip_id))
}

fn step_key(s: &StepLine) -> Option<HopKey> {
    let egress = match s.point {
        Point::Ingress => false,
        Point::Egress => true,
        Point::Dnat | Point::Snat | Point::Drop => return None,
    };
    Some((
        s.iface.clone().flatten()?,
        egress,
        s.src.clone(),
        s.dst.clone(),
        u64::from(s.ip_id?),
    ))
}

/// What became of one packet in pktrace's output.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// One journey: every hop, first to last, a NAT step for each rewrite.
    Whole,
    /// Its hops are in several journeys (their indices).
    Split(Vec<usize>),
    /// One journey, but it lacks something (what).
    Partial(usize, String),
    /// No journey has any of its hops.
    Missing,
}

/// Finds the journeys of packets by their tc steps.
pub struct Judge<'a> {
    journeys: &'a [&'a JourneyLine],
    by_hop: HashMap<HopKey, Vec<usize>>,
    names: &'a HashMap<u32, String>,
}

impl<'a> Judge<'a> {
    #[must_use]
    pub fn new(journeys: &'a [&'a JourneyLine], names: &'a HashMap<u32, String>) -> Self {
        let mut by_hop: HashMap<HopKey, Vec<usize>> = HashMap::new();
        for (i, j) in journeys.iter().enumerate() {
            for key in j.steps.iter().filter_map(step_key) {
                by_hop.entry(key).or_default().push(i);
            }
        }
        Self {
            journeys,
            by_hop,
            names,
        }
    }

    /// The verdict on one packet.
    ///
    /// # Panics
    /// Never: a set of one element has a first.
    #[must_use]
    pub fn judge(&self, p: &Packet) -> Verdict {
        let keys: Vec<HopKey> = p.frames.iter().map(|r| frame_key(r, self.names)).collect();
        let found: Vec<BTreeSet<usize>> = keys
            .iter()
            .map(|k| self.by_hop.get(k).into_iter().flatten().copied().collect())
            .collect();
        let all: BTreeSet<usize> = found.iter().flatten().copied().collect();
        let j = match all.len() {
            0 => return Verdict::Missing,
            1 => *all.first().expect("one"),
            _ => return Verdict::Split(all.into_iter().collect()),
        };
        let missing: Vec<usize> = (0..keys.len()).filter(|&i| found[i].is_empty()).collect();
        if !missing.is_empty() {
            let hops: Vec<String> = missing.iter().map(|&i| hop_text(&keys[i])).collect();
            return Verdict::Partial(j, format!("no step for {}", hops.join(", ")));
        }
        let tc: Vec<HopKey> = self.journeys[j].steps.iter().filter_map(step_key).collect();
        if tc.first() != keys.first() || tc.last() != keys.last() {
            return Verdict::Partial(j, "does not start and end where the packet did".into());
        }
        match nat_chain(
            self.journeys[j],
            &p.frames[0],
            &p.frames[p.frames.len() - 1],
        ) {
            Ok(()) => {}
            Err(why) => return Verdict::Partial(j, why),
        }
        Verdict::Whole
    }
}

/// The journey's NAT steps, in order, each rewriting the packet as the one before left it,
/// turn the packet as it entered (`first`) into the packet as it left (`last`).
fn nat_chain(j: &JourneyLine, first: &Record, last: &Record) -> Result<(), String> {
    let mut now = (first.src_ep(), first.dst_ep());
    for s in j.steps.iter().filter(|s| s.point.is_nat()) {
        let text = |v: &Option<String>| v.clone().unwrap_or_else(|| "?".to_owned());
        let (orig, new) = (
            (text(&s.orig_src), text(&s.orig_dst)),
            (s.src.clone(), s.dst.clone()),
        );
        if orig != now {
            return Err(format!(
                "{} step rewrote {} > {}, not {} > {}",
                crate::trace::point_name(s.point),
                orig.0,
                orig.1,
                now.0,
                now.1
            ));
        }
        now = new;
    }
    let left = (last.src_ep(), last.dst_ep());
    if now == left {
        Ok(())
    } else {
        Err(format!(
            "no NAT step for {} > {} -> {} > {}",
            now.0, now.1, left.0, left.1
        ))
    }
}

fn hop_text(k: &HopKey) -> String {
    let dir = if k.1 { "egress" } else { "ingress" };
    format!("{dir} {} {} > {} id {}", k.0, k.2, k.3, k.4)
}

/// How the packets fared.
#[derive(Debug, Default)]
pub struct Tally {
    pub total: usize,
    pub whole: usize,
    pub split: usize,
    pub partial: usize,
    pub missing: usize,
    /// Up to `Tally::SHOWN` packets that were not whole, described.
    pub bad: Vec<String>,
}

impl Tally {
    const SHOWN: usize = 12;

    /// Judges every packet.
    #[must_use]
    pub fn of(packets: &[Packet], journeys: &[&JourneyLine], names: &HashMap<u32, String>) -> Self {
        let judge = Judge::new(journeys, names);
        let mut t = Self {
            total: packets.len(),
            ..Self::default()
        };
        for p in packets {
            let v = judge.judge(p);
            match &v {
                Verdict::Whole => t.whole += 1,
                Verdict::Split(_) => t.split += 1,
                Verdict::Partial(..) => t.partial += 1,
                Verdict::Missing => t.missing += 1,
            }
            if v != Verdict::Whole && t.bad.len() < Self::SHOWN {
                t.bad.push(describe(p, &v, journeys, names));
            }
        }
        t
    }

    /// True when every packet is one whole journey (and there was a packet).
    #[must_use]
    pub const fn holds(&self) -> bool {
        self.total > 0 && self.whole == self.total
    }
}

impl fmt::Display for Tally {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "whole {}/{} (split {}, partial {}, missing {})",
            self.whole, self.total, self.split, self.partial, self.missing
        )?;
        for b in &self.bad {
            write!(f, "\n{b}")?;
        }
        Ok(())
    }
}

fn describe(
    p: &Packet,
    v: &Verdict,
    journeys: &[&JourneyLine],
    names: &HashMap<u32, String>,
) -> String {
    let hops: Vec<String> = p
        .frames
        .iter()
        .map(|r| hop_text(&frame_key(r, names)))
        .collect();
    let shown: Vec<usize> = match v {
        Verdict::Split(js) => js.clone(),
        Verdict::Partial(j, _) => vec![*j],
        Verdict::Whole | Verdict::Missing => Vec::new(),
    };
    let mut out = format!("- {v:?}: packet {}", hops.join(" | "));
    for j in shown {
        let _ = write!(out, "\n    journey {j}: {}", shape_text(journeys[j]));
    }
    out
}

fn shape_text(j: &JourneyLine) -> String {
    let steps: Vec<String> = j
        .steps
        .iter()
        .map(|s| {
            let point = crate::trace::point_name(s.point);
            let iface = crate::trace::iface(s)
                .map(|i| format!(" {i}"))
                .unwrap_or_default();
            format!("{point}{iface} {}>{}", s.src, s.dst)
        })
        .collect();
    let ending = j
        .ending
        .and_then(|e| serde_json::to_value(e).ok())
        .and_then(|e| e.as_str().map(str::to_owned))
        .unwrap_or_else(|| "?".to_owned());
    format!("{} [{ending}]", steps.join(" | "))
}

#[cfg(test)]
mod tests;
