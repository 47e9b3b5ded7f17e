//! `-o json`: the JSON lines contract of DESIGN.md, one object per line. Journey lines are
//! flushed once per batch ([`Sink::flush`]), the other lines at once.
//!
//! Lines: `{"type":"journey",…}` per journey, `{"type":"loss",…}` when events were lost, and
//! `{"type":"summary",…}` last. Beyond the contract, journeys carry `ending`, `transit_ns` and
//! `start_ktime_ns` (the kernel's monotonic clock at the first step), steps carry `ip_id`
//! (IPv4), `t_at_or_before: true` when the hook saw the packet at or before `t_ns` (the uplink
//! ingress of a connection's first packet, emitted at its DNAT), and NAT steps `why` when
//! attribution explains itself. `start_ktime_ns` and `ip_id`
//! are what `pktrace merge` joins nodes by.
//!
//! Journey lines, one per traced packet, are written by hand into one reused buffer (no
//! allocation per journey or step; the serde structs cost 45 % of the collector's CPU); the
//! rare lines go through serde. A test checks the two write the same bytes.

use std::{
    io::{self, Write},
    net::SocketAddr,
    ops::Range,
};

use serde::Serialize;
use tracer_common::{FAMILY_IPV6, PROTO_TCP, PROTO_UDP, Tuple};

use super::Sink;
use crate::{
    journey::{Ending, Journey, Point, Step, dst_ip, proto_name, src_ip},
    summary::{Stats, Summary},
};

/// Journey lines are gathered up to this many bytes before they are written: as large as the
/// output's buffer (`run`'s `BufWriter`), so that a full batch goes past it without a copy.
const PENDING: usize = 64 << 10;

/// Writes JSON lines.
pub struct JsonSink {
    out: Box<dyn Write + Send>,
    /// The `pod` field, already a JSON string.
    pod: Vec<u8>,
    /// Journey lines not written yet (written when [`PENDING`] bytes are there, at
    /// [`Sink::flush`], before any other line, and on drop).
    buf: Vec<u8>,
}

impl JsonSink {
    /// A sink writing to `out`; `pod` is the `pod` field of every journey.
    #[must_use]
    pub fn new(out: Box<dyn Write + Send>, pod: String) -> Self {
        let mut quoted = Vec::new();
        json_str(&mut quoted, &pod);
        Self {
            out,
            pod: quoted,
            buf: Vec::new(),
        }
    }

    /// Writes the journey lines gathered so far.
    fn write_pending(&mut self) -> io::Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let result = self.out.write_all(&self.buf);
        self.buf.clear();
        result
    }
}

impl Drop for JsonSink {
    /// Journeys gathered and never flushed are written still (as `BufWriter` does on drop);
    /// errors cannot be reported here.
    fn drop(&mut self) {
        let _ = self.write_pending().and_then(|()| self.out.flush());
    }
}

/// Appends `s` as a JSON string, escaped as [`TerminalSafe`] does. Strings with nothing to
/// escape (interface names, chains, services, nearly every `why`) are copied as they are.
fn json_str(buf: &mut Vec<u8>, s: &str) {
    if needs_no_escape(s) {
        buf.push(b'"');
        buf.extend_from_slice(s.as_bytes());
        buf.push(b'"');
        return;
    }
    // Writing into a Vec cannot fail.
    let _ = s.serialize(&mut serde_json::Serializer::with_formatter(
        &mut *buf,
        TerminalSafe,
    ));
}

/// True when neither serde_json (`"`, `\\`, below U+0020) nor [`TerminalSafe`] (controls,
/// invisible format characters) would escape any character of `s`.
fn needs_no_escape(s: &str) -> bool {
    // Printable ASCII without `"` and `\\` (nearly every string): one pass the compiler
    // vectorises (no early exit), 20 % of the collector's CPU when it went byte by byte.
    let plain = s.bytes().fold(true, |ok, b| {
        ok & ((0x20..0x7f).contains(&b) & (b != b'"') & (b != b'\\'))
    });
    plain || needs_no_escape_slow(s)
}

