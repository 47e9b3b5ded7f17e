use serde_json::{Value, json};

use super::*;

const POD: Ipv4Addr = Ipv4Addr::new(10, 13, 76, 46);
const VIP: Ipv4Addr = Ipv4Addr::new(10, 0, 159, 58);
const BACKEND: Ipv4Addr = Ipv4Addr::new(10, 13, 76, 26);

fn names() -> HashMap<u32, String> {
    [
        (1, "lo"),
        (2, "eth0"),
        (3, "azure0"),
        (4, "azvpod"),
        (5, "azvback"),
    ]
    .into_iter()
    .map(|(i, n)| (i, n.to_owned()))
    .collect()
}

fn ct() -> Vec<CtEntry> {
    vec![CtEntry {
        proto: "tcp".into(),
        orig_src: POD.to_string(),
        orig_dst: VIP.to_string(),
        orig_sport: "40000".into(),
        orig_dport: "80".into(),
        reply_src: BACKEND.to_string(),
        reply_dst: POD.to_string(),
        reply_sport: "80".into(),
        reply_dport: "40000".into(),
    }]
}

fn frame(
    t: u64,
    ifindex: u32,
    outgoing: bool,
    src: (Ipv4Addr, u16),
    dst: (Ipv4Addr, u16),
    id: u16,
) -> Record {
    Record {
        t_us: t,
        ifindex,
        outgoing,
        proto: 6,
        src: src.0,
        dst: dst.0,
        ports: Some((src.1, dst.1)),
        ip_id: id,
        l4: (1, 0, 2),
    }
}

/// A SYN from the pod to the ClusterIP, DNATed to the backend: in on the pod's veth, through
/// the bridge, out on the backend's veth.
fn syn(t: u64, id: u16) -> Vec<Record> {
    vec![
        frame(t, 4, false, (POD, 40000), (VIP, 80), id),
        frame(t + 1, 3, false, (POD, 40000), (VIP, 80), id),
        frame(t + 2, 5, true, (POD, 40000), (BACKEND, 80), id),
    ]
}

fn tc(point: &str, iface: &str, src: &str, dst: &str, id: u64) -> Value {
    json!({"point": point, "iface": iface, "src": src, "dst": dst, "ip_id": id})
}

fn whole_journey(id: u64) -> Value {
    json!({"type": "journey", "ending": "left", "steps": [
        tc("ingress", "azvpod", "10.13.76.46:40000", "10.0.159.58:80", id),
        tc("ingress", "azure0", "10.13.76.46:40000", "10.0.159.58:80", id),
        {"point": "dnat", "src": "10.13.76.46:40000", "dst": "10.13.76.26:80",
         "orig_src": "10.13.76.46:40000", "orig_dst": "10.0.159.58:80", "reply": false},
        tc("egress", "azvback", "10.13.76.46:40000", "10.13.76.26:80", id),
    ]})
}

/// A journey written as JSON (without the fields the property does not read) as the contract's
/// type.
fn journey_line(v: &Value) -> JourneyLine {
    let mut v = v.clone();
    v["proto"] = json!("tcp");
    v["pod"] = json!("default/ubuntu");
    for s in v["steps"].as_array_mut().expect("steps") {
        s["t_ns"] = json!(0);
    }
    serde_json::from_value(v).expect("a journey line")
}

fn tally(frames: &[Record], journeys: &[Value]) -> Tally {
    let packets = forwarded(frames, &ct(), &names(), &[POD]);
    let lines: Vec<JourneyLine> = journeys.iter().map(journey_line).collect();
    let refs: Vec<&JourneyLine> = lines.iter().collect();
    Tally::of(&packets, &refs, &names())
}

#[test]
fn one_journey_with_every_hop_and_the_dnat_is_whole() {
    let t = tally(&syn(10, 7), &[whole_journey(7)]);
    assert_eq!((t.total, t.whole), (1, 1), "{t}");
    assert!(t.holds());
}

