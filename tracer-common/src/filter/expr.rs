//! The filter expression's kernel part ([`ExprFilter`], the `EXPR_FILTER` global): the IP
//! versions and transport protocols a packet must have for the expression to possibly match.
//!
//! Only what NAT never changes is here (NAT rewrites addresses and ports, never the IP version
//! or the protocol), so the programs may rule a packet out on it at every hook: a journey whose
//! packet is ruled out at one hook would be ruled out at all of them.

use core::mem::size_of;

use crate::{FAMILY_IPV4, FAMILY_IPV6};

/// Bit of [`ExprFilter::families`] for IPv4.
pub const EXPR_V4: u32 = 1;
/// Bit of [`ExprFilter::families`] for IPv6.
pub const EXPR_V6: u32 = 2;

/// The IP versions and protocols the expression admits; with `active == 0` (no expression,
/// the object's default) every packet is admitted.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExprFilter {
    /// 1 when an expression is given: the two fields below apply.
    pub active: u32,
    /// [`EXPR_V4`] and [`EXPR_V6`] bits of the versions admitted.
    pub families: u32,
    /// Bit `p % 64` of word `p / 64` is set when protocol number `p` is admitted.
    pub protos: [u64; 4],
}
const _: () = assert!(size_of::<ExprFilter>() == 40);

impl ExprFilter {
    /// No expression: every packet admitted.
    pub const ANY: Self = Self {
        active: 0,
        families: EXPR_V4 | EXPR_V6,
        protos: [u64::MAX; 4],
    };

    /// The filter admitting the versions in `families` ([`EXPR_V4`], [`EXPR_V6`]) and the
    /// protocols in `protos`.
    #[must_use]
    pub fn of(families: u32, protos: impl IntoIterator<Item = u8>) -> Self {
        let mut words = [0u64; 4];
        for p in protos {
            words[usize::from(p >> 6)] |= 1 << (p & 63);
        }
        Self {
            active: 1,
            families,
            protos: words,
        }
    }

    /// The value's bytes as the object holds them (native order), for loaders that patch
    /// globals from bytes.
    #[must_use]
    pub fn to_ne_bytes(&self) -> [u8; size_of::<Self>()] {
        let mut out = [0u8; size_of::<Self>()];
        out[..4].copy_from_slice(&self.active.to_ne_bytes());
        out[4..8].copy_from_slice(&self.families.to_ne_bytes());
        for (chunk, w) in out[8..].chunks_exact_mut(8).zip(self.protos) {
            chunk.copy_from_slice(&w.to_ne_bytes());
        }
        out
    }

    /// Whether a packet of this family ([`FAMILY_IPV4`], [`FAMILY_IPV6`]) and protocol may
    /// match the expression.
    #[expect(
        clippy::inline_always,
        reason = "eBPF: the verifier needs the call inlined"
    )]
    #[inline(always)]
    #[must_use]
    pub const fn admits(&self, family: u8, proto: u8) -> bool {
        if self.active == 0 {
            return true;
        }
        let bit = match family {
            FAMILY_IPV4 => EXPR_V4,
            FAMILY_IPV6 => EXPR_V6,
            _ => 0,
        };
        self.families & bit != 0 && (self.protos[(proto >> 6) as usize] >> (proto & 63)) & 1 != 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{PROTO_ICMP, PROTO_TCP, PROTO_UDP};

    #[test]
    fn admits_only_the_versions_and_protocols_given() {
        for p in 0..=255u8 {
            assert!(ExprFilter::ANY.admits(FAMILY_IPV4, p));
            assert!(ExprFilter::ANY.admits(FAMILY_IPV6, p));
            assert!(
                ExprFilter::ANY.admits(0, p),
                "no expression: nothing changes"
            );
        }
        let f = ExprFilter::of(EXPR_V4, [PROTO_UDP, 255, 64, 63]);
        for p in 0..=255u8 {
            let want = matches!(p, PROTO_UDP | 255 | 64 | 63);
            assert_eq!(f.admits(FAMILY_IPV4, p), want, "{p}");
            assert!(!f.admits(FAMILY_IPV6, p), "{p}");
        }
        let f = ExprFilter::of(EXPR_V4 | EXPR_V6, [PROTO_TCP]);
        assert!(f.admits(FAMILY_IPV6, PROTO_TCP) && !f.admits(FAMILY_IPV6, PROTO_ICMP));
        assert!(!ExprFilter::of(EXPR_V4 | EXPR_V6, []).admits(FAMILY_IPV4, PROTO_TCP));
        let bytes = f.to_ne_bytes();
        assert_eq!(bytes[..4], 1u32.to_ne_bytes());
        assert_eq!(bytes[4..8], 3u32.to_ne_bytes());
        assert_eq!(bytes[8..16], (1u64 << PROTO_TCP).to_ne_bytes());
        assert_eq!(bytes[16..], [0; 24]);
    }
}
