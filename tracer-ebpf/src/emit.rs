//! Maps, globals, the filter and the ring-buffer writer shared by all programs.

use aya_ebpf::{
    bindings::{BPF_NOEXIST, BPF_RB_AVAIL_DATA, BPF_RB_FORCE_WAKEUP, BPF_RB_NO_WAKEUP},
    macros::map,
    maps::{Array, HashMap, LruHashMap, PerCpuArray, RingBuf},
};
use tracer_common::{
    AddrKey, AddrSetV4, Event, FAMILY_IPV4, FLOW_ADDR_SLOTS, FLOW_TUPLE_BITS, KernelOffsets,
    NatEventV4, TcEventV4, Tuple, counter, filter, flow_addr_slot, flow_slot_of,
    parse::{Parsed, Window},
};

/// Default ring-buffer size (4 MiB, about 90 ms of 100,000 traced packets/s; see
/// BENCHMARKS.md "Memory", ring size); user space may override it (`EVENTS` max entries).
const RING_BYTES: u32 = 4 << 20;

/// Events for user space.
#[map]
pub static EVENTS: RingBuf = RingBuf::with_byte_size(RING_BYTES, 0);

/// Per-CPU counters, indexed by [`counter`].
#[map]
pub static COUNTERS: PerCpuArray<u64> = PerCpuArray::with_max_entries(counter::COUNT, 0);

/// Addresses of the traced pods, seeded by user space.
#[map]
pub static TRACKED_ADDRS: HashMap<AddrKey, u32> = HashMap::with_max_entries(256, 0);

/// The IPv4 addresses of `TRACKED_ADDRS` as a small array ([`AddrSetV4`]), written by user
/// space after every change to it: compared linearly instead of two hash lookups per packet.
#[map]
pub static TRACKED_V4: Array<AddrSetV4> = Array::with_max_entries(1, 0);

/// Flows followed after NAT rewrote them (both directions), added by the NAT programs.
#[map]
pub static TRACKED_FLOWS: LruHashMap<Tuple, u32> = LruHashMap::with_max_entries(65536, 0);

/// Slots of [`FLOW_CACHE`] per CPU (a power of two).
const FLOW_CACHE_SLOTS: usize = 256;

/// How many times a [`FLOW_CACHE`] entry answers before `TRACKED_FLOWS` is asked again (the
/// lookup also marks the flow as used in the LRU, which keeps an active flow from eviction).
const FLOW_CACHE_HITS: u32 = 64;

/// A tuple found in `TRACKED_FLOWS` by a lookup on this CPU.
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
/// [`track_flow`] ask it before `TRACKED_FLOWS` (a hash of the 40-byte key and a bucket walk,
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

/// Per-CPU scratch space: a packet's first bytes and what the parser read from them (the BPF
/// stack is too small for both).
#[repr(C)]
pub struct Scratch {
    pub window: Window,
    pub parsed: Parsed,
}

/// One [`Scratch`] per program family (0: tc, 1: NAT: netfilter brackets or `nat_*` probes, never
/// both at once), per CPU.
#[map]
pub static SCRATCH: PerCpuArray<Scratch> = PerCpuArray::with_max_entries(2, 0);

/// [`filter`] mode, set by user space at load time.
#[unsafe(no_mangle)]
static FILTER_MODE: u32 = filter::TRACKED;

/// Wake the reader when the ring buffer's fill crosses this many bytes (once per crossing,
/// see [`emit`]); below it, and while it stays above, the reader drains on a timer (a wakeup
/// per event costs microseconds per packet).
#[unsafe(no_mangle)]
static WAKE_BYTES: u64 = 1 << 20;

/// Kernel structure offsets from the running kernel's BTF, set by user space at load time.
#[unsafe(no_mangle)]
static OFFSETS: KernelOffsets = KernelOffsets {
    nf_ctx_skb: 0,
    skb_len: 0,
    skb_data: 0,
    skb_nfct: 0,
    skb_mark: 0,
    skb_dev: 0,
    dev_ifindex: 0,
    skb_data_len: 0,
};

