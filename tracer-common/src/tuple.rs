//! A packet's addresses, ports and protocol at one point ([`Tuple`]) and the fields NAT leaves
//! alone that recognise the same packet at every hook ([`Fingerprint`]).

use core::{
    hash::{Hash, Hasher},
    mem::size_of,
};

/// Address family of a [`Tuple`].
pub const FAMILY_IPV4: u8 = 4;
/// Address family of a [`Tuple`].
pub const FAMILY_IPV6: u8 = 6;

/// IP protocol numbers the parser understands.
pub const PROTO_ICMP: u8 = 1;
/// TCP.
pub const PROTO_TCP: u8 = 6;
/// UDP.
pub const PROTO_UDP: u8 = 17;
/// ICMPv6.
pub const PROTO_ICMPV6: u8 = 58;

/// A packet's addresses, ports and protocol as seen at one point.
///
/// IPv4 addresses sit in the first four bytes of `saddr`/`daddr` (network order), the rest is
/// zero. Ports are in host order. For ICMP echo both ports hold the echo identifier (as
/// conntrack does); for other ICMP messages both are zero.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct Tuple {
    pub saddr: [u8; 16],
    pub daddr: [u8; 16],
    pub sport: u16,
    pub dport: u16,
    pub proto: u8,
    pub family: u8,
    #[expect(
        clippy::pub_underscore_fields,
        reason = "explicit padding of a `repr(C)` tuple shared with the kernel programs; the layout is theirs"
    )]
    pub _pad: [u8; 2],
}
const _: () = assert!(size_of::<Tuple>() == 40);

/// Every byte of the tuple (the same bytes `Eq` compares) as three words: the user-space tables
/// keyed by tuples hash one per packet or more, and the derived field-by-field hash (a length
/// and a byte slice per address, then each small field) was the collector's largest single
/// cost after the JSON writer.
impl Hash for Tuple {
    #[inline]
    fn hash<H: Hasher>(&self, state: &mut H) {
        let Self {
            saddr,
            daddr,
            sport,
            dport,
            proto,
            family,
            _pad: pad,
        } = *self;
        state.write_u128(u128::from_ne_bytes(saddr));
        state.write_u128(u128::from_ne_bytes(daddr));
        state.write_u64(
            u64::from(sport)
                | u64::from(dport) << 16
                | u64::from(proto) << 32
                | u64::from(family) << 40
                | u64::from(u16::from_ne_bytes(pad)) << 48,
        );
    }
}

impl Tuple {
    /// The same flow seen from the other end.
    #[must_use]
    pub const fn reversed(&self) -> Self {
        Self {
            saddr: self.daddr,
            daddr: self.saddr,
            sport: self.dport,
            dport: self.sport,
            proto: self.proto,
            family: self.family,
            _pad: [0; 2],
        }
    }

    /// True when this is a real packet tuple (the parser found an IP header).
    #[must_use]
    pub const fn is_set(&self) -> bool {
        self.family != 0
    }
}

/// Fields of a packet that NAT does not change, used to recognise the same packet at every
/// hook: IP id (IPv4) plus TCP seq/ack/flags/window, ICMP type/code/sequence and leading
/// payload, or UDP length and leading payload bytes.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct Fingerprint {
    pub ip_id: u32,
    pub a: u32,
    pub b: u32,
    pub c: u32,
}
const _: () = assert!(size_of::<Fingerprint>() == 16);

/// Every field as one word, as [`Tuple`]'s hash does.
impl Hash for Fingerprint {
    #[inline]
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_u128(
            u128::from(self.ip_id)
                | u128::from(self.a) << 32
                | u128::from(self.b) << 64
                | u128::from(self.c) << 96,
        );
    }
}

impl Fingerprint {
    /// A 32-bit digest of the whole fingerprint: FNV-1a over `ip_id`, `a`, `b` and `c`, each
    /// as 4 big-endian bytes, in that order. For an IPv6 packet (no IP id outside fragments)
    /// it is the packet's identity on the wire: the flow label with the TCP sequence,
    /// acknowledgement, flags and window, or the UDP length and first 8 payload bytes, or the
    /// ICMPv6 type, code, sequence and first payload bytes (a fragment's: its identification).
    /// NAT changes none of them, and every pktrace computes the same digest, so two nodes'
    /// captures of one packet agree on it. Stable: changing it breaks `pktrace merge` between
    /// versions.
    #[must_use]
    pub const fn wire_hash(&self) -> u32 {
        const OFFSET: u32 = 0x811c_9dc5;
        const PRIME: u32 = 0x0100_0193;
        let words = [self.ip_id, self.a, self.b, self.c];
        let mut h = OFFSET;
        let mut i = 0;
        while i < words.len() {
            let bytes = words[i].to_be_bytes();
            let mut j = 0;
            while j < bytes.len() {
                h ^= bytes[j] as u32;
                h = h.wrapping_mul(PRIME);
                j += 1;
            }
            i += 1;
        }
        h
    }
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod wire_hash_tests {
    use super::Fingerprint;

    fn fnv1a(bytes: &[u8]) -> u32 {
        bytes.iter().fold(0x811c_9dc5_u32, |h, b| {
            (h ^ u32::from(*b)).wrapping_mul(0x0100_0193)
        })
    }

    #[test]
    fn the_digest_is_fnv1a_of_the_fields_big_endian() {
        let fp = Fingerprint {
            ip_id: 0x000a_bcde,
            a: 0x1122_3344,
            b: 0x5566_7788,
            c: 0x0000_0218,
        };
        let bytes: Vec<u8> = [fp.ip_id, fp.a, fp.b, fp.c]
            .iter()
            .flat_map(|w| w.to_be_bytes())
            .collect();
        assert_eq!(fp.wire_hash(), fnv1a(&bytes));
        // FNV-1a's published value for the empty input, and a fixed one: the digest must
        // never change between versions.
        assert_eq!(fnv1a(b""), 0x811c_9dc5);
        assert_eq!(Fingerprint::default().wire_hash(), 0x6969_1905);
    }

    #[test]
    fn each_field_changes_the_digest() {
        let base = Fingerprint {
            ip_id: 1,
            a: 2,
            b: 3,
            c: 4,
        };
        let h = base.wire_hash();
        for other in [
            Fingerprint { ip_id: 9, ..base },
            Fingerprint { a: 9, ..base },
            Fingerprint { b: 9, ..base },
            Fingerprint { c: 9, ..base },
            // Swapped fields are another packet.
            Fingerprint { a: 3, b: 2, ..base },
        ] {
            assert_ne!(other.wire_hash(), h, "{other:?}");
        }
    }
}
