//! Types shared by pktrace's eBPF programs and its collector.
//!
//! Everything here is `#[repr(C)]`, `Copy`, free of `bool` and implicit padding, and its layout
//! is pinned at compile time: the kernel writes these bytes into the ring buffer and the
//! collector reads them back. The packet parser ([`parse`]) is shared too, so the exact code the
//! kernel runs is unit-tested and fuzzed on the host.
#![cfg_attr(not(test), no_std)]

pub mod batch;
pub mod counter;
pub mod filter;
mod flow_slot;
mod kernel;
pub mod nf_patch;
mod observation;
pub mod parse;
mod record;
mod tuple;

pub use filter::{AddrKey, AddrSetV4, ExprFilter, V4_SET_MAX};
pub use flow_slot::{
    FLOW_ADDR_SLOTS, FLOW_TUPLE_BITS, flow_addr_slot, flow_slot_of, flow_tuple_slot,
};
pub use kernel::{KernelOffsets, PendingNat};
pub use observation::{
    BadRecord, DropSeen, Frame, NatSeen, Observation, SiteSeen, TcHook, TcSeen, decode, frame,
};
pub use record::{
    DROP_REASON_UNKNOWN, DropRecord, DropRecordV4, FRAME_MAX, NatRecord, NatRecordV4, RecordHeader,
    SITE_NAME_MAX, SITE_SLOTS, SiteRecord, TcFrameRecord, TcRecord, TcRecordV4, TupleV4, ct, flag,
    hook, kind, site_slot,
};
pub use tuple::{
    FAMILY_IPV4, FAMILY_IPV6, Fingerprint, PROTO_ICMP, PROTO_ICMPV6, PROTO_TCP, PROTO_UDP, Tuple,
};

/// Bytes of a packet copied into the parser's window (from L2 in tc, from L3 at netfilter).
pub const PKT_WINDOW: usize = 256;

#[cfg(feature = "user")]
mod pod {
    // SAFETY: all of these are `repr(C)`, `Copy`, made only of integers and byte arrays, and
    // have no implicit padding (sizes are asserted above).
    unsafe impl aya::Pod for super::RecordHeader {}
    unsafe impl aya::Pod for super::TcRecordV4 {}
    unsafe impl aya::Pod for super::TcFrameRecord {}
    unsafe impl aya::Pod for super::TcRecord {}
    unsafe impl aya::Pod for super::NatRecordV4 {}
    unsafe impl aya::Pod for super::NatRecord {}
    unsafe impl aya::Pod for super::DropRecordV4 {}
    unsafe impl aya::Pod for super::DropRecord {}
    unsafe impl aya::Pod for super::SiteRecord {}
    unsafe impl aya::Pod for super::Tuple {}
    unsafe impl aya::Pod for super::AddrKey {}
    unsafe impl aya::Pod for super::AddrSetV4 {}
    unsafe impl aya::Pod for super::PendingNat {}
    unsafe impl aya::Pod for super::KernelOffsets {}
    unsafe impl aya::Pod for super::ExprFilter {}
}