/// Reads a global set at load time (volatile, so the compiler cannot fold the default).
#[inline(always)]
pub fn offsets() -> KernelOffsets {
    // SAFETY: a plain read of a static the loader patched before verification.
    unsafe { core::ptr::read_volatile(&OFFSETS) }
}

#[inline(always)]
fn filter_mode() -> u32 {
    // SAFETY: as above.
    unsafe { core::ptr::read_volatile(&FILTER_MODE) }
}

/// Adds one to a per-CPU counter.
#[inline(always)]
pub fn count(index: u32) {
    if let Some(c) = COUNTERS.get_ptr_mut(index) {
        // SAFETY: per-CPU slot, no concurrent writer on this CPU while the program runs.
        unsafe { *c += 1 };
    }
}

/// The per-CPU scratch space `slot` (0: tc, 1: NAT programs).
#[inline(always)]
pub fn scratch(slot: u32) -> Option<&'static mut Scratch> {
    // SAFETY: per-CPU value, used only until the program returns.
    SCRATCH.get_ptr_mut(slot).map(|p| unsafe { &mut *p })
}

/// Set (to 1, never back) once a flow went into `TRACKED_FLOWS`: until then no packet can
/// match a flow and the programs skip that map's lookup.
#[unsafe(no_mangle)]
static mut FLOWS_PRESENT: u32 = 0;

/// True when `TRACKED_FLOWS` may hold a flow.
#[inline(always)]
pub fn flows_present() -> bool {
    // SAFETY: a plain read of a global; programs on other CPUs only ever write 1.
    unsafe { core::ptr::read_volatile(&raw const FLOWS_PRESENT) != 0 }
}

/// The IPv4 addresses of the followed flows, hashed ([`flow_addr_slot`]): a slot is set (to 1,
/// never back, before the flow's insert, as `FLOWS_PRESENT`) for each address of each IPv4
/// flow [`track_flow`] follows. An address whose slot is 0 is in no followed flow; a set slot
/// may be another address's. Bytes, not bits: a plain byte store needs no atomic
/// read-modify-write against other CPUs. The tc programs ask it before a packet of no tracked
/// address goes on to the followed-flow checks, and the netfilter enter programs before they
/// time a packet by its conntrack entry; for TCP and UDP both then ask [`FLOW_TUPLES`].
#[unsafe(no_mangle)]
static mut FLOW_ADDRS: [u8; FLOW_ADDR_SLOTS] = [0; FLOW_ADDR_SLOTS];

/// False when no followed flow holds the IPv4 address `addr` ([`word4`]).
#[inline(always)]
pub fn flow_addr_maybe(addr: u32) -> bool {
    // SAFETY: a plain read of a global byte; programs on other CPUs only ever write 1.
    unsafe {
        core::ptr::read_volatile(
            (&raw const FLOW_ADDRS)
                .cast::<u8>()
                .add(flow_addr_slot(addr)),
        ) != 0
    }
}

/// Sets the [`FLOW_ADDRS`] slot of an IPv4 address.
#[inline(always)]
fn note_flow_addr(addr: u32) {
    // SAFETY: a plain write of a global byte; every writer writes the same value.
    unsafe {
        core::ptr::write_volatile(
            (&raw mut FLOW_ADDRS).cast::<u8>().add(flow_addr_slot(addr)),
            1,
        );
    }
}

/// Bytes of [`FLOW_TUPLES`] (a power of two): twice the followed-flow table's default
/// directions (65,536), so that it stays mostly zero while that table holds a few thousand.
const FLOW_TUPLE_SLOTS: usize = 1 << FLOW_TUPLE_BITS;

