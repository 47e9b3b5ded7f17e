//! Parser tests on hand-built frames: what the kernel programs will read, byte for byte.

use super::*;
use crate::flag;

const SRC: [u8; 4] = [10, 13, 76, 46];
const DST: [u8; 4] = [10, 0, 159, 58];

fn eth(ethertype: u16) -> Vec<u8> {
    let mut f = vec![
        0x02, 0x42, 0x0a, 0x0d, 0x4c, 0x04, 0x02, 0x42, 0x0a, 0x0d, 0x4c, 0x2e,
    ];
    f.extend_from_slice(&ethertype.to_be_bytes());
    f
}

fn vlan(f: &mut Vec<u8>, tpid_after: u16) {
    // Turn the ethertype into a tag: TPID already written; append TCI + inner type.
    f.extend_from_slice(&[0x00, 0x64]);
    f.extend_from_slice(&tpid_after.to_be_bytes());
}

/// An IPv4 header (checksum left zero: the parser does not check it).
fn ipv4(
    proto: u8,
    payload_len: usize,
    id: u16,
    frag: u16,
    options: &[u8],
    src: [u8; 4],
    dst: [u8; 4],
) -> Vec<u8> {
    let ihl = 20 + options.len();
    let total = u16::try_from(ihl + payload_len).unwrap();
    let mut h = vec![0x40 | u8::try_from(ihl / 4).unwrap(), 0];
    h.extend_from_slice(&total.to_be_bytes());
    h.extend_from_slice(&id.to_be_bytes());
    h.extend_from_slice(&frag.to_be_bytes());
    h.extend_from_slice(&[64, proto, 0, 0]);
    h.extend_from_slice(&src);
    h.extend_from_slice(&dst);
    h.extend_from_slice(options);
    h
}

fn tcp(sport: u16, dport: u16, seq: u32, ack: u32, flags: u8, window: u16) -> Vec<u8> {
    let mut t = Vec::new();
    t.extend_from_slice(&sport.to_be_bytes());
    t.extend_from_slice(&dport.to_be_bytes());
    t.extend_from_slice(&seq.to_be_bytes());
    t.extend_from_slice(&ack.to_be_bytes());
    t.extend_from_slice(&[0x50, flags]);
    t.extend_from_slice(&window.to_be_bytes());
    t.extend_from_slice(&[0xde, 0xad, 0, 0]); // checksum, urgent
    t
}

fn udp(sport: u16, dport: u16, payload: &[u8]) -> Vec<u8> {
    let mut u = Vec::new();
    u.extend_from_slice(&sport.to_be_bytes());
    u.extend_from_slice(&dport.to_be_bytes());
    u.extend_from_slice(&u16::try_from(8 + payload.len()).unwrap().to_be_bytes());
    u.extend_from_slice(&[0x12, 0x34]);
    u.extend_from_slice(payload);
    u
}

fn icmp_echo(ty: u8, id: u16, seq: u16, payload: &[u8]) -> Vec<u8> {
    let mut i = vec![ty, 0, 0xab, 0xcd];
    i.extend_from_slice(&id.to_be_bytes());
    i.extend_from_slice(&seq.to_be_bytes());
    i.extend_from_slice(payload);
    i
}

fn v4_frame(l4: &[u8], proto: u8) -> Vec<u8> {
    let mut f = eth(0x0800);
    f.extend(ipv4(proto, l4.len(), 0x1234, 0x4000, &[], SRC, DST));
    f.extend_from_slice(l4);
    f
}

fn addr4(a: [u8; 4]) -> [u8; 16] {
    let mut out = [0; 16];
    out[..4].copy_from_slice(&a);
    out
}

