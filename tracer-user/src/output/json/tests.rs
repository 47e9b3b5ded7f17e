use std::{net::SocketAddr, sync::Arc};

use serde::Serialize as _;
use serde_json::{Value, json};
use tracer_common::{PROTO_ICMP, PROTO_TCP, PROTO_UDP};

use super::{lines::*, write::*, *};
use crate::{
    journey::{Attribution, Ending, Point, Step},
    output::test_support::{Shared, nat, t, tc},
};

fn lines(f: impl FnOnce(&mut dyn Sink)) -> Vec<Value> {
    let buf = Shared::default();
    let mut sink = crate::output::sink(
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
    assert!(!text.contains('\u{1b}'), "no colour in JSON");
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
        s.wire_id = Some(0xbeef);
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
    reply.nat_mut().reply = true;
    reply.attribution = Some(Arc::new(Attribution {
        rule: "IP-MASQ-AGENT".into(),
        service: None,
        why: Some("MASQUERADE by IP-MASQ-AGENT rule 3".into()),
    }));
    let mut no_iface = tc(Point::Egress, "", v6, 70);
    *no_iface.iface_mut() = None;
    let mut claimed = tc(Point::Ingress, "eth0", icmp, 10);
    claimed.set_time_bound();
    let mut v6_wire = tc(Point::Egress, "eth0", v6, 80);
    v6_wire.wire_id = Some(0x6969_1905);
    let cases: Vec<(Step, Value)> = vec![
        (
            v6_wire,
            json!({"point":"egress","iface":"eth0","src":"[fd00::2e]:5353",
                   "dst":"[fd00::a]:53","t_ns":70,"wire_hash":0x6969_1905_u32}),
        ),
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

/// NAT steps the hook could not time (conntrack's events) are counted, their times `null`;
/// dropped journeys and unanswered connections are counted by class.
#[test]
fn untimed_nat_is_counted_and_failures_by_class() {
    let a = t(PROTO_TCP, "10.13.76.46:41234", "10.0.159.58:80");
    let b = t(PROTO_TCP, "10.13.76.46:41234", "10.13.76.26:80");
    let mut summary = Summary::new();
    for _ in 0..3 {
        summary.record(&Journey {
            steps: vec![
                tc(Point::Ingress, "azvx", a, 0),
                nat(Point::Dnat, a, b, 5, None),
            ],
            ending: Ending::Left,
        });
    }
    summary.record(&Journey {
        steps: vec![Step::drop_at("NO_SOCKET", "tcp_v4_rcv", b, 9)],
        ending: Ending::Dropped,
    });
    summary.add_no_answer();
    let out = lines(|s| s.summary(&summary).unwrap());
    assert_eq!(
        out[0]["nat"]["dnat"],
        json!({"count":3,"p50_ns":null,"p99_ns":null,"max_ns":null})
    );
    assert_eq!(out[0]["classes"], json!({"no_answer":1,"no_socket":1}));
    assert_eq!(out[0]["drops"], json!({"NO_SOCKET":1}));
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
               "nat":{"dnat":zero,"snat":zero},"transit":zero,"no_answer":0}),
        json!({"type":"summary","journeys":1,"events":3,"lost_events":5,"bad_records":7,
               "evicted_journeys":4,
               "evicted_flows":6,
               "nat":{"dnat":{"count":1,"p50_ns":2710,"p99_ns":2710,"max_ns":2710},
                      "snat":zero},
               "transit":{"count":1,"p50_ns":9410,"p99_ns":9410,"max_ns":9410},
               "no_answer":0}),
    ];
    assert_eq!(out, want);
}

/// Journeys of every kind of step, for [`journey_bytes_match_serde`].
fn serde_cases() -> [Journey; 7] {
    let icmp = t(PROTO_ICMP, "10.13.76.46:7", "203.0.113.80:7");
    let v6 = t(PROTO_UDP, "[fd00::2e]:5353", "[fd00::a]:53");
    let mut odd = nat(Point::Snat, icmp, v6, 40, None);
    odd.nat_mut().reply = true;
    odd.attribution = Some(Arc::new(Attribution {
        rule: String::new(),
        service: Some("ns/\u{9b}svc\"\\".into()),
        why: Some("bidi \u{202e} and \u{1b}[31m".into()),
    }));
    let mut no_iface = tc(Point::Egress, "", v6, 70);
    *no_iface.iface_mut() = None;
    no_iface.wire_id = Some(u32::MAX);
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
    [
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
        Journey {
            steps: vec![
                tc(Point::Ingress, "azv47c3ee9d512", edges, 1),
                tc(Point::Ingress, "azure0", edges, 2),
                {
                    let mut d = Step::drop_at("NETFILTER_DROP", "nft_do_chain", edges, 3);
                    d.attribution = Some(Arc::new(Attribution {
                        rule: "KUBE-SERVICES rule 1".into(),
                        service: Some("default/web-gone".into()),
                        why: Some("REJECT: \"default/web-gone:http has no endpoints\"".into()),
                    }));
                    d
                },
            ],
            ending: Ending::Dropped,
        },
        Journey {
            steps: vec![Step::drop_at("NO_SOCKET", "unknown", v6, 9)],
            ending: Ending::Dropped,
        },
        // More tuples than the line remembers, and back to the first.
        Journey {
            steps: vec![
                tc(Point::Ingress, "a", edges, 1),
                tc(Point::Egress, "b", icmp, 2),
                {
                    let mut s = tc(Point::Ingress, "c", v6, 3);
                    s.set_time_bound();
                    s
                },
                nat(Point::Snat, edges, icmp, 4, None),
                tc(Point::Egress, "d", edges, 5),
            ],
            ending: Ending::Left,
        },
    ]
}