/// [`needs_no_escape`] character by character, for strings with non-ASCII characters.
fn needs_no_escape_slow(s: &str) -> bool {
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
        if c.is_control() || super::is_invisible_format(c) {
            return false;
        }
        i += c.len_utf8();
    }
    true
}

/// Appends a tuple's source or destination as a JSON string: `addr:port` for TCP and UDP
/// (`[v6]:port`), the address alone otherwise (as [`crate::journey::endpoint`]). IPv4 is
/// written digit by digit (the same text as `Display`); IPv6 goes through `Display`.
fn json_endpoint(buf: &mut Vec<u8>, t: &Tuple, source: bool) {
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
fn ipv4_endpoint(buf: &mut Vec<u8>, octets: [u8; 4], port: Option<u16>) {
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
fn num(buf: &mut Vec<u8>, mut n: u64) {
    let len = n.checked_ilog10().map_or(1, |l| l as usize + 1);
    let at = buf.len();
    buf.resize(at + len, 0);
    for slot in buf[at..].iter_mut().rev() {
        *slot = b'0' + (n % 10) as u8;
        n /= 10;
    }
}

/// The opening of a step object up to its point's value, as JSON text.
const fn point_open(p: Point) -> &'static [u8] {
    match p {
        Point::Ingress => b"{\"point\":\"ingress\"",
        Point::Egress => b"{\"point\":\"egress\"",
        Point::Dnat => b"{\"point\":\"dnat\"",
        Point::Snat => b"{\"point\":\"snat\"",
    }
}

type Endpoints = (Tuple, Range<usize>, Range<usize>);

/// The endpoints of the tuples written last in this line, as ranges of the line: the steps of
/// a journey mostly repeat a tuple (ingress and egress without NAT, a NAT step's `orig` the
/// tuple before it), and a copy costs less than writing the addresses again.
#[derive(Default)]
struct Written {
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

/// Appends one step object, keys in the order of [`StepOut`].
fn write_step(buf: &mut Vec<u8>, step: &Step, start_ns: u64, written: &mut Written) {
    let nat = step.point.is_nat();
    buf.extend_from_slice(point_open(step.point));
    if !nat {
        key!(buf, "iface");
        match step.iface.as_deref() {
            Some(i) => json_str(buf, i),
            None => buf.extend_from_slice(b"null"),
        }
    }
    written.endpoints(buf, &step.tuple, b",\"src\":", b",\"dst\":");
    if nat {
        let orig = step.orig.as_ref().unwrap_or(&step.tuple);
        written.endpoints(buf, orig, b",\"orig_src\":", b",\"orig_dst\":");
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
    key!(buf, "t_ns");
    num(buf, step.ktime_ns.saturating_sub(start_ns));
    if step.time_bound {
        buf.extend_from_slice(b",\"t_at_or_before\":true");
    }
    if let Some(id) = step.ip_id {
        key!(buf, "ip_id");
        num(buf, u64::from(id));
    }
    if let Some(a) = step.attribution.as_ref() {
        if !a.rule.is_empty() {
            key!(buf, "rule");
            json_str(buf, &a.rule);
        }
        if let Some(service) = a.service.as_deref() {
            key!(buf, "service");
            json_str(buf, service);
        }
        if let Some(why) = a.why.as_deref() {
            key!(buf, "why");
            json_str(buf, why);
        }
    }
    buf.push(b'}');
}

/// Appends a journey line (with its newline), keys in the order of [`JourneyLine`].
fn write_journey(buf: &mut Vec<u8>, pod_json: &[u8], j: &Journey, first: &Step) {
    let start = first.ktime_ns;
    buf.extend_from_slice(b"{\"type\":\"journey\",\"proto\":");
    match first.tuple.proto {
        PROTO_TCP => buf.extend_from_slice(b"\"tcp\""),
        PROTO_UDP => buf.extend_from_slice(b"\"udp\""),
        other => json_str(buf, &proto_name(other)),
    }
    key!(buf, "pod");
    buf.extend_from_slice(pod_json);
    key!(buf, "steps");
    buf.push(b'[');
    let mut written = Written::default();
    for (i, step) in j.steps.iter().enumerate() {
        if i > 0 {
            buf.push(b',');
        }
        write_step(buf, step, start, &mut written);
    }
    buf.extend_from_slice(b"],\"ending\":");
    buf.extend_from_slice(ending_json(j.ending));
    key!(buf, "transit_ns");
    num(buf, j.transit_ns());
    key!(buf, "start_ktime_ns");
    num(buf, start);
    buf.extend_from_slice(b"}\n");
}

/// Writes `value` as one line in one `write_all`, then flushes.
fn write_line<T: Serialize>(out: &mut dyn Write, value: &T) -> io::Result<()> {
    let mut buf = Vec::new();
    value.serialize(&mut serde_json::Serializer::with_formatter(
        &mut buf,
        TerminalSafe,
    ))?;
    buf.push(b'\n');
    out.write_all(&buf)?;
    out.flush()
}

/// serde_json's compact output, plus `\uXXXX` for what JSON may leave raw but a terminal
/// would obey (C1 controls such as U+009B CSI, DEL, bidi and zero-width characters: the set
/// [`super::safe`] escapes). Lossless: a reader decodes the very same strings.
struct TerminalSafe;

impl serde_json::ser::Formatter for TerminalSafe {
    fn write_string_fragment<W: ?Sized + Write>(
        &mut self,
        w: &mut W,
        fragment: &str,
    ) -> io::Result<()> {
        let mut start = 0;
        for (i, c) in fragment.char_indices() {
            if c.is_control() || super::is_invisible_format(c) {
                w.write_all(&fragment.as_bytes()[start..i])?;
                write!(w, "\\u{:04x}", u32::from(c))?;
                start = i + c.len_utf8();
            }
        }
        w.write_all(&fragment.as_bytes()[start..])
    }
}

/// The journey line as serde would write it: the reference [`write_journey`] is tested against.
#[cfg(test)]
#[derive(Serialize)]
struct JourneyLine<'a> {
    r#type: &'static str,
    proto: String,
    pod: &'a str,
    steps: Vec<StepOut<'a>>,
    ending: &'static str,
    transit_ns: u64,
    start_ktime_ns: u64,
}

/// One step. `Option<Option<_>>`: outer `None` leaves the key out (it does not belong to this
/// kind of step), inner `None` writes `null` (it belongs but is unknown).
#[cfg(test)]
#[derive(Serialize)]
struct StepOut<'a> {
    point: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    iface: Option<Option<&'a str>>,
    src: String,
    dst: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    orig_src: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    orig_dst: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reply: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    latency_ns: Option<Option<u64>>,
    t_ns: u64,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    t_at_or_before: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    ip_id: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    rule: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    service: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    why: Option<&'a str>,
}

#[derive(Serialize)]
struct LossLine {
    r#type: &'static str,
    lost: u64,
    lost_total: u64,
}

#[derive(Serialize)]
struct EvictedFlowsLine {
    r#type: &'static str,
    flows: u64,
    flows_total: u64,
}

#[derive(Serialize)]
struct EvictedLine {
    r#type: &'static str,
    journeys: u64,
    journeys_total: u64,
}

#[derive(Serialize)]
struct SummaryLine {
    r#type: &'static str,
    journeys: u64,
    events: u64,
    lost_events: u64,
    /// Ring-buffer records that were no event (a pktrace build mismatch): 0.
    bad_records: u64,
    evicted_journeys: u64,
    evicted_flows: u64,
    nat: NatStats,
    transit: StatsOut,
}

#[derive(Serialize)]
struct NatStats {
    dnat: StatsOut,
    snat: StatsOut,
}

#[derive(Serialize)]
struct StatsOut {
    count: u64,
    p50_ns: u64,
    p99_ns: u64,
    max_ns: u64,
}

impl From<Stats> for StatsOut {
    fn from(s: Stats) -> Self {
        Self {
            count: s.count,
            p50_ns: s.p50_ns,
            p99_ns: s.p99_ns,
            max_ns: s.max_ns,
        }
    }
}

#[cfg(test)]
fn step_out(step: &Step, start_ns: u64) -> StepOut<'_> {
    use crate::journey::endpoint;
    let nat = step.point.is_nat();
    let attribution = step.attribution.as_ref();
    StepOut {
        point: step.point.as_str(),
        iface: (!nat).then_some(step.iface.as_deref()),
        src: endpoint(&step.tuple, true),
        dst: endpoint(&step.tuple, false),
        orig_src: nat.then(|| endpoint(step.orig.as_ref().unwrap_or(&step.tuple), true)),
        orig_dst: nat.then(|| endpoint(step.orig.as_ref().unwrap_or(&step.tuple), false)),
        reply: nat.then_some(step.reply),
        latency_ns: nat.then_some(step.latency_ns),
        t_ns: step.ktime_ns.saturating_sub(start_ns),
        t_at_or_before: step.time_bound,
        ip_id: step.ip_id,
        rule: attribution
            .map(|a| a.rule.as_str())
            .filter(|r| !r.is_empty()),
        service: attribution.and_then(|a| a.service.as_deref()),
        why: attribution.and_then(|a| a.why.as_deref()),
    }
}

