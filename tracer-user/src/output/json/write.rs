//! Journey lines written by hand into one reused buffer: strings escaped as [`super::lines::TerminalSafe`]
//! does, endpoints and numbers formatted without allocating, repeated endpoints copied from
//! earlier in the line. Must write the bytes serde writes for [`super::contract::JourneyLine`]
//! (tested: a written line parses and serializes back to the same bytes).

use std::{io::Write as _, net::SocketAddr, ops::Range};

use tracer_common::{FAMILY_IPV6, PROTO_TCP, PROTO_UDP, Tuple};

use super::lines::serialize;
use crate::{
    journey::{DropStep, Ending, Journey, Point, Step},
    util::tuple::{dst_ip, proto_name, src_ip},
};

/// What a step line is written from: every read of [`Step`]'s fields is here.
pub(super) struct StepView<'a> {
    pub(super) point: Point,
    pub(super) iface: Option<&'a str>,
    pub(super) tuple: &'a Tuple,
    /// NAT steps: the tuple before the translation.
    pub(super) orig: &'a Tuple,
    pub(super) reply: bool,
    pub(super) latency_ns: Option<u64>,
    /// Drop steps: why and where.
    pub(super) drop: Option<&'a DropStep>,
    pub(super) ktime_ns: u64,
    pub(super) time_bound: bool,
    pub(super) ip_id: Option<u32>,
    /// IPv6: the packet's [`Step::wire_id`], written as `wire_hash`.
    pub(super) wire_hash: Option<u32>,
    /// An empty rule is left out.
    pub(super) rule: Option<&'a str>,
    pub(super) service: Option<&'a str>,
    pub(super) why: Option<&'a str>,
}

impl<'a> StepView<'a> {
    #[inline]
    pub(super) fn of(step: &'a Step) -> Self {
        let attribution = step.attribution.as_deref();
        Self {
            point: step.point(),
            iface: step.iface(),
            tuple: &step.tuple,
            orig: step.orig().unwrap_or(&step.tuple),
            reply: step.reply(),
            latency_ns: step.latency_ns(),
            drop: step.dropped(),
            ktime_ns: step.ktime_ns,
            time_bound: step.time_bound(),
            ip_id: step.wire_id.filter(|_| step.tuple.family != FAMILY_IPV6),
            wire_hash: step.wire_id.filter(|_| step.tuple.family == FAMILY_IPV6),
            rule: attribution
                .map(|a| a.rule.as_str())
                .filter(|r| !r.is_empty()),
            service: attribution.and_then(|a| a.service.as_deref()),
            why: attribution.and_then(|a| a.why.as_deref()),
        }
    }
}

/// Appends `s` as a JSON string, escaped as [`super::lines::TerminalSafe`] does. Strings with nothing to
/// escape (interface names, chains, services, nearly every `why`) are copied as they are.
pub(super) fn json_str(buf: &mut Vec<u8>, s: &str) {
    if needs_no_escape(s) {
        buf.push(b'"');
        buf.extend_from_slice(s.as_bytes());
        buf.push(b'"');
        return;
    }
    serialize(buf, s);
}

/// True when neither `serde_json` (`"`, `\\`, below U+0020) nor [`super::lines::TerminalSafe`] (controls,
/// invisible format characters) would escape any character of `s`.
pub(super) fn needs_no_escape(s: &str) -> bool {
    // Printable ASCII without `"` and `\\` (nearly every string): one pass the compiler
    // vectorises (no early exit), 20 % of the collector's CPU when it went byte by byte.
    let plain = s.bytes().fold(true, |ok, b| {
        ok & ((0x20..0x7f).contains(&b) && (b != b'"') && (b != b'\\'))
    });
    plain || needs_no_escape_slow(s)
}

/// [`needs_no_escape`] character by character, for strings with non-ASCII characters.
pub(super) fn needs_no_escape_slow(s: &str) -> bool {
    let bytes = s.as_bytes();
    let mut i = 0;
    while let Some(&b) = bytes.get(i) {
        if b < 0x80 {
            if !(0x20..0x7f).contains(&b) || b == b'"' || b == b'\\' {
                return false;
            }
            i += 1;
            continue;
        }
        // A multi-byte character: `i` is at its first byte, so the slice is valid.
        let Some(c) = s.get(i..).and_then(|rest| rest.chars().next()) else {
            return false;
        };
        if c.is_control() || crate::util::text::is_invisible_format(c) {
            return false;
        }
        i += c.len_utf8();
    }
    true
}

