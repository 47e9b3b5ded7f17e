//! tc classifiers: one event per traced packet at ingress and egress of each interface.
//!
//! Contract: a packet is traced by [`crate::filter::is_traced`]'s rule, decided as cheaply as
//! its bytes allow: first on the addresses and ports read in place ([`fast_verdict`]), then on
//! a parse in place, and only for other frames on a copy and the full parser. A traced packet
//! is counted (`MATCHED`) and emitted: a [`TcRecordV4`] for IPv4, else the wide
//! [`TcRecord`]; with `-w` (a non-zero `SNAPLEN`, checked first) a [`TcFrameRecord`] with
//! the frame's first bytes instead. tc ingress notes an untraced packet that may open a connection
//! ([`crate::first::note`]). The programs always return `TC_ACT_UNSPEC` (tcx: next), so the
//! CNI's own programs still run.

use core::mem::MaybeUninit;

use aya_ebpf::{
    bindings::TC_ACT_UNSPEC, helpers::bpf_ktime_get_ns, macros::classifier, programs::TcContext,
};
use tracer_common::{
    FAMILY_IPV4, FRAME_MAX, PKT_WINDOW, TcFrameRecord, TcRecord, TcRecordV4, counter, flag, kind,
    parse::{self, FAST_ETH_BYTES, Parsed},
};

use crate::{
    emit::{emit, emit_direct},
    filter::{is_traced, v4_set, v4_tracked},
    first,
    followed::{
        addr_maybe_followed, flow_followed, flow_followed_hashed, flow_hash_v4, flows_present,
        hash_maybe_followed,
    },
    maps::{SCRATCH_TC, count, expr_admits, scratch, snaplen, trace_all},
};

/// Smallest frame worth parsing (an Ethernet header).
const MIN_FRAME: u32 = 14;

/// tc ingress. Returns `TC_ACT_UNSPEC` (tcx: next) whatever happens.
///
/// # Minimum kernel version
/// 5.8 with clsact (the ring buffer); tcx links need 6.6.
#[classifier]
// Inlined into the entry aya's macro wraps it in: as a BPF-to-BPF call (LLVM's choice once the
// program grew) every run paid a call and a frame, about 10 ns outside the filter.
#[inline(always)]
pub fn tc_ingress(ctx: TcContext) -> i32 {
    if try_tc(&ctx, kind::TC_INGRESS).is_err() {
        count(counter::UNPARSED);
    }
    TC_ACT_UNSPEC
}

/// tc egress. Returns `TC_ACT_UNSPEC` (tcx: next) whatever happens.
///
/// # Minimum kernel version
/// As [`tc_ingress`].
#[classifier]
// As `tc_ingress`.
#[inline(always)]
pub fn tc_egress(ctx: TcContext) -> i32 {
    if try_tc(&ctx, kind::TC_EGRESS).is_err() {
        count(counter::UNPARSED);
    }
    TC_ACT_UNSPEC
}

/// The Ethernet and IPv4 header bytes [`fast_verdict`] reads.
const FAST_FRAME: usize = 14 + 20;

/// What the IPv4 fast filter concluded from a frame's two addresses, read in place.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Verdict {
    /// Certainly outside the filter: neither address is tracked and no flow is followed.
    Outside,
    /// One of the two addresses is tracked.
    TrackedAddr,
    /// Neither address is tracked, but the packet may be a followed flow's; for TCP and UDP,
    /// the flow's hash (`flow_hash_v4`), whose `FLOW_TUPLES` byte is set.
    MaybeFollowed(Option<u32>),
    /// No conclusion (not a plain IPv4 frame, no exact set, or every packet traced).
    Unknown,
}

