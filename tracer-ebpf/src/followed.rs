//! Followed flows: tuples learnt from NAT, so that a traced packet stays traced after NAT
//! rewrote it (MASQUERADE, DNAT to a backend) and its replies do too.
//!
//! Contract: [`follow_flow`] adds a tuple and its reverse to `FOLLOWED_FLOWS`; before the
//! inserts it sets the tuple's bytes in two hashes that are never cleared, `FLOW_ADDRS` (each
//! IPv4 address) and `FLOW_TUPLES` (each direction's addresses and ports), and
//! `FLOWS_PRESENT`. A tuple whose byte is 0 in either hash is certainly not followed, so the
//! hot paths ask the hashes ([`addr_maybe_followed`], [`hash_maybe_followed`]) before the
//! table; a set byte may be another tuple's (false positives only). [`flow_followed`] then
//! asks this CPU's small cache of found tuples, and only then the table. User space follows
//! flows the same way (tracer-user `nat/conntrack/gates.rs`): the hashes are shared with it
//! ([`tracer_common::flow_slot_of`], [`tracer_common::flow_addr_slot`]).

use aya_ebpf::{bindings::BPF_NOEXIST, macros::map, maps::PerCpuArray};
use tracer_common::{FAMILY_IPV4, FLOW_TUPLE_BITS, Tuple, counter, flow_addr_slot, flow_slot_of};

use crate::maps::{
    FLOW_ADDRS, FLOW_TUPLE_SLOTS, FLOW_TUPLES, FLOWS_PRESENT, FOLLOWED_FLOWS, count, trace_all,
};

/// Slots of [`FLOW_CACHE`] per CPU (a power of two).
const FLOW_CACHE_SLOTS: usize = 256;

/// How many times a [`FLOW_CACHE`] entry answers before `FOLLOWED_FLOWS` is asked again (the
/// lookup also marks the flow as used in the LRU, which keeps an active flow from eviction).
const FLOW_CACHE_HITS: u32 = 64;

/// A tuple found in `FOLLOWED_FLOWS` by a lookup on this CPU.
#[repr(C)]
pub struct FlowCacheEntry {
    tuple: Tuple,
    /// [`flow_hash`] of `tuple`, written with it. Programs on one CPU can nest (a tc program in
    /// a softirq that interrupts a netfilter program in process context), so an entry can be
    /// torn: one tuple's first bytes and another's last. A hit needs this to match the asked
    /// tuple's hash too, which a torn entry does only by a 32-bit hash collision.
    check: u32,
    /// Answers left before the table is asked again; 0: empty.
    hits_left: u32,
}

/// A small direct-mapped cache, per CPU, of followed flows: [`flow_followed`] and
/// [`follow_flow`] ask it before `FOLLOWED_FLOWS` (a hash of the 40-byte key and a bucket walk,
/// both cold under a stream). It only holds tuples a lookup found, and each answers
/// [`FLOW_CACHE_HITS`] times, so a flow the LRU evicted is still taken as followed for at
/// most that many packets per CPU, after which the lookup fails and the flow is inserted
/// again.
#[repr(C)]
pub struct FlowCache {
    slots: [FlowCacheEntry; FLOW_CACHE_SLOTS],
}

#[map]
static FLOW_CACHE: PerCpuArray<FlowCache> = PerCpuArray::with_max_entries(1, 0);

/// The first four bytes of an address as a native `u32` (an IPv4 address in a [`Tuple`]), as
/// the hashes and the IPv4 filter take it.
#[inline(always)]
pub fn word4(a: &[u8; 16]) -> u32 {
    u32::from_ne_bytes([a[0], a[1], a[2], a[3]])
}

/// True when `FOLLOWED_FLOWS` may hold a flow (`FLOWS_PRESENT`).
#[inline(always)]
pub fn flows_present() -> bool {
    // SAFETY: a plain read of a global; programs on other CPUs only ever write 1.
    unsafe { core::ptr::read_volatile(&raw const FLOWS_PRESENT) != 0 }
}

