use super::*;
use crate::{FAMILY_IPV6, PROTO_TCP, PROTO_UDP, flag, hook};

fn bytes_of<T: Copy>(v: &T) -> Vec<u8> {
    // SAFETY: plain `repr(C)` data without implicit padding, read as bytes.
    unsafe { core::slice::from_raw_parts((v as *const T).cast::<u8>(), size_of::<T>()) }.to_vec()
}

fn compact() -> TcEventV4 {
    TcEventV4 {
        kind: kind::TC_EGRESS,
        flags: flag::TRUNCATED,
        proto: PROTO_UDP,
        ifindex: 0x0102_0304,
        ktime_ns: 0x1122_3344_5566_7788,
        len: 1514,
        mark: 0x4000,
        fp: Fingerprint {
            ip_id: 7,
            a: 8,
            b: 9,
            c: 10,
        },
        saddr: [10, 0, 0, 1],
        daddr: [192, 0, 2, 7],
        sport: 41234,
        dport: 53,
        ..TcEventV4::default()
    }
}

#[test]
fn compact_record_decodes_into_the_event_it_stands_for() {
    let r = compact();
    let mut want = Event {
        kind: kind::TC_EGRESS,
        ct_info: ct::NONE,
        flags: flag::TRUNCATED,
        ifindex: 0x0102_0304,
        ktime_ns: 0x1122_3344_5566_7788,
        len: 1514,
        mark: 0x4000,
        fp: r.fp,
        ..Event::default()
    };
    want.tuple.saddr[..4].copy_from_slice(&[10, 0, 0, 1]);
    want.tuple.daddr[..4].copy_from_slice(&[192, 0, 2, 7]);
    want.tuple.sport = 41234;
    want.tuple.dport = 53;
    want.tuple.proto = PROTO_UDP;
    want.tuple.family = FAMILY_IPV4;
    assert_eq!(Record::decode(&bytes_of(&r)), Ok(want));
    // Any alignment of the record in the ring.
    let mut shifted = vec![0u8; 3];
    shifted.extend(bytes_of(&r));
    assert_eq!(Record::decode(&shifted[3..]), Ok(want));
    let ingress = TcEventV4 {
        kind: kind::TC_INGRESS,
        ..r
    };
    assert_eq!(
        Record::decode(&bytes_of(&ingress)).map(|e| e.kind),
        Ok(kind::TC_INGRESS)
    );
}

fn nat_compact() -> NatEventV4 {
    NatEventV4 {
        kind: kind::NAT,
        hook: hook::PRE_ROUTING,
        ct_info: ct::IS_REPLY,
        flags: flag::NAT_HOOK_TIMED | flag::TRUNCATED,
        ifindex: 0x0a0b_0c0d,
        ktime_ns: 0x0102_0304_0506_0708,
        skb: 0xffff_8880_1234_5678,
        len: 65_226,
        mark: 0x4000,
        nat_ns: 0x1_0000_2710,
        fp: Fingerprint {
            ip_id: 11,
            a: 12,
            b: 13,
            c: 14,
        },
        saddr: [10, 0, 0, 1],
        daddr: [10, 244, 1, 9],
        sport: 41234,
        dport: 8080,
        proto: PROTO_TCP,
        orig_proto: PROTO_UDP,
        orig_saddr: [10, 0, 0, 1],
        orig_daddr: [10, 0, 160, 10],
        orig_sport: 41235,
        orig_dport: 80,
        ..NatEventV4::default()
    }
}

#[test]
fn compact_nat_record_decodes_into_the_event_it_stands_for() {
    let r = nat_compact();
    let mut want = Event {
        kind: kind::NAT,
        hook: hook::PRE_ROUTING,
        ct_info: ct::IS_REPLY,
        flags: flag::NAT_HOOK_TIMED | flag::TRUNCATED,
        ifindex: 0x0a0b_0c0d,
        ktime_ns: 0x0102_0304_0506_0708,
        skb: 0xffff_8880_1234_5678,
        len: 65_226,
        mark: 0x4000,
        nat_ns: 0x1_0000_2710,
        fp: r.fp,
        ..Event::default()
    };
    want.tuple.saddr[..4].copy_from_slice(&[10, 0, 0, 1]);
    want.tuple.daddr[..4].copy_from_slice(&[10, 244, 1, 9]);
    (want.tuple.sport, want.tuple.dport) = (41234, 8080);
    want.tuple.proto = PROTO_TCP;
    want.tuple.family = FAMILY_IPV4;
    want.orig.saddr[..4].copy_from_slice(&[10, 0, 0, 1]);
    want.orig.daddr[..4].copy_from_slice(&[10, 0, 160, 10]);
    (want.orig.sport, want.orig.dport) = (41235, 80);
    want.orig.proto = PROTO_UDP;
    want.orig.family = FAMILY_IPV4;
    assert_eq!(Record::decode(&bytes_of(&r)), Ok(want));
    // Any alignment of the record in the ring.
    for shift in 1..8 {
        let mut shifted = vec![0u8; shift];
        shifted.extend(bytes_of(&r));
        assert_eq!(Record::decode(&shifted[shift..]), Ok(want));
    }
    // With the ring's 8-byte header: two whole cache lines, as a compact tc record is one.
    assert_eq!((8 + size_of::<NatEventV4>()) % 64, 0);
    assert_eq!((8 + size_of::<TcEventV4>()) % 64, 0);
}

#[test]
fn compact_nat_records_of_other_kinds_are_bad() {
    for k in [0, kind::TC_INGRESS, kind::TC_EGRESS, 4, 0xff] {
        let r = NatEventV4 {
            kind: k,
            ..nat_compact()
        };
        assert_eq!(Record::decode(&bytes_of(&r)), Err(BadRecord::Kind(k)));
    }
}

#[test]
fn full_record_round_trips() {
    for k in [kind::TC_INGRESS, kind::TC_EGRESS, kind::NAT] {
        let mut ev = Event {
            kind: k,
            hook: hook::POST_ROUTING,
            ct_info: ct::NEW,
            skb: 0xffff_8880_0000_1000,
            nat_ns: 2710,
            ..Event::default()
        };
        ev.tuple.saddr = [0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
        ev.tuple.family = FAMILY_IPV6;
        ev.orig.family = FAMILY_IPV4;
        assert_eq!(Record::decode(&bytes_of(&ev)), Ok(ev));
    }
}

#[test]
fn records_of_other_lengths_are_bad_not_events() {
    let full = bytes_of(&Event {
        kind: kind::NAT,
        ..Event::default()
    });
    let mut long = full.clone();
    long.extend([0; 8]);
    for n in
        (0..full.len()).filter(|&n| n != size_of::<TcEventV4>() && n != size_of::<NatEventV4>())
    {
        assert_eq!(Record::decode(&full[..n]), Err(BadRecord::Length(n)));
    }
    assert_eq!(
        Record::decode(&long),
        Err(BadRecord::Length(full.len() + 8))
    );
}

#[test]
fn unknown_kinds_are_bad_not_events() {
    // A compact record carries tc events only; a NAT kind there is as wrong as kind 0.
    for k in [0, kind::NAT, 4, 0xff] {
        let r = TcEventV4 {
            kind: k,
            ..compact()
        };
        assert_eq!(Record::decode(&bytes_of(&r)), Err(BadRecord::Kind(k)));
    }
    for k in [0, 4, 0xff] {
        let ev = Event {
            kind: k,
            ..Event::default()
        };
        assert_eq!(Record::decode(&bytes_of(&ev)), Err(BadRecord::Kind(k)));
    }
}
