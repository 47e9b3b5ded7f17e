//! The fast paths of the parser: the commonest packets (IPv4 without options, not a fragment,
//! TCP, UDP or ICMP) parsed from their first bytes in place, without a window; each gives
//! exactly what the full parser gives on the same bytes (host tests and fuzz target
//! `parse_packet`).

use core::mem::MaybeUninit;

use super::{ETH_HLEN, ETH_P_IP, Parsed};
use crate::{FAMILY_IPV4, Fingerprint, PKT_WINDOW, PROTO_ICMP, PROTO_TCP, PROTO_UDP};

/// The shortest packet [`parse_ipv4_fast`] takes: an IPv4 header without options and the
/// first 8 bytes of its L4 header (ports, or ICMP type and echo identifier).
pub const FAST_BYTES: usize = 28;

/// Bytes [`parse_l3`](super::parse_l3) reads from a packet [`parse_ipv4_fast`] takes (an IPv4 header without
/// options, then TCP, UDP or ICMP): the header and the 16 bytes of L4 header and payload the
/// fingerprint takes. A caller that copies only these (and gives the packet's real `cap`)
/// parses such a packet exactly as from all its bytes.
pub const FAST_PARSE_BYTES: usize = 36;

/// Where the L4 header of a packet [`parse_ipv4_fast`] may take ends, `None` for a packet it
/// leaves to the full parser whatever its protocol: shorter than [`FAST_BYTES`], IP options,
/// or any fragment bit but DF.
#[expect(
    clippy::inline_always,
    reason = "eBPF: the verifier needs the call inlined"
)]
#[inline(always)]
pub(super) fn fast_l4_end(h: &[u8; FAST_PARSE_BYTES], cap: usize) -> Option<usize> {
    let b16 = |i: usize| u16::from_be_bytes([h[i], h[i + 1]]);
    if cap < FAST_BYTES || h[0] != 0x45 || b16(6) & 0x3fff != 0 {
        return None;
    }
    let total = usize::from(b16(2));
    // As parse_ipv4: the L4 header ends at min(cap, total) (total < 20: cap).
    Some(if total >= 20 { cap.min(total) } else { cap })
}

/// The commonest packet, parsed whole from its first [`FAST_PARSE_BYTES`] (the netfilter
/// programs, which load them into registers; no window, no masking): an IPv4 header without
/// options, not a fragment, carrying TCP, UDP or ICMP whose header fits in the packet. `cap` is
/// how many bytes the packet really has from its IP header on (its linear length, capped at
/// [`PKT_WINDOW`]): bytes of `head` at or past it may hold anything and are not read.
///
/// Returns `None` when the fast path does not apply (`out` untouched): the caller then copies
/// the packet and calls [`parse_l3`](super::parse_l3). Otherwise `out`, written whole, is exactly
/// what [`parse_l3`](super::parse_l3) gives on the packet's first `cap` bytes (host test
/// `fast_l3_agrees_with_the_parser`, fuzz target `parse_packet`).
#[expect(
    clippy::inline_always,
    reason = "eBPF: the verifier needs the call inlined"
)]
#[inline(always)]
pub fn parse_ipv4_fast<'a>(
    head: &[u8; FAST_PARSE_BYTES],
    cap: usize,
    out: &'a mut MaybeUninit<Parsed>,
) -> Option<&'a mut Parsed> {
    let h = head;
    let b16 = |i: usize| u16::from_be_bytes([h[i], h[i + 1]]);
    let b32 = |i: usize| u32::from_be_bytes([h[i], h[i + 1], h[i + 2], h[i + 3]]);
    let end = fast_l4_end(h, cap)?;
    // be32_partial of bytes 28..36: those at or past `end` read as zero.
    let partial = |from: usize| {
        let mut v = 0u32;
        let mut i = from;
        while i < from + 4 {
            v = (v << 8) | if i < end { u32::from(h[i]) } else { 0 };
            i += 1;
        }
        v
    };
    let proto = h[9];
    let (sport, dport, a, b, c) = match proto {
        PROTO_TCP if end >= 40 => (
            b16(20),
            b16(22),
            b32(24),
            b32(28),
            u32::from(h[33]) | (u32::from(b16(34)) << 16),
        ),
        PROTO_UDP if end >= 28 => (
            b16(20),
            b16(22),
            u32::from(b16(24)),
            partial(28),
            partial(32),
        ),
        PROTO_ICMP if end >= 28 => {
            let ty = h[20];
            let id = if ty == 8 || ty == 0 { b16(24) } else { 0 };
            (
                id,
                id,
                (u32::from(ty) << 8) | u32::from(h[21]),
                u32::from(b16(26)),
                partial(28),
            )
        }
        _ => return None,
    };
    let out = Parsed::zeroed_in(out);
    out.tuple.family = FAMILY_IPV4;
    out.tuple.proto = proto;
    out.tuple.sport = sport;
    out.tuple.dport = dport;
    out.tuple.saddr[..4].copy_from_slice(&h[12..16]);
    out.tuple.daddr[..4].copy_from_slice(&h[16..20]);
    out.fp = Fingerprint {
        ip_id: u32::from(b16(4)),
        a,
        b,
        c,
    };
    Some(out)
}