/// False when no followed flow holds the IPv4 address `addr` ([`word4`]): its `FLOW_ADDRS`
/// byte is 0. Bytes, not bits: a plain byte store needs no atomic read-modify-write against
/// other CPUs. Unlike `FLOW_TUPLES` it cannot tell apart the flows between two busy addresses
/// (the node's address and an outside host, a ClusterIP and its backend).
#[inline(always)]
pub fn addr_maybe_followed(addr: u32) -> bool {
    // SAFETY: a plain read of a global byte; programs on other CPUs only ever write 1.
    unsafe {
        core::ptr::read_volatile(
            (&raw const FLOW_ADDRS)
                .cast::<u8>()
                .add(flow_addr_slot(addr)),
        ) != 0
    }
}

/// Sets the `FLOW_ADDRS` byte of an IPv4 address.
#[inline(always)]
fn note_addr(addr: u32) {
    // SAFETY: a plain write of a global byte; every writer writes the same value.
    unsafe {
        core::ptr::write_volatile(
            (&raw mut FLOW_ADDRS).cast::<u8>().add(flow_addr_slot(addr)),
            1,
        );
    }
}

/// The full 32-bit [`flow_slot_of`] hash of the flow of these addresses ([`word4`]) and ports
/// (host order): its top [`FLOW_TUPLE_BITS`] are the flow's `FLOW_TUPLES` slot, its low bits
/// its [`FLOW_CACHE`] slot.
#[inline(always)]
pub fn flow_hash_v4(saddr: u32, daddr: u32, sport: u16, dport: u16) -> u32 {
    flow_slot_of(saddr, daddr, sport, dport, 32)
}

/// A tuple's [`flow_hash_v4`], from the first four bytes of each address whatever its family.
#[inline(always)]
fn flow_hash(t: &Tuple) -> u32 {
    flow_hash_v4(word4(&t.saddr), word4(&t.daddr), t.sport, t.dport)
}

/// The `FLOW_TUPLES` byte of a flow whose [`flow_hash_v4`] is `h`, masked to the array.
#[inline(always)]
fn tuple_byte_of_hash(h: u32) -> *mut u8 {
    (&raw mut FLOW_TUPLES)
        .cast::<u8>()
        .wrapping_add((h >> (32 - FLOW_TUPLE_BITS)) as usize & (FLOW_TUPLE_SLOTS - 1))
}

/// False when no followed flow has the [`flow_hash_v4`] `h` (its `FLOW_TUPLES` byte is 0).
#[inline(always)]
pub fn hash_maybe_followed(h: u32) -> bool {
    // SAFETY: a plain read of a byte of the global array; programs on other CPUs only ever
    // write 1.
    unsafe { core::ptr::read_volatile(tuple_byte_of_hash(h)) != 0 }
}

/// False when the IPv4 tuple of these addresses ([`word4`]) and ports (host order) is certainly
/// not a followed flow (its `FLOW_TUPLES` byte is 0); the tuple need not be built.
#[inline(always)]
pub fn v4_maybe_followed(saddr: u32, daddr: u32, sport: u16, dport: u16) -> bool {
    hash_maybe_followed(flow_hash_v4(saddr, daddr, sport, dport))
}

/// Sets the `FLOW_TUPLES` byte of a tuple (as [`flow_followed`] finds it).
#[inline(always)]
fn note_tuple(t: &Tuple) {
    // SAFETY: a plain write of a byte of the global array; every writer writes the same value.
    unsafe { core::ptr::write_volatile(tuple_byte_of_hash(flow_hash(t)), 1) };
}

/// This CPU's [`FLOW_CACHE`] entry for a tuple whose [`flow_hash`] is `h`.
#[inline(always)]
fn cache_entry(h: u32) -> Option<&'static mut FlowCacheEntry> {
    let cache = FLOW_CACHE.get_ptr_mut(0)?;
    let i = h as usize & (FLOW_CACHE_SLOTS - 1);
    // SAFETY: per-CPU value; `i` is within the array. Programs that nest on this CPU may
    // write the same entry: see `FlowCacheEntry::check`.
    unsafe { (*cache).slots.get_mut(i) }
}

