//! Arbitrary bytes through the packet parser exactly as the kernel programs call it: copied into
//! a fixed window (`parse::window_of`, like `bpf_skb_load_bytes` into the per-CPU scratch
//! buffer), then `parse_ethernet` (tc) and `parse_l3` (netfilter) with the same window.
//!
//! Beyond "no panic" (overflow checks are on), what must hold for every input:
//! - the result depends on the first `cap` bytes only: the scratch window keeps stale bytes of
//!   earlier packets past `cap`, and reads that wrap around the window's mask would show here;
//! - a successful parse does not depend on what the reused output held before, and a failed
//!   one leaves it untouched (the kernel reuses one `Parsed` per CPU);
//! - family 4 or 6, zero padding, IPv4 addresses in the first four bytes with the rest zero,
//!   addresses, protocol and IP id read from where the header has them;
//! - only known flag bits; a truncated L4 header yields no ports and no L4 fingerprint; only
//!   TCP, UDP and ICMP have ports, ICMP's are the echo identifier on both sides; an IPv4 later
//!   fragment has no ports;
//! - the tc view of a frame and the netfilter view of its L3 packet agree when both windows
//!   hold the same bytes;
//! - the netfilter programs' parse from the first `FAST_PARSE_BYTES` (`parse_ipv4_fast`),
//!   when it applies, is exactly `parse_l3`'s result, whatever the bytes it was given past the
//!   packet's end;
//! - the tc programs' in-place parse (`parse_ethernet_fast`), when it applies, is exactly
//!   `parse_ethernet`'s result, for the frame as it is and as the linear head of a longer
//!   (GSO) packet whose further bytes it never reads;
//! - the ports the tc programs read in place (`ethernet_ports_fast`) are the in-place parse's,
//!   for exactly its TCP and UDP packets.
#![no_main]

use std::mem::MaybeUninit;

use libfuzzer_sys::fuzz_target;
use tracer_common::{
    FAMILY_IPV4, FAMILY_IPV6, Fingerprint, PKT_WINDOW, PROTO_ICMP, PROTO_ICMPV6, PROTO_TCP,
    PROTO_UDP, Tuple, flag,
    parse::{self, Parsed, Window},
};

type Parser = fn(&Window, usize, &mut Parsed) -> bool;

fuzz_target!(|data: &[u8]| {
    let (w, cap) = parse::window_of(data);
    let l2 = run(parse::parse_ethernet, &w, cap);
    let l3 = run(parse::parse_l3, &w, cap);
    if let Some(p) = &l3 {
        check_l3_fields(p, &data[..cap], 0);
    }
    check_fast_l3(&data[..cap], l3.as_ref());
    check_fast_ethernet(data, l2.as_ref());
    if let Some(p) = &l2 {
        let off = l3_offset(&data[..cap]).expect("parse_ethernet read an IP packet past its tags");
        check_l3_fields(p, &data[..cap], off);
    }
    // The netfilter view of the same bytes (the frame as the L2 window holds it, minus its
    // Ethernet header and tags) must read the same packet, when its version matches.
    if let Some(off) = l3_offset(&data[..cap]) {
        let (w3, cap3) = parse::window_of(&data[off..cap]);
        let from_l3 = run(parse::parse_l3, &w3, cap3);
        let ethertype = u16::from_be_bytes([data[off - 2], data[off - 1]]);
        let version_matches = data.get(off).is_some_and(|b| {
            (b >> 4 == 4 && ethertype == 0x0800) || (b >> 4 == 6 && ethertype == 0x86dd)
        });
        if version_matches {
            assert_eq!(l2, from_l3, "tc and netfilter views differ");
        } else {
            assert_eq!(
                l2, None,
                "parsed an IP version the ethertype does not announce"
            );
        }
    }
});