/// Bytes of a frame [`parse_ethernet_fast`] reads: an Ethernet header without VLAN tags and
/// the [`FAST_PARSE_BYTES`] [`parse_ipv4_fast`] reads after it.
pub const FAST_ETH_BYTES: usize = ETH_HLEN + FAST_PARSE_BYTES;

/// The commonest frame, parsed in place (tc programs, from the packet's linear bytes): Ethernet
/// without VLAN tags, then a packet [`parse_ipv4_fast`] takes (IPv4 without options, not a
/// fragment, TCP, UDP or ICMP whose header lies within the packet). `head` is the frame's first
/// [`FAST_ETH_BYTES`] bytes, `len` its length (`skb->len`, linear and paged bytes).
///
/// Returns `None` when the fast path does not apply (`out` untouched): the caller then copies
/// the frame into a window and calls [`parse_ethernet`](super::parse_ethernet). Otherwise `out`, written whole, is
/// exactly what [`parse_ethernet`](super::parse_ethernet) gives on the frame's first `min(len, PKT_WINDOW)` bytes
/// (host test and fuzz target `parse_packet` check it). `out` may be uninitialised: the tc
/// programs keep it on the stack.
#[expect(
    clippy::inline_always,
    reason = "eBPF: the verifier needs the call inlined"
)]
#[inline(always)]
pub fn parse_ethernet_fast<'a>(
    head: &[u8; FAST_ETH_BYTES],
    len: u32,
    out: &'a mut MaybeUninit<Parsed>,
) -> Option<&'a mut Parsed> {
    let (ip, cap) = ipv4_of_frame(head, len)?;
    parse_ipv4_fast(ip, cap, out)
}

/// The IPv4 packet of a plain Ethernet frame's first [`FAST_ETH_BYTES`], and how many of its
/// bytes [`parse_ethernet`](super::parse_ethernet) would read (the frame's first min(`len`, [`PKT_WINDOW`]) bytes,
/// less the Ethernet header); `None` when the ethertype is not IPv4.
#[expect(
    clippy::inline_always,
    reason = "eBPF: the verifier needs the call inlined"
)]
#[inline(always)]
pub(super) fn ipv4_of_frame(
    head: &[u8; FAST_ETH_BYTES],
    len: u32,
) -> Option<(&[u8; FAST_PARSE_BYTES], usize)> {
    if u16::from_be_bytes([head[12], head[13]]) != ETH_P_IP {
        return None;
    }
    let cap = if len as usize > PKT_WINDOW {
        PKT_WINDOW
    } else {
        len as usize
    };
    let (_, ip) = head.split_first_chunk::<ETH_HLEN>()?;
    let ip: &[u8; FAST_PARSE_BYTES] = ip.try_into().ok()?;
    Some((ip, cap.saturating_sub(ETH_HLEN)))
}

/// The ports of a TCP or UDP frame that [`parse_ethernet_fast`] takes, read without parsing
/// the rest (host order, as its tuple holds them): `Some` exactly when it would return a TCP or
/// UDP packet, with that packet's `sport` and `dport` (host test
/// `fast_ports_agree_with_the_fast_parse`, fuzz target `parse_packet`). The tc programs hash
/// them with the addresses to rule out followed flows before any parse.
#[expect(
    clippy::inline_always,
    reason = "eBPF: the verifier needs the call inlined"
)]
#[inline(always)]
#[must_use]
pub fn ethernet_ports_fast(head: &[u8; FAST_ETH_BYTES], len: u32) -> Option<(u16, u16)> {
    let (ip, cap) = ipv4_of_frame(head, len)?;
    let end = fast_l4_end(ip, cap)?;
    match ip[9] {
        PROTO_TCP if end >= 40 => {}
        PROTO_UDP if end >= 28 => {}
        _ => return None,
    }
    Some((
        u16::from_be_bytes([ip[20], ip[21]]),
        u16::from_be_bytes([ip[22], ip[23]]),
    ))
}

/// The first [`FAST_ETH_BYTES`] of a frame, `None` when it is shorter (host tests, fuzzing).
#[must_use]
pub fn fast_head(frame: &[u8]) -> Option<&[u8; FAST_ETH_BYTES]> {
    frame.get(..FAST_ETH_BYTES)?.try_into().ok()
}
