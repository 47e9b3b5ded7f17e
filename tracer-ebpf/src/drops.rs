//! The drop programs on the `skb:kfree_skb` tracepoint: one event per traced packet the kernel
//! frees as dropped.
//!
//! The tracepoint is `kfree_skb(struct sk_buff *skb, void *location, enum skb_drop_reason
//! reason, struct sock *rx_sk)` (include/trace/events/skb.h, v6.12; `reason` from v5.17,
//! `rx_sk` from v6.12; before v5.17 only `skb` and `location`). From v6.3 the kernel frees a
//! packet it consumed through `consume_skb`'s own tracepoint, never this one
//! (`__kfree_skb_reason` / `__sk_skb_reason_drop`, net/core/skbuff.c), so it fires for drops
//! only; user space still refuses a reason named `CONSUMED`. Before v5.17 `kfree_skb` was also
//! called for a few packets that were not drops: those kernels say `NOT_SPECIFIED`.
//!
//! Contract: the packet is read from `skb->head + skb->network_header` (wherever `data` points
//! at the free: at L4 in `tcp_v4_rcv`, at L3 in netfilter) up to the end of its linear data,
//! and traced by the same rule as the tc programs ([`crate::filter::is_traced`]); an IPv4
//! packet whose addresses are neither tracked nor noted in the followed flows' address hash is
//! let go after two kernel reads (the skb's fields in one span, then 20 bytes of IP header). A packet without a network header (freed before L3) is not
//! read. A traced one is counted (`MATCHED`) and emitted as a [`DropRecordV4`] or
//! [`DropRecord`], after the kernel's name for its location where [`crate::site`] writes one
//! (all three entry points: 5.13 to 5.16 have `bpf_snprintf` and take `drop_raw_old`). The
//! programs never change anything.
//!
//! Three entry points, one body: `drop_btf` (`tp_btf`, loaded by user space as a tracing
//! program on `btf_trace_kfree_skb`: it sits in the `classifier` section like the fentry
//! programs, so that aya accepts the object on kernels whose BTF it cannot load), and two raw
//! tracepoints for kernels that refuse it: `drop_raw` (5.17+, three arguments) and
//! `drop_raw_old` (two: a raw tracepoint program may not read past the tracepoint's arguments).
//!
//! # Minimum kernel version
//! `drop_btf`: 5.5 with BTF; the raw tracepoints: 4.17; all need the ring buffer (5.8).

use core::ffi::c_void;

use aya_ebpf::{
    helpers::{bpf_ktime_get_ns, bpf_probe_read_kernel},
    macros::raw_tracepoint,
    programs::RawTracePointContext,
};
use tracer_common::{
    DROP_REASON_UNKNOWN, DropRecord, DropRecordV4, FAMILY_IPV4, KernelOffsets, PKT_WINDOW, counter,
    flag, kind,
    parse::{self, Window},
};

use crate::{
    emit::emit,
    filter::{is_traced, v4_set, v4_tracked},
    followed::{addr_maybe_followed, flows_present},
    maps::{SCRATCH_DROP, count, offsets, scratch, trace_all},
};

mod site;

use site::name_once;

/// `skb->network_header` when unset (`(typeof(skb->network_header))~0U`,
/// include/linux/skbuff.h, v6.1).
const NO_HEADER: u16 = 0xffff;

/// `tp_btf/kfree_skb` (loaded by user space, see the module).
#[unsafe(no_mangle)]
#[unsafe(link_section = "classifier")]
pub extern "C" fn drop_btf(ctx: *mut c_void) -> i32 {
    // SAFETY: the verifier checks each context load against the tracepoint's BTF prototype.
    let (skb, location, reason) = unsafe {
        let args = ctx.cast::<u64>();
        (*args, *args.add(1), *args.add(2) as u32)
    };
    on_drop(skb, location, reason);
    0
}

/// `raw_tracepoint/kfree_skb` on 5.17+ (with `reason`).
#[raw_tracepoint(tracepoint = "kfree_skb")]
pub fn drop_raw(ctx: RawTracePointContext) -> i32 {
    let (skb, location, reason): (u64, u64, u64) = (ctx.arg(0), ctx.arg(1), ctx.arg(2));
    on_drop(skb, location, reason as u32);
    0
}

/// `raw_tracepoint/kfree_skb` before 5.17 (no `reason`).
#[raw_tracepoint(tracepoint = "kfree_skb")]
pub fn drop_raw_old(ctx: RawTracePointContext) -> i32 {
    let (skb, location): (u64, u64) = (ctx.arg(0), ctx.arg(1));
    on_drop(skb, location, DROP_REASON_UNKNOWN);
    0
}

#[inline(always)]
fn on_drop(skb: u64, location: u64, reason: u32) {
    if try_drop(skb, location, reason).is_err() {
        count(counter::UNPARSED);
    }
}

/// Reads a kernel value at `base + off`.
#[inline(always)]
fn read<T>(base: u64, off: u32) -> Result<T, ()> {
    // SAFETY: bpf_probe_read_kernel copes with any address.
    unsafe { bpf_probe_read_kernel((base + u64::from(off)) as *const T) }.map_err(|_| ())
}

/// The widest span of `sk_buff` read at once for its five fields (on x86_64 and arm64 kernels
/// 5.10–6.18 they lie within about 110 bytes); a wider one is read field by field.
const SKB_SPAN: u32 = 160;

/// A `T` at byte `i` of the window; `Err` past its end.
#[inline(always)]
fn at<T: Copy>(w: &Window, i: u32) -> Result<T, ()> {
    let i = i as usize;
    if i > PKT_WINDOW - core::mem::size_of::<T>() {
        return Err(());
    }
    // SAFETY: `i + size_of::<T>()` is within the window (checked above); unaligned read.
    Ok(unsafe { core::ptr::read_unaligned(w.as_ptr().add(i).cast::<T>()) })
}

