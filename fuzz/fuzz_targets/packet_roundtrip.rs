//! Valid packets built from a structured description (Ethernet with up to three VLAN tags,
//! 802.1Q or QinQ; IPv4 with options and fragments, IPv6 with hop-by-hop, routing, fragment,
//! destination-options and authentication headers; TCP with options, UDP, ICMP and ICMPv6
//! echo and errors, other protocols; Ethernet padding after the packet), parsed with the
//! kernel's code path. The parser must read back exactly what was written (the expected
//! result is stated from the description, not from the bytes), and a NAT rewrite of the same
//! packet (addresses, ports or echo id, checksums, TTL, the header quoted in an ICMP error,
//! VLAN priorities) must leave the fingerprint unchanged, in the tc and the netfilter view.
#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use tracer_common::{
    FAMILY_IPV4, FAMILY_IPV6, PKT_WINDOW, PROTO_ICMP, PROTO_ICMPV6, PROTO_TCP, PROTO_UDP, flag,
    parse::{self, Parsed},
};

#[derive(Arbitrary, Debug, Clone)]
struct Packet {
    /// `None`: the packet starts with its IP header (netfilter); else the VLAN tags of its frame.
    l2: Option<Vec<Vlan>>,
    ip: Ip,
    l4: L4,
    /// Bytes after the packet (Ethernet padding): never part of it.
    trailer: Vec<u8>,
    /// IPv4 header checksum, then the L4 checksum (not checked by the parser).
    checksums: [u8; 4],
    nat: Nat,
}

#[derive(Arbitrary, Debug, Clone, Copy)]
struct Vlan {
    qinq: bool,
    tci: u16,
}

#[derive(Arbitrary, Debug, Clone)]
enum Ip {
    V4 {
        tos: u8,
        id: u16,
        dont_fragment: bool,
        more_fragments: bool,
        /// 13 bits, in 8-byte units.
        frag_offset: u16,
        ttl: u8,
        /// Up to 40 bytes, padded with end-of-options to a multiple of four.
        options: Vec<u8>,
        src: [u8; 4],
        dst: [u8; 4],
    },
    V6 {
        traffic_class: u8,
        /// 20 bits.
        flow: u32,
        hop_limit: u8,
        exts: Vec<Ext>,
        src: [u8; 16],
        dst: [u8; 16],
    },
}

#[derive(Arbitrary, Debug, Clone, Copy)]
enum Ext {
    HopByHop { len: u8, fill: u8 },
    Routing { len: u8, fill: u8 },
    DestOpts { len: u8, fill: u8 },
    Fragment { offset: u16, more: bool, id: u32 },
    Auth { len: u8, fill: u8 },
}

#[derive(Arbitrary, Debug, Clone)]
enum L4 {
    Tcp {
        sport: u16,
        dport: u16,
        seq: u32,
        ack: u32,
        flags: u8,
        window: u16,
        /// Words of TCP options (0–10).
        option_words: u8,
        payload: Vec<u8>,
    },
    Udp {
        sport: u16,
        dport: u16,
        payload: Vec<u8>,
    },
    Icmp {
        ty: u8,
        code: u8,
        /// Bytes 4..8 of the ICMP header: echo id and sequence, or unused / MTU / pointer.
        rest: [u8; 4],
        /// Echo data, or the quoted header of an error.
        payload: Vec<u8>,
    },
    Other {
        proto: OtherProto,
        payload: Vec<u8>,
    },
}

/// Protocols the parser reads no L4 header of (and that are not IPv6 extension headers).
#[derive(Arbitrary, Debug, Clone, Copy)]
enum OtherProto {
    Gre,
    Esp,
    Sctp,
    NoNext,
    Reserved,
}

impl OtherProto {
    const fn number(self) -> u8 {
        match self {
            Self::Gre => 47,
            Self::Esp => 50,
            Self::Sctp => 132,
            Self::NoNext => 59,
            Self::Reserved => 255,
        }
    }
}

/// What NAT and routing change on the way through the node.
#[derive(Arbitrary, Debug, Clone)]
struct Nat {
    src: [u8; 16],
    dst: [u8; 16],
    sport: u16,
    dport: u16,
    ttl_drop: u8,
    checksums: [u8; 6],
    tci: u16,
    /// Parse the rewritten packet in the other view (tc ↔ netfilter).
    other_view: bool,
}