#[test]
fn tcp_over_ipv4() {
    let p =
        Parsed::from_ethernet(&v4_frame(&tcp(41234, 80, 7, 9, 0x02, 64240), PROTO_TCP)).unwrap();
    assert_eq!(p.tuple.family, FAMILY_IPV4);
    assert_eq!((p.tuple.saddr, p.tuple.daddr), (addr4(SRC), addr4(DST)));
    assert_eq!(
        (p.tuple.sport, p.tuple.dport, p.tuple.proto),
        (41234, 80, PROTO_TCP)
    );
    assert_eq!(
        p.fp,
        Fingerprint {
            ip_id: 0x1234,
            a: 7,
            b: 9,
            c: 0x02 | (64240 << 16)
        }
    );
    assert_eq!(p.flags, 0);
}

#[test]
fn udp_fingerprint_takes_the_leading_payload() {
    let p = Parsed::from_ethernet(&v4_frame(&udp(5000, 53, b"abcdefgh-rest"), PROTO_UDP)).unwrap();
    assert_eq!((p.tuple.sport, p.tuple.dport), (5000, 53));
    assert_eq!(p.fp.a, 8 + 13);
    assert_eq!(p.fp.b, u32::from_be_bytes(*b"abcd"));
    assert_eq!(p.fp.c, u32::from_be_bytes(*b"efgh"));
    // A short payload is zero-padded, not read past the packet's end.
    let p = Parsed::from_ethernet(&v4_frame(&udp(5000, 53, b"ab"), PROTO_UDP)).unwrap();
    assert_eq!(
        (p.fp.b, p.fp.c),
        (u32::from_be_bytes([b'a', b'b', 0, 0]), 0)
    );
    // Zero-length UDP.
    let p = Parsed::from_ethernet(&v4_frame(&udp(1, 2, b""), PROTO_UDP)).unwrap();
    assert_eq!((p.fp.a, p.fp.b, p.fp.c), (8, 0, 0));
}

#[test]
fn icmp_echo_uses_the_identifier_as_both_ports() {
    let p =
        Parsed::from_ethernet(&v4_frame(&icmp_echo(8, 0x77, 3, b"TIMESTAMP"), PROTO_ICMP)).unwrap();
    assert_eq!((p.tuple.sport, p.tuple.dport), (0x77, 0x77));
    assert_eq!(p.fp.a, 8 << 8);
    assert_eq!(p.fp.b, 3);
    assert_eq!(p.fp.c, u32::from_be_bytes(*b"TIME"));
    // An ICMP error carries no identifier.
    let p = Parsed::from_ethernet(&v4_frame(&[3, 1, 0, 0, 0, 0, 0, 0], PROTO_ICMP)).unwrap();
    assert_eq!((p.tuple.sport, p.tuple.dport), (0, 0));
}

#[test]
fn nat_does_not_change_the_fingerprint() {
    // The same TCP segment before and after DNAT + SNAT: addresses, ports and checksums differ.
    let before = v4_frame(&tcp(41234, 80, 1000, 2000, 0x18, 502), PROTO_TCP);
    let mut after = eth(0x0800);
    let l4 = tcp(50000, 8080, 1000, 2000, 0x18, 502);
    after.extend(ipv4(
        PROTO_TCP,
        l4.len(),
        0x1234,
        0x4000,
        &[],
        [10, 13, 76, 4],
        [10, 13, 76, 26],
    ));
    after.extend(l4);
    let (a, b) = (
        Parsed::from_ethernet(&before).unwrap(),
        Parsed::from_ethernet(&after).unwrap(),
    );
    assert_eq!(a.fp, b.fp);
    assert_ne!(a.tuple, b.tuple);
    // And the netfilter view (from L3) agrees with the tc view (from L2).
    assert_eq!(Parsed::from_l3(&before[14..]).unwrap(), a);
}

#[test]
fn vlan_tags_are_skipped() {
    for tags in [1, 2] {
        let mut f = eth(0x8100);
        if tags == 2 {
            vlan(&mut f, 0x8100);
        }
        vlan(&mut f, 0x0800);
        let l4 = tcp(1, 2, 3, 4, 0x10, 5);
        f.extend(ipv4(PROTO_TCP, l4.len(), 9, 0, &[], SRC, DST));
        f.extend(l4);
        let p = Parsed::from_ethernet(&f).unwrap_or_else(|| panic!("{tags} tags"));
        assert_eq!((p.tuple.sport, p.tuple.dport, p.fp.ip_id), (1, 2, 9));
    }
}