/// The netfilter exit's parse from the packet's first `FAST_PARSE_BYTES` (bytes past the
/// packet's `cap` hold garbage, as the loads past a short packet's end may) equals
/// `parse_l3`'s result (`l3`) whenever it claims the packet; a refused parse leaves its output
/// untouched.
fn check_fast_l3(packet: &[u8], l3: Option<&Parsed>) {
    let cap = packet.len();
    let mut head = [0u8; parse::FAST_PARSE_BYTES];
    for (i, b) in head.iter_mut().enumerate() {
        *b = packet.get(i).copied().unwrap_or(0x5a ^ i as u8);
    }
    let dirty = Parsed {
        flags: 0xff,
        ..Parsed::default()
    };
    let mut slot = MaybeUninit::new(dirty);
    if let Some(fast) = parse::parse_ipv4_fast(&head, cap, &mut slot) {
        let full = l3.expect("the fast l3 parse took a packet parse_l3 rejects");
        assert_eq!(&*fast, full, "fast l3 parse differs from parse_l3's");
    } else {
        // SAFETY: initialised above; a refused parse writes nothing.
        let after = unsafe { slot.assume_init() };
        assert_eq!(after, dirty, "a refused fast l3 parse wrote its output");
    }
}

/// The in-place parse equals `parse_ethernet`'s whenever it claims the frame (`l2` is the
/// full parse of `data` as it is), and leaves its output untouched when it does not; also
/// with `data` as the first bytes of a 64 KB packet (the window then holds other bytes past
/// `data`).
fn check_fast_ethernet(data: &[u8], l2: Option<&Parsed>) {
    let Some(head) = parse::fast_head(data) else {
        return;
    };
    let dirty = Parsed {
        flags: 0xff,
        ..Parsed::default()
    };
    let len = u32::try_from(data.len()).unwrap_or(u32::MAX);
    check_fast_ports(head, len);
    check_fast_ports(head, 65_000);
    let mut slot = MaybeUninit::new(dirty);
    if let Some(fast) = parse::parse_ethernet_fast(head, len, &mut slot) {
        let full = l2.expect("the fast ethernet parse took a frame parse_ethernet rejects");
        assert_eq!(
            &*fast, full,
            "fast ethernet parse differs from parse_ethernet's"
        );
    } else {
        // SAFETY: initialised above; a refused parse writes nothing.
        let after = unsafe { slot.assume_init() };
        assert_eq!(
            after, dirty,
            "a refused fast ethernet parse wrote its output"
        );
    }
    let mut gso = data.to_vec();
    gso.resize(data.len().max(PKT_WINDOW), 0xa5);
    let (w, cap) = parse::window_of(&gso);
    let mut full = Parsed::default();
    let full_ok = parse::parse_ethernet(&w, cap, &mut full);
    let mut slot = MaybeUninit::new(dirty);
    if let Some(fast) = parse::parse_ethernet_fast(head, 65_000, &mut slot) {
        assert!(
            full_ok,
            "the fast ethernet parse took a GSO head parse_ethernet rejects"
        );
        assert_eq!(*fast, full, "fast ethernet parse of a GSO head differs");
    } else {
        // SAFETY: as above.
        let after = unsafe { slot.assume_init() };
        assert_eq!(
            after, dirty,
            "a refused fast ethernet parse wrote its output"
        );
    }
}

/// The tc programs' ports read in place (`ethernet_ports_fast`, hashed against the followed
/// flows) are exactly the in-place parse's, for exactly its TCP and UDP packets.
fn check_fast_ports(head: &[u8; parse::FAST_ETH_BYTES], len: u32) {
    let mut slot = MaybeUninit::uninit();
    let want = parse::parse_ethernet_fast(head, len, &mut slot)
        .filter(|p| p.tuple.proto == PROTO_TCP || p.tuple.proto == PROTO_UDP)
        .map(|p| (p.tuple.sport, p.tuple.dport));
    assert_eq!(
        parse::ethernet_ports_fast(head, len),
        want,
        "ports read in place differ from the in-place parse's"
    );
}

