//! `-w FILE`: the pcapng holds every tc step of the journeys the JSON output of the same run
//! shows, in order, each on an interface named after its hook, with the frame as that hop saw
//! it and the journey (its NAT changes and their rules) in the packet's comment; read back by
//! tshark, as a user would.

use std::process::Command;

use serde_json::Value;
use tests::{
    LabGuard,
    trace::{Pktrace, point_name},
};
use tracer_user::output::json::contract::{JourneyLine, Point, StepLine};
use xtask::lab::{self, UBUNTU, topology::WHEREAMI_CLUSTER_IP};

/// The internet host: DNAT-free, masqueraded by IP-MASQ-AGENT's last rule.
const INTERNET: &str = "203.0.113.80:80";

/// One packet as tshark read it: its interface, its addresses and ports, its comment.
#[derive(Debug)]
struct Packet {
    iface: String,
    src: String,
    dst: String,
    comment: String,
}

/// The first value of a tshark `-T json -e` field.
fn field(layers: &Value, name: &str) -> String {
    layers[name][0].as_str().unwrap_or_default().to_owned()
}

fn tshark(file: &str) -> Vec<Packet> {
    let out = Command::new("tshark")
        .args(["-r", file, "-T", "json"])
        .args(["-e", "frame.interface_name", "-e", "frame.comment"])
        .args([
            "-e",
            "ip.src",
            "-e",
            "ip.dst",
            "-e",
            "tcp.srcport",
            "-e",
            "tcp.dstport",
        ])
        .args(["-e", "udp.srcport", "-e", "udp.dstport"])
        .output()
        .expect("tshark (installed by cargo xtask setup)");
    assert!(
        out.status.success(),
        "tshark: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let all: Value = serde_json::from_slice(&out.stdout).expect("tshark's JSON");
    all.as_array()
        .expect("an array of packets")
        .iter()
        .map(|p| {
            let l = &p["_source"]["layers"];
            // `ip:port` as the JSON lines say it (ICMP: the address alone).
            let ep = |ip: &str, side: &str| {
                let port = [format!("tcp.{side}port"), format!("udp.{side}port")]
                    .iter()
                    .map(|f| field(l, f))
                    .find(|p| !p.is_empty());
                let ip = field(l, ip);
                port.map_or_else(|| ip.clone(), |p| format!("{ip}:{p}"))
            };
            Packet {
                iface: field(l, "frame.interface_name"),
                src: ep("ip.src", "src"),
                dst: ep("ip.dst", "dst"),
                comment: field(l, "frame.comment"),
            }
        })
        .collect()
}

/// The journey's NAT steps as its comment must say them: `DNAT a -> b by RULE`.
fn nat_said(s: &StepLine) -> Option<String> {
    let (what, before, after) = match (s.point, s.reply) {
        (Point::Dnat, Some(false)) => ("DNAT", s.orig_dst.clone()?, s.dst.clone()),
        (Point::Snat, Some(false)) => ("SNAT", s.orig_src.clone()?, s.src.clone()),
        _ => return None,
    };
    Some(format!(
        "{what} {before} -> {after} by {}",
        s.rule.as_deref()?
    ))
}

#[test]
fn pcapng_packets_are_the_tc_steps_of_the_shown_journeys_with_each_hops_frame_and_the_journey_in_comments()
 {
    let _lab = LabGuard::new();
    let file = std::env::temp_dir().join(format!("pktrace-w-{}.pcapng", std::process::id()));
    let path = file.display().to_string();
    let pk = Pktrace::start(&["--pod", "ubuntu", "--follow", "-w", &path]);
    for addr in [WHEREAMI_CLUSTER_IP.to_string(), INTERNET.to_owned()] {
        lab::client_tcp(&UBUNTU.netns(), &addr).unwrap_or_else(|e| panic!("tcp {addr}: {e:#}"));
    }
    let trace = pk.stop();
    assert!(trace.status.success(), "{}", trace.dump());
    let packets = tshark(&path);
    let _ = std::fs::remove_file(&file);
    let journeys: Vec<&JourneyLine> = trace.journeys();
    let tc: Vec<(usize, &StepLine)> = journeys
        .iter()
        .enumerate()
        .flat_map(|(i, j)| {
            j.steps
                .iter()
                .filter(|s| s.iface.is_some())
                .map(move |s| (i, s))
        })
        .collect();
    assert_eq!(
        packets.len(),
        tc.len(),
        "a packet per tc step\n{}",
        trace.dump()
    );
    eprintln!(
        "{} packets for the tc steps of {} journeys",
        packets.len(),
        journeys.len()
    );
    for (p, (i, s)) in packets.iter().zip(&tc) {
        let iface = s.iface.clone().flatten().unwrap_or_default();
        assert_eq!(p.iface, format!("{iface} {}", point_name(s.point)), "{p:?}");
        // The frame is what this hop saw: before DNAT on the pod's veth, after it beyond.
        assert_eq!((&p.src, &p.dst), (&s.src, &s.dst), "{p:?} {s:?}");
        let head = format!("pktrace journey {}, packet ", i + 1);
        assert!(p.comment.starts_with(&head), "{p:?}");
        assert!(p.comment.contains(" | pod default/ubuntu"), "{p:?}");
        for said in journeys[*i].steps.iter().filter_map(nat_said) {
            assert!(p.comment.contains(&said), "{said} missing from {p:?}");
        }
    }
    let comments: Vec<&str> = packets.iter().map(|p| p.comment.as_str()).collect();
    let dnat = format!("DNAT {WHEREAMI_CLUSTER_IP} -> ");
    assert!(
        comments.iter().any(|c| c.contains(&dnat)
            && c.contains(" by KUBE-SEP-")
            && c.contains("(default/whereami)")),
        "{comments:#?}"
    );
    assert!(
        comments.iter().any(|c| c.contains("SNAT 10.13.76.46:")
            && (c.contains(" by IP-MASQ-AGENT") || c.contains(" by KUBE-POSTROUTING"))),
        "{comments:#?}"
    );
    // The client's veth ingress saw the ClusterIP, the backend's veth egress the backend.
    let cluster = WHEREAMI_CLUSTER_IP.to_string();
    assert!(
        packets.iter().any(|p| p.dst == cluster
            && p.iface.ends_with(" ingress")
            && p.iface.starts_with("azv"))
    );
    assert!(packets.iter().any(|p| p.comment.contains(&dnat)
        && p.dst.starts_with("10.13.")
        && p.iface.ends_with(" egress")
        && p.iface.starts_with("azv")));
}

#[test]
fn pcapng_file_that_cannot_be_created_stops_pktrace_before_it_attaches() {
    let _lab = LabGuard::new();
    let pk = Pktrace::spawn_with_env(
        &["--pod", "ubuntu", "-w", "/nonexistent-pktrace-dir/x.pcapng"],
        &[],
    );
    let trace = pk.wait(std::time::Duration::from_secs(20));
    assert_eq!(trace.status.code(), Some(1), "{}", trace.dump());
    let lines: Vec<&str> = trace.stderr.lines().collect();
    assert_eq!(lines.len(), 1, "{}", trace.stderr);
    assert!(
        lines[0].starts_with(
            "pktrace: cannot create -w /nonexistent-pktrace-dir/x.pcapng (give a file"
        ),
        "{}",
        trace.stderr
    );
}