const ETH_P_IP: u16 = 0x0800;
const ETH_P_IPV6: u16 = 0x86dd;
const MACS: [u8; 12] = [2, 0x42, 10, 13, 76, 4, 2, 0x42, 10, 13, 76, 46];

fuzz_target!(|pkt: Packet| {
    let pkt = pkt.normalized();
    let (bytes, layout) = pkt.build();
    let got = parse_as(&pkt, &bytes);
    let want = pkt.expected(&layout, bytes.len());
    assert_eq!(got, want, "\npacket {pkt:?}\nbytes {bytes:02x?}");

    // Through NAT and routing: the fingerprint is what joins the two observations.
    let after = pkt.nat_rewritten();
    let (after_bytes, after_layout) = after.build();
    let got_after = parse_as(&after, &after_bytes);
    assert_eq!(
        got_after,
        after.expected(&after_layout, after_bytes.len()),
        "{after:?}"
    );
    if let (Some(before), Some(after_p)) = (got, got_after) {
        // Same window alignment: the same bytes are captured, so the same fingerprint.
        if pkt.l2.as_ref().map(Vec::len) == after.l2.as_ref().map(Vec::len) {
            assert_eq!(
                before.fp, after_p.fp,
                "NAT changed the fingerprint: {pkt:?}"
            );
            assert_eq!(before.flags, after_p.flags);
        }
        // Otherwise (tc before, netfilter after) when both windows hold the whole packet.
        if bytes.len() <= PKT_WINDOW && after_bytes.len() <= PKT_WINDOW {
            assert_eq!(before.fp, after_p.fp, "views disagree: {pkt:?} / {after:?}");
        }
    }
});

fn parse_as(pkt: &Packet, bytes: &[u8]) -> Option<Parsed> {
    let (w, cap) = parse::window_of(bytes);
    let mut out = Parsed::default();
    let ok = if pkt.l2.is_some() {
        parse::parse_ethernet(&w, cap, &mut out)
    } else {
        parse::parse_l3(&w, cap, &mut out)
    };
    ok.then_some(out)
}

/// Where the builder put things, in bytes from the start of what is parsed.
struct Layout {
    l3: usize,
    /// Each extension header: offset, length, kind.
    exts: Vec<(usize, usize, u8)>,
    l4: usize,
    /// End of the IP packet (before the trailer).
    end: usize,
}

impl Packet {
    /// Caps lengths so a frame stays near the window (a bit past it, to reach the edge).
    fn normalized(mut self) -> Self {
        if let Some(tags) = &mut self.l2 {
            tags.truncate(3);
        }
        match &mut self.ip {
            Ip::V4 {
                options,
                frag_offset,
                ..
            } => {
                options.truncate(40);
                while options.len() % 4 != 0 {
                    options.push(0);
                }
                *frag_offset &= 0x1fff;
            }
            Ip::V6 { exts, flow, .. } => {
                exts.truncate(8);
                *flow &= 0x000f_ffff;
            }
        }
        match &mut self.l4 {
            L4::Tcp {
                option_words,
                payload,
                ..
            } => {
                *option_words %= 11;
                payload.truncate(300);
            }
            L4::Udp { payload, .. } | L4::Icmp { payload, .. } | L4::Other { payload, .. } => {
                payload.truncate(300);
            }
        }
        self.trailer.truncate(64);
        self
    }

    const fn family(&self) -> u8 {
        match self.ip {
            Ip::V4 { .. } => FAMILY_IPV4,
            Ip::V6 { .. } => FAMILY_IPV6,
        }
    }

    fn proto(&self) -> u8 {
        match &self.l4 {
            L4::Tcp { .. } => PROTO_TCP,
            L4::Udp { .. } => PROTO_UDP,
            L4::Icmp { .. } if self.family() == FAMILY_IPV4 => PROTO_ICMP,
            L4::Icmp { .. } => PROTO_ICMPV6,
            L4::Other { proto, .. } => proto.number(),
        }
    }