/// The followed flows' tuples, hashed ([`flow_slot_of`]): a slot is set (to 1, never back,
/// before the flow's insert, as `FLOWS_PRESENT`) for each direction of each flow [`track_flow`]
/// follows. A tuple whose slot is 0 is not in `TRACKED_FLOWS`, so [`flow_followed`] needs no
/// lookup in it (a hash of the 40-byte key and a bucket walk, the costliest part of a packet
/// outside the filter once any flow is followed); a set slot may be another tuple's (false
/// positives only, more of them the longer pktrace runs, since slots are never cleared). Unlike
/// [`FLOW_ADDRS`] it tells apart the flows between two busy addresses (the node's address and
/// an outside host, a ClusterIP and its backend) by their ports.
#[unsafe(no_mangle)]
static mut FLOW_TUPLES: [u8; FLOW_TUPLE_SLOTS] = [0; FLOW_TUPLE_SLOTS];

/// The full 32-bit [`flow_slot_of`] hash of the flow of these addresses ([`word4`]) and ports
/// (host order): its top [`FLOW_TUPLE_BITS`] are the flow's [`FLOW_TUPLES`] slot, its low bits
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

/// The [`FLOW_TUPLES`] byte of a flow whose [`flow_hash_v4`] is `h`, masked to the array.
#[inline(always)]
fn tuple_byte_of_hash(h: u32) -> *mut u8 {
    (&raw mut FLOW_TUPLES)
        .cast::<u8>()
        .wrapping_add((h >> (32 - FLOW_TUPLE_BITS)) as usize & (FLOW_TUPLE_SLOTS - 1))
}

/// False when no followed flow has the [`flow_hash_v4`] `h` (its [`FLOW_TUPLES`] byte is 0).
#[inline(always)]
pub fn flow_hash_maybe(h: u32) -> bool {
    // SAFETY: a plain read of a byte of the global array; programs on other CPUs only ever
    // write 1.
    unsafe { core::ptr::read_volatile(tuple_byte_of_hash(h)) != 0 }
}

/// This CPU's [`FLOW_CACHE`] entry for a tuple whose [`flow_hash`] is `h`.
#[inline(always)]
fn flow_cache_entry(h: u32) -> Option<&'static mut FlowCacheEntry> {
    let cache = FLOW_CACHE.get_ptr_mut(0)?;
    let i = h as usize & (FLOW_CACHE_SLOTS - 1);
    // SAFETY: per-CPU value; `i` is within the array. Programs that nest on this CPU may
    // write the same entry: see `FlowCacheEntry::check`.
    unsafe { (*cache).slots.get_mut(i) }
}

/// True when this CPU's [`FLOW_CACHE`] says the tuple (of [`flow_hash`] `h`) is followed;
/// each answer uses up one of the entry's hits.
#[inline(always)]
fn flow_cached(t: &Tuple, h: u32) -> bool {
    let Some(e) = flow_cache_entry(h) else {
        return false;
    };
    if e.hits_left == 0 || e.check != h || e.tuple != *t {
        return false;
    }
    e.hits_left -= 1;
    true
}

/// Notes in this CPU's [`FLOW_CACHE`] a tuple (of [`flow_hash`] `h`) a lookup just found in
/// `TRACKED_FLOWS`.
#[inline(always)]
fn cache_flow(t: &Tuple, h: u32) {
    if let Some(e) = flow_cache_entry(h) {
        // No order between these stores is needed: `check` guards against a torn entry.
        e.tuple = *t;
        e.check = h;
        e.hits_left = FLOW_CACHE_HITS;
    }
}

/// False when the IPv4 tuple of these addresses ([`word4`]) and ports (host order) is certainly
/// not a followed flow (its [`FLOW_TUPLES`] byte is 0); the tuple need not be built.
#[inline(always)]
pub fn flow_v4_maybe(saddr: u32, daddr: u32, sport: u16, dport: u16) -> bool {
    flow_hash_maybe(flow_hash_v4(saddr, daddr, sport, dport))
}