/// The hand-written journey line is byte for byte what serde writes, for every kind of
/// step, escapes included.
#[test]
fn journey_bytes_match_serde() {
    let journeys = serde_cases();
    let labels = [
        ("default/ubuntu", None),
        ("odd\u{7f}\"pod", None),
        ("default/whereami", Some("default/whereami")),
    ];
    for (pod, svc) in labels {
        for j in &journeys {
            let mut sink = JsonSink::new(Box::new(io::sink()), pod.into());
            if let Some(svc) = svc {
                sink = sink.with_svc(svc);
            }
            sink.buf.clear();
            write_journey(
                &mut sink.buf,
                (&sink.pod, sink.svc.as_deref()),
                j,
                &j.steps[0],
            );
            let text = String::from_utf8(sink.buf.clone()).unwrap();
            let line = Line::parse(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
            let mut again = Vec::new();
            write_line(&mut again, &line).unwrap();
            assert_eq!(String::from_utf8_lossy(&again), text);
            let Line::Journey(parsed) = line else {
                panic!("not a journey: {text}")
            };
            check_parsed(&parsed, j, pod);
            assert_eq!(parsed.svc.as_deref(), svc, "{text}");
        }
    }
}

/// The values of a parsed journey line are the journey's.
fn check_parsed(line: &contract::JourneyLine, j: &Journey, pod: &str) {
    let start = j.steps[0].ktime_ns;
    assert_eq!(
        (line.proto.as_str(), line.pod.as_str(), line.nodes.as_ref()),
        (j.proto().as_str(), pod, None)
    );
    assert_eq!(line.transit_ns, Some(j.transit_ns()));
    assert_eq!(line.start_ktime_ns, Some(start));
    assert_eq!(
        line.class.as_deref(),
        j.failure().map(crate::drops::FailureClass::as_str)
    );
    assert_eq!(
        line.ending.map(|e| serde_json::to_vec(&e).unwrap()),
        Some(ending_json(j.ending).to_vec())
    );
    assert_eq!(line.steps.len(), j.steps.len());
    for (got, step) in line.steps.iter().zip(&j.steps) {
        let v = StepView::of(step);
        assert_eq!(got.point.is_nat(), v.point.is_nat());
        assert_eq!(serde_json::to_value(got.point).unwrap(), v.point.as_str());
        assert_eq!(got.t_ns, v.ktime_ns.saturating_sub(start));
        assert_eq!((got.src.clone(), got.dst.clone()), endpoints(v.tuple));
        let nat = v.point.is_nat();
        let orig = (got.orig_src.clone(), got.orig_dst.clone());
        let want_orig = nat.then(|| endpoints(v.orig));
        assert_eq!(
            orig,
            want_orig.map_or((None, None), |(s, d)| (Some(s), Some(d)))
        );
        let tc = !nat && v.drop.is_none();
        assert_eq!(got.iface, tc.then(|| v.iface.map(str::to_owned)));
        assert_eq!(got.reason.as_deref(), v.drop.map(|d| &*d.reason));
        assert_eq!(got.location.as_deref(), v.drop.map(|d| &*d.location));
        assert_eq!(got.reply, nat.then_some(v.reply));
        assert_eq!(got.latency_ns, nat.then_some(v.latency_ns));
        assert_eq!((got.t_at_or_before, got.ip_id), (v.time_bound, v.ip_id));
        assert_eq!(got.wire_hash, v.wire_hash);
        assert_eq!(got.rule.as_deref(), v.rule);
        assert_eq!(got.service.as_deref(), v.service);
        assert_eq!(got.why.as_deref(), v.why);
        assert_eq!((&got.node, got.wire_ns), (&None, None));
        assert!(got.extra.is_empty(), "only the contract's fields");
    }
}

fn endpoints(t: &tracer_common::Tuple) -> (String, String) {
    (
        crate::journey::endpoint(t, true),
        crate::journey::endpoint(t, false),
    )
}

/// Every field DESIGN.md names for a journey, its tc and NAT steps and the summary is written.
#[test]
fn every_field_design_names_is_written() {
    let out = lines(|s| {
        s.journey(&contract_journey()).unwrap();
        s.summary(&Summary::new()).unwrap();
    });
    let has = |v: &Value, keys: &[&str]| {
        for k in keys {
            assert!(v.get(k).is_some(), "{k} missing in {v}");
        }
    };
    has(&out[0], &["type", "proto", "pod", "steps"]);
    let tc = ["point", "iface", "src", "dst", "t_ns"];
    has(&out[0]["steps"][0], &tc);
    has(&out[0]["steps"][2], &tc);
    has(
        &out[0]["steps"][1],
        &[
            "point",
            "src",
            "dst",
            "orig_src",
            "orig_dst",
            "reply",
            "latency_ns",
            "t_ns",
        ],
    );
    has(&out[0]["steps"][1], &["rule", "service"]);
    has(
        &out[1],
        &[
            "type",
            "journeys",
            "events",
            "lost_events",
            "nat",
            "transit",
            "no_answer",
        ],
    );
    let stats = ["count", "p50_ns", "p99_ns", "max_ns"];
    for v in [
        &out[1]["nat"]["dnat"],
        &out[1]["nat"]["snat"],
        &out[1]["transit"],
    ] {
        has(v, &stats);
    }
}

/// The rare lines read back as the values written.
#[test]
fn rare_lines_round_trip() {
    let buf = Shared::default();
    let mut sink = JsonSink::new(Box::new(buf.clone()), "p".into());
    let mut summary = Summary::new();
    summary.record(&contract_journey());
    summary.add_events(3);
    sink.loss(2, 5).unwrap();
    sink.evicted(3, 4).unwrap();
    sink.evicted_flows(2, 6).unwrap();
    sink.evicted_connections(1, 7).unwrap();
    summary.add_no_answer();
    summary.set_no_answer_waiting(2);
    summary.set_refusals(Refusals {
        reset: 3,
        icmp_error: 0,
    });
    summary.set_evicted_connections(7);
    sink.summary(&summary).unwrap();
    let got: Vec<Line> = buf
        .text()
        .lines()
        .map(|l| Line::parse(l).unwrap())
        .collect();
    let stats = |n| contract::Stats {
        count: 1,
        p50_ns: Some(n),
        p99_ns: Some(n),
        max_ns: Some(n),
    };
    let want = [
        Line::Loss(LossLine {
            lost: 2,
            lost_total: 5,
        }),
        Line::Evicted(EvictedLine {
            journeys: 3,
            journeys_total: 4,
        }),
        Line::EvictedFlows(EvictedFlowsLine {
            flows: 2,
            flows_total: 6,
        }),
        Line::EvictedConnections(EvictedConnectionsLine {
            connections: 1,
            connections_total: 7,
        }),
        Line::Summary(SummaryLine {
            journeys: 1,
            events: 3,
            lost_events: 0,
            bad_records: 0,
            evicted_journeys: 0,
            evicted_flows: 0,
            nat: NatStats {
                dnat: stats(2710),
                // Nothing seen: zeros (`null` is for steps seen but not timed).
                snat: contract::Stats {
                    count: 0,
                    ..stats(0)
                },
            },
            transit: stats(9410),
            drops: std::collections::BTreeMap::new(),
            classes: [("no_answer".to_owned(), 1)].into(),
            no_answer: 1,
            no_answer_waiting: 2,
            refused: [("reset".to_owned(), 3)].into(),
            evicted_connections: 7,
        }),
    ];
    assert_eq!(got, want);
}

/// Line types a reader does not know are told apart from broken lines.
#[test]
fn unknown_line_types_are_skippable() {
    let line = Line::parse(r#"{"type":"from_the_future","x":[1]}"#).unwrap();
    assert_eq!(line, Line::Unknown);
    assert!(Line::parse(r#"{"type":"loss","lost":1}"#).is_err());
    assert!(Line::parse("[1]").is_err());
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
        .chain([0xfeff, 0xfff9, 0xfffb, 0xfffd, 0x1f600, 0x0010_ffff])
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
fn written_endings_and_points_are_the_contracts() {
    let endings = [
        Ending::Left,
        Ending::TimedOut,
        Ending::Flushed,
        Ending::InterfaceGone,
        Ending::Dropped,
    ];
    let parsed: Vec<Ending> = endings
        .iter()
        .map(|&e| serde_json::from_slice(ending_json(e)).unwrap())
        .collect();
    for (i, e) in parsed.iter().enumerate() {
        assert!(
            !parsed[..i].contains(e),
            "{endings:?} are written as {parsed:?}"
        );
    }
    for p in [
        Point::Ingress,
        Point::Egress,
        Point::Dnat,
        Point::Snat,
        Point::Drop,
    ] {
        let open = point_open(p);
        let value = &open[b"{\"point\":".len()..];
        let parsed: Point = serde_json::from_slice(value).unwrap();
        assert_eq!(serde_json::to_value(parsed).unwrap(), p.as_str());
        assert_eq!(parsed.is_nat(), p.is_nat());
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
    for _ in 0..=(PENDING / line) {
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