/// The skb's `network_header`, `head`, `data`, `len` and `data_len`: one read of the span
/// holding them into `w` (each kernel read costs about 25–30 ns), or five reads when the
/// span is wider than [`SKB_SPAN`].
#[inline(always)]
fn skb_fields(
    skb: u64,
    off: &KernelOffsets,
    w: &mut Window,
) -> Result<(u16, u64, u64, u32, u32), ()> {
    let fields = [
        off.skb_network_header,
        off.skb_head,
        off.skb_data,
        off.skb_len,
        off.skb_data_len,
    ];
    let (mut lo, mut hi) = (u32::MAX, 0u32);
    for f in fields {
        lo = lo.min(f);
        hi = hi.max(f + 8);
    }
    let span = hi.saturating_sub(lo);
    if span == 0 || span > SKB_SPAN {
        return Ok((
            read(skb, off.skb_network_header)?,
            read(skb, off.skb_head)?,
            read(skb, off.skb_data)?,
            read(skb, off.skb_len)?,
            read(skb, off.skb_data_len)?,
        ));
    }
    // SAFETY: `span` is within 1..=SKB_SPAN, less than the window's size.
    let ret = unsafe {
        aya_ebpf::helpers::generated::bpf_probe_read_kernel(
            w.as_mut_ptr().cast(),
            span,
            (skb + u64::from(lo)) as *const c_void,
        )
    };
    if ret != 0 {
        return Err(());
    }
    Ok((
        at(w, off.skb_network_header - lo)?,
        at(w, off.skb_head - lo)?,
        at(w, off.skb_data - lo)?,
        at(w, off.skb_len - lo)?,
        at(w, off.skb_data_len - lo)?,
    ))
}

/// Where the packet's IP header is and how many linear bytes follow it (at most the window);
/// `Ok(None)` for a packet without a network header or linear bytes after it. `w` is scratch.
#[inline(always)]
fn network_of(skb: u64, off: &KernelOffsets, w: &mut Window) -> Result<Option<(u64, u32)>, ()> {
    if off.skb_head == 0 || off.skb_network_header == 0 {
        return Ok(None);
    }
    let (nh, head, data, len, data_len) = skb_fields(skb, off, w)?;
    if nh == NO_HEADER {
        return Ok(None);
    }
    let ip = head + u64::from(nh);
    let end = data + u64::from(len.saturating_sub(data_len));
    if end <= ip {
        return Ok(None);
    }
    let avail = end - ip;
    let cap = if avail > PKT_WINDOW as u64 {
        PKT_WINDOW as u32
    } else {
        avail as u32
    };
    Ok(Some((ip, cap)))
}

/// True when an IPv4 header's addresses say the packet is certainly outside the filter (as
/// the tc programs' fast verdict: neither tracked, and neither noted in a followed flow).
#[inline(always)]
fn surely_outside(ip: u64) -> bool {
    if trace_all() {
        return false;
    }
    let Some(set) = v4_set() else {
        return false;
    };
    let Ok(h) = read::<[u32; 5]>(ip, 0) else {
        return false;
    };
    let vihl = h[0].to_ne_bytes()[0];
    if vihl >> 4 != 4 || vihl & 0x0f < 5 {
        return false;
    }
    let (saddr, daddr) = (h[3], h[4]);
    if v4_tracked(set, saddr, daddr) {
        return false;
    }
    !flows_present() || !(addr_maybe_followed(saddr) || addr_maybe_followed(daddr))
}

#[inline(always)]
fn try_drop(skb: u64, location: u64, reason: u32) -> Result<(), ()> {
    let off = offsets();
    let scratch = scratch(SCRATCH_DROP).ok_or(())?;
    let Some((ip, cap)) = network_of(skb, &off, &mut scratch.window)? else {
        return Ok(());
    };
    if surely_outside(ip) {
        return Ok(());
    }
    // SAFETY: `cap` is within 1..=PKT_WINDOW, the size of the per-CPU window.
    let ret = unsafe {
        aya_ebpf::helpers::generated::bpf_probe_read_kernel(
            scratch.window.as_mut_ptr().cast(),
            cap,
            ip as *const c_void,
        )
    };
    if ret != 0 || !parse::parse_l3(&scratch.window, cap as usize, &mut scratch.parsed) {
        return Err(());
    }
    let parsed = &scratch.parsed;
    if !is_traced(&parsed.tuple) {
        return Ok(());
    }
    count(counter::MATCHED);
    name_once(location);
    let dev: u64 = read(skb, off.skb_dev).unwrap_or(0);
    let ifindex: u32 = if dev == 0 {
        0
    } else {
        read(dev, off.dev_ifindex).unwrap_or(0)
    };
    // SAFETY: helper without preconditions.
    let now = unsafe { bpf_ktime_get_ns() };
    let t = &parsed.tuple;
    if t.family == FAMILY_IPV4 {
        emit(|r: &mut DropRecordV4| {
            r.head.kind = kind::DROP;
            r.head.flags = parsed.flags;
            r.head.ifindex = ifindex;
            r.head.ktime_ns = now;
            r.fp = parsed.fp;
            r.tuple.set(t);
            r.location = location;
            r.reason = reason;
        });
        return Ok(());
    }
    emit(|r: &mut DropRecord| {
        r.head.kind = kind::DROP;
        r.head.flags = parsed.flags | flag::WIDE;
        r.head.ifindex = ifindex;
        r.head.ktime_ns = now;
        r.fp = parsed.fp;
        r.tuple = *t;
        r.location = location;
        r.reason = reason;
    });
    Ok(())
}
