//! Packet parsing shared by the kernel programs and the host.
//!
//! The kernel copies up to [`PKT_WINDOW`] bytes of a packet into a scratch buffer and calls
//! these functions on it; the host's tests and fuzz targets call the very same code. Every read
//! goes through `byte`, which masks the index into the window, so the verifier sees a bounded
//! access and the host can never read out of bounds; `cap` (how many bytes are real) bounds
//! what the parser believes.

use core::mem::MaybeUninit;

use crate::{
    FAMILY_IPV4, FAMILY_IPV6, Fingerprint, PKT_WINDOW, PROTO_ICMP, PROTO_ICMPV6, PROTO_TCP,
    PROTO_UDP, Tuple, flag,
};

mod fast;
pub mod first;

pub use fast::{
    FAST_BYTES, FAST_ETH_BYTES, FAST_PARSE_BYTES, ethernet_ports_fast, fast_head,
    parse_ethernet_fast, parse_ipv4_fast,
};
use fast::{fast_l4_end, ipv4_of_frame};

/// The parser's input: a fixed window of packet bytes.
pub type Window = [u8; PKT_WINDOW];

const _: () = assert!(PKT_WINDOW.is_power_of_two());

/// What the parser read from one packet.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Parsed {
    pub tuple: Tuple,
    pub fp: Fingerprint,
    /// Bits of [`flag`].
    pub flags: u8,
}

const _: () = assert!(size_of::<Parsed>().is_multiple_of(4) && align_of::<Parsed>() >= 4);

impl Parsed {
    /// Sets every byte to zero (what `*self = Parsed::default()` does), a word at a time:
    /// LLVM turns that assignment into a call to the BPF target's `memset`, which aya-ebpf
    /// implements a byte at a time (five instructions per byte, about 300 for a `Parsed`).
    /// The volatile writes keep LLVM from forming that call again.
    #[expect(
        clippy::inline_always,
        reason = "eBPF: the verifier needs the call inlined"
    )]
    #[inline(always)]
    pub fn clear(&mut self) {
        // SAFETY: a `&mut Parsed` is valid for writes of all its bytes.
        unsafe { zero_words(core::ptr::from_mut::<Self>(self).cast::<u32>()) };
    }

    /// [`clear`](Self::clear) for a slot not written yet (a local on the BPF stack, which
    /// `Parsed::default()` would fill by `memset`): zeroes it and returns it initialised.
    #[expect(
        clippy::inline_always,
        reason = "eBPF: the verifier needs the call inlined"
    )]
    #[inline(always)]
    pub fn zeroed_in(slot: &mut MaybeUninit<Self>) -> &mut Self {
        // SAFETY: the slot is valid for writes of all its bytes; after them every byte is
        // initialised, and `Parsed` is valid for every bit pattern (integers only).
        unsafe {
            zero_words(slot.as_mut_ptr().cast::<u32>());
            slot.assume_init_mut()
        }
    }
}

/// Writes zero to the `size_of::<Parsed>() / 4` words at `words` (volatile, see
/// [`Parsed::clear`]).
///
/// # Safety
/// `words` is valid for writes of a `Parsed` and 4-aligned.
#[expect(
    clippy::inline_always,
    reason = "eBPF: the verifier needs the call inlined"
)]
#[inline(always)]
unsafe fn zero_words(words: *mut u32) {
    let mut i = 0;
    while i < size_of::<Parsed>() / 4 {
        // SAFETY: within the `Parsed` the caller vouches for; `Parsed` is made of integers
        // only (padding included, every bit pattern valid), at least 4-aligned and a whole
        // number of words long (asserted above).
        unsafe { core::ptr::write_volatile(words.add(i), 0) };
        i += 1;
    }
}

const ETH_P_IP: u16 = 0x0800;
const ETH_P_IPV6: u16 = 0x86dd;
const ETH_P_8021Q: u16 = 0x8100;
const ETH_P_8021AD: u16 = 0x88a8;
const ETH_HLEN: usize = 14;
const VLAN_HLEN: usize = 4;
const MAX_VLAN_TAGS: usize = 2;
const IPV6_HLEN: usize = 40;
const MAX_IPV6_EXT: usize = 6;

/// `cap` as a value the compiler cannot reason about. The callers clamp it to `PKT_WINDOW`, so
/// after a check `i < cap` LLVM knows `i < PKT_WINDOW` and drops the mask in [`byte`]; older
/// verifiers (Debian's 6.1) do not learn bounds from comparing two registers and reject the
/// unmasked access. The verifier still knows the bound: it follows the value through the stack.
#[expect(
    clippy::inline_always,
    reason = "eBPF: the verifier needs the call inlined"
)]
#[inline(always)]
fn opaque(cap: usize) -> usize {
    // SAFETY: a volatile read of a local.
    unsafe { core::ptr::read_volatile(&raw const cap) }
}

