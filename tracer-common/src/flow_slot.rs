//! Slots of the kernel's followed-flow and followed-address hashes (`FLOW_TUPLES`,
//! `FLOW_ADDRS`): the kernel programs and user space compute them with these same functions.

use crate::Tuple;

/// A flow's slot among `1 << bits` (`bits` in 1..=32) of the kernel's followed-flow hash
/// (`FLOW_TUPLES`): from the first four bytes of each address as a native `u32` (an IPv4
/// address as it lies in memory) and the two ports (host order, as in a [`Tuple`]), the fields
/// that tell flows apart; leaving the family and protocol out only adds collisions. The words
/// are combined (the rotation makes the two directions of a flow differ) and mixed by
/// MurmurHash3's 32-bit finaliser without its last xor-shift, which would change only the
/// lowest of the high bits kept: sequential ports spread as well as random ones. Ending on a
/// multiplication and a shift also keeps the slot's bound visible to older verifiers (Debian's
/// 6.1 loses it through an xor: LLVM turns `(h ^ h >> 16) >> 15` into `h >> 15 ^ h >> 31`).
#[expect(
    clippy::inline_always,
    reason = "eBPF: the verifier needs the call inlined"
)]
#[inline(always)]
#[must_use]
pub fn flow_slot_of(saddr: u32, daddr: u32, sport: u16, dport: u16, bits: u32) -> u32 {
    let ports = (u32::from(sport) << 16) | u32::from(dport);
    let mut h = (saddr ^ daddr.rotate_left(16)).wrapping_mul(0x9e37_79b1) ^ ports;
    h ^= h >> 16;
    h = h.wrapping_mul(0x85eb_ca6b);
    h ^= h >> 13;
    h = h.wrapping_mul(0xc2b2_ae35);
    h >> (32 - bits)
}

/// Bits of a flow's slot in the kernel's followed-flow hash (`FLOW_TUPLES`, 1 << 17 bytes).
pub const FLOW_TUPLE_BITS: u32 = 17;
/// Bytes of the kernel's followed-address hash (`FLOW_ADDRS`, a power of two).
pub const FLOW_ADDR_SLOTS: usize = 1024;

/// The `FLOW_ADDRS` slot of an IPv4 address (its four bytes as a native `u32`, as they lie in
/// memory): the kernel programs and user space (which follows flows for `--nat-hook
/// conntrack`) must agree on it.
#[expect(
    clippy::inline_always,
    reason = "eBPF: the verifier needs the call inlined"
)]
#[inline(always)]
#[must_use]
pub fn flow_addr_slot(addr: u32) -> usize {
    (addr.wrapping_mul(0x9e37_79b1) >> 22) as usize & (FLOW_ADDR_SLOTS - 1)
}

/// The `FLOW_TUPLES` slot of a tuple (the first four bytes of each address, whatever its
/// family), as the kernel programs find it.
#[expect(
    clippy::inline_always,
    reason = "eBPF: the verifier needs the call inlined"
)]
#[inline(always)]
#[must_use]
pub fn flow_tuple_slot(t: &Tuple) -> usize {
    let w = |a: &[u8; 16]| u32::from_ne_bytes([a[0], a[1], a[2], a[3]]);
    flow_slot_of(w(&t.saddr), w(&t.daddr), t.sport, t.dport, FLOW_TUPLE_BITS) as usize
}

#[cfg(test)]
mod tests;