    fn l4_bytes(&self) -> Vec<u8> {
        let csum = [self.checksums[2], self.checksums[3]];
        let mut b = Vec::new();
        match &self.l4 {
            L4::Tcp {
                sport,
                dport,
                seq,
                ack,
                flags,
                window,
                option_words,
                payload,
            } => {
                b.extend(sport.to_be_bytes());
                b.extend(dport.to_be_bytes());
                b.extend(seq.to_be_bytes());
                b.extend(ack.to_be_bytes());
                b.extend([(5 + option_words) << 4, *flags]);
                b.extend(window.to_be_bytes());
                b.extend(csum);
                b.extend([0, 0]); // urgent pointer
                b.extend((0..usize::from(*option_words) * 4).map(|i| [1, 2, 4, 0xb4][i % 4]));
                b.extend(payload);
            }
            L4::Udp {
                sport,
                dport,
                payload,
            } => {
                b.extend(sport.to_be_bytes());
                b.extend(dport.to_be_bytes());
                b.extend(u16::try_from(8 + payload.len()).unwrap().to_be_bytes());
                b.extend(csum);
                b.extend(payload);
            }
            L4::Icmp {
                ty,
                code,
                rest,
                payload,
            } => {
                b.extend([*ty, *code]);
                b.extend(csum);
                b.extend(rest);
                b.extend(payload);
            }
            L4::Other { payload, .. } => b.extend(payload),
        }
        b
    }

    fn build(&self) -> (Vec<u8>, Layout) {
        let mut f = Vec::new();
        if let Some(tags) = &self.l2 {
            f.extend(MACS);
            for tag in tags {
                f.extend(if tag.qinq { 0x88a8u16 } else { 0x8100 }.to_be_bytes());
                f.extend(tag.tci.to_be_bytes());
            }
            f.extend(
                if self.family() == FAMILY_IPV4 {
                    ETH_P_IP
                } else {
                    ETH_P_IPV6
                }
                .to_be_bytes(),
            );
        }
        let l3 = f.len();
        let l4 = self.l4_bytes();
        let mut exts = Vec::new();
        match &self.ip {
            Ip::V4 {
                tos,
                id,
                dont_fragment,
                more_fragments,
                frag_offset,
                ttl,
                options,
                src,
                dst,
            } => {
                let ihl = 20 + options.len();
                let frag = frag_offset
                    | if *dont_fragment { 0x4000 } else { 0 }
                    | if *more_fragments { 0x2000 } else { 0 };
                f.push(0x40 | u8::try_from(ihl / 4).unwrap());
                f.push(*tos);
                f.extend(u16::try_from(ihl + l4.len()).unwrap().to_be_bytes());
                f.extend(id.to_be_bytes());
                f.extend(frag.to_be_bytes());
                f.extend([*ttl, self.proto(), self.checksums[0], self.checksums[1]]);
                f.extend(src);
                f.extend(dst);
                f.extend(options);
            }
            Ip::V6 {
                traffic_class,
                flow,
                hop_limit,
                exts: spec,
                src,
                dst,
            } => {
                let ext_bytes: Vec<Vec<u8>> = spec
                    .iter()
                    .enumerate()
                    .map(|(i, e)| {
                        let next = spec.get(i + 1).map_or(self.proto(), |n| n.kind());
                        e.bytes(next)
                    })
                    .collect();
                let payload = ext_bytes.iter().map(Vec::len).sum::<usize>() + l4.len();
                let first = (6u32 << 28) | (u32::from(*traffic_class) << 20) | flow;
                f.extend(first.to_be_bytes());
                f.extend(u16::try_from(payload).unwrap().to_be_bytes());
                f.push(spec.first().map_or(self.proto(), |e| e.kind()));
                f.push(*hop_limit);
                f.extend(src);
                f.extend(dst);
                for (e, b) in spec.iter().zip(ext_bytes) {
                    exts.push((f.len() - l3, b.len(), e.kind()));
                    f.extend(b);
                }
            }
        }
        let l4_off = f.len() - l3;
        f.extend(&l4);
        let end = f.len() - l3;
        f.extend(&self.trailer);
        (
            f,
            Layout {
                l3,
                exts,
                l4: l4_off,
                end,
            },
        )
    }

