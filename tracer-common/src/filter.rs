//! What the kernel programs let through: the filter modes (the `FILTER_MODE` global), the key
//! of the traced addresses' map ([`AddrKey`]), its IPv4 copy for the fast path
//! ([`AddrSetV4`]), and the filter expression's kernel part ([`ExprFilter`]).

use core::mem::size_of;

mod expr;
pub use expr::{EXPR_V4, EXPR_V6, ExprFilter};

/// Filter mode: only packets of tracked addresses and flows.
pub const TRACKED: u32 = 0;
/// Filter mode: every IP packet on the attached hooks.
pub const ALL: u32 = 1;

/// Key of the `TRACKED_ADDRS` map: an address of a traced pod.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct AddrKey {
    pub addr: [u8; 16],
    pub family: u8,
    #[expect(
        clippy::pub_underscore_fields,
        reason = "explicit padding of a map key the kernel programs share: zeroed so keys compare byte for byte"
    )]
    pub _pad: [u8; 3],
}
const _: () = assert!(size_of::<AddrKey>() == 20);

/// How many IPv4 addresses [`AddrSetV4`] holds.
pub const V4_SET_MAX: usize = 14;

/// The traced pods' IPv4 addresses for the programs' fast filter (the one entry of the
/// `TRACKED_V4` array), a copy of the IPv4 keys of `TRACKED_ADDRS` that user space writes after
/// every change to that map. Compared linearly: no hashing of a 20-byte key per address.
///
/// `exact == 1`: the IPv4 addresses of `TRACKED_ADDRS` are exactly `addrs[..len]`. Anything
/// else (the zero value before user space wrote it, more than [`V4_SET_MAX`] addresses, or an
/// update in progress) sends the programs to `TRACKED_ADDRS`. An update is three writes so that
/// a program reading it concurrently (array values are copied without a lock) never sees a
/// mix: `exact = 0` with the old addresses, then the new addresses with `exact = 0`, then the
/// same with `exact = 1`; each write changes either `exact` or the rest, never both.
///
/// `_lead` puts the fields the programs read (`exact`, `len`, the first 12 addresses) into one
/// cache line of the kernel's array: an array map's values start `sizeof(struct bpf_array)`
/// into a line-aligned allocation, 312 bytes (56 into a line) on 6.18 (its BTF), so a 64-byte
/// value starting there straddles two lines and every packet read both. With the 8 bytes
/// ahead of them the fields sit at 320..384, one line; on a layout that starts the value on a
/// line, only the 13th and 14th addresses move to a second one.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AddrSetV4 {
    /// Never read; always zero.
    #[expect(
        clippy::pub_underscore_fields,
        reason = "the lead that puts the fields on one cache line of the array map value (see above); never read"
    )]
    pub _lead: u64,
    pub exact: u32,
    pub len: u32,
    /// Addresses as they sit in the packet (network order), read as a native `u32`.
    pub addrs: [u32; V4_SET_MAX],
}
const _: () = assert!(size_of::<AddrSetV4>() == 72);

impl AddrSetV4 {
    /// The set of `addrs` (octets), or the fall-back (`exact = 0`) when they do not fit.
    #[must_use]
    #[expect(
        clippy::cast_possible_truncation,
        reason = "at most `V4_SET_MAX` addresses (checked first)"
    )]
    pub fn of(addrs: &[[u8; 4]]) -> Self {
        let mut set = Self::default();
        if addrs.len() > V4_SET_MAX {
            return set;
        }
        for (slot, a) in set.addrs.iter_mut().zip(addrs) {
            *slot = u32::from_ne_bytes(*a);
        }
        set.len = addrs.len() as u32;
        set.exact = 1;
        set
    }

    /// Whether `addr` (network order, as read from the packet) is among `addrs[..len]`; only
    /// meaningful once `exact == 1` was seen (checked once by the caller: a second read could
    /// see an update begin).
    #[expect(
        clippy::inline_always,
        reason = "eBPF: the verifier needs the call inlined"
    )]
    #[inline(always)]
    #[must_use]
    pub fn contains(&self, addr: u32) -> bool {
        self.contains_either(addr, addr)
    }

    /// Whether `a` or `b` (network order, as read from the packet) is among `addrs[..len]`,
    /// in one pass over the set (a packet's two addresses); the same caveat as
    /// [`Self::contains`].
    #[expect(
        clippy::inline_always,
        reason = "eBPF: the verifier needs the call inlined"
    )]
    #[inline(always)]
    #[must_use]
    #[expect(
        clippy::cast_possible_truncation,
        reason = "`i` stays below `V4_SET_MAX`"
    )]
    pub fn contains_either(&self, a: u32, b: u32) -> bool {
        let mut i = 0;
        while i < V4_SET_MAX {
            if i as u32 >= self.len {
                break;
            }
            let x = self.addrs[i];
            if x == a || x == b {
                return true;
            }
            i += 1;
        }
        false
    }
}

#[cfg(test)]
mod tests;