/// Appends a tuple's source or destination as a JSON string: `addr:port` for TCP and UDP
/// (`[v6]:port`), the address alone otherwise (as [`crate::journey::endpoint`]). IPv4 is
/// written digit by digit (the same text as `Display`); IPv6 goes through `Display`.
pub(super) fn json_endpoint(buf: &mut Vec<u8>, t: &Tuple, source: bool) {
    let (addr, port) = if source {
        (&t.saddr, t.sport)
    } else {
        (&t.daddr, t.dport)
    };
    let ports = matches!(t.proto, PROTO_TCP | PROTO_UDP);
    if t.family == FAMILY_IPV6 {
        let addr = if source { src_ip(t) } else { dst_ip(t) };
        buf.push(b'"');
        // Writing into a Vec cannot fail; addresses never need escaping.
        let _ = if ports {
            write!(buf, "{}", SocketAddr::new(addr, port))
        } else {
            write!(buf, "{addr}")
        };
        buf.push(b'"');
    } else {
        let octets = [addr[0], addr[1], addr[2], addr[3]];
        ipv4_endpoint(buf, octets, ports.then_some(port));
    }
}

/// Appends `"a.b.c.d"` or `"a.b.c.d:port"` (the text of `Display`), built on the stack and
/// appended at once.
pub(super) fn ipv4_endpoint(buf: &mut Vec<u8>, octets: [u8; 4], port: Option<u16>) {
    // Quotes, 4 octets of 3 digits, 3 dots, a colon and 5 digits: 23 bytes at most, written
    // in place into room made at the end and cut to length. (Digits built in an array on the
    // stack and copied stalled on store forwarding: byte stores read back 16 bytes at a time.)
    let at = buf.len();
    buf.resize(at + 24, 0);
    let text = &mut buf[at..];
    let mut n = 0;
    let mut put = |b: u8| {
        text[n] = b;
        n += 1;
    };
    put(b'"');
    for (i, o) in octets.into_iter().enumerate() {
        if i > 0 {
            put(b'.');
        }
        if o >= 100 {
            put(b'0' + o / 100);
        }
        if o >= 10 {
            put(b'0' + o / 10 % 10);
        }
        put(b'0' + o % 10);
    }
    if let Some(port) = port {
        put(b':');
        let mut started = false;
        for div in [10_000u16, 1_000, 100, 10] {
            let digit = (port / div % 10) as u8;
            started |= digit != 0;
            if started {
                put(b'0' + digit);
            }
        }
        put(b'0' + (port % 10) as u8);
    }
    put(b'"');
    buf.truncate(at + n);
}

/// Appends `,"key":` (a literal: `key!("t_ns")`).
macro_rules! key {
    ($buf:expr, $k:literal) => {
        $buf.extend_from_slice(concat!(",\"", $k, "\":").as_bytes())
    };
}

/// Appends `n` in decimal (the text of `Display`), in place as [`ipv4_endpoint`] does.
pub(super) fn num(buf: &mut Vec<u8>, mut n: u64) {
    let len = n.checked_ilog10().map_or(1, |l| l as usize + 1);
    let at = buf.len();
    buf.resize(at + len, 0);
    for slot in buf[at..].iter_mut().rev() {
        *slot = b'0' + (n % 10) as u8;
        n /= 10;
    }
}

/// The opening of a step object up to its point's value, as JSON text.
pub(super) const fn point_open(p: Point) -> &'static [u8] {
    match p {
        Point::Ingress => b"{\"point\":\"ingress\"",
        Point::Egress => b"{\"point\":\"egress\"",
        Point::Dnat => b"{\"point\":\"dnat\"",
        Point::Snat => b"{\"point\":\"snat\"",
        Point::Drop => b"{\"point\":\"drop\"",
    }
}

pub(super) type Endpoints = (Tuple, Range<usize>, Range<usize>);

/// The endpoints of the tuples written last in this line, as ranges of the line: the steps of
/// a journey mostly repeat a tuple (ingress and egress without NAT, a NAT step's `orig` the
/// tuple before it), and a copy costs less than writing the addresses again.
#[derive(Default)]
pub(super) struct Written {
    /// A tuple and where its source and destination strings are.
    slots: [Option<Endpoints>; 2],
    next: usize,
}