/// The fast filter's verdict on a frame from its linear bytes in place (no copy, no parse):
/// for an IPv4 frame without VLAN tags whose header the parser would accept (version 4, IHL ≥
/// 5, all 20 bytes present), whether either address is in the IPv4 fast filter, and when
/// neither is, whether a followed flow could still match (outside when none is followed, when
/// neither address is noted in the followed flows' address hash, or, for TCP and UDP, when the
/// followed-flow hash's slot of the addresses and ports is clear). The full path reads the
/// same two addresses from the same bytes, so it would reach the same verdict;
/// [`Verdict::Unknown`] sends a packet through it with every check.
#[inline(always)]
fn fast_verdict(ctx: &TcContext) -> Verdict {
    if trace_all() {
        return Verdict::Unknown;
    }
    let Some(set) = v4_set() else {
        return Verdict::Unknown;
    };
    let (data, end) = (ctx.data(), ctx.data_end());
    if data + FAST_FRAME > end {
        return Verdict::Unknown;
    }
    // SAFETY: the 34 bytes at `data` are within the packet's linear data (checked above; the
    // verifier checks it again). Unaligned reads: the IP header sits at an odd offset.
    let (ethertype, vihl, saddr, daddr) = unsafe {
        let p = data as *const u8;
        (
            p.add(12).cast::<u16>().read_unaligned(),
            *p.add(14),
            p.add(26).cast::<u32>().read_unaligned(),
            p.add(30).cast::<u32>().read_unaligned(),
        )
    };
    if ethertype != 0x0800u16.to_be() || vihl >> 4 != 4 || vihl & 0x0f < 5 {
        return Verdict::Unknown;
    }
    if v4_tracked(set, saddr, daddr) {
        return Verdict::TrackedAddr;
    }
    if !flows_present() || !(addr_maybe_followed(saddr) || addr_maybe_followed(daddr)) {
        return Verdict::Outside;
    }
    // A followed flow could hold the packet: for TCP and UDP its ports, read in place, and its
    // addresses give the followed-flow hash's slot, which rules most such packets out without
    // a parse (the same tuple the parse would give, so the same answer as the slot check
    // after it).
    if data + FAST_ETH_BYTES <= end {
        // SAFETY: the FAST_ETH_BYTES bytes at `data` are within the packet's linear data
        // (checked above; the verifier checks it again); a byte array has no alignment
        // requirement.
        let head = unsafe { &*(data as *const [u8; FAST_ETH_BYTES]) };
        if let Some((sport, dport)) = parse::ethernet_ports_fast(head, ctx.len()) {
            let h = flow_hash_v4(saddr, daddr, sport, dport);
            if !hash_maybe_followed(h) {
                return Verdict::Outside;
            }
            return Verdict::MaybeFollowed(Some(h));
        }
    }
    Verdict::MaybeFollowed(None)
}

/// The frame parsed in place from its linear bytes when [`parse::parse_ethernet_fast`] applies
/// (plain Ethernet, IPv4 without options, TCP or UDP: no copy, and for a GSO packet no walk
/// into its paged fragments); `None` sends the caller to the copy and the full parser.
#[inline(always)]
fn parse_in_place<'a>(
    ctx: &TcContext,
    len: u32,
    out: &'a mut MaybeUninit<Parsed>,
) -> Option<&'a mut Parsed> {
    let (data, end) = (ctx.data(), ctx.data_end());
    if data + FAST_ETH_BYTES > end {
        return None;
    }
    // SAFETY: the FAST_ETH_BYTES bytes at `data` are within the packet's linear data (checked
    // above; the verifier checks it again); a byte array has no alignment requirement.
    let head = unsafe { &*(data as *const [u8; FAST_ETH_BYTES]) };
    parse::parse_ethernet_fast(head, len, out)
}

#[inline(always)]
fn try_tc(ctx: &TcContext, event_kind: u8) -> Result<(), ()> {
    let verdict = fast_verdict(ctx);
    if verdict == Verdict::Outside {
        if event_kind == kind::TC_INGRESS {
            first::note(ctx);
        }
        return Ok(());
    }
    // Not counted before the fast verdict: the per-CPU counter's cache line would be one more
    // for every packet outside the filter.
    count(counter::SEEN);
    let len = ctx.len();
    // On the stack: no per-CPU scratch (two more cache lines) for the commonest frames.
    let mut fast = MaybeUninit::uninit();
    if let Some(parsed) = parse_in_place(ctx, len, &mut fast) {
        // The tuple's addresses are the bytes the verdict read: it stands for the address
        // half of the filter.
        let traced = match verdict {
            Verdict::TrackedAddr => true,
            // The in-place parse's tuple is the one the verdict hashed (the same addresses and
            // ports); were it not, only the cache would miss: the table lookup is exact.
            Verdict::MaybeFollowed(Some(h)) => flow_followed_hashed(&parsed.tuple, h),
            Verdict::MaybeFollowed(None) => flow_followed(&parsed.tuple),
            _ => is_traced(&parsed.tuple),
        };
        if traced {
            emit_event(ctx, event_kind, parsed);
        } else if event_kind == kind::TC_INGRESS {
            first::note(ctx);
        }
        return Ok(());
    }
    let parsed = parse_copy(ctx, len)?;
    if is_traced(&parsed.tuple) {
        emit_event(ctx, event_kind, parsed);
    }
    Ok(())
}