/// [`ending`] as a JSON string.
const fn ending_json(e: Ending) -> &'static [u8] {
    match e {
        Ending::Left => b"\"left\"",
        Ending::TimedOut => b"\"timed_out\"",
        Ending::Flushed => b"\"flushed\"",
        Ending::InterfaceGone => b"\"interface_gone\"",
    }
}

#[cfg(test)]
const fn ending(e: Ending) -> &'static str {
    match e {
        Ending::Left => "left",
        Ending::TimedOut => "timed_out",
        Ending::Flushed => "flushed",
        Ending::InterfaceGone => "interface_gone",
    }
}

impl Sink for JsonSink {
    fn journey(&mut self, j: &Journey) -> io::Result<()> {
        let Some(first) = j.steps.first() else {
            return Ok(());
        };
        if self.buf.capacity() == 0 {
            self.buf.reserve(PENDING + 4096);
        }
        write_journey(&mut self.buf, &self.pod, j, first);
        if self.buf.len() >= PENDING {
            self.write_pending()?;
        }
        Ok(())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.write_pending()?;
        self.out.flush()
    }

    fn loss(&mut self, lost_new: u64, lost_total: u64) -> io::Result<()> {
        self.write_pending()?;
        write_line(
            &mut self.out,
            &LossLine {
                r#type: "loss",
                lost: lost_new,
                lost_total,
            },
        )
    }

