//! Hostile and odd packets (issue 6): every IPv4 option length, fragments, every truncation,
//! VLAN stacks, each IPv6 extension header, ICMP errors quoting another packet's header,
//! zero-length UDP, every TCP flag combination. The parser must read what is there, flag what
//! is not, never read past what was captured, and never take an inner header for the outer.

use super::*;

const SRC: [u8; 4] = [10, 13, 76, 46];
const DST: [u8; 4] = [10, 0, 159, 58];
const SRC6: [u8; 16] = [0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
const DST6: [u8; 16] = [0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2];

/// Ethernet header with `tpids` VLAN tags (TCI 100) before `ethertype`.
fn eth(tpids: &[u16], ethertype: u16) -> Vec<u8> {
    let mut f = vec![2, 0x42, 10, 13, 76, 4, 2, 0x42, 10, 13, 76, 46];
    for tpid in tpids {
        f.extend(tpid.to_be_bytes());
        f.extend([0, 100]);
    }
    f.extend(ethertype.to_be_bytes());
    f
}

/// IPv4 packet: header with `options`, `frag` (flags and offset), then `l4`.
fn ipv4(proto: u8, frag: u16, options: &[u8], l4: &[u8]) -> Vec<u8> {
    let ihl = 20 + options.len();
    let mut h = vec![0x40 | u8::try_from(ihl / 4).unwrap(), 0];
    h.extend(u16::try_from(ihl + l4.len()).unwrap().to_be_bytes());
    h.extend(0x1234u16.to_be_bytes());
    h.extend(frag.to_be_bytes());
    h.extend([64, proto, 0, 0]);
    h.extend(SRC);
    h.extend(DST);
    h.extend(options);
    h.extend(l4);
    h
}

/// IPv6 packet: `next`, then `rest` (extension headers and L4).
fn ipv6(next: u8, rest: &[u8]) -> Vec<u8> {
    let mut h = vec![0x60, 0x0a, 0xbc, 0xde];
    h.extend(u16::try_from(rest.len()).unwrap().to_be_bytes());
    h.extend([next, 64]);
    h.extend(SRC6);
    h.extend(DST6);
    h.extend(rest);
    h
}

fn tcp(sport: u16, dport: u16, flags: u8) -> Vec<u8> {
    let mut t = Vec::new();
    t.extend(sport.to_be_bytes());
    t.extend(dport.to_be_bytes());
    t.extend(1000u32.to_be_bytes());
    t.extend(2000u32.to_be_bytes());
    t.extend([0x50, flags]);
    t.extend(502u16.to_be_bytes());
    t.extend([0xab, 0xcd, 0, 0]);
    t
}

fn udp(sport: u16, dport: u16, payload: &[u8]) -> Vec<u8> {
    let mut u = Vec::new();
    u.extend(sport.to_be_bytes());
    u.extend(dport.to_be_bytes());
    u.extend(u16::try_from(8 + payload.len()).unwrap().to_be_bytes());
    u.extend([0x12, 0x34]);
    u.extend(payload);
    u
}

fn l2(packet: &[u8]) -> Vec<u8> {
    let ethertype = if packet[0] >> 4 == 6 { 0x86dd } else { 0x0800 };
    let mut f = eth(&[], ethertype);
    f.extend(packet);
    f
}

/// Parses as the kernel does, also with stale bytes past the captured ones and into a dirty
/// output, and checks all three agree (the per-CPU window and result are reused).
fn parse(bytes: &[u8], from_l2: bool) -> Option<Parsed> {
    if !from_l2 {
        check_fast_l3(bytes, 0xee);
    } else if bytes.len() >= 14 && bytes[12..14] == [0x08, 0x00] {
        check_fast_l3(&bytes[14..], 0xee);
    }
    let parser = if from_l2 { parse_ethernet } else { parse_l3 };
    let (w, cap) = window_of(bytes);
    let mut clean = Parsed::default();
    let ok = parser(&w, cap, &mut clean);
    let mut stale = w;
    for b in stale.iter_mut().skip(cap) {
        *b = 0xa5;
    }
    let mut dirty = Parsed {
        flags: 0xff,
        fp: Fingerprint {
            ip_id: 7,
            a: 7,
            b: 7,
            c: 7,
        },
        ..Parsed::default()
    };
    dirty.tuple.sport = 7;
    let before = dirty;
    assert_eq!(parser(&stale, cap, &mut dirty), ok, "{bytes:02x?}");
    if ok {
        assert_eq!(
            dirty, clean,
            "stale bytes or a stale result leaked: {bytes:02x?}"
        );
    } else {
        assert_eq!(dirty, before, "a failed parse wrote its output");
    }
    ok.then_some(clean)
}

/// The netfilter exit's parse of a packet from its first [`FAST_PARSE_BYTES`] (loaded whatever
/// the packet's length; past `l3.len()` they hold `junk`): exactly `parse_l3` on the packet
/// whenever it claims it, `out` untouched when it does not. Returns whether it claimed the
/// packet.
fn check_fast_l3(l3: &[u8], junk: u8) -> bool {
    let cap = l3.len().min(PKT_WINDOW);
    let mut head = [junk; FAST_PARSE_BYTES];
    let n = cap.min(FAST_PARSE_BYTES);
    head[..n].copy_from_slice(&l3[..n]);
    let dirty = Parsed {
        flags: 0x80,
        ..Parsed::default()
    };
    let mut slot = MaybeUninit::new(dirty);
    if let Some(fast) = parse_ipv4_fast(&head, cap, &mut slot) {
        let full = Parsed::from_l3(l3).expect("the fast l3 parse took a packet parse_l3 refuses");
        assert_eq!(*fast, full, "fast and full parses differ: {l3:02x?}");
        true
    } else {
        // SAFETY: initialised above, and a refused parse writes nothing.
        let after = unsafe { slot.assume_init() };
        assert_eq!(after, dirty, "a refused fast parse wrote its output");
        false
    }
}

/// Ordinary and odd IPv4 packets for the fast parses' checks: TCP, UDP with and without
/// payload, ICMP echo and error, fragments, options, another protocol.
fn fast_path_packets() -> Vec<Vec<u8>> {
    vec![
        ipv4(PROTO_TCP, 0, &[], &tcp(40000, 80, 0x10)),
        ipv4(PROTO_TCP, 0x4000, &[], &tcp(1, 2, 0x02)),
        ipv4(PROTO_UDP, 0, &[], &udp(53, 5353, b"abcdefgh")),
        ipv4(PROTO_UDP, 0x4000, &[], &udp(53, 5353, b"abcdefghijklmnopq")),
        ipv4(PROTO_UDP, 0, &[], &udp(1, 2, b"")),
        ipv4(PROTO_UDP, 0, &[], &udp(1, 2, b"xyz")),
        ipv4(PROTO_ICMP, 0, &[], &[8, 0, 0, 0, 0x12, 0x34, 0, 1, 9, 9]),
        ipv4(
            PROTO_ICMP,
            0,
            &[],
            &[0, 0, 0, 0, 0x12, 0x34, 0, 1, 9, 9, 9, 9, 9],
        ),
        ipv4(PROTO_ICMP, 0, &[], &[3, 1, 0, 0, 0, 0, 0, 0, 0x45, 0]),
        ipv4(PROTO_UDP, 0x2000, &[], &udp(1, 2, b"x")),
        ipv4(PROTO_UDP, 0x0001, &[], &udp(1, 2, b"x")),
        ipv4(PROTO_TCP, 0, &[1, 1, 1, 1], &tcp(3, 4, 0x10)),
        ipv4(47, 0, &[], &[0; 40]),
    ]
}

/// Every prefix, every lying total length and every single-byte change of the first
/// [`FAST_PARSE_BYTES`] of ordinary and odd IPv4 packets go through [`check_fast_l3`], with
/// zeros and garbage past the packet's end; the fast path does take the ordinary ones.
#[test]
fn fast_l3_agrees_with_the_parser() {
    let packets = fast_path_packets();
    let mut taken = 0;
    for p in &packets {
        let mut longer = p.clone();
        longer.resize(300, 0x77);
        for junk in [0, 0xa5, 0xff] {
            for len in 0..=p.len() {
                taken += usize::from(check_fast_l3(&p[..len], junk));
            }
            check_fast_l3(&longer, junk);
            for total in [0u16, 19, 20, 27, 28, 29, 35, 36, 39, 40, 41, 1500] {
                let mut q = p.clone();
                q[2..4].copy_from_slice(&total.to_be_bytes());
                check_fast_l3(&q, junk);
            }
            for i in 0..FAST_PARSE_BYTES.min(p.len()) {
                for x in [0x01, 0x10, 0x40, 0xff] {
                    let mut q = p.clone();
                    q[i] ^= x;
                    check_fast_l3(&q, junk);
                    q.resize(300, 0x33);
                    check_fast_l3(&q, junk);
                }
            }
        }
    }
    assert!(taken >= 20, "the fast path took only {taken} packets");
    for p in &packets[..8] {
        assert!(check_fast_l3(p, 0xa5), "{p:02x?}");
    }
}

/// The tc programs' in-place parse of a frame whose first [`FAST_ETH_BYTES`] are linear, with
/// `len` the whole frame's length: exactly `parse_ethernet` on the frame's window whenever it
/// claims the frame, and `out` untouched when it does not. Returns whether it claimed it.
fn check_fast_ethernet(frame: &[u8], len: usize) -> bool {
    let Some(head) = fast_head(frame) else {
        return false;
    };
    let dirty = Parsed {
        flags: 0x80,
        ..Parsed::default()
    };
    let mut slot = MaybeUninit::new(dirty);
    let len32 = u32::try_from(len).unwrap();
    if let Some(fast) = parse_ethernet_fast(head, len32, &mut slot) {
        // The window holds the frame's first min(len, PKT_WINDOW) bytes: the linear ones and
        // then paged ones (here: whatever the frame holds, then zeros).
        let mut bytes = frame.to_vec();
        bytes.resize(len.max(frame.len()), 0);
        let full = Parsed::from_ethernet(&bytes[..len])
            .expect("the fast ethernet parse took a frame parse_ethernet refuses");
        assert_eq!(
            *fast, full,
            "fast and full parses differ (len {len}): {frame:02x?}"
        );
        true
    } else {
        // SAFETY: initialised above, and a refused parse writes nothing.
        let after = unsafe { slot.assume_init() };
        assert_eq!(after, dirty, "a refused fast parse wrote its output");
        false
    }
}

/// Every prefix, every lying total length and every single-byte change of the header of
/// ordinary and odd frames goes through [`check_fast_ethernet`], also as the head of a large
/// GSO packet; the fast path does take the ordinary ones (TCP, UDP with and without payload).
#[test]
fn fast_ethernet_agrees_with_the_parser() {
    let packets = fast_path_packets();
    let mut taken = 0;
    let mut frames = Vec::new();
    for p in &packets {
        frames.push(l2(p));
        let mut tagged = eth(&[0x8100], 0x0800);
        tagged.extend(p);
        frames.push(tagged);
        let mut padded = l2(p);
        padded.resize(60.max(padded.len()), 0xee);
        frames.push(padded);
    }
    for f in &frames {
        for len in 0..=f.len() {
            taken += usize::from(check_fast_ethernet(&f[..len], len));
        }
        // The head of a GSO packet: the rest of its 64 KB is paged.
        for len in [f.len() + 1, 300, 1514, 65_000] {
            check_fast_ethernet(f, len);
        }
        for total in [0u16, 19, 20, 27, 28, 29, 35, 39, 40, 41, 1500] {
            let mut q = f.clone();
            q[16..18].copy_from_slice(&total.to_be_bytes());
            check_fast_ethernet(&q, q.len());
        }
        for i in 0..FAST_ETH_BYTES.min(f.len()) {
            for x in [0x01, 0x10, 0x40, 0xff] {
                let mut q = f.clone();
                q[i] ^= x;
                check_fast_ethernet(&q, q.len());
                check_fast_ethernet(&q, 65_000);
            }
        }
    }
    assert!(taken >= 20, "the fast path took only {taken} frames");
    // TCP and UDP of an ordinary shape are taken, whole or as the head of a GSO packet.
    for p in [&packets[0], &packets[1], &packets[3]] {
        let f = l2(p);
        assert!(check_fast_ethernet(&f, f.len()), "{f:02x?}");
        assert!(check_fast_ethernet(&f, 65_000), "{f:02x?}");
    }
}

fn ports(p: &Parsed) -> (u16, u16) {
    (p.tuple.sport, p.tuple.dport)
}

#[test]
fn ipv4_options_of_every_length() {
    for words in 0..=10u8 {
        // NOPs, then a record-route-shaped option filling the rest; any bytes are fine.
        let options: Vec<u8> = (0..usize::from(words) * 4)
            .map(|i| if i % 4 == 3 { 0x07 } else { 1 })
            .collect();
        for (proto, l4, want) in [
            (PROTO_TCP, tcp(41234, 80, 0x02), (41234, 80)),
            (PROTO_UDP, udp(5000, 53, b"q"), (5000, 53)),
        ] {
            let packet = ipv4(proto, 0x4000, &options, &l4);
            for from_l2 in [false, true] {
                let bytes = if from_l2 { l2(&packet) } else { packet.clone() };
                let p = parse(&bytes, from_l2).unwrap_or_else(|| panic!("{words} option words"));
                assert_eq!(ports(&p), want, "{words} option words");
                assert_eq!(p.flags, 0);
            }
            // The options push the L4 header past a packet that ends early.
            let cut = &packet[..20 + options.len() + 4];
            let p = parse(cut, false).unwrap();
            assert_eq!(
                (ports(&p), p.flags),
                ((0, 0), flag::TRUNCATED),
                "{words} words, cut"
            );
        }
    }
    // An IHL below five words is not an IPv4 header.
    for ihl in 0..5u8 {
        let mut packet = ipv4(PROTO_TCP, 0, &[], &tcp(1, 2, 0x10));
        packet[0] = 0x40 | ihl;
        assert_eq!(parse(&packet, false), None, "ihl {ihl}");
    }
}

#[test]
fn first_and_later_fragments() {
    let l4 = udp(5000, 53, &[0x55; 24]);
    // First fragment (MF, offset 0): ports, flagged.
    let first = parse(&ipv4(PROTO_UDP, 0x2000, &[], &l4), false).unwrap();
    assert_eq!((ports(&first), first.flags), ((5000, 53), flag::FRAGMENT));
    // Don't-fragment alone is not a fragment.
    let whole = parse(&ipv4(PROTO_UDP, 0x4000, &[], &l4), false).unwrap();
    assert_eq!(whole.flags, 0);
    // Later fragments (with or without MF): their bytes look like a UDP header and must not
    // be read as one; the offset tells fragments of one datagram apart.
    let mut seen = Vec::new();
    for (frag, offset) in [(0x2003, 3), (0x2006, 6), (0x0009, 9), (0x1fff, 0x1fff)] {
        let p = parse(&ipv4(PROTO_UDP, frag, &[], &l4), false).unwrap();
        assert_eq!(ports(&p), (0, 0), "offset {offset}");
        assert_eq!(
            (p.flags, p.fp.a, p.fp.ip_id),
            (flag::FRAGMENT, offset, 0x1234)
        );
        assert!(!seen.contains(&p.fp), "fragments share a fingerprint");
        seen.push(p.fp);
    }
    assert!(!seen.contains(&first.fp));
    // A later fragment of a few bytes is still a fragment, not a truncated header.
    let tiny = parse(&ipv4(PROTO_TCP, 0x0001, &[], &[1, 2, 3]), false).unwrap();
    assert_eq!((ports(&tiny), tiny.flags), ((0, 0), flag::FRAGMENT));
}

/// A packet to cut at every length: where its IP and L4 headers start and how many L4 bytes
/// the parser needs.
struct Cut {
    name: &'static str,
    bytes: Vec<u8>,
    from_l2: bool,
    l3: usize,
    l4: usize,
    need: usize,
}

fn truncation_cases() -> Vec<Cut> {
    let v4_tcp = ipv4(PROTO_TCP, 0, &[1, 1, 1, 0], &tcp(1, 2, 0x18));
    let v4_icmp = ipv4(
        PROTO_ICMP,
        0,
        &[],
        &[8, 0, 0, 0, 0, 7, 0, 1, b'p', b'i', b'n', b'g'],
    );
    let mut hbh = vec![PROTO_UDP, 0, 1, 4, 0, 0, 0, 0];
    hbh.extend(udp(546, 547, b"dhcpv6"));
    let v6_udp = ipv6(0, &hbh);
    let mut vlan = eth(&[0x88a8, 0x8100], 0x0800);
    vlan.extend(&v4_tcp);
    let cut = |name, bytes, from_l2, l3, l4, need| Cut {
        name,
        bytes,
        from_l2,
        l3,
        l4,
        need,
    };
    vec![
        cut("ipv4 tcp with options", v4_tcp.clone(), false, 0, 24, 20),
        cut("ipv4 icmp", v4_icmp, false, 0, 20, 8),
        cut("ipv6 hop-by-hop udp", v6_udp, false, 0, 48, 8),
        cut("ethernet ipv4 tcp", l2(&v4_tcp), true, 14, 38, 20),
        cut("qinq ipv4 tcp", vlan, true, 22, 46, 20),
    ]
}

#[test]
fn truncated_headers_at_every_length() {
    for Cut {
        name,
        bytes,
        from_l2,
        l3,
        l4,
        need,
    } in truncation_cases()
    {
        let whole = parse(&bytes, from_l2).unwrap();
        let ip_min = if bytes[l3] >> 4 == 6 { 40 } else { 20 };
        for n in 0..bytes.len() {
            let got = parse(&bytes[..n], from_l2);
            if n < l3 + ip_min {
                assert_eq!(got, None, "{name} cut at {n}");
                continue;
            }
            let p = got.unwrap_or_else(|| panic!("{name} cut at {n}"));
            assert_eq!(
                (p.tuple.saddr, p.tuple.daddr, p.tuple.family),
                (whole.tuple.saddr, whole.tuple.daddr, whole.tuple.family)
            );
            assert_eq!(p.fp.ip_id, whole.fp.ip_id, "{name} cut at {n}");
            if n < l4 + need {
                assert_eq!(
                    p.flags & flag::TRUNCATED,
                    flag::TRUNCATED,
                    "{name} cut at {n}"
                );
                assert_eq!(ports(&p), (0, 0), "{name} cut at {n}");
            } else {
                assert_eq!(p.flags & flag::TRUNCATED, 0, "{name} cut at {n}");
                assert_eq!(ports(&p), ports(&whole), "{name} cut at {n}");
            }
        }
    }
}

#[test]
fn vlan_single_double_and_qinq() {
    let packet = ipv4(PROTO_TCP, 0, &[], &tcp(41234, 80, 0x10));
    let untagged = parse(&l2(&packet), true).unwrap();
    for tpids in [
        &[0x8100][..],
        &[0x88a8],
        &[0x8100, 0x8100],
        &[0x88a8, 0x8100],
        &[0x88a8, 0x88a8],
    ] {
        let mut f = eth(tpids, 0x0800);
        f.extend(&packet);
        assert_eq!(parse(&f, true), Some(untagged), "{tpids:04x?}");
        // A frame cut inside its tags is not a packet.
        for n in 14..14 + 4 * tpids.len() {
            assert_eq!(parse(&f[..n], true), None, "{tpids:04x?} cut at {n}");
        }
    }
    // A third tag hides the ethertype: not a packet the parser reads.
    let mut f = eth(&[0x88a8, 0x8100, 0x8100], 0x0800);
    f.extend(&packet);
    assert_eq!(parse(&f, true), None);
    // IPv6 behind a tag; an IPv4 ethertype over an IPv6 header is rejected.
    let v6 = ipv6(PROTO_TCP, &tcp(443, 5555, 0x12));
    let mut f = eth(&[0x8100], 0x86dd);
    f.extend(&v6);
    assert_eq!(ports(&parse(&f, true).unwrap()), (443, 5555));
    let mut f = eth(&[0x8100], 0x0800);
    f.extend(&v6);
    assert_eq!(parse(&f, true), None);
}

/// One IPv6 extension header of each kind, each of its own length, before UDP.
fn ext(kind: u8, next: u8) -> Vec<u8> {
    match kind {
        // Hop-by-hop, routing, destination options: (len + 1) * 8 bytes.
        0 | 43 | 60 => {
            let mut h = vec![next, 1];
            h.resize(16, 0);
            h
        }
        // Fragment: 8 bytes, offset 0 (a first fragment), M set, id 0x0102_0304.
        44 => vec![next, 0, 0, 1, 1, 2, 3, 4],
        // Authentication header: (len + 2) * 4 bytes.
        51 => {
            let mut h = vec![next, 4];
            h.resize(24, 0xaa);
            h
        }
        _ => unreachable!(),
    }
}

fn chain(kinds: &[u8], l4_proto: u8, l4: &[u8]) -> Vec<u8> {
    let mut rest = Vec::new();
    for (i, &k) in kinds.iter().enumerate() {
        rest.extend(ext(k, kinds.get(i + 1).copied().unwrap_or(l4_proto)));
    }
    rest.extend(l4);
    ipv6(kinds.first().copied().unwrap_or(l4_proto), &rest)
}

#[test]
fn ipv6_each_extension_header() {
    let l4 = udp(546, 547, b"dhcp");
    for kinds in [
        &[0u8][..],
        &[43],
        &[44],
        &[51],
        &[60],
        &[0, 43, 44, 51, 60],
        &[0, 60, 43, 51, 44, 60],
    ] {
        let p = parse(&chain(kinds, PROTO_UDP, &l4), false).unwrap_or_else(|| panic!("{kinds:?}"));
        assert_eq!(
            (p.tuple.proto, ports(&p)),
            (PROTO_UDP, (546, 547)),
            "{kinds:?}"
        );
        // A first fragment is flagged and read like a whole packet (the UDP length replaces
        // the fragment id in the fingerprint: the L4 header identifies it better).
        let fragment = kinds.contains(&44);
        assert_eq!(
            p.flags,
            if fragment { flag::FRAGMENT } else { 0 },
            "{kinds:?}"
        );
        assert_eq!(p.fp.a, 12, "{kinds:?}: the UDP length");
    }
    // A later fragment: no L4 header to read, whatever its bytes look like.
    let mut later = vec![PROTO_UDP, 0, 0x00, 0x41, 9, 9, 9, 9];
    later.extend(udp(546, 547, b"dhcp"));
    let p = parse(&ipv6(44, &later), false).unwrap();
    assert_eq!(
        (p.tuple.proto, ports(&p), p.flags, p.fp.a),
        (PROTO_UDP, (0, 0), flag::FRAGMENT, 0x0909_0909)
    );
    // Seven extension headers: the parser follows six, then reports the seventh as the
    // protocol with no ports (bounded work per packet, as the verifier needs).
    let p = parse(&chain(&[60; 7], PROTO_UDP, &l4), false).unwrap();
    assert_eq!((p.tuple.proto, ports(&p), p.flags), (60, (0, 0), 0));
    // ESP: encrypted, no ports.
    let p = parse(&ipv6(50, &[0; 16]), false).unwrap();
    assert_eq!((p.tuple.proto, ports(&p)), (50, (0, 0)));
    // An extension header cut short: flagged, its kind reported.
    for kind in [0, 43, 44, 51, 60] {
        let full = chain(&[kind], PROTO_UDP, &l4);
        let p = parse(&full[..41], false).unwrap();
        assert_eq!(
            (p.tuple.proto, p.flags & flag::TRUNCATED),
            (kind, flag::TRUNCATED),
            "{kind}"
        );
    }
}

#[test]
fn icmp_errors_do_not_take_the_quoted_header_for_their_own() {
    // Destination unreachable (port), time exceeded, fragmentation needed: each quotes the IP
    // header and first 8 bytes of a TCP segment 10.13.76.46:41234 → 10.0.159.58:80.
    let quoted = ipv4(PROTO_TCP, 0x4000, &[], &tcp(41234, 80, 0x02));
    let quoted = &quoted[..28];
    for (ty, code, rest) in [
        (3u8, 3u8, [0u8; 4]),
        (11, 0, [0; 4]),
        (3, 4, [0, 0, 0x05, 0xdc]),
    ] {
        let mut icmp = vec![ty, code, 0, 0];
        icmp.extend(rest);
        icmp.extend(quoted);
        let p = parse(&l2(&ipv4(PROTO_ICMP, 0, &[], &icmp)), true).unwrap();
        assert_eq!(
            ports(&p),
            (0, 0),
            "type {ty}: the quoted ports are not the error's"
        );
        assert_eq!(p.fp.a, (u32::from(ty) << 8) | u32::from(code));
        assert_eq!(p.fp.b, u32::from(u16::from_be_bytes([rest[2], rest[3]])));
        assert_eq!(
            p.fp.c,
            u32::from_be_bytes([quoted[0], quoted[1], quoted[2], quoted[3]])
        );
        // NAT rewrites the quoted header's addresses and ports: the fingerprint stays.
        let mut natted = icmp.clone();
        natted[8 + 12..8 + 16].copy_from_slice(&[10, 13, 76, 4]);
        natted[8 + 20..8 + 22].copy_from_slice(&50000u16.to_be_bytes());
        natted[2..4].copy_from_slice(&[0xee, 0xee]);
        let q = parse(&l2(&ipv4(PROTO_ICMP, 0, &[], &natted)), true).unwrap();
        assert_eq!(q.fp, p.fp, "type {ty}");
    }
    // ICMPv6 destination unreachable and packet too big quoting UDP over IPv6.
    let quoted = ipv6(PROTO_UDP, &udp(5353, 53, b"x"));
    for ty in [1u8, 2, 3, 4] {
        let mut icmp = vec![ty, 0, 0, 0, 0, 0, 0x05, 0x00];
        icmp.extend(&quoted);
        let p = parse(&ipv6(PROTO_ICMPV6, &icmp), false).unwrap();
        assert_eq!(
            (p.tuple.proto, ports(&p)),
            (PROTO_ICMPV6, (0, 0)),
            "type {ty}"
        );
    }
    // Echo request and reply: the identifier is the "port" (as conntrack keys them).
    let p = parse(
        &ipv6(PROTO_ICMPV6, &[128, 0, 0, 0, 0x12, 0x34, 0, 1]),
        false,
    )
    .unwrap();
    assert_eq!(ports(&p), (0x1234, 0x1234));
}

#[test]
fn zero_length_udp() {
    // No payload: the length is the header's 8, no payload bytes in the fingerprint.
    let p = parse(&l2(&ipv4(PROTO_UDP, 0, &[], &udp(1, 2, b""))), true).unwrap();
    assert_eq!(
        (ports(&p), p.fp.a, p.fp.b, p.fp.c, p.flags),
        ((1, 2), 8, 0, 0, 0)
    );
    // A length field of zero (as for jumbograms), and Ethernet padding after the packet:
    // neither is read as payload.
    let mut zero = udp(1, 2, b"");
    zero[4..6].copy_from_slice(&[0, 0]);
    let mut f = l2(&ipv4(PROTO_UDP, 0, &[], &zero));
    f.extend([0xff; 18]);
    let p = parse(&f, true).unwrap();
    assert_eq!((ports(&p), p.fp.a, p.fp.b, p.fp.c), ((1, 2), 0, 0, 0));
    // Seven bytes of UDP header: truncated.
    let p = parse(&ipv4(PROTO_UDP, 0, &[], &udp(1, 2, b"")[..7]), false).unwrap();
    assert_eq!((ports(&p), p.flags), ((0, 0), flag::TRUNCATED));
}

#[test]
fn every_tcp_flag_combination_has_its_own_fingerprint() {
    let mut seen = std::collections::HashSet::new();
    for flags in 0..=u8::MAX {
        let p = parse(&l2(&ipv4(PROTO_TCP, 0, &[], &tcp(41234, 80, flags))), true).unwrap();
        assert_eq!(ports(&p), (41234, 80));
        assert_eq!((p.fp.a, p.fp.b), (1000, 2000));
        assert_eq!(p.fp.c & 0xff, u32::from(flags));
        assert!(seen.insert(p.fp), "flags {flags:#04x} share a fingerprint");
    }
    assert_eq!(seen.len(), 256);
}