/// The frame copied (its first `PKT_WINDOW` bytes, linear or not) into this CPU's tc scratch
/// and parsed by the full parser: for frames [`parse_in_place`] does not take (VLAN tags,
/// IPv6, IP options, fragments, other protocols, short linear data).
#[inline(always)]
fn parse_copy(ctx: &TcContext, len: u32) -> Result<&'static Parsed, ()> {
    if len < MIN_FRAME {
        return Err(());
    }
    let cap = if len > PKT_WINDOW as u32 {
        PKT_WINDOW as u32
    } else {
        len
    };
    let scratch = scratch(SCRATCH_TC).ok_or(())?;
    // SAFETY: `cap` is within 1..=PKT_WINDOW, the size of the per-CPU window.
    let ret = unsafe {
        aya_ebpf::helpers::generated::bpf_skb_load_bytes(
            ctx.skb.skb.cast(),
            0,
            scratch.window.as_mut_ptr().cast(),
            cap,
        )
    };
    if ret != 0 || !parse::parse_ethernet(&scratch.window, cap as usize, &mut scratch.parsed) {
        return Err(());
    }
    Ok(&scratch.parsed)
}

/// Counts a traced packet and emits its record: [`TcRecordV4`] for IPv4, else the wide
/// [`TcRecord`]; nothing for a packet of an IP version or protocol the filter expression rules
/// out.
#[inline(always)]
fn emit_event(ctx: &TcContext, event_kind: u8, parsed: &Parsed) {
    if !expr_admits(parsed.tuple.family, parsed.tuple.proto) {
        return;
    }
    count(counter::MATCHED);
    // SAFETY: reading a field of the program's own context.
    let ifindex = unsafe { (*ctx.skb.skb).ifindex };
    // SAFETY: helper without preconditions.
    let now = unsafe { bpf_ktime_get_ns() };
    let snap = snaplen();
    if snap != 0 {
        emit_frame(ctx, event_kind, parsed, (ifindex, now), snap);
        return;
    }
    let t = &parsed.tuple;
    if t.family == FAMILY_IPV4 {
        // The IPv4 record (48 bytes).
        emit(|r: &mut TcRecordV4| {
            r.head.kind = event_kind;
            r.head.flags = parsed.flags;
            r.head.ifindex = ifindex;
            r.head.ktime_ns = now;
            r.fp = parsed.fp;
            r.tuple.set(t);
        });
        return;
    }
    emit(|r: &mut TcRecord| {
        r.head.kind = event_kind;
        r.head.flags = parsed.flags | flag::WIDE;
        r.head.ifindex = ifindex;
        r.head.ktime_ns = now;
        r.fp = parsed.fp;
        r.tuple = parsed.tuple;
    });
}

/// `-w`: emits the traced packet's [`TcFrameRecord`]: its record's fields and its first
/// `snap` bytes (fewer when the frame is shorter; none when the copy fails, which the record's
/// `cap_len` of 0 tells).
#[inline(always)]
fn emit_frame(
    ctx: &TcContext,
    event_kind: u8,
    parsed: &Parsed,
    (ifindex, now): (u32, u64),
    snap: u32,
) {
    let len = ctx.len();
    let mut cap = if len < snap { len } else { snap };
    if cap > FRAME_MAX as u32 {
        cap = FRAME_MAX as u32;
    }
    crate::stage::flush();
    emit_direct(|r: &mut TcFrameRecord| {
        r.head.kind = event_kind;
        r.head.flags = parsed.flags | flag::WIDE | flag::FRAME;
        r.head.ifindex = ifindex;
        r.head.ktime_ns = now;
        r.fp = parsed.fp;
        r.tuple = parsed.tuple;
        r.orig_len = len;
        if cap == 0 {
            return;
        }
        // SAFETY: `cap` is within 1..=FRAME_MAX, the size of `bytes`, which the ring
        // reservation holds.
        let ret = unsafe {
            aya_ebpf::helpers::generated::bpf_skb_load_bytes(
                ctx.skb.skb.cast(),
                0,
                r.bytes.as_mut_ptr().cast(),
                cap,
            )
        };
        if ret == 0 {
            r.cap_len = cap;
        }
    });
}