    fn evicted(&mut self, new: u64, total: u64) -> io::Result<()> {
        self.write_pending()?;
        write_line(
            &mut self.out,
            &EvictedLine {
                r#type: "evicted",
                journeys: new,
                journeys_total: total,
            },
        )
    }

    fn evicted_flows(&mut self, new: u64, total: u64) -> io::Result<()> {
        self.write_pending()?;
        write_line(
            &mut self.out,
            &EvictedFlowsLine {
                r#type: "evicted_flows",
                flows: new,
                flows_total: total,
            },
        )
    }

    fn summary(&mut self, s: &Summary) -> io::Result<()> {
        self.write_pending()?;
        write_line(
            &mut self.out,
            &SummaryLine {
                r#type: "summary",
                journeys: s.journeys(),
                events: s.events(),
                lost_events: s.lost_events(),
                bad_records: s.bad_records(),
                evicted_journeys: s.evicted_journeys(),
                evicted_flows: s.evicted_flows(),
                nat: NatStats {
                    dnat: s.dnat().into(),
                    snat: s.snat().into(),
                },
                transit: s.transit().into(),
            },
        )
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use serde_json::{Value, json};
    use tracer_common::{PROTO_ICMP, PROTO_TCP, PROTO_UDP};

    use super::*;
    use crate::{
        journey::{Attribution, Point},
        output::test_support::{Shared, nat, t, tc},
    };

    fn lines(f: impl FnOnce(&mut dyn Sink)) -> Vec<Value> {
        let buf = Shared::default();
        let mut sink = super::super::sink(
            crate::config::Format::Json,
            true,
            "default/ubuntu".into(),
            Box::new(buf.clone()),
        );
        f(sink.as_mut());
        sink.flush().unwrap();
        let bytes = buf.0.lock().unwrap().clone();
        let text = String::from_utf8(bytes).unwrap();
        assert!(text.ends_with('\n'));
        assert!(!text.contains("\u{1b}"), "no colour in JSON");
        text.lines()
            .map(|l| serde_json::from_str(l).expect(l))
            .collect()
    }

    fn contract_journey() -> Journey {
        let pre = t(PROTO_TCP, "10.13.76.46:41234", "10.0.159.58:80");
        let post = t(PROTO_TCP, "10.13.76.46:41234", "10.13.76.26:80");
        let mut dnat = nat(Point::Dnat, pre, post, 1_003_120, Some(2710));
        dnat.attribution = Some(Arc::new(Attribution {
            rule: "KUBE-SEP-6HBOEI5FVFTJNRJ3".into(),
            service: Some("default/whereami".into()),
            why: None,
        }));
        let mut steps = vec![
            tc(Point::Ingress, "azv47c3ee9d512", pre, 1_000_000),
            dnat,
            tc(Point::Egress, "azva4124965a9b", post, 1_009_410),
        ];
        for s in &mut steps {
            s.ip_id = Some(0xbeef);
        }
        Journey {
            steps,
            ending: Ending::Left,
        }
    }

    #[test]
    fn journey_matches_the_contract_key_by_key() {
        let out = lines(|s| s.journey(&contract_journey()).unwrap());
        let want = json!({"type":"journey","proto":"tcp","pod":"default/ubuntu",
          "steps":[
            {"point":"ingress","iface":"azv47c3ee9d512","src":"10.13.76.46:41234",
             "dst":"10.0.159.58:80","t_ns":0,"ip_id":48879},
            {"point":"dnat","src":"10.13.76.46:41234","dst":"10.13.76.26:80",
             "orig_src":"10.13.76.46:41234","orig_dst":"10.0.159.58:80","reply":false,
             "latency_ns":2710,"t_ns":3120,"ip_id":48879,"rule":"KUBE-SEP-6HBOEI5FVFTJNRJ3",
             "service":"default/whereami"},
            {"point":"egress","iface":"azva4124965a9b","src":"10.13.76.46:41234",
             "dst":"10.13.76.26:80","t_ns":9410,"ip_id":48879}],
          "ending":"left","transit_ns":9410,"start_ktime_ns":1_000_000});
        assert_eq!(out, [want]);
    }

    #[test]
    fn step_variants() {
        let icmp = t(PROTO_ICMP, "10.13.76.46:7", "203.0.113.80:7");
        let masq = t(PROTO_ICMP, "10.13.76.4:7", "203.0.113.80:7");
        let v6 = t(PROTO_UDP, "[fd00::2e]:5353", "[fd00::a]:53");
        let mut reply = nat(Point::Snat, masq.reversed(), icmp.reversed(), 50, None);
        reply.reply = true;
        reply.attribution = Some(Arc::new(Attribution {
            rule: "IP-MASQ-AGENT".into(),
            service: None,
            why: Some("MASQUERADE by IP-MASQ-AGENT rule 3".into()),
        }));
        let mut no_iface = tc(Point::Egress, "", v6, 70);
        no_iface.iface = None;
        let mut claimed = tc(Point::Ingress, "eth0", icmp, 10);
        claimed.time_bound = true;
        let cases: Vec<(Step, Value)> = vec![
            (
                claimed,
                json!({"point":"ingress","iface":"eth0","src":"10.13.76.46",
                       "dst":"203.0.113.80","t_ns":0,"t_at_or_before":true}),
            ),
            (
                tc(Point::Ingress, "azv47c3ee9d512", icmp, 10),
                json!({"point":"ingress","iface":"azv47c3ee9d512","src":"10.13.76.46",
                       "dst":"203.0.113.80","t_ns":0}),
            ),
            (
                nat(Point::Snat, icmp, masq, 40, None),
                json!({"point":"snat","src":"10.13.76.4","dst":"203.0.113.80",
                       "orig_src":"10.13.76.46","orig_dst":"203.0.113.80","reply":false,
                       "latency_ns":null,"t_ns":30}),
            ),
            (
                reply,
                json!({"point":"snat","src":"203.0.113.80","dst":"10.13.76.46",
                       "orig_src":"203.0.113.80","orig_dst":"10.13.76.4","reply":true,
                       "latency_ns":null,"t_ns":40,"rule":"IP-MASQ-AGENT",
                       "why":"MASQUERADE by IP-MASQ-AGENT rule 3"}),
            ),
            (
                tc(Point::Ingress, "azv\u{1b}[31m", v6, 60),
                json!({"point":"ingress","iface":"azv\u{1b}[31m","src":"[fd00::2e]:5353",
                       "dst":"[fd00::a]:53","t_ns":50}),
            ),
            (
                no_iface,
                json!({"point":"egress","iface":null,"src":"[fd00::2e]:5353",
                       "dst":"[fd00::a]:53","t_ns":60}),
            ),
        ];
        let first = tc(Point::Ingress, "x", icmp, 10);
        for (step, want) in cases {
            let j = Journey {
                steps: vec![first.clone(), step],
                ending: Ending::TimedOut,
            };
            let out = lines(|s| s.journey(&j).unwrap());
            assert_eq!(out[0]["steps"][1], want);
            assert_eq!(out[0]["ending"], "timed_out");
            assert_eq!(out[0]["proto"], "icmp");
        }
    }

    #[test]
    fn a_journey_closed_for_its_interface_says_so() {
        let icmp = t(PROTO_ICMP, "10.13.76.46:0", "203.0.113.80:0");
        let j = Journey {
            steps: vec![tc(Point::Ingress, "azv47c3ee9d512", icmp, 10)],
            ending: Ending::InterfaceGone,
        };
        let out = lines(|s| s.journey(&j).unwrap());
        assert_eq!(out[0]["ending"], "interface_gone");
        assert_eq!(out[0]["steps"][0]["iface"], "azv47c3ee9d512");
    }

    #[test]
    fn loss_summary_and_empty_journey() {
        let mut summary = Summary::new();
        summary.record(&contract_journey());
        summary.add_events(3);
        summary.set_lost(5);
        summary.set_evicted(4);
        summary.set_evicted_flows(6);
        summary.add_bad_records(7);
        let out = lines(|s| {
            s.journey(&Journey {
                steps: vec![],
                ending: Ending::Flushed,
            })
            .unwrap();
            s.loss(2, 5).unwrap();
            s.evicted(3, 4).unwrap();
            s.evicted_flows(2, 6).unwrap();
            s.summary(&Summary::new()).unwrap();
            s.summary(&summary).unwrap();
        });
        let zero = json!({"count":0,"p50_ns":0,"p99_ns":0,"max_ns":0});
        let want = [
            json!({"type":"loss","lost":2,"lost_total":5}),
            json!({"type":"evicted","journeys":3,"journeys_total":4}),
            json!({"type":"evicted_flows","flows":2,"flows_total":6}),
            json!({"type":"summary","journeys":0,"events":0,"lost_events":0,"bad_records":0,
                   "evicted_journeys":0,
                   "evicted_flows":0,
                   "nat":{"dnat":zero,"snat":zero},"transit":zero}),
            json!({"type":"summary","journeys":1,"events":3,"lost_events":5,"bad_records":7,
                   "evicted_journeys":4,
                   "evicted_flows":6,
                   "nat":{"dnat":{"count":1,"p50_ns":2710,"p99_ns":2710,"max_ns":2710},
                          "snat":zero},
                   "transit":{"count":1,"p50_ns":9410,"p99_ns":9410,"max_ns":9410}}),
        ];
        assert_eq!(out, want);
    }

    /// The hand-written journey line is byte for byte what serde writes, for every kind of
    /// step, escapes included.
    #[test]
    fn journey_bytes_match_serde() {
        let icmp = t(PROTO_ICMP, "10.13.76.46:7", "203.0.113.80:7");
        let v6 = t(PROTO_UDP, "[fd00::2e]:5353", "[fd00::a]:53");
        let mut odd = nat(Point::Snat, icmp, v6, 40, None);
        odd.reply = true;
        odd.attribution = Some(Arc::new(Attribution {
            rule: String::new(),
            service: Some("ns/\u{9b}svc\"\\".into()),
            why: Some("bidi \u{202e} and \u{1b}[31m".into()),
        }));
        let mut no_iface = tc(Point::Egress, "", v6, 70);
        no_iface.iface = None;
        let mut other_proto = tc(Point::Ingress, "azv\u{1b}[31m", icmp, 5);
        other_proto.tuple.proto = 47;
        let edges = t(PROTO_TCP, "0.0.0.0:0", "255.255.255.255:65535");
        let mut plain = nat(
            Point::Dnat,
            edges,
            t(PROTO_UDP, "10.0.100.9:9", "1.20.3.4:10"),
            7,
            Some(0),
        );
        plain.attribution = Some(Arc::new(Attribution {
            rule: "KUBE-SEP-6HBOEI5FVFTJNRJ3".into(),
            service: Some("default/café".into()),
            why: Some("DNAT by KUBE-SEP-X rule 1 (service a/b via KUBE-SERVICES → KUBE-SVC-Y, 1 of 2 endpoints) …".into()),
        }));
        let journeys = [
            contract_journey(),
            Journey {
                steps: vec![
                    tc(Point::Ingress, "azv0123456789a", edges, u64::MAX - 1),
                    plain,
                ],
                ending: Ending::Left,
            },
            Journey {
                steps: vec![tc(Point::Ingress, "x", icmp, 10), odd, no_iface],
                ending: Ending::TimedOut,
            },
            Journey {
                steps: vec![other_proto],
                ending: Ending::Flushed,
            },
            // More tuples than the line remembers, and back to the first.
            Journey {
                steps: vec![
                    tc(Point::Ingress, "a", edges, 1),
                    tc(Point::Egress, "b", icmp, 2),
                    Step {
                        time_bound: true,
                        ..tc(Point::Ingress, "c", v6, 3)
                    },
                    nat(Point::Snat, edges, icmp, 4, None),
                    tc(Point::Egress, "d", edges, 5),
                ],
                ending: Ending::Left,
            },
        ];
        for pod in ["default/ubuntu", "odd\u{7f}\"pod"] {
            for j in &journeys {
                let mut sink = JsonSink::new(Box::new(io::sink()), pod.into());
                let first = &j.steps[0];
                let reference = JourneyLine {
                    r#type: "journey",
                    proto: j.proto(),
                    pod,
                    steps: j
                        .steps
                        .iter()
                        .map(|s| step_out(s, first.ktime_ns))
                        .collect(),
                    ending: ending(j.ending),
                    transit_ns: j.transit_ns(),
                    start_ktime_ns: first.ktime_ns,
                };
                let mut want = Vec::new();
                write_line(&mut want, &reference).unwrap();
                sink.buf.clear();
                write_journey(&mut sink.buf, &sink.pod, j, first);
                assert_eq!(
                    String::from_utf8_lossy(&sink.buf),
                    String::from_utf8_lossy(&want)
                );
            }
        }
    }

    /// Strings written as they are give serde's bytes: every character below U+3000, the
    /// invisible ones above it, and longer mixes.
    #[test]
    fn strings_match_serde() {
        let serde = |s: &str| {
            let mut want = Vec::new();
            s.serialize(&mut serde_json::Serializer::with_formatter(
                &mut want,
                TerminalSafe,
            ))
            .unwrap();
            want
        };
        let mut samples: Vec<String> = (0..0x3000u32)
            .chain([0xfeff, 0xfff9, 0xfffb, 0xfffd, 0x1f600, 0x10ffff])
            .filter_map(char::from_u32)
            .map(|c| format!("a{c}b"))
            .collect();
        samples.extend(
            [
                "",
                "eth0",
                "\"",
                "\\",
                "x\u{7f}",
                "→",
                "KUBE-SVC → KUBE-SEP …",
                "\u{202e}end",
            ]
            .map(String::from),
        );
        for s in &samples {
            let mut got = Vec::new();
            json_str(&mut got, s);
            assert_eq!(got, serde(s), "{s:?}");
        }
    }

    /// IPv4 endpoints written digit by digit read as `Display` writes them, for every octet
    /// value in every position and ports of every length.
    #[test]
    fn ipv4_endpoints_match_display() {
        let ports = [
            0u16, 1, 9, 10, 99, 100, 999, 1_000, 9_999, 10_000, 40_000, 65_535,
        ];
        for o in 0..=255u8 {
            for (i, port) in ports.into_iter().enumerate() {
                let mut octets = [10, 0, 0, 1];
                octets[i % 4] = o;
                let addr = std::net::Ipv4Addr::from(octets);
                let mut got = Vec::new();
                ipv4_endpoint(&mut got, octets, Some(port));
                let want = format!("\"{}\"", SocketAddr::from((addr, port)));
                assert_eq!(String::from_utf8_lossy(&got), want);
                got.clear();
                ipv4_endpoint(&mut got, octets, None);
                assert_eq!(String::from_utf8_lossy(&got), format!("\"{addr}\""));
            }
        }
    }

    #[test]
    fn numbers_match_display() {
        let mut samples = vec![0, 1, 9, 10, 99, 100, u64::MAX - 1, u64::MAX];
        for p in 1..20 {
            let ten = 10u64.pow(p);
            samples.extend([
                ten - 1,
                ten,
                ten + 1,
                ten.saturating_mul(3).saturating_add(7),
            ]);
        }
        for n in samples {
            let mut got = b"x".to_vec();
            num(&mut got, n);
            assert_eq!(String::from_utf8_lossy(&got), format!("x{n}"));
        }
    }

    #[test]
    fn written_endings_and_points_are_their_json_strings() {
        for e in [
            Ending::Left,
            Ending::TimedOut,
            Ending::Flushed,
            Ending::InterfaceGone,
        ] {
            let want = serde_json::to_string(ending(e)).unwrap();
            assert_eq!(ending_json(e), want.as_bytes());
        }
        for p in [Point::Ingress, Point::Egress, Point::Dnat, Point::Snat] {
            let want = format!("{{\"point\":{}", serde_json::to_string(p.as_str()).unwrap());
            assert_eq!(point_open(p), want.as_bytes());
        }
    }

    /// Journey lines are gathered and written in large pieces, never after a line that came
    /// later, and none is left behind on drop.
    #[test]
    fn gathered_journeys_keep_their_order() {
        let out = Shared::default();
        let mut sink = JsonSink::new(Box::new(out.clone()), "p".into());
        sink.journey(&contract_journey()).unwrap();
        assert_eq!(out.text(), "", "gathered, not written");
        sink.loss(1, 1).unwrap();
        sink.journey(&contract_journey()).unwrap();
        let types: Vec<String> = out
            .text()
            .lines()
            .map(|l| serde_json::from_str::<Value>(l).unwrap()["type"].to_string())
            .collect();
        assert_eq!(types, ["\"journey\"", "\"loss\""]);
        let line = out.text().lines().next().unwrap().len() + 1;
        for _ in 0..PENDING / line + 1 {
            sink.journey(&contract_journey()).unwrap();
        }
        assert!(
            out.text().len() > PENDING,
            "written once {PENDING} bytes were there"
        );
        drop(sink);
        let text = out.text();
        assert_eq!(text.lines().count(), 2 + PENDING / line + 2);
        assert!(text.ends_with("}\n"));
    }

    #[test]
    fn write_errors_are_returned() {
        struct Broken;
        impl Write for Broken {
            fn write(&mut self, _: &[u8]) -> io::Result<usize> {
                Err(io::ErrorKind::BrokenPipe.into())
            }
            fn flush(&mut self) -> io::Result<()> {
                Ok(())
            }
        }
        let mut sink = JsonSink::new(Box::new(Broken), "p".into());
        // Journeys are gathered: the error comes at the latest when they are flushed.
        let err = sink
            .journey(&contract_journey())
            .and_then(|()| sink.flush())
            .unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::BrokenPipe);
        assert!(sink.loss(1, 1).is_err());
        assert!(sink.summary(&Summary::new()).is_err());
    }
}
