use std::sync::{Arc, Mutex};

use pcap_file::{
    DataLink,
    pcapng::{Block, PcapNgReader, blocks::enhanced_packet::EnhancedPacketOption},
};
use tracer_common::{Fingerprint, Frame, PROTO_TCP, TcHook, TcSeen};

use super::*;
use crate::{
    collect::frames::{Frames, Shared as SharedFrames},
    config::Format,
    journey::{Ending, Point},
    output::{
        sink,
        test_support::{Shared as Buf, nat, t, tc},
    },
};

/// What the reader found: each interface's name, and each packet's interface, time, bytes,
/// original length and comment.
struct ReadBack {
    ifaces: Vec<(String, u32, Option<u8>)>,
    packets: Vec<(u32, u128, Vec<u8>, u32, String)>,
}

fn read_back(bytes: &[u8]) -> ReadBack {
    let mut r = PcapNgReader::new(bytes).expect("a section header");
    let mut back = ReadBack {
        ifaces: Vec::new(),
        packets: Vec::new(),
    };
    while let Some(block) = r.next_block() {
        match block.expect("a valid block") {
            Block::InterfaceDescription(i) => {
                assert_eq!(i.linktype, DataLink::ETHERNET);
                let mut name = String::new();
                let mut resol = None;
                for o in &i.options {
                    match o {
                        InterfaceDescriptionOption::IfName(n) => name = n.to_string(),
                        InterfaceDescriptionOption::IfTsResol(r) => resol = Some(*r),
                        _ => {}
                    }
                }
                back.ifaces.push((name, i.snaplen, resol));
            }
            Block::EnhancedPacket(p) => {
                let comment = p
                    .options
                    .iter()
                    .find_map(|o| match o {
                        EnhancedPacketOption::Comment(c) => Some(c.to_string()),
                        _ => None,
                    })
                    .unwrap_or_default();
                back.packets.push((
                    p.interface_id,
                    p.timestamp.as_nanos(),
                    p.data.to_vec(),
                    p.original_len,
                    comment,
                ));
            }
            other => panic!("unexpected block {other:?}"),
        }
    }
    back
}

fn seen(hook: TcHook, ktime_ns: u64, tuple: tracer_common::Tuple) -> TcSeen {
    TcSeen {
        hook,
        flags: 0,
        ifindex: 1,
        ktime_ns,
        fp: Fingerprint::default(),
        tuple,
    }
}

/// A capture in front of a JSON sink, both into buffers; `print` as without `-w -`.
fn capture(print: bool, frames: SharedFrames) -> (PcapSink, Buf, Buf) {
    let (pcap, json) = (Buf::default(), Buf::default());
    let inner = sink(
        Format::Json,
        false,
        "default/ubuntu".into(),
        Box::new(json.clone()),
    );
    let s = PcapSink::new(
        inner,
        Box::new(pcap.clone()),
        frames,
        Options {
            print_journeys: print,
            snaplen: 128,
            wall_offset_ns: 1_000_000_000_000,
            pod: "default/ubuntu".into(),
        },
    )
    .expect("header written");
    (s, pcap, json)
}

