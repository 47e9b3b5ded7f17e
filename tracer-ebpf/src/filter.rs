//! The filter: which packets are traced.
//!
//! A packet is traced when every packet is (`--trace-all`), when one of its addresses is a
//! tracked address (an address of a traced pod, in `TRACKED_ADDRS` and, for IPv4, the small
//! array `TRACKED_V4`), or when its tuple is a followed flow ([`crate::followed`]). The tracked
//! addresses are asked first: they cost a few compares, the followed flows a hash.

use tracer_common::{AddrKey, AddrSetV4, FAMILY_IPV4, Tuple};

use crate::{
    followed::{flow_followed, word4},
    maps::{TRACKED_ADDRS, TRACKED_V4, trace_all},
};

/// The IPv4 tracked addresses, `None` when the array cannot answer (see [`AddrSetV4`]).
#[inline(always)]
pub fn v4_set() -> Option<&'static AddrSetV4> {
    TRACKED_V4.get(0).filter(|s| s.exact == 1)
}

/// Whether one of two IPv4 addresses (network order, as read from the packet) is tracked.
#[inline(always)]
pub fn v4_tracked(set: &AddrSetV4, saddr: u32, daddr: u32) -> bool {
    set.contains_either(saddr, daddr)
}

/// An [`AddrKey`] on the stack, 8-aligned so that it can be written a word at a time.
#[repr(C, align(8))]
struct KeyBuf(AddrKey);

/// Whether an address is in `TRACKED_ADDRS`.
#[inline(always)]
fn addr_tracked(family: u8, addr: &[u8; 16]) -> bool {
    let mut key = core::mem::MaybeUninit::<KeyBuf>::uninit();
    // Whole words, all 20 bytes: a byte copy of the array, or zeroing the padding by a struct
    // literal, becomes a call to aya-ebpf's byte-loop `memcpy`/`memset`.
    // SAFETY: the address is 16 bytes read as two unaligned u64s; the key is 20 bytes at an
    // 8-aligned address, written as two u64s and one u32 (family, then the zero padding), so
    // every byte of it is initialised before it is read.
    let key = unsafe {
        let src = addr.as_ptr().cast::<u64>();
        let dst = key.as_mut_ptr().cast::<u64>();
        dst.write(src.read_unaligned());
        dst.add(1).write(src.add(1).read_unaligned());
        dst.add(2)
            .cast::<u32>()
            .write(u32::from_ne_bytes([family, 0, 0, 0]));
        &key.assume_init_ref().0
    };
    // SAFETY: the value is only tested for presence.
    unsafe { TRACKED_ADDRS.get(key).is_some() }
}

/// True when one of the tuple's addresses is tracked.
#[inline(always)]
pub fn has_tracked_addr(t: &Tuple) -> bool {
    if t.family == FAMILY_IPV4
        && let Some(set) = v4_set()
    {
        return v4_tracked(set, word4(&t.saddr), word4(&t.daddr));
    }
    addr_tracked(t.family, &t.saddr) || addr_tracked(t.family, &t.daddr)
}

/// True when the packet of this tuple is traced: every packet is, one of its addresses is
/// tracked, or its flow is followed.
#[inline(always)]
pub fn is_traced(t: &Tuple) -> bool {
    if trace_all() {
        return true;
    }
    if has_tracked_addr(t) {
        return true;
    }
    flow_followed(t)
}
