//! Ring-buffer records as the collector reads them (`tracer_common::Record::decode`): any bytes
//! either decode or are refused, never panic; a record decodes exactly when it has one of the
//! three layouts' lengths and a kind that layout carries; and the event holds the record's fields,
//! read here from their byte offsets independently of the decoder.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tracer_common::{BadRecord, Event, FAMILY_IPV4, NatEventV4, Record, TcEventV4, ct, kind};

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_ne_bytes([b[at], b[at + 1]])
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_ne_bytes(b[at..at + 4].try_into().unwrap())
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_ne_bytes(b[at..at + 8].try_into().unwrap())
}

fuzz_target!(|data: &[u8]| {
    let got = Record::decode(data);
    let compact = data.len() == size_of::<TcEventV4>();
    let nat = data.len() == size_of::<NatEventV4>();
    let full = data.len() == size_of::<Event>();
    if !compact && !nat && !full {
        assert_eq!(got, Err(BadRecord::Length(data.len())));
        return;
    }
    let k = data[0];
    let known = if compact {
        k == kind::TC_INGRESS || k == kind::TC_EGRESS
    } else if nat {
        k == kind::NAT
    } else {
        (kind::TC_INGRESS..=kind::NAT).contains(&k)
    };
    if !known {
        assert_eq!(got, Err(BadRecord::Kind(k)));
        return;
    }
    let ev = got.expect("a known kind at a known length decodes");
    if full {
        // The event is the record's bytes.
        // SAFETY: plain `repr(C)` data without padding, read as bytes.
        let bytes = unsafe {
            core::slice::from_raw_parts((&ev as *const Event).cast::<u8>(), size_of::<Event>())
        };
        assert_eq!(bytes, data);
        return;
    }
    if nat {
        check_nat(&ev, data);
        return;
    }
    // Layout of TcEventV4: kind, flags, proto, pad, ifindex, ktime_ns, len, mark, fp (16),
    // saddr, daddr, sport, dport, pad.
    assert_eq!(
        (ev.kind, ev.hook, ev.ct_info, ev.flags),
        (k, 0, ct::NONE, data[1])
    );
    assert_eq!(ev.ifindex, u32_at(data, 4));
    assert_eq!(ev.ktime_ns, u64_at(data, 8));
    assert_eq!((ev.len, ev.mark), (u32_at(data, 16), u32_at(data, 20)));
    assert_eq!(
        [ev.fp.ip_id, ev.fp.a, ev.fp.b, ev.fp.c],
        [
            u32_at(data, 24),
            u32_at(data, 28),
            u32_at(data, 32),
            u32_at(data, 36)
        ]
    );
    let t = &ev.tuple;
    assert_eq!((t.family, t.proto), (FAMILY_IPV4, data[2]));
    assert_eq!(&t.saddr[..4], &data[40..44]);
    assert_eq!(&t.daddr[..4], &data[44..48]);
    assert!(t.saddr[4..].iter().chain(&t.daddr[4..]).all(|&b| b == 0));
    assert_eq!((t.sport, t.dport), (u16_at(data, 48), u16_at(data, 50)));
    assert_eq!((ev.skb, ev.netns, ev.nat_ns), (0, 0, 0));
    assert_eq!(ev.orig, Default::default());
});

/// Layout of NatEventV4: kind, hook, ct_info, flags, ifindex, ktime_ns, skb, len, mark, nat_ns,
/// fp (16), then the packet after (saddr, daddr, sport, dport, proto), orig_proto, pad, the
/// packet before (saddr, daddr, sport, dport), pad.
fn check_nat(ev: &Event, data: &[u8]) {
    assert_eq!(
        (ev.kind, ev.hook, ev.ct_info, ev.flags),
        (data[0], data[1], data[2], data[3])
    );
    assert_eq!(ev.ifindex, u32_at(data, 4));
    assert_eq!(ev.ktime_ns, u64_at(data, 8));
    assert_eq!(ev.skb, u64_at(data, 16));
    assert_eq!((ev.len, ev.mark), (u32_at(data, 24), u32_at(data, 28)));
    assert_eq!(ev.nat_ns, u64_at(data, 32));
    assert_eq!(
        [ev.fp.ip_id, ev.fp.a, ev.fp.b, ev.fp.c],
        [
            u32_at(data, 40),
            u32_at(data, 44),
            u32_at(data, 48),
            u32_at(data, 52)
        ]
    );
    assert_eq!(ev.netns, 0);
    for (t, at, proto) in [(&ev.tuple, 56, data[68]), (&ev.orig, 72, data[69])] {
        assert_eq!((t.family, t.proto), (FAMILY_IPV4, proto));
        assert_eq!(&t.saddr[..4], &data[at..at + 4]);
        assert_eq!(&t.daddr[..4], &data[at + 4..at + 8]);
        assert!(t.saddr[4..].iter().chain(&t.daddr[4..]).all(|&b| b == 0));
        assert_eq!(
            (t.sport, t.dport),
            (u16_at(data, at + 8), u16_at(data, at + 10))
        );
        assert_eq!(t._pad, [0, 0]);
    }
}