#[test]
fn each_tc_step_is_a_packet_with_its_frame_on_its_hooks_interface_and_the_journey_in_its_comment() {
    let a = t(PROTO_TCP, "10.13.76.46:41234", "10.0.159.58:80");
    let b = t(PROTO_TCP, "10.13.76.46:41234", "10.13.76.26:80");
    let frames: SharedFrames = Arc::new(Mutex::new(Frames::default()));
    {
        let mut f = frames.lock().unwrap();
        f.add(
            &seen(TcHook::Ingress, 100, a),
            Frame {
                bytes: &[1, 2, 3],
                orig_len: 74,
            },
        );
        f.add(
            &seen(TcHook::Egress, 300, b),
            Frame {
                bytes: &[4, 5],
                orig_len: 74,
            },
        );
    }
    let (mut s, pcap, json) = capture(true, Arc::clone(&frames));
    let mut dnat = nat(Point::Dnat, a, b, 200, Some(2_000));
    dnat.attribution = Some(Arc::new(crate::journey::Attribution {
        rule: "KUBE-SEP-6HBOEI5FVFTJNRJ3".into(),
        service: Some("default/whereami".into()),
        why: None,
    }));
    let j = Journey {
        steps: vec![
            tc(Point::Ingress, "azv47c3ee9d512", a, 100),
            dnat,
            tc(Point::Egress, "azva4124965a9b", b, 300),
        ],
        ending: Ending::Left,
    };
    s.journey(&j).unwrap();
    // A second journey on a hook already named: no new interface block; its frame is gone.
    s.journey(&Journey {
        steps: vec![tc(Point::Ingress, "azv47c3ee9d512", a, 400)],
        ending: Ending::TimedOut,
    })
    .unwrap();
    s.flush().unwrap();
    let back = read_back(&pcap.0.lock().unwrap());
    assert_eq!(
        back.ifaces,
        [
            ("azv47c3ee9d512 ingress".to_owned(), 128, Some(9)),
            ("azva4124965a9b egress".to_owned(), 128, Some(9))
        ]
    );
    let dnat_line =
        "DNAT 10.0.159.58:80 -> 10.13.76.26:80 by KUBE-SEP-6HBOEI5FVFTJNRJ3 (default/whereami)";
    assert_eq!(
        back.packets,
        [
            (
                0,
                1_000_000_000_100,
                vec![1, 2, 3],
                74,
                format!(
                    "pktrace journey 1, packet 1/2: ingress azv47c3ee9d512 | pod default/ubuntu | {dnat_line}"
                )
            ),
            (
                1,
                1_000_000_000_300,
                vec![4, 5],
                74,
                format!(
                    "pktrace journey 1, packet 2/2: egress azva4124965a9b | pod default/ubuntu | {dnat_line}"
                )
            ),
            (
                0,
                1_000_000_000_400,
                vec![],
                0,
                "pktrace journey 2, packet 1/1: ingress azv47c3ee9d512 | \
                pod default/ubuntu | ended: timed out (no later hook saw the packet within 1 s) | \
                frame not captured: it was let go before its journey was written"
                    .to_owned()
            ),
        ]
    );
    assert!(
        frames.lock().unwrap().is_empty(),
        "written frames are let go"
    );
    assert_eq!(json.text().lines().count(), 2, "the JSON output goes on");
}

#[test]
fn to_stdout_the_journeys_go_to_the_pcapng_only_and_the_summary_still_comes() {
    let frames = Arc::new(Mutex::new(Frames::default()));
    let (mut s, pcap, json) = capture(false, frames);
    let a = t(PROTO_TCP, "10.13.76.46:41234", "10.0.159.58:80");
    s.journey(&Journey {
        steps: vec![tc(Point::Egress, "eth0", a, 5)],
        ending: Ending::Left,
    })
    .unwrap();
    s.summary(&Summary::new()).unwrap();
    assert_eq!(read_back(&pcap.0.lock().unwrap()).packets.len(), 1);
    let text = json.text();
    assert!(!text.contains("\"journey\""), "{text}");
    assert!(text.contains("\"summary\""), "{text}");
}

#[test]
fn a_dropped_journeys_comment_says_the_reason_location_and_rule() {
    let tuple = t(PROTO_TCP, "10.13.76.46:42940", "10.0.77.77:80");
    let mut drop = Step::drop_at("NETFILTER_DROP", "nft_do_chain", tuple, 1_000);
    if let StepKind::Drop(d) = &mut drop.kind {
        d.class = crate::drops::FailureClass::NoEndpoints;
    }
    drop.attribution = Some(Arc::new(crate::journey::Attribution {
        rule: "KUBE-SERVICES rule 3".into(),
        service: Some("default/web-gone".into()),
        why: Some("has no endpoints".into()),
    }));
    let j = Journey {
        steps: vec![drop],
        ending: Ending::Dropped,
    };
    assert_eq!(
        comment::journey_lines(&j),
        [
            "dropped no_endpoints: NETFILTER_DROP at nft_do_chain by KUBE-SERVICES rule 3 (default/web-gone): has no endpoints"
        ]
    );
}