#[expect(
    clippy::inline_always,
    reason = "eBPF: the verifier needs the call inlined"
)]
#[inline(always)]
fn byte(w: &Window, i: usize) -> u8 {
    w[i & (PKT_WINDOW - 1)]
}

#[expect(
    clippy::inline_always,
    reason = "eBPF: the verifier needs the call inlined"
)]
#[inline(always)]
fn be16(w: &Window, i: usize) -> u16 {
    u16::from_be_bytes([byte(w, i), byte(w, i + 1)])
}

#[expect(
    clippy::inline_always,
    reason = "eBPF: the verifier needs the call inlined"
)]
#[inline(always)]
fn be32(w: &Window, i: usize) -> u32 {
    u32::from_be_bytes([byte(w, i), byte(w, i + 1), byte(w, i + 2), byte(w, i + 3)])
}

#[expect(
    clippy::inline_always,
    reason = "eBPF: the verifier needs the call inlined"
)]
#[inline(always)]
fn copy4(w: &Window, i: usize) -> [u8; 4] {
    [byte(w, i), byte(w, i + 1), byte(w, i + 2), byte(w, i + 3)]
}

/// Reads up to four bytes at `i` as a big-endian word, zero past `cap`.
#[expect(
    clippy::inline_always,
    reason = "eBPF: the verifier needs the call inlined"
)]
#[inline(always)]
fn be32_partial(w: &Window, i: usize, cap: usize) -> u32 {
    let mut v = 0u32;
    let mut k = 0;
    while k < 4 {
        v <<= 8;
        if i + k < cap {
            v |= u32::from(byte(w, i + k));
        }
        k += 1;
    }
    v
}

/// Parses a frame that starts with an Ethernet header (tc programs), with up to two VLAN tags,
/// into `out`; false when it is not an IP packet the parser can read.
#[expect(
    clippy::inline_always,
    reason = "eBPF: the verifier needs the call inlined"
)]
#[inline(always)]
pub fn parse_ethernet(w: &Window, cap: usize, out: &mut Parsed) -> bool {
    let cap = opaque(cap);
    if cap < ETH_HLEN {
        return false;
    }
    let mut ethertype = be16(w, 12);
    let mut off = ETH_HLEN;
    let mut tags = 0;
    while tags < MAX_VLAN_TAGS {
        if ethertype != ETH_P_8021Q && ethertype != ETH_P_8021AD {
            break;
        }
        if cap < off + VLAN_HLEN {
            return false;
        }
        ethertype = be16(w, off + 2);
        off += VLAN_HLEN;
        tags += 1;
    }
    match ethertype {
        ETH_P_IP => parse_ipv4(w, off, cap, out),
        ETH_P_IPV6 => parse_ipv6(w, off, cap, out),
        _ => false,
    }
}

/// Parses a packet that starts with its IP header (netfilter hooks) into `out`; false when it
/// is not an IP packet the parser can read.
#[expect(
    clippy::inline_always,
    reason = "eBPF: the verifier needs the call inlined"
)]
#[inline(always)]
pub fn parse_l3(w: &Window, cap: usize, out: &mut Parsed) -> bool {
    let cap = opaque(cap);
    if cap == 0 {
        return false;
    }
    match byte(w, 0) >> 4 {
        4 => parse_ipv4(w, 0, cap, out),
        6 => parse_ipv6(w, 0, cap, out),
        _ => false,
    }
}

impl Parsed {
    /// Host convenience: parses an Ethernet frame held in a slice.
    #[must_use]
    pub fn from_ethernet(frame: &[u8]) -> Option<Self> {
        let (w, cap) = window_of(frame);
        let mut p = Self::default();
        parse_ethernet(&w, cap, &mut p).then_some(p)
    }

    /// Host convenience: parses a packet that starts with its IP header.
    #[must_use]
    pub fn from_l3(packet: &[u8]) -> Option<Self> {
        let (w, cap) = window_of(packet);
        let mut p = Self::default();
        parse_l3(&w, cap, &mut p).then_some(p)
    }
}

/// Copies the first bytes of `bytes` into a window, as the kernel programs do.
#[must_use]
pub fn window_of(bytes: &[u8]) -> (Window, usize) {
    let mut w = [0u8; PKT_WINDOW];
    let cap = bytes.len().min(PKT_WINDOW);
    w[..cap].copy_from_slice(&bytes[..cap]);
    (w, cap)
}