    /// What the parser must read, stated from the description.
    fn expected(&self, at: &Layout, len: usize) -> Option<Parsed> {
        if self.l2.as_ref().is_some_and(|tags| tags.len() > 2) {
            return None; // a third tag hides the ethertype: not a packet the parser reads
        }
        let cap = len.min(PKT_WINDOW);
        // Offsets below are from the start of the parsed bytes.
        let base = at.l3;
        let end = cap.min(base + at.end);
        let mut p = Parsed::default();
        p.tuple.family = self.family();
        match &self.ip {
            Ip::V4 {
                id,
                more_fragments,
                frag_offset,
                src,
                dst,
                ..
            } => {
                if cap < base + 20 {
                    return None;
                }
                p.tuple.proto = self.proto();
                p.tuple.saddr[..4].copy_from_slice(src);
                p.tuple.daddr[..4].copy_from_slice(dst);
                p.fp.ip_id = u32::from(*id);
                if *more_fragments || *frag_offset != 0 {
                    p.flags |= flag::FRAGMENT;
                }
                if *frag_offset != 0 {
                    p.fp.a = u32::from(*frag_offset);
                    return Some(p);
                }
            }
            Ip::V6 {
                flow,
                src,
                dst,
                exts,
                ..
            } => {
                if cap < base + 40 {
                    return None;
                }
                p.tuple.saddr = *src;
                p.tuple.daddr = *dst;
                p.fp.ip_id = *flow;
                for (k, (e, &(off, _, kind))) in exts.iter().zip(&at.exts).enumerate() {
                    if k == 6 {
                        // The parser follows six extension headers, then gives up on L4.
                        p.tuple.proto = kind;
                        return Some(p);
                    }
                    let need = if matches!(e, Ext::Fragment { .. }) {
                        8
                    } else {
                        2
                    };
                    if end < base + off + need {
                        p.flags |= flag::TRUNCATED;
                        p.tuple.proto = kind;
                        return Some(p);
                    }
                    if let Ext::Fragment { offset, id, .. } = e {
                        p.flags |= flag::FRAGMENT;
                        p.fp.a = *id;
                        if offset & 0x1fff != 0 {
                            p.tuple.proto = exts.get(k + 1).map_or(self.proto(), |n| n.kind());
                            return Some(p);
                        }
                    }
                }
                p.tuple.proto = self.proto();
            }
        }
        self.expected_l4(&mut p, base + at.l4, end);
        Some(p)
    }

    fn expected_l4(&self, p: &mut Parsed, off: usize, end: usize) {
        let need = match &self.l4 {
            L4::Tcp { .. } => 20,
            L4::Udp { .. } | L4::Icmp { .. } => 8,
            L4::Other { .. } => return,
        };
        if end < off + need {
            p.flags |= flag::TRUNCATED;
            return;
        }
        // Payload bytes the window and the packet both hold, zero after.
        let word = |payload: &[u8], from: usize| {
            let room = end.saturating_sub(off + need);
            let byte = |i: usize| {
                if i < room {
                    payload.get(i).copied().unwrap_or(0)
                } else {
                    0
                }
            };
            u32::from_be_bytes([byte(from), byte(from + 1), byte(from + 2), byte(from + 3)])
        };
        match &self.l4 {
            L4::Tcp {
                sport,
                dport,
                seq,
                ack,
                flags,
                window,
                ..
            } => {
                (p.tuple.sport, p.tuple.dport) = (*sport, *dport);
                p.fp.a = *seq;
                p.fp.b = *ack;
                p.fp.c = u32::from(*flags) | (u32::from(*window) << 16);
            }
            L4::Udp {
                sport,
                dport,
                payload,
            } => {
                (p.tuple.sport, p.tuple.dport) = (*sport, *dport);
                p.fp.a = u32::try_from(8 + payload.len()).unwrap();
                p.fp.b = word(payload, 0);
                p.fp.c = word(payload, 4);
            }
            L4::Icmp {
                ty,
                code,
                rest,
                payload,
            } => {
                let echo = match self.family() {
                    FAMILY_IPV4 => *ty == 8 || *ty == 0,
                    _ => *ty == 128 || *ty == 129,
                };
                if echo {
                    let id = u16::from_be_bytes([rest[0], rest[1]]);
                    (p.tuple.sport, p.tuple.dport) = (id, id);
                }
                p.fp.a = (u32::from(*ty) << 8) | u32::from(*code);
                p.fp.b = u32::from(u16::from_be_bytes([rest[2], rest[3]]));
                p.fp.c = word(payload, 0);
            }
            L4::Other { .. } => {}
        }
    }

