//! The object's maps and load-time globals: its interface with user space.
//!
//! User space finds each of these by name (aya's `map`/`override_global`, and the `.bss` gates
//! in tracer-user's `nat/conntrack/gates.rs`), so a rename here is a rename there. Maps only one
//! program family uses and user space never opens (the NAT programs' pending slots, the
//! first-packet note, the followed-flow cache) sit with the code that uses them.
//!
//! The accessors read a global the loader patched (volatile, so the compiler cannot fold the
//! default) or hand out a per-CPU slot.

use aya_ebpf::{
    macros::map,
    maps::{Array, HashMap, LruHashMap, PerCpuArray, RingBuf},
};
use tracer_common::{
    AddrKey, AddrSetV4, ExprFilter, FLOW_ADDR_SLOTS, FLOW_TUPLE_BITS, KernelOffsets, Tuple,
    counter, filter,
    parse::{Parsed, Window},
};

/// Default ring-buffer size (4 MiB, about 90 ms of 100,000 traced packets/s; see
/// BENCHMARKS.md "Memory", ring size); user space may override it (`EVENTS` max entries).
const RING_BYTES: u32 = 4 << 20;

/// Events for user space ([`crate::emit`]).
#[map]
pub static EVENTS: RingBuf = RingBuf::with_byte_size(RING_BYTES, 0);

/// Per-CPU counters, indexed by [`counter`].
#[map]
pub static COUNTERS: PerCpuArray<u64> = PerCpuArray::with_max_entries(counter::COUNT, 0);

/// Tracked addresses: the addresses of the traced pods, seeded by user space.
#[map]
pub static TRACKED_ADDRS: HashMap<AddrKey, u32> = HashMap::with_max_entries(256, 0);

/// The IPv4 addresses of `TRACKED_ADDRS` as a small array ([`AddrSetV4`]), written by user
/// space after every change to it: compared linearly instead of two hash lookups per packet.
#[map]
pub static TRACKED_V4: Array<AddrSetV4> = Array::with_max_entries(1, 0);

/// Followed flows: tuples NAT rewrote a traced packet into or out of (both directions), added
/// by the NAT programs ([`crate::followed`]) and by user space (`--nat-hook conntrack`).
#[map]
pub static FOLLOWED_FLOWS: LruHashMap<Tuple, u32> = LruHashMap::with_max_entries(65536, 0);

/// Per-CPU scratch space: a packet's first bytes and what the parser read from them (the BPF
/// stack is too small for both).
#[repr(C)]
pub struct Scratch {
    pub window: Window,
    pub parsed: Parsed,
}

/// The tc programs' [`Scratch`] slot.
pub const SCRATCH_TC: u32 = 0;
/// The NAT programs' [`Scratch`] slot: netfilter brackets or `nat_*` probes, never both at once.
pub const SCRATCH_NAT: u32 = 1;

/// The drop program's [`Scratch`] slot: a drop may interrupt a NAT program on the same CPU.
pub const SCRATCH_DROP: u32 = 2;

/// One [`Scratch`] per program family ([`SCRATCH_TC`], [`SCRATCH_NAT`], [`SCRATCH_DROP`]),
/// per CPU.
#[map]
pub static SCRATCH: PerCpuArray<Scratch> = PerCpuArray::with_max_entries(3, 0);

/// [`filter`] mode, set by user space at load time.
#[unsafe(no_mangle)]
static FILTER_MODE: u32 = filter::TRACKED;

/// The filter expression's IP versions and protocols ([`ExprFilter`]), set by user space at
/// load time; the default admits every packet.
#[unsafe(no_mangle)]
static EXPR_FILTER: ExprFilter = ExprFilter::ANY;

/// Wake the reader when the ring buffer's fill crosses this many bytes (once per crossing,
/// see [`crate::emit::emit`]); below it, and while it stays above, the reader drains on a
/// timer (a wakeup per event costs microseconds per packet).
#[unsafe(no_mangle)]
static WAKE_BYTES: u64 = 1 << 20;

/// `-w`: bytes of each traced frame the tc programs copy into its record (1 to
/// [`tracer_common::FRAME_MAX`]); 0, the default, copies none and writes the records of
/// tracing without `-w`.
#[unsafe(no_mangle)]
static SNAPLEN: u32 = 0;

