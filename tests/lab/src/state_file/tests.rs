//! The rendered state file parses, has the lab's pods, and has the fixture's exact shape.

use std::time::Duration;

use serde_json::Value;

use super::*;
use crate::topology::{PODS, mac_for};

const FIXTURE: &str = include_str!("../testdata/azure-vnet.fixture.json");

fn decode64(text: &str) -> Vec<u8> {
    const ALPHABET: &str = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let sextets: Vec<u32> = text
        .trim_end_matches('=')
        .chars()
        .map(|c| u32::try_from(ALPHABET.find(c).expect("base64 digit")).unwrap())
        .collect();
    let bits: u64 = sextets.iter().fold(0, |acc, s| acc << 6 | u64::from(*s));
    let nbytes = sextets.len() * 6 / 8;
    let total = sextets.len() * 6;
    (0..nbytes)
        .map(|i| (bits >> (total - 8 * (i + 1)) & 0xff) as u8)
        .collect()
}

fn endpoints(doc: &Value) -> &serde_json::Map<String, Value> {
    doc["Network"]["ExternalInterfaces"]["eth0"]["Networks"]["azure"]["Endpoints"]
        .as_object()
        .expect("Endpoints is an object")
}

/// The JSON types at every path; endpoint IDs collapse to one key.
fn shape(value: &Value) -> Value {
    match value {
        Value::Null => "null".into(),
        Value::Bool(_) => "bool".into(),
        Value::Number(_) => "number".into(),
        Value::String(_) => "string".into(),
        Value::Array(items) => {
            let mut shapes: Vec<Value> = items.iter().map(shape).collect();
            shapes.dedup();
            Value::Array(shapes)
        }
        Value::Object(map) => {
            let mut out = serde_json::Map::new();
            for (key, item) in map {
                let key = if key.ends_with("-eth0") {
                    "<endpoint>"
                } else {
                    key.as_str()
                };
                let previous = out.insert(key.to_owned(), shape(item));
                assert!(
                    previous.is_none_or(|p| p == out[key]),
                    "endpoints differ in shape"
                );
            }
            Value::Object(out)
        }
    }
}

#[test]
fn base64_matches_the_cni() {
    assert_eq!(base64(&prefix_mask(24).octets()), "////AA==");
    assert_eq!(base64(&prefix_mask(0).octets()), "AAAAAA==");
    assert_eq!(base64(&NODE_UPLINK_MAC), "AA06KL0C");
    assert_eq!(base64(&[0xee, 0xaf, 0xf8, 0x66, 0x59, 0xbd]), "7q/4Zlm9");
    assert_eq!(base64(b"ab"), "YWI=");
    assert_eq!(decode64("qgj8xJz4"), [0xaa, 0x08, 0xfc, 0xc4, 0x9c, 0xf8]);
}

#[test]
fn timestamps_are_rfc3339_utc() {
    let t = UNIX_EPOCH + Duration::new(1_795_184_645, 812_412_634);
    assert_eq!(rfc3339(t), "2026-11-20T14:24:05.812412634Z");
    assert_eq!(
        rfc3339(UNIX_EPOCH + Duration::from_hours(264_384)),
        "2000-02-29T00:00:00.000000000Z"
    );
}

#[test]
fn state_file_has_the_fixture_shape() {
    let ours: Value = serde_json::from_str(&render(&PODS, SystemTime::now())).expect("valid JSON");
    let fixture: Value = serde_json::from_str(FIXTURE).expect("fixture parses");
    assert_eq!(shape(&ours), shape(&fixture));
}

#[test]
fn state_file_lists_the_lab_pods() {
    let doc: Value = serde_json::from_str(&render(&PODS, UNIX_EPOCH)).expect("valid JSON");
    let endpoints = endpoints(&doc);
    assert_eq!(endpoints.len(), PODS.len());
    for pod in PODS {
        let (id, ep) = endpoints
            .iter()
            .find(|(_, ep)| ep["PODName"] == pod.name)
            .unwrap_or_else(|| panic!("no endpoint for {}", pod.name));
        assert_eq!(ep["Id"], id.as_str());
        assert!(id.ends_with("-eth0") && ep["ContainerID"].as_str().unwrap().starts_with(&id[..8]));
        assert_eq!(ep["PODNameSpace"], pod.namespace);
        assert_eq!(ep["HostIfName"], pod.host_if);
        assert_eq!(ep["IfName"], "eth0");
        assert_eq!(ep["IPAddresses"][0]["IP"], pod.ip.to_string());
        assert_eq!(
            decode64(ep["IPAddresses"][0]["Mask"].as_str().unwrap()),
            [255, 255, 255, 0]
        );
        assert_eq!(
            decode64(ep["MacAddress"].as_str().unwrap()),
            mac_for(pod.ip)
        );
        assert_eq!(ep["Routes"][0]["Gw"], "10.13.76.1");
        assert_eq!(
            ep["SandboxKey"],
            format!("/var/run/netns/pkt-pod-{}", pod.name)
        );
    }
    let eth0 = &doc["Network"]["ExternalInterfaces"]["eth0"];
    assert_eq!(eth0["BridgeName"], "azure0");
    assert_eq!(eth0["Subnets"][0], "10.13.76.0/24");
    assert_eq!(
        doc["Network"]["TimeStamp"],
        "1970-01-01T00:00:00.000000000Z"
    );
}

#[test]
fn container_ids_are_stable_and_distinct() {
    let ids: Vec<String> = PODS.iter().map(container_id).collect();
    assert!(
        ids.iter()
            .all(|id| id.len() == 32 && id.bytes().all(|b| b.is_ascii_hexdigit()))
    );
    let mut unique = ids.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), ids.len());
    assert_eq!(container_id(&PODS[0]), ids[0]);
}