#[test]
fn ipv4_options_move_the_l4_header() {
    let l4 = udp(7, 8, b"payload!");
    let mut f = eth(0x0800);
    f.extend(ipv4(
        PROTO_UDP,
        l4.len(),
        1,
        0,
        &[1, 1, 1, 0, 0x44, 4, 5, 0],
        SRC,
        DST,
    ));
    f.extend(l4);
    let p = Parsed::from_ethernet(&f).unwrap();
    assert_eq!((p.tuple.sport, p.tuple.dport), (7, 8));
}

#[test]
fn fragments_are_flagged_and_later_ones_have_no_ports() {
    let l4 = udp(7, 8, &[0; 32]);
    let mut first = eth(0x0800);
    first.extend(ipv4(PROTO_UDP, l4.len(), 5, 0x2000, &[], SRC, DST));
    first.extend(&l4);
    let p = Parsed::from_ethernet(&first).unwrap();
    assert_eq!(p.flags & flag::FRAGMENT, flag::FRAGMENT);
    assert_eq!((p.tuple.sport, p.tuple.dport), (7, 8));

    let mut later = eth(0x0800);
    later.extend(ipv4(PROTO_UDP, 16, 5, 0x0003, &[], SRC, DST));
    later.extend([0xaa; 16]);
    let p = Parsed::from_ethernet(&later).unwrap();
    assert_eq!(p.flags & flag::FRAGMENT, flag::FRAGMENT);
    assert_eq!((p.tuple.sport, p.tuple.dport, p.fp.a), (0, 0, 3));
}

#[test]
fn truncated_l4_is_flagged_not_misread() {
    let frame = v4_frame(&tcp(1, 2, 3, 4, 5, 6), PROTO_TCP);
    let p = Parsed::from_ethernet(&frame[..14 + 20 + 10]).unwrap();
    assert_eq!(p.flags & flag::TRUNCATED, flag::TRUNCATED);
    assert_eq!((p.tuple.sport, p.tuple.dport), (0, 0));
    // Truncated before the end of the IP header: not a packet the parser can read.
    assert!(Parsed::from_ethernet(&frame[..14 + 19]).is_none());
    assert!(Parsed::from_ethernet(&frame[..13]).is_none());
}

#[test]
fn non_ip_and_garbage_are_rejected() {
    assert!(Parsed::from_ethernet(&eth(0x0806)).is_none(), "ARP");
    let mut bad_version = v4_frame(&tcp(1, 2, 3, 4, 5, 6), PROTO_TCP);
    bad_version[14] = 0x55;
    assert!(Parsed::from_ethernet(&bad_version).is_none());
    let mut bad_ihl = v4_frame(&tcp(1, 2, 3, 4, 5, 6), PROTO_TCP);
    bad_ihl[14] = 0x43;
    assert!(Parsed::from_ethernet(&bad_ihl).is_none());
    assert!(Parsed::from_l3(&[]).is_none());
    assert!(
        Parsed::from_l3(&[0x60; 10]).is_none(),
        "IPv6 header cut short"
    );
}