impl Written {
    /// Appends `,"<src_key>":"…","<dst_key>":"…"` for `t` (keys given with their comma, colon
    /// and quotes).
    fn endpoints(&mut self, buf: &mut Vec<u8>, t: &Tuple, src_key: &[u8], dst_key: &[u8]) {
        let seen = self.slots.iter().flatten().find(|(w, _, _)| w == t);
        if let Some((_, src, dst)) = seen {
            let (src, dst) = (src.clone(), dst.clone());
            buf.extend_from_slice(src_key);
            buf.extend_from_within(src);
            buf.extend_from_slice(dst_key);
            buf.extend_from_within(dst);
            return;
        }
        buf.extend_from_slice(src_key);
        let src_at = buf.len();
        json_endpoint(buf, t, true);
        let src = src_at..buf.len();
        buf.extend_from_slice(dst_key);
        let dst_at = buf.len();
        json_endpoint(buf, t, false);
        self.slots[self.next] = Some((*t, src, dst_at..buf.len()));
        self.next = (self.next + 1) % self.slots.len();
    }
}

/// Appends one step object, keys in the order of [`super::contract::StepLine`].
pub(super) fn write_step(buf: &mut Vec<u8>, step: &StepView, start_ns: u64, written: &mut Written) {
    let nat = step.point.is_nat();
    buf.extend_from_slice(point_open(step.point));
    if !nat && step.drop.is_none() {
        key!(buf, "iface");
        match step.iface {
            Some(i) => json_str(buf, i),
            None => buf.extend_from_slice(b"null"),
        }
    }
    written.endpoints(buf, step.tuple, b",\"src\":", b",\"dst\":");
    if nat {
        written.endpoints(buf, step.orig, b",\"orig_src\":", b",\"orig_dst\":");
        buf.extend_from_slice(if step.reply {
            b",\"reply\":true"
        } else {
            b",\"reply\":false"
        });
        key!(buf, "latency_ns");
        match step.latency_ns {
            Some(n) => num(buf, n),
            None => buf.extend_from_slice(b"null"),
        }
    }
    if let Some(d) = step.drop {
        key!(buf, "reason");
        json_str(buf, &d.reason);
        key!(buf, "location");
        json_str(buf, &d.location);
    }
    key!(buf, "t_ns");
    num(buf, step.ktime_ns.saturating_sub(start_ns));
    if step.time_bound {
        buf.extend_from_slice(b",\"t_at_or_before\":true");
    }
    if let Some(id) = step.ip_id {
        key!(buf, "ip_id");
        num(buf, u64::from(id));
    }
    if let Some(hash) = step.wire_hash {
        key!(buf, "wire_hash");
        num(buf, u64::from(hash));
    }
    for (k, v) in [
        (&b",\"rule\":"[..], step.rule),
        (b",\"service\":", step.service),
        (b",\"why\":", step.why),
    ] {
        if let Some(v) = v {
            buf.extend_from_slice(k);
            json_str(buf, v);
        }
    }
    buf.push(b'}');
}

/// Appends a journey line (with its newline), keys in the order of
/// [`super::contract::JourneyLine`]; `labels` are the `pod` and (with `--svc`) `svc` fields,
/// already JSON strings.
pub(super) fn write_journey(
    buf: &mut Vec<u8>,
    labels: (&[u8], Option<&[u8]>),
    j: &Journey,
    first: &Step,
) {
    let (pod_json, svc_json) = labels;
    let start = first.ktime_ns;
    buf.extend_from_slice(b"{\"type\":\"journey\",\"proto\":");
    match first.tuple.proto {
        PROTO_TCP => buf.extend_from_slice(b"\"tcp\""),
        PROTO_UDP => buf.extend_from_slice(b"\"udp\""),
        other => json_str(buf, &proto_name(other)),
    }
    key!(buf, "pod");
    buf.extend_from_slice(pod_json);
    if let Some(svc) = svc_json {
        key!(buf, "svc");
        buf.extend_from_slice(svc);
    }
    key!(buf, "steps");
    buf.push(b'[');
    let mut written = Written::default();
    for (i, step) in j.steps.iter().enumerate() {
        if i > 0 {
            buf.push(b',');
        }
        write_step(buf, &StepView::of(step), start, &mut written);
    }
    buf.extend_from_slice(b"],\"ending\":");
    buf.extend_from_slice(ending_json(j.ending));
    if let Some(class) = j.failure() {
        key!(buf, "class");
        json_str(buf, class.as_str());
    }
    key!(buf, "transit_ns");
    num(buf, j.transit_ns());
    key!(buf, "start_ktime_ns");
    num(buf, start);
    buf.extend_from_slice(b"}\n");
}

/// An ending as a JSON string.
pub(super) const fn ending_json(e: Ending) -> &'static [u8] {
    match e {
        Ending::Left => b"\"left\"",
        Ending::TimedOut => b"\"timed_out\"",
        Ending::Flushed => b"\"flushed\"",
        Ending::InterfaceGone => b"\"interface_gone\"",
        Ending::Dropped => b"\"dropped\"",
    }
}