/// Parses the window three ways (clean, with stale bytes past `cap`, into a dirty output) and
/// checks they agree; returns the parse.
fn run(parser: Parser, w: &Window, cap: usize) -> Option<Parsed> {
    let mut clean = Parsed::default();
    let ok = parser(w, cap, &mut clean);

    let mut stale = *w;
    for (i, b) in stale.iter_mut().enumerate().skip(cap) {
        *b = !w[i % cap.max(1)] ^ (i as u8);
    }
    let mut again = Parsed::default();
    assert_eq!(
        parser(&stale, cap, &mut again),
        ok,
        "bytes past cap changed the verdict"
    );
    assert_eq!(again, clean, "bytes past cap changed the result");

    let dirty = Parsed {
        tuple: Tuple {
            saddr: [0xee; 16],
            daddr: [0xdd; 16],
            sport: 0xbeef,
            dport: 0xcafe,
            proto: 0xfe,
            family: 9,
            _pad: [7, 7],
        },
        fp: Fingerprint {
            ip_id: !0,
            a: !0,
            b: !0,
            c: !0,
        },
        flags: 0xff,
    };
    let mut reused = dirty;
    assert_eq!(parser(w, cap, &mut reused), ok);
    if ok {
        assert_eq!(reused, clean, "a previous result leaked into this one");
        check_invariants(&clean);
        Some(clean)
    } else {
        assert_eq!(reused, dirty, "a failed parse wrote its output");
        None
    }
}

fn check_invariants(p: &Parsed) {
    let t = &p.tuple;
    assert!(t.family == FAMILY_IPV4 || t.family == FAMILY_IPV6, "{p:?}");
    assert_eq!(t._pad, [0, 0]);
    if t.family == FAMILY_IPV4 {
        assert_eq!(t.saddr[4..], [0; 12], "{p:?}");
        assert_eq!(t.daddr[4..], [0; 12], "{p:?}");
        assert!(p.fp.ip_id <= 0xffff);
    } else {
        assert!(p.fp.ip_id <= 0x000f_ffff, "IPv6 flow label is 20 bits");
    }
    assert_eq!(p.flags & !(flag::FRAGMENT | flag::TRUNCATED), 0, "{p:?}");
    if p.flags & flag::TRUNCATED != 0 {
        assert_eq!((t.sport, t.dport, p.fp.b, p.fp.c), (0, 0, 0, 0), "{p:?}");
    }
    match t.proto {
        PROTO_TCP | PROTO_UDP => {}
        PROTO_ICMP | PROTO_ICMPV6 => assert_eq!(t.sport, t.dport, "{p:?}"),
        _ => assert_eq!((t.sport, t.dport), (0, 0), "{p:?}"),
    }
}

/// Checks the IP header fields against the bytes at `off` (where the IP header starts).
fn check_l3_fields(p: &Parsed, bytes: &[u8], off: usize) {
    let h = &bytes[off..];
    let t = &p.tuple;
    match h[0] >> 4 {
        4 => {
            assert_eq!(t.family, FAMILY_IPV4);
            assert_eq!(t.proto, h[9]);
            assert_eq!(t.saddr[..4], h[12..16]);
            assert_eq!(t.daddr[..4], h[16..20]);
            assert_eq!(p.fp.ip_id, u32::from(u16::from_be_bytes([h[4], h[5]])));
            let frag = u16::from_be_bytes([h[6], h[7]]);
            assert_eq!(p.flags & flag::FRAGMENT != 0, frag & 0x3fff != 0, "{p:?}");
            if frag & 0x1fff != 0 {
                assert_eq!(
                    (t.sport, t.dport),
                    (0, 0),
                    "later fragment with ports: {p:?}"
                );
                assert_eq!(p.fp.a, u32::from(frag & 0x1fff));
            }
        }
        6 => {
            assert_eq!(t.family, FAMILY_IPV6);
            assert_eq!(t.saddr, h[8..24]);
            assert_eq!(t.daddr, h[24..40]);
            let first = u32::from_be_bytes([h[0], h[1], h[2], h[3]]);
            assert_eq!(p.fp.ip_id, first & 0x000f_ffff);
        }
        v => panic!("parsed IP version {v}: {p:?}"),
    }
}

/// Where the IP header starts in a frame, following up to two VLAN tags as the parser does;
/// `None` when the frame's ethertype (after the tags) is not IPv4 or IPv6 or it is too short.
fn l3_offset(frame: &[u8]) -> Option<usize> {
    let be16 = |i: usize| Some(u16::from_be_bytes([*frame.get(i)?, *frame.get(i + 1)?]));
    let mut ethertype = be16(12)?;
    let mut off = 14;
    for _ in 0..2 {
        if ethertype != 0x8100 && ethertype != 0x88a8 {
            break;
        }
        ethertype = be16(off + 2)?;
        off += 4;
    }
    (matches!(ethertype, 0x0800 | 0x86dd) && off < frame.len().min(PKT_WINDOW)).then_some(off)
}