/// True when this CPU's [`FLOW_CACHE`] says the tuple (of [`flow_hash`] `h`) is followed;
/// each answer uses up one of the entry's hits.
#[inline(always)]
fn cached(t: &Tuple, h: u32) -> bool {
    let Some(e) = cache_entry(h) else {
        return false;
    };
    if e.hits_left == 0 || e.check != h || e.tuple != *t {
        return false;
    }
    e.hits_left -= 1;
    true
}

/// Notes in this CPU's [`FLOW_CACHE`] a tuple (of [`flow_hash`] `h`) a lookup just found in
/// `FOLLOWED_FLOWS`.
#[inline(always)]
fn cache(t: &Tuple, h: u32) {
    if let Some(e) = cache_entry(h) {
        // No order between these stores is needed: `check` guards against a torn entry.
        e.tuple = *t;
        e.check = h;
        e.hits_left = FLOW_CACHE_HITS;
    }
}

/// True when the flow is followed (`FOLLOWED_FLOWS`; the lookup only once a flow was added,
/// only for a tuple whose `FLOW_TUPLES` byte is set, and only when this CPU's [`FLOW_CACHE`]
/// cannot answer).
#[inline(always)]
pub fn flow_followed(t: &Tuple) -> bool {
    if !flows_present() {
        return false;
    }
    let h = flow_hash(t);
    hash_maybe_followed(h) && flow_followed_hashed(t, h)
}

/// [`flow_followed`] once flows are followed and the tuple's `FLOW_TUPLES` byte, of its
/// [`flow_hash`] `h`, was found set (the tc fast verdict asks it before the parse): this CPU's
/// [`FLOW_CACHE`], then `FOLLOWED_FLOWS`.
#[inline(always)]
pub fn flow_followed_hashed(t: &Tuple, h: u32) -> bool {
    if cached(t, h) {
        return true;
    }
    // SAFETY: the value is only tested for presence.
    let found = unsafe { FOLLOWED_FLOWS.get(t).is_some() };
    if found {
        cache(t, h);
    }
    found
}

/// Follows a flow in both directions. Only a flow not followed yet is inserted (an LRU insert
/// takes a fresh element each time; the lookup also refreshes a known flow), and nothing is
/// when every packet is traced anyway. Inserts are `BPF_NOEXIST`, so each one counted in
/// `FLOW_ENTRIES` is a new entry: user space never deletes any, so what it cannot find in the
/// table any more was evicted.
#[inline(always)]
pub fn follow_flow(t: &Tuple) {
    if trace_all() {
        return;
    }
    let h = flow_hash(t);
    if cached(t, h) {
        return;
    }
    // SAFETY: the value is only tested for presence.
    if unsafe { FOLLOWED_FLOWS.get(t).is_some() } {
        cache(t, h);
        return;
    }
    let rev = t.reversed();
    // Before the inserts: a program that sees the flow must not skip the lookup.
    if t.family == FAMILY_IPV4 {
        note_addr(word4(&t.saddr));
        note_addr(word4(&t.daddr));
    }
    note_tuple(t);
    note_tuple(&rev);
    // SAFETY: a plain write of a global; every writer writes the same value.
    unsafe { core::ptr::write_volatile(&raw mut FLOWS_PRESENT, 1) };
    if FOLLOWED_FLOWS.insert(t, &1, u64::from(BPF_NOEXIST)).is_ok() {
        count(counter::FLOW_ENTRIES);
        count(counter::FLOWS_ADDED);
    }
    if FOLLOWED_FLOWS
        .insert(&rev, &1, u64::from(BPF_NOEXIST))
        .is_ok()
    {
        count(counter::FLOW_ENTRIES);
    }
}