/// 1 when the drop program names the sites it reports ([`crate::site`]), set by user space at
/// load time only when the kernel has `bpf_snprintf` (5.13+); 0 makes that code dead.
#[unsafe(no_mangle)]
static SITE_NAMES: u32 = 0;

/// Kernel structure offsets from the running kernel's BTF, set by user space at load time.
#[unsafe(no_mangle)]
static OFFSETS: KernelOffsets = KernelOffsets {
    nf_ctx_skb: 0,
    skb_len: 0,
    skb_data: 0,
    skb_nfct: 0,
    skb_dev: 0,
    dev_ifindex: 0,
    skb_data_len: 0,
    skb_head: 0,
    skb_network_header: 0,
};

/// Set (to 1, never back) once a flow went into `FOLLOWED_FLOWS`: until then no packet can
/// match a followed flow and the programs skip that map's lookup. Written by
/// [`crate::followed`] and by user space.
#[unsafe(no_mangle)]
pub static mut FLOWS_PRESENT: u32 = 0;

/// The IPv4 addresses of the followed flows, hashed ([`tracer_common::flow_addr_slot`]): a
/// byte per slot, set to 1 and never cleared. See [`crate::followed`].
#[unsafe(no_mangle)]
pub static mut FLOW_ADDRS: [u8; FLOW_ADDR_SLOTS] = [0; FLOW_ADDR_SLOTS];

/// Bytes of [`FLOW_TUPLES`] (a power of two): twice the followed-flow table's default
/// directions (65,536), so that it stays mostly zero while that table holds a few thousand.
pub const FLOW_TUPLE_SLOTS: usize = 1 << FLOW_TUPLE_BITS;

/// The followed flows' tuples, hashed ([`tracer_common::flow_slot_of`]): a byte per slot,
/// set to 1 and never cleared. See [`crate::followed`].
#[unsafe(no_mangle)]
pub static mut FLOW_TUPLES: [u8; FLOW_TUPLE_SLOTS] = [0; FLOW_TUPLE_SLOTS];

/// The kernel structure offsets user space patched in.
#[inline(always)]
pub fn offsets() -> KernelOffsets {
    // SAFETY: a plain read of a static the loader patched before verification.
    unsafe { core::ptr::read_volatile(&OFFSETS) }
}

/// True in [`filter::ALL`] mode (every packet traced).
#[inline(always)]
pub fn trace_all() -> bool {
    // SAFETY: as above.
    unsafe { core::ptr::read_volatile(&FILTER_MODE) == filter::ALL }
}

/// Whether the filter expression may match a packet of this family and protocol
/// ([`EXPR_FILTER`]; NAT changes neither, so the answer holds at every hook).
#[inline(always)]
pub fn expr_admits(family: u8, proto: u8) -> bool {
    // SAFETY: as above.
    unsafe { core::ptr::read_volatile(&EXPR_FILTER) }.admits(family, proto)
}

/// Whether the drop program names its sites ([`SITE_NAMES`]).
#[inline(always)]
pub fn site_names() -> bool {
    // SAFETY: as above.
    unsafe { core::ptr::read_volatile(&SITE_NAMES) != 0 }
}

/// Bytes of each traced frame to copy ([`SNAPLEN`]); 0 without `-w`.
#[inline(always)]
pub fn snaplen() -> u32 {
    // SAFETY: as above.
    unsafe { core::ptr::read_volatile(&SNAPLEN) }
}

/// The ring-buffer fill at which an event wakes the reader ([`WAKE_BYTES`]).
#[inline(always)]
pub fn wake_bytes() -> u64 {
    // SAFETY: as above.
    unsafe { core::ptr::read_volatile(&WAKE_BYTES) }
}

/// Adds one to a per-CPU counter.
#[inline(always)]
pub fn count(index: u32) {
    add(index, 1);
}

/// Adds `n` to a per-CPU counter.
#[inline(always)]
pub fn add(index: u32, n: u64) {
    if let Some(c) = COUNTERS.get_ptr_mut(index) {
        // SAFETY: per-CPU slot, no concurrent writer on this CPU while the program runs.
        unsafe { *c += n };
    }
}

/// This CPU's scratch space `slot` ([`SCRATCH_TC`], [`SCRATCH_NAT`]).
#[inline(always)]
pub fn scratch(slot: u32) -> Option<&'static mut Scratch> {
    // SAFETY: per-CPU value, used only until the program returns.
    SCRATCH.get_ptr_mut(slot).map(|p| unsafe { &mut *p })
}