/// Sets the [`FLOW_TUPLES`] byte of a tuple (as [`flow_followed`] finds it).
#[inline(always)]
fn note_flow_tuple(t: &Tuple) {
    // SAFETY: a plain write of a byte of the global array; every writer writes the same value.
    unsafe { core::ptr::write_volatile(tuple_byte_of_hash(flow_hash(t)), 1) };
}

/// True in [`filter::ALL`] mode (every packet traced).
#[inline(always)]
pub fn trace_all() -> bool {
    filter_mode() == filter::ALL
}

/// The IPv4 fast filter, `None` when it cannot answer (see [`AddrSetV4`]).
#[inline(always)]
pub fn v4_set() -> Option<&'static AddrSetV4> {
    TRACKED_V4.get(0).filter(|s| s.exact == 1)
}

/// Whether one of two IPv4 addresses (network order, as read from the packet) is tracked.
#[inline(always)]
pub fn v4_tracked(set: &AddrSetV4, saddr: u32, daddr: u32) -> bool {
    set.contains(saddr) || set.contains(daddr)
}

/// An [`AddrKey`] on the stack, 8-aligned so that it can be written a word at a time.
#[repr(C, align(8))]
struct KeyBuf(AddrKey);

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

/// True when the packet's address of a traced pod, or its flow, is tracked.
#[inline(always)]
pub fn is_tracked(t: &Tuple) -> bool {
    if trace_all() {
        return true;
    }
    if has_tracked_addr(t) {
        return true;
    }
    flow_followed(t)
}

/// True when the flow is followed (`TRACKED_FLOWS`; the lookup only once a flow was added,
/// only for a tuple whose [`FLOW_TUPLES`] slot is set, and only when this CPU's
/// [`FLOW_CACHE`] cannot answer).
#[inline(always)]
pub fn flow_followed(t: &Tuple) -> bool {
    if !flows_present() {
        return false;
    }
    let h = flow_hash(t);
    flow_hash_maybe(h) && flow_followed_hashed(t, h)
}

/// [`flow_followed`] once flows are followed and the tuple's [`FLOW_TUPLES`] byte, of its
/// [`flow_hash`] `h`, was found set (the tc fast verdict asks it before the parse): this CPU's
/// [`FLOW_CACHE`], then `TRACKED_FLOWS`.
#[inline(always)]
pub fn flow_followed_hashed(t: &Tuple, h: u32) -> bool {
    if flow_cached(t, h) {
        return true;
    }
    // SAFETY: the value is only tested for presence.
    let found = unsafe { TRACKED_FLOWS.get(t).is_some() };
    if found {
        cache_flow(t, h);
    }
    found
}

/// True when one of the tuple's addresses belongs to a traced pod.
#[inline(always)]
pub fn has_tracked_addr(t: &Tuple) -> bool {
    if t.family == FAMILY_IPV4
        && let Some(set) = v4_set()
    {
        return v4_tracked(set, word4(&t.saddr), word4(&t.daddr));
    }
    addr_tracked(t.family, &t.saddr) || addr_tracked(t.family, &t.daddr)
}

/// The first four bytes of an address as a native `u32` (an IPv4 address in a [`Tuple`]).
#[inline(always)]
pub fn word4(a: &[u8; 16]) -> u32 {
    u32::from_ne_bytes([a[0], a[1], a[2], a[3]])
}