fn ipv6(next: u8, payload: &[u8]) -> Vec<u8> {
    let mut h = vec![0x60, 0x0a, 0xbc, 0xde];
    h.extend_from_slice(&u16::try_from(payload.len()).unwrap().to_be_bytes());
    h.extend_from_slice(&[next, 64]);
    h.extend_from_slice(&[0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
    h.extend_from_slice(&[0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2]);
    h.extend_from_slice(payload);
    h
}

#[test]
fn ipv6_with_extension_headers() {
    let l4 = tcp(443, 5555, 1, 2, 0x12, 3);
    // Hop-by-hop (8 bytes) then destination options (16 bytes) then TCP.
    let mut payload = vec![60, 0, 0, 0, 0, 0, 0, 0];
    payload.extend_from_slice(&[PROTO_TCP, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
    payload.extend(&l4);
    let mut f = eth(0x86dd);
    f.extend(ipv6(0, &payload));
    let p = Parsed::from_ethernet(&f).unwrap();
    assert_eq!(p.tuple.family, FAMILY_IPV6);
    assert_eq!(
        (p.tuple.proto, p.tuple.sport, p.tuple.dport),
        (PROTO_TCP, 443, 5555)
    );
    assert_eq!(p.fp.ip_id, 0x000a_bcde);
    assert_eq!(p.tuple.daddr[15], 2);
}

/// `ipv6` with its source address's last byte set to `src` (what SNAT rewrites).
fn ipv6_from(src: u8, next: u8, payload: &[u8]) -> Vec<u8> {
    let mut p = ipv6(next, payload);
    p[8 + 15] = src;
    p
}

#[test]
fn an_ipv6_packets_wire_hash_survives_nat_and_tells_its_neighbours_apart() {
    // The same segment before and after MASQUERADE (source address and port), then the next
    // segment of the flow, and a UDP datagram and its successor with other payloads.
    let seg = |sport, seq| tcp(sport, 80, seq, 7, 0x18, 502);
    let hash = |pkt: &[u8]| Parsed::from_l3(pkt).unwrap().fp.wire_hash();
    let before = ipv6_from(0x2e, PROTO_TCP, &seg(41234, 1000));
    let after = ipv6_from(0x04, PROTO_TCP, &seg(50000, 1000));
    let next = ipv6_from(0x2e, PROTO_TCP, &seg(41234, 1100));
    assert_eq!(hash(&before), hash(&after));
    assert_ne!(hash(&before), hash(&next));
    let dns = |id: u8, sport| udp(sport, 53, &[id, 0x2a, 1, 0, 0, 1, 0, 0]);
    let (q1, q1_nat, q2) = (
        ipv6_from(0x2e, PROTO_UDP, &dns(1, 5353)),
        ipv6_from(0x04, PROTO_UDP, &dns(1, 6000)),
        ipv6_from(0x2e, PROTO_UDP, &dns(2, 5353)),
    );
    assert_eq!(hash(&q1), hash(&q1_nat));
    assert_ne!(hash(&q1), hash(&q2));
}

#[test]
fn ipv6_later_fragment_has_no_ports() {
    // Fragment header: next = UDP, offset 8 (in 8-byte units), identification 0x01020304.
    let mut payload = vec![PROTO_UDP, 0, 0x00, 0x40, 1, 2, 3, 4];
    payload.extend_from_slice(&[0; 24]);
    let p = Parsed::from_l3(&ipv6(44, &payload)).unwrap();
    assert_eq!(p.flags & flag::FRAGMENT, flag::FRAGMENT);
    assert_eq!(
        (p.tuple.proto, p.tuple.sport, p.fp.a),
        (PROTO_UDP, 0, 0x0102_0304)
    );
}

#[test]
fn every_prefix_of_a_frame_parses_without_panicking() {
    let frames = [
        v4_frame(&tcp(1, 2, 3, 4, 5, 6), PROTO_TCP),
        v4_frame(&udp(1, 2, b"xyz"), PROTO_UDP),
        v4_frame(&icmp_echo(0, 1, 2, b"p"), PROTO_ICMP),
    ];
    for f in &frames {
        for n in 0..=f.len() {
            let _ = Parsed::from_ethernet(&f[..n]);
            let _ = Parsed::from_l3(&f[n.min(14)..n]);
        }
    }
}

/// The netfilter programs load only [`FAST_PARSE_BYTES`] of a packet [`parse_ipv4_fast`]
/// takes: `parse_l3` reads nothing past them, nor the TOS (byte 1), TTL (8) and checksum (10,
/// 11) (garbage there changes nothing).
#[test]
fn fast_path_packets_parse_from_their_first_fast_parse_bytes() {
    let payload = [0x5a; 40];
    let mut tcp_data = tcp(40000, 443, 1, 2, 0x18, 512);
    tcp_data.extend_from_slice(&payload);
    let packets = [
        (tcp_data, PROTO_TCP),
        (tcp(40000, 443, 1, 2, 0x10, 512), PROTO_TCP),
        (udp(5353, 53, &payload), PROTO_UDP),
        (udp(5353, 53, &payload[..3]), PROTO_UDP),
        (icmp_echo(8, 77, 1, &payload), PROTO_ICMP),
        (icmp_echo(0, 77, 1, &[]), PROTO_ICMP),
    ];
    for (l4, proto) in packets {
        let mut pkt = ipv4(proto, l4.len(), 0x1234, 0x4000, &[], SRC, DST);
        pkt.extend_from_slice(&l4);
        let (w, cap) = window_of(&pkt);
        let head: &[u8; FAST_PARSE_BYTES] = w[..FAST_PARSE_BYTES].try_into().unwrap();
        let mut slot = MaybeUninit::uninit();
        let fast = *parse_ipv4_fast(head, cap, &mut slot).expect("the fast parse takes it");
        let mut full = Parsed::default();
        assert!(parse_l3(&w, cap, &mut full));
        assert_eq!(full, fast, "proto {proto}");
        let mut junk = w;
        for b in &mut junk[FAST_PARSE_BYTES..] {
            *b = 0xee;
        }
        for i in [1, 8, 10, 11] {
            junk[i] ^= 0xa5;
        }
        let mut part = Parsed::default();
        assert!(parse_l3(&junk, cap, &mut part));
        assert_eq!(part, full, "proto {proto}, {} bytes", pkt.len());
    }
}

/// [`ethernet_ports_fast`] answers exactly for the frames [`parse_ethernet_fast`] parses as TCP
/// or UDP, with their ports, at every length and as the head of a GSO packet.
#[test]
#[expect(
    clippy::cast_possible_truncation,
    reason = "a test frame's length, far below 2^32"
)]
fn fast_ports_agree_with_the_fast_parse() {
    let mut fragment = eth(0x0800);
    let l4 = udp(7, 8, &[0; 32]);
    fragment.extend(ipv4(PROTO_UDP, l4.len(), 5, 0x2000, &[], SRC, DST));
    fragment.extend(&l4);
    let mut options = eth(0x0800);
    let l4 = udp(7, 8, &[0; 32]);
    options.extend(ipv4(PROTO_UDP, l4.len(), 1, 0, &[1, 1, 1, 0], SRC, DST));
    options.extend(&l4);
    let mut tagged = eth(0x8100);
    vlan(&mut tagged, 0x0800);
    tagged.extend(ipv4(PROTO_UDP, 12, 1, 0, &[], SRC, DST));
    tagged.extend(udp(7, 8, b"abcd"));
    let frames = [
        v4_frame(&tcp(40000, 443, 1, 2, 0x10, 512), PROTO_TCP),
        v4_frame(&udp(5353, 53, &[0x5a; 40]), PROTO_UDP),
        v4_frame(&udp(5353, 53, &[]), PROTO_UDP),
        v4_frame(&icmp_echo(8, 77, 1, &[1; 20]), PROTO_ICMP),
        fragment,
        options,
        tagged,
    ];
    let mut answered = 0;
    for frame in &frames {
        let mut padded = frame.clone();
        padded.resize(padded.len().max(FAST_ETH_BYTES), 0xee);
        let head: &[u8; FAST_ETH_BYTES] = padded[..FAST_ETH_BYTES].try_into().unwrap();
        for len in (0..=frame.len() as u32).chain([1500, 65_000]) {
            let mut slot = MaybeUninit::uninit();
            let want = parse_ethernet_fast(head, len, &mut slot)
                .filter(|p| p.tuple.proto == PROTO_TCP || p.tuple.proto == PROTO_UDP)
                .map(|p| (p.tuple.sport, p.tuple.dport));
            assert_eq!(
                ethernet_ports_fast(head, len),
                want,
                "{frame:02x?}, len {len}"
            );
            answered += usize::from(want.is_some());
        }
    }
    // Not vacuous: the TCP and UDP frames are answered at their full length and beyond.
    assert!(answered >= 6, "{answered}");
}

/// [`first::first_key_fast`] answers for the SYNs, UDP datagrams and ICMP echo requests that
/// [`parse_ethernet_fast`] parses, with the fast parse's tuple and IP id, and for nothing else:
/// not a SYN-ACK or a later TCP segment, an echo reply, a fragment, IP options or VLAN tags.
#[test]
#[expect(
    clippy::cast_possible_truncation,
    reason = "a test frame's length, far below 2^32"
)]
fn first_keys_agree_with_the_fast_parse() {
    let mut fragment = eth(0x0800);
    let l4 = udp(7, 8, &[0; 32]);
    fragment.extend(ipv4(PROTO_UDP, l4.len(), 5, 0x2000, &[], SRC, DST));
    fragment.extend(&l4);
    let mut tagged = eth(0x8100);
    vlan(&mut tagged, 0x0800);
    tagged.extend(ipv4(PROTO_UDP, 12, 1, 0, &[], SRC, DST));
    tagged.extend(udp(7, 8, b"abcd"));
    let candidates = [
        v4_frame(&tcp(40000, 80, 1, 0, 0x02, 512), PROTO_TCP),
        v4_frame(&tcp(40000, 80, 1, 0, 0x02 | 0x40 | 0x80, 512), PROTO_TCP),
        v4_frame(&udp(5353, 53, &[0x5a; 40]), PROTO_UDP),
        v4_frame(&icmp_echo(8, 77, 1, &[1; 20]), PROTO_ICMP),
    ];
    let others = [
        v4_frame(&tcp(80, 40000, 1, 2, 0x12, 512), PROTO_TCP),
        v4_frame(&tcp(40000, 80, 1, 2, 0x10, 512), PROTO_TCP),
        v4_frame(&tcp(40000, 80, 1, 2, 0x18, 512), PROTO_TCP),
        v4_frame(&icmp_echo(0, 77, 1, &[1; 20]), PROTO_ICMP),
        fragment,
        tagged,
    ];
    let pad = |frame: &Vec<u8>| {
        let mut padded = frame.clone();
        padded.resize(padded.len().max(FAST_ETH_BYTES), 0xee);
        padded
    };
    for frame in &candidates {
        let padded = pad(frame);
        let head: &[u8; FAST_ETH_BYTES] = padded[..FAST_ETH_BYTES].try_into().unwrap();
        let len = u32::try_from(frame.len()).unwrap();
        let mut slot = MaybeUninit::uninit();
        let p = *parse_ethernet_fast(head, len, &mut slot).expect("fast parse");
        let key = first::first_key_fast(head, len).unwrap_or_else(|| panic!("{frame:02x?}"));
        assert!(key.is(&p.tuple, p.fp.ip_id), "{key:?} vs {p:?}");
        assert_eq!(u32::from(key.ip_id), p.fp.ip_id);
        // Another packet of the flow (another IP id) or another flow is not this one.
        assert!(!key.is(&p.tuple, p.fp.ip_id ^ 1));
        let mut other = p.tuple;
        other.sport ^= 1;
        assert!(!key.is(&other, p.fp.ip_id));
        // Cut short of its L4 header, the frame is no candidate.
        assert_eq!(first::first_key_fast(head, 14 + 20 + 4), None);
    }
    for frame in &others {
        let padded = pad(frame);
        let head: &[u8; FAST_ETH_BYTES] = padded[..FAST_ETH_BYTES].try_into().unwrap();
        for len in (0..=frame.len() as u32).chain([1500, 65_000]) {
            assert_eq!(
                first::first_key_fast(head, len),
                None,
                "{frame:02x?}, len {len}"
            );
        }
    }
}