#[test]
fn a_journey_cut_at_the_bridge_is_split() {
    let first = json!({"type": "journey", "ending": "timed_out", "steps": [
        tc("ingress", "azvpod", "10.13.76.46:40000", "10.0.159.58:80", 7)]});
    let second = json!({"type": "journey", "ending": "left", "steps": [
        tc("ingress", "azure0", "10.13.76.46:40000", "10.0.159.58:80", 7),
        {"point": "dnat", "src": "10.13.76.46:40000", "dst": "10.13.76.26:80",
         "orig_src": "10.13.76.46:40000", "orig_dst": "10.0.159.58:80", "reply": false},
        tc("egress", "azvback", "10.13.76.46:40000", "10.13.76.26:80", 7)]});
    let t = tally(&syn(10, 7), &[first, second]);
    assert_eq!((t.total, t.split), (1, 1), "{t}");
    assert!(!t.holds());
    assert!(t.to_string().contains("journey 1: ingress azure0"), "{t}");
}

#[test]
fn missing_hops_nat_steps_and_journeys_are_told_apart() {
    // The first hop is missing (as for a first packet from outside without its uplink step).
    let mut late = whole_journey(7);
    late["steps"].as_array_mut().unwrap().remove(0);
    let t = tally(&syn(10, 7), &[late]);
    assert_eq!(t.partial, 1, "{t}");
    assert!(t.bad[0].contains("no step for ingress azvpod"), "{t}");
    // Every hop, but no DNAT step.
    let mut no_nat = whole_journey(7);
    no_nat["steps"].as_array_mut().unwrap().remove(2);
    let t = tally(&syn(10, 7), &[no_nat]);
    assert!(t.bad[0].contains("no NAT step for 10.13.76.46:40000 > 10.0.159.58:80 -> 10.13.76.46:40000 > 10.13.76.26:80"), "{t}");
    // A NAT step of another packet.
    let mut other = whole_journey(7);
    other["steps"][2]["orig_dst"] = json!("10.0.159.59:80");
    let t = tally(&syn(10, 7), &[other]);
    assert!(
        t.bad[0].contains("dnat step rewrote 10.13.76.46:40000 > 10.0.159.59:80"),
        "{t}"
    );
    // Another IP id: no journey.
    let t = tally(&syn(10, 7), &[whole_journey(8)]);
    assert_eq!(t.missing, 1, "{t}");
    assert!(!Tally::default().holds(), "no packet is no evidence");
}

#[test]
fn replies_group_with_their_connection_and_retransmits_are_packets_of_their_own() {
    // The backend's SYN-ACK (id 0), sent twice, un-DNATed on the way.
    let synack = |t| {
        vec![
            frame(t, 5, false, (BACKEND, 80), (POD, 40000), 0),
            frame(t + 1, 4, true, (VIP, 80), (POD, 40000), 0),
        ]
    };
    let frames: Vec<Record> = [synack(10), synack(20)].concat();
    let packets = forwarded(&frames, &ct(), &names(), &[POD]);
    assert_eq!(packets.len(), 2, "{packets:#?}");
    assert!(packets.iter().all(|p| p.frames.len() == 2));
}

#[test]
fn packets_of_others_local_ones_and_loopback_are_left_out() {
    let other = Ipv4Addr::new(10, 13, 76, 7);
    let frames = vec![
        // Between two other hosts.
        frame(1, 2, false, (other, 1), (BACKEND, 80), 1),
        frame(2, 5, true, (other, 1), (BACKEND, 80), 1),
        // Received only (delivered to the node).
        frame(3, 4, false, (POD, 5), (Ipv4Addr::new(10, 13, 76, 4), 22), 2),
        // On lo.
        frame(4, 1, false, (POD, 6), (BACKEND, 80), 3),
        frame(5, 1, true, (POD, 6), (BACKEND, 80), 3),
    ];
    assert!(forwarded(&frames, &ct(), &names(), &[POD]).is_empty());
}

#[test]
fn a_reply_un_dnated_on_its_way_is_whole() {
    let frames = vec![
        frame(10, 5, false, (BACKEND, 80), (POD, 40000), 9),
        frame(11, 4, true, (VIP, 80), (POD, 40000), 9),
    ];
    let j = json!({"type": "journey", "ending": "left", "steps": [
        tc("ingress", "azvback", "10.13.76.26:80", "10.13.76.46:40000", 9),
        {"point": "dnat", "reply": true, "src": "10.0.159.58:80", "dst": "10.13.76.46:40000",
         "orig_src": "10.13.76.26:80", "orig_dst": "10.13.76.46:40000"},
        tc("egress", "azvpod", "10.0.159.58:80", "10.13.76.46:40000", 9),
    ]});
    let t = tally(&frames, &[j]);
    assert!(t.holds(), "{t}");
}