/// Follows a flow in both directions. Only a flow not followed yet is inserted (an LRU insert
/// takes a fresh element each time; the lookup also refreshes a known flow), and nothing is
/// when every packet is traced anyway. Inserts are `BPF_NOEXIST`, so each one counted in
/// `FLOW_ENTRIES` is a new entry: user space never deletes any, so what it cannot find in the
/// table any more was evicted.
#[inline(always)]
pub fn track_flow(t: &Tuple) {
    if trace_all() {
        return;
    }
    let h = flow_hash(t);
    if flow_cached(t, h) {
        return;
    }
    // SAFETY: the value is only tested for presence.
    if unsafe { TRACKED_FLOWS.get(t).is_some() } {
        cache_flow(t, h);
        return;
    }
    let rev = t.reversed();
    // Before the inserts: a program that sees the flow must not skip the lookup.
    if t.family == FAMILY_IPV4 {
        note_flow_addr(word4(&t.saddr));
        note_flow_addr(word4(&t.daddr));
    }
    note_flow_tuple(t);
    note_flow_tuple(&rev);
    // SAFETY: a plain write of a global; every writer writes the same value.
    unsafe { core::ptr::write_volatile(&raw mut FLOWS_PRESENT, 1) };
    if TRACKED_FLOWS.insert(t, &1, u64::from(BPF_NOEXIST)).is_ok() {
        count(counter::FLOW_ENTRIES);
        count(counter::FLOWS_ADDED);
    }
    if TRACKED_FLOWS
        .insert(&rev, &1, u64::from(BPF_NOEXIST))
        .is_ok()
    {
        count(counter::FLOW_ENTRIES);
    }
}

/// Reserves a record of type `T` (an [`Event`], a [`TcEventV4`] or a [`NatEventV4`]) in the ring buffer, zeroes
/// it, lets `fill` write it in place (no copy on the small BPF stack) and submits it; a full
/// buffer is counted as a loss.
#[inline(always)]
pub fn emit<T: 'static>(fill: impl FnOnce(&mut T)) {
    // Bytes the record takes in the ring buffer: the record header (`BPF_RINGBUF_HDR_SZ`) and
    // `T`, rounded up to 8; and `T` in 8-byte words.
    let record_bytes = (8 + core::mem::size_of::<T>() as u64).next_multiple_of(8);
    let words_of_t = core::mem::size_of::<T>() / 8;
    match EVENTS.reserve::<T>(0) {
        Some(mut entry) => {
            let ev = entry.as_mut_ptr();
            // SAFETY: the reservation is `size_of::<T>()` bytes, 8-byte aligned (both record
            // types are plain integers, a multiple of 8 bytes: asserted below); zeroing makes
            // it a valid `T` and leaks no stale ring-buffer bytes. Zeroed a word at a time:
            // `write_bytes` becomes a call to aya-ebpf's byte-at-a-time `memset` (5
            // instructions per byte, the costliest part of an emitted event).
            let ev = unsafe {
                let words = ev.cast::<u64>();
                let mut i = 0;
                while i < words_of_t {
                    core::ptr::write_volatile(words.add(i), 0);
                    i += 1;
                }
                &mut *ev
            };
            fill(ev);
            // SAFETY: a plain read of a static the loader patched before verification.
            let wake = unsafe { core::ptr::read_volatile(&WAKE_BYTES) };
            // Edge-triggered: only the event whose record made the fill cross `wake` wakes the
            // reader. While the reader lags, the fill stays above it and every further event
            // would pay for a wakeup it does not need; the reader's drain timer covers the
            // rare crossing no event sees (producers on several CPUs reserving at once).
            let avail = EVENTS.query(u64::from(BPF_RB_AVAIL_DATA));
            let flags = if avail >= wake && avail < wake + record_bytes {
                BPF_RB_FORCE_WAKEUP
            } else {
                BPF_RB_NO_WAKEUP
            };
            entry.submit(u64::from(flags));
            count(counter::EMITTED);
        }
        None => count(counter::RINGBUF_FULL),
    }
}

const _: () = assert!(
    core::mem::size_of::<Event>() % 8 == 0
        && core::mem::align_of::<Event>() == 8
        && core::mem::size_of::<TcEventV4>() % 8 == 0
        && core::mem::align_of::<TcEventV4>() == 8
        && core::mem::size_of::<NatEventV4>() % 8 == 0
        && core::mem::align_of::<NatEventV4>() == 8
);