#[expect(
    clippy::inline_always,
    reason = "eBPF: the verifier needs the call inlined"
)]
#[inline(always)]
fn parse_ipv4(w: &Window, off: usize, cap: usize, p: &mut Parsed) -> bool {
    if cap < off + 20 || byte(w, off) >> 4 != 4 {
        return false;
    }
    let ihl = usize::from(byte(w, off) & 0x0f) * 4;
    if ihl < 20 {
        return false;
    }
    p.clear();
    p.tuple.family = FAMILY_IPV4;
    p.tuple.proto = byte(w, off + 9);
    let s = copy4(w, off + 12);
    let d = copy4(w, off + 16);
    p.tuple.saddr[..4].copy_from_slice(&s);
    p.tuple.daddr[..4].copy_from_slice(&d);
    p.fp.ip_id = u32::from(be16(w, off + 4));
    let frag = be16(w, off + 6);
    let frag_offset = frag & 0x1fff;
    let more_fragments = frag & 0x2000 != 0;
    if frag_offset != 0 || more_fragments {
        p.flags |= flag::FRAGMENT;
    }
    if frag_offset != 0 {
        // A later fragment: no L4 header. The offset tells fragments of one datagram apart.
        p.fp.a = u32::from(frag_offset);
        return true;
    }
    let total = usize::from(be16(w, off + 2));
    let l4_end = if total >= ihl { off + total } else { cap };
    parse_l4(w, off + ihl, cap.min(l4_end), p);
    true
}

#[expect(
    clippy::inline_always,
    reason = "eBPF: the verifier needs the call inlined"
)]
#[inline(always)]
fn parse_ipv6(w: &Window, off: usize, cap: usize, p: &mut Parsed) -> bool {
    if cap < off + IPV6_HLEN || byte(w, off) >> 4 != 6 {
        return false;
    }
    p.clear();
    p.tuple.family = FAMILY_IPV6;
    p.fp.ip_id = be32(w, off) & 0x000f_ffff;
    let mut i = 0;
    while i < 16 {
        p.tuple.saddr[i] = byte(w, off + 8 + i);
        p.tuple.daddr[i] = byte(w, off + 24 + i);
        i += 1;
    }
    let payload = usize::from(be16(w, off + 4));
    let end = cap.min(off + IPV6_HLEN + payload);
    let mut next = byte(w, off + 6);
    let mut l4 = off + IPV6_HLEN;
    let mut n = 0;
    while n < MAX_IPV6_EXT {
        let len = match next {
            // Hop-by-hop, routing, destination options: (hdr_ext_len + 1) * 8.
            0 | 43 | 60 => (usize::from(byte(w, l4 + 1)) + 1) * 8,
            // Fragment header: fixed 8 bytes; later fragments carry no L4 header.
            44 => {
                if end < l4 + 8 {
                    p.flags |= flag::TRUNCATED;
                    p.tuple.proto = next;
                    return true;
                }
                p.flags |= flag::FRAGMENT;
                p.fp.a = be32(w, l4 + 4);
                if be16(w, l4 + 2) & 0xfff8 != 0 {
                    p.tuple.proto = byte(w, l4);
                    return true;
                }
                8
            }
            // Authentication header: (payload len + 2) * 4.
            51 => (usize::from(byte(w, l4 + 1)) + 2) * 4,
            _ => break,
        };
        if end < l4 + 2 {
            p.flags |= flag::TRUNCATED;
            p.tuple.proto = next;
            return true;
        }
        next = byte(w, l4);
        l4 += len;
        n += 1;
    }
    p.tuple.proto = next;
    parse_l4(w, l4, end, p);
    true
}

/// Reads ports and the NAT-invariant fingerprint of the L4 header at `off`; `end` is where
/// the packet's captured bytes end.
#[expect(
    clippy::inline_always,
    reason = "eBPF: the verifier needs the call inlined"
)]
#[inline(always)]
fn parse_l4(w: &Window, off: usize, end: usize, p: &mut Parsed) {
    let need = match p.tuple.proto {
        PROTO_TCP => 20,
        PROTO_UDP | PROTO_ICMP | PROTO_ICMPV6 => 8,
        _ => return,
    };
    if end < off + need {
        p.flags |= flag::TRUNCATED;
        return;
    }
    match p.tuple.proto {
        PROTO_TCP => {
            p.tuple.sport = be16(w, off);
            p.tuple.dport = be16(w, off + 2);
            p.fp.a = be32(w, off + 4);
            p.fp.b = be32(w, off + 8);
            p.fp.c = u32::from(byte(w, off + 13)) | (u32::from(be16(w, off + 14)) << 16);
        }
        PROTO_UDP => {
            p.tuple.sport = be16(w, off);
            p.tuple.dport = be16(w, off + 2);
            p.fp.a = u32::from(be16(w, off + 4));
            p.fp.b = be32_partial(w, off + 8, end);
            p.fp.c = be32_partial(w, off + 12, end);
        }
        _ => {
            let ty = byte(w, off);
            let is_echo = match p.tuple.proto {
                PROTO_ICMP => ty == 8 || ty == 0,
                _ => ty == 128 || ty == 129,
            };
            if is_echo {
                let id = be16(w, off + 4);
                p.tuple.sport = id;
                p.tuple.dport = id;
            }
            p.fp.a = (u32::from(ty) << 8) | u32::from(byte(w, off + 1));
            p.fp.b = u32::from(be16(w, off + 6));
            p.fp.c = be32_partial(w, off + 8, end);
        }
    }
}

#[cfg(test)]
mod hostile_tests;
#[cfg(test)]
mod tests;