    /// The same packet after DNAT/SNAT and a routing hop.
    fn nat_rewritten(&self) -> Self {
        let mut out = self.clone();
        let n = &self.nat;
        out.checksums.copy_from_slice(&n.checksums[..4]);
        if n.other_view {
            out.l2 = match &self.l2 {
                Some(_) => None,
                None => Some(Vec::new()),
            };
        } else if let Some(tags) = &mut out.l2 {
            for tag in tags {
                tag.tci ^= n.tci;
            }
        }
        match &mut out.ip {
            Ip::V4 { ttl, src, dst, .. } => {
                *ttl = ttl.wrapping_sub(n.ttl_drop);
                src.copy_from_slice(&n.src[..4]);
                dst.copy_from_slice(&n.dst[..4]);
            }
            Ip::V6 {
                hop_limit,
                src,
                dst,
                ..
            } => {
                *hop_limit = hop_limit.wrapping_sub(n.ttl_drop);
                (*src, *dst) = (n.src, n.dst);
            }
        }
        let family = self.family();
        match &mut out.l4 {
            L4::Tcp { sport, dport, .. } | L4::Udp { sport, dport, .. } => {
                (*sport, *dport) = (n.sport, n.dport);
            }
            L4::Icmp {
                ty, rest, payload, ..
            } => {
                let echo = matches!(
                    (family, *ty),
                    (FAMILY_IPV4, 0 | 8) | (FAMILY_IPV6, 128 | 129)
                );
                if echo {
                    rest[..2].copy_from_slice(&n.sport.to_be_bytes()); // conntrack maps the id
                } else {
                    rewrite_quoted(payload, family, n);
                }
            }
            L4::Other { .. } => {}
        }
        out
    }
}

/// NAT rewrites the header an ICMP error quotes (nf_nat_icmp_reply_translation,
/// net/netfilter/nf_nat_proto.c, v6.1): its addresses, ports and checksums.
fn rewrite_quoted(payload: &mut [u8], family: u8, n: &Nat) {
    let set = |payload: &mut [u8], at: usize, bytes: &[u8]| {
        for (i, b) in bytes.iter().enumerate() {
            if let Some(slot) = payload.get_mut(at + i) {
                *slot = *b;
            }
        }
    };
    // The quoted packet went the other way: its source is the reply's destination.
    let l4 = if family == FAMILY_IPV4 {
        set(payload, 10, &n.checksums[4..]);
        set(payload, 12, &n.dst[..4]);
        set(payload, 16, &n.src[..4]);
        20
    } else {
        set(payload, 8, &n.dst);
        set(payload, 24, &n.src);
        40
    };
    set(payload, l4, &n.dport.to_be_bytes());
    set(payload, l4 + 2, &n.sport.to_be_bytes());
    set(payload, l4 + 6, &n.checksums[2..4]); // UDP's; TCP's lies past the 8 bytes quoted
}

impl Ext {
    const fn kind(self) -> u8 {
        match self {
            Self::HopByHop { .. } => 0,
            Self::Routing { .. } => 43,
            Self::Fragment { .. } => 44,
            Self::Auth { .. } => 51,
            Self::DestOpts { .. } => 60,
        }
    }

    fn bytes(self, next: u8) -> Vec<u8> {
        match self {
            Self::HopByHop { len, fill }
            | Self::Routing { len, fill }
            | Self::DestOpts { len, fill } => {
                let len = len % 32; // up to 256 bytes: enough to run past the window
                let mut b = vec![next, len];
                b.resize((usize::from(len) + 1) * 8, fill);
                b
            }
            Self::Fragment { offset, more, id } => {
                let field = ((offset & 0x1fff) << 3) | u16::from(more);
                let mut b = vec![next, 0];
                b.extend(field.to_be_bytes());
                b.extend(id.to_be_bytes());
                b
            }
            Self::Auth { len, fill } => {
                let len = len % 64;
                let mut b = vec![next, len];
                b.resize((usize::from(len) + 2) * 4, fill);
                b
            }
        }
    }
}
