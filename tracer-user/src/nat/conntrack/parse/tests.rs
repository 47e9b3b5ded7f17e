use super::*;
use crate::journey::model::endpoint;

/// Captured on kernel 6.18 (`NFNLGRP_CONNTRACK_NEW`, one datagram each) in a throwaway network
/// namespace: a UDP datagram 192.0.2.10:40000 → 198.51.100.7:53 sent through
/// `DNAT --to-destination 192.0.2.10:5353` (OUTPUT) and `SNAT --to-source 192.0.2.10:4000`
/// (POSTROUTING).
const UDP_DNAT_SNAT: &str = "9400000000010006000000000000000002000000340001801400018008000100c000020a08000200c63364071c0002800500010011000000060002009c4000000600030000350000340002801400018008000100c000020a08000200c000020a1c00028005000100110000000600020014e90000060003000fa0000008000c0035a49d3608000300000001b8080007000000001e";
/// The same namespace: `ping 198.51.100.8` (echo identifier 0x64a9) through
/// `DNAT --to-destination 192.0.2.10`.
const ICMP_DNAT: &str = "a4000000000100060000000000000000020000003c0001801400018008000100c000020a08000200c63364082400028005000100010000000600040064a90000050005000800000005000600000000003c0002801400018008000100c000020a08000200c000020a2400028005000100010000000600040064a900000500050000000000050006000000000008000c00f7cdff0f08000300000001a8080007000000001e";

fn bytes(hex: &str) -> Vec<u8> {
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
        .collect()
}

fn eps(t: &Tuple) -> (String, String) {
    (endpoint(t, true), endpoint(t, false))
}

#[test]
fn a_new_entry_gives_both_tuples_and_both_nat_directions() {
    let parsed = parse_datagram(&bytes(UDP_DNAT_SNAT));
    assert_eq!(parsed.unreadable, 0);
    let [e] = parsed.entries[..] else {
        panic!("{parsed:?}")
    };
    assert_eq!(e.orig.proto, tracer_common::PROTO_UDP);
    assert_eq!(
        eps(&e.orig),
        ("192.0.2.10:40000".into(), "198.51.100.7:53".into())
    );
    assert_eq!(
        eps(&e.reply),
        ("192.0.2.10:5353".into(), "192.0.2.10:4000".into())
    );
    assert!(e.dnat() && e.snat());
}

#[test]
fn icmp_entries_key_by_the_echo_identifier() {
    let parsed = parse_datagram(&bytes(ICMP_DNAT));
    let [e] = parsed.entries[..] else {
        panic!("{parsed:?}")
    };
    assert_eq!(e.orig.proto, PROTO_ICMP);
    assert_eq!((e.orig.sport, e.orig.dport), (0x64a9, 0x64a9));
    assert_eq!((e.reply.sport, e.reply.dport), (0x64a9, 0x64a9));
    assert_eq!(eps(&e.reply), ("192.0.2.10".into(), "192.0.2.10".into()));
    assert!(e.dnat() && !e.snat());
}

#[test]
fn several_messages_in_a_datagram_and_damaged_ones_are_counted() {
    let mut both = bytes(UDP_DNAT_SNAT);
    both.extend(bytes(ICMP_DNAT));
    assert_eq!(parse_datagram(&both).entries.len(), 2);
    // Cut inside the second message: the first is read, the rest is counted.
    let cut = &both[..both.len() - 20];
    let parsed = parse_datagram(cut);
    assert_eq!((parsed.entries.len(), parsed.unreadable), (1, 1));
    // A message whose tuple attribute is truncated inside (its length says 0x34, 8 given).
    let mut bad = bytes(UDP_DNAT_SNAT);
    bad[20..22].copy_from_slice(&0x0ff0u16.to_ne_bytes());
    let parsed = parse_datagram(&bad);
    assert_eq!((parsed.entries.len(), parsed.unreadable), (0, 1));
    // Another subsystem's message is no entry and no damage.
    let mut other = bytes(UDP_DNAT_SNAT);
    other[5] = 10;
    assert_eq!(parse_datagram(&other), Parsed::default());
}
