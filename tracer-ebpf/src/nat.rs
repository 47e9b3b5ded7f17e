//! BPF netfilter programs bracketing the NAT hooks.
//!
//! The nat table runs at `NF_IP_PRI_NAT_DST` (-100) in PRE_ROUTING and LOCAL_OUT and at
//! `NF_IP_PRI_NAT_SRC` (100) in POST_ROUTING and LOCAL_IN (include/uapi/linux/netfilter_ipv4.h,
//! v6.1). User space attaches each `*_enter` program one priority before and each `*_exit` one
//! after, so the pair sees the packet before and after NAT and times the whole step.
//!
//! aya-obj only parses the section names it knows, so these programs sit in the `classifier`
//! section; user space loads them itself as `BPF_PROG_TYPE_NETFILTER`.
//!
//! # Minimum kernel version
//! 6.4 (BPF_PROG_TYPE_NETFILTER and netfilter links).

use core::ffi::c_void;

use aya_ebpf::{
    helpers::{
        bpf_ktime_get_ns, bpf_probe_read_kernel, generated::bpf_probe_read_kernel as read_raw,
    },
    macros::map,
    maps::PerCpuArray,
};
use tracer_common::{
    Event, KernelOffsets, PKT_WINDOW, PendingNat, Tuple, counter, ct, flag, hook, kind, parse,
};

use crate::emit::{count, emit, has_tracked_addr, is_tracked, offsets, scratch, track_flow};

/// `NF_ACCEPT`: netfilter programs must return `NF_DROP` or `NF_ACCEPT`; we never drop.
const NF_ACCEPT: i32 = 1;
/// `NFCT_INFOMASK`: the low bits of `skb->_nfct` hold `ctinfo`.
const NFCT_INFOMASK: u64 = 7;

/// Packets in flight through a nat hook, one slot per hook number.
#[map]
static NAT_PENDING: PerCpuArray<PendingNat> = PerCpuArray::with_max_entries(5, 0);

macro_rules! bracket {
    ($enter:ident, $exit:ident, $hook:expr) => {
        #[doc = concat!("Before the nat table in hook ", stringify!($hook), ".")]
        #[unsafe(no_mangle)]
        #[unsafe(link_section = "classifier")]
        pub extern "C" fn $enter(ctx: *mut c_void) -> i32 {
            if enter(ctx, $hook).is_err() {
                count(counter::UNPARSED);
            }
            NF_ACCEPT
        }

        #[doc = concat!("After the nat table in hook ", stringify!($hook), ".")]
        #[unsafe(no_mangle)]
        #[unsafe(link_section = "classifier")]
        pub extern "C" fn $exit(ctx: *mut c_void) -> i32 {
            if exit(ctx, $hook).is_err() {
                count(counter::UNPARSED);
            }
            NF_ACCEPT
        }
    };
}

bracket!(nf_pre_enter, nf_pre_exit, hook::PRE_ROUTING);
bracket!(nf_out_enter, nf_out_exit, hook::LOCAL_OUT);
bracket!(nf_post_enter, nf_post_exit, hook::POST_ROUTING);
bracket!(nf_in_enter, nf_in_exit, hook::LOCAL_IN);

/// Reads a kernel value at `base + off`.
#[inline(always)]
pub(crate) fn read<T>(base: u64, off: u32) -> Result<T, ()> {
    // SAFETY: bpf_probe_read_kernel copes with any address.
    unsafe { bpf_probe_read_kernel((base + u64::from(off)) as *const T) }.map_err(|_| ())
}

/// Offset of `skb` in `struct bpf_nf_ctx { state; skb; }` (include/linux/netfilter.h, v6.4).
const NF_CTX_SKB: u32 = 8;

/// The `struct sk_buff *` of a netfilter program's context (`struct bpf_nf_ctx`): a direct
/// context load where the member sits where every kernel with netfilter programs has it, a
/// probe read otherwise.
#[inline(always)]
fn skb_of(ctx: *mut c_void, off: &KernelOffsets) -> Result<u64, ()> {
    if off.nf_ctx_skb == NF_CTX_SKB {
        // SAFETY: the verifier allows this read-only 8-byte context load (`nf_is_valid_access`).
        return Ok(unsafe { *ctx.cast::<u64>().add(1) });
    }
    read::<u64>(ctx as u64, off.nf_ctx_skb)
}

/// Where a packet's linear data is (`skb->data` must point at the IP header, as it does in the
/// netfilter hooks and in `nf_nat_manip_pkt`) and how many bytes it has, capped at the window.
#[inline(always)]
fn linear_of(skb: u64, off: &KernelOffsets) -> Result<(u64, u32), ()> {
    // `len` and `data_len` are neighbours in `struct sk_buff` (v4.x–v6.x): one read for both.
    let (len, data_len) = if off.skb_data_len == off.skb_len + 4 {
        let both: [u32; 2] = read(skb, off.skb_len)?;
        (both[0], both[1])
    } else {
        (
            read::<u32>(skb, off.skb_len)?,
            read::<u32>(skb, off.skb_data_len)?,
        )
    };
    let data: u64 = read(skb, off.skb_data)?;
    let linear = len.saturating_sub(data_len);
    let cap = if linear > PKT_WINDOW as u32 {
        PKT_WINDOW as u32
    } else {
        linear
    };
    if cap == 0 {
        return Err(());
    }
    Ok((data, cap))
}

/// Parses the packet's L3 and L4 headers from its linear data into the NAT programs' scratch.
#[inline(always)]
pub(crate) fn parse_skb(skb: u64, off: &KernelOffsets) -> Result<&'static parse::Parsed, ()> {
    let (data, cap) = linear_of(skb, off)?;
    parse_linear(data, cap)
}

#[inline(always)]
fn parse_linear(data: u64, cap: u32) -> Result<&'static parse::Parsed, ()> {
    let scratch = scratch(1).ok_or(())?;
    // SAFETY: `cap` is within 1..=PKT_WINDOW, the size of the per-CPU window.
    let ret = unsafe {
        read_raw(
            scratch.window.as_mut_ptr().cast(),
            cap,
            data as *const c_void,
        )
    };
    if ret != 0 || !parse::parse_l3(&scratch.window, cap as usize, &mut scratch.parsed) {
        return Err(());
    }
    Ok(&scratch.parsed)
}

/// The packet's tuple, copying only [`parse::FAST_BYTES`] for a plain IPv4 TCP/UDP/ICMP packet
/// (every packet crosses the nat hooks, most are never emitted) and parsing fully otherwise.
#[inline(always)]
fn tuple_of(skb: u64, off: &KernelOffsets) -> Result<Tuple, ()> {
    let (data, cap) = linear_of(skb, off)?;
    if cap >= parse::FAST_BYTES as u32 {
        let scratch = scratch(1).ok_or(())?;
        // SAFETY: FAST_BYTES is within the per-CPU window.
        let ret = unsafe {
            read_raw(
                scratch.window.as_mut_ptr().cast(),
                parse::FAST_BYTES as u32,
                data as *const c_void,
            )
        };
        if ret != 0 {
            return Err(());
        }
        let mut t = Tuple::default();
        if parse::tuple_ipv4_fast(&scratch.window, parse::FAST_BYTES, cap as usize, &mut t) {
            return Ok(t);
        }
    }
    Ok(parse_linear(data, cap)?.tuple)
}

#[inline(always)]
fn enter(ctx: *mut c_void, hook_num: u8) -> Result<(), ()> {
    count(counter::NAT_SEEN);
    let off = offsets();
    let skb = skb_of(ctx, &off)?;
    let before = tuple_of(skb, &off)?;
    let slot = NAT_PENDING.get_ptr_mut(u32::from(hook_num)).ok_or(())?;
    // SAFETY: per-CPU slot of this hook; the exit program on this CPU reads it next.
    unsafe {
        (*slot).skb = skb;
        (*slot).before = before;
        (*slot).ktime_ns = bpf_ktime_get_ns();
    }
    Ok(())
}

#[inline(always)]
fn exit(ctx: *mut c_void, hook_num: u8) -> Result<(), ()> {
    // SAFETY: helper without preconditions.
    let now = unsafe { bpf_ktime_get_ns() };
    let off = offsets();
    let skb = skb_of(ctx, &off)?;
    let slot = NAT_PENDING.get_ptr_mut(u32::from(hook_num)).ok_or(())?;
    // SAFETY: per-CPU slot written by this hook's enter program on this CPU.
    let pending: &mut PendingNat = unsafe { &mut *slot };
    if pending.skb != skb {
        count(counter::NAT_UNPAIRED);
        return Ok(());
    }
    // Cleared so that a later packet cannot pair with a stale entry.
    pending.skb = 0;
    // Most packets are not rewritten, or not tracked: decide on the tuple alone.
    let after = tuple_of(skb, &off)?;
    if !should_report(&pending.before, &after) {
        return Ok(());
    }
    let after = parse_skb(skb, &off)?;
    let rewrite = Rewrite {
        skb,
        hook: hook_num,
        flags: flag::NAT_HOOK_TIMED,
        now,
        nat_ns: now.saturating_sub(pending.ktime_ns),
        before: &pending.before,
        after,
    };
    report_checked(&rewrite, &off, || {
        let nfct: u64 = if off.skb_nfct == 0 {
            0
        } else {
            read(skb, off.skb_nfct).unwrap_or(0)
        };
        if nfct == 0 {
            ct::NONE
        } else {
            (nfct & NFCT_INFOMASK) as u8
        }
    });
    Ok(())
}

/// One packet before and after a NAT step, as a pair of programs saw it.
pub(crate) struct Rewrite<'a> {
    /// Kernel `struct sk_buff` address.
    pub skb: u64,
    /// The netfilter hook whose manipulation this was ([`hook`]): the collector derives DNAT
    /// or SNAT from it and the conntrack direction.
    pub hook: u8,
    /// [`flag`] bits saying how `nat_ns` was measured.
    pub flags: u8,
    /// `bpf_ktime_get_ns()` after the step.
    pub now: u64,
    pub nat_ns: u64,
    pub before: &'a Tuple,
    pub after: &'a parse::Parsed,
}

/// Shared end of every NAT program pair: when the packet changed and its flow is tracked,
/// follows the flow under its new addresses (both directions) and emits the NAT event.
/// `ct_info` is only asked for when the event is emitted.
#[inline(always)]
pub(crate) fn report(r: &Rewrite<'_>, off: &KernelOffsets, ct_info: impl FnOnce() -> u8) {
    if should_report(r.before, &r.after.tuple) {
        report_checked(r, off, ct_info);
    }
}

/// True when NAT changed the packet and its flow is tracked on either side.
#[inline(always)]
fn should_report(before: &Tuple, after: &Tuple) -> bool {
    *after != *before && (is_tracked(before) || is_tracked(after))
}

/// [`report`] once [`should_report`] said yes.
#[inline(always)]
fn report_checked(r: &Rewrite<'_>, off: &KernelOffsets, ct_info: impl FnOnce() -> u8) {
    let (before, after) = (r.before, r.after);
    // Keep following the flow under its new addresses, in both directions.
    if !has_tracked_addr(&after.tuple) {
        track_flow(&after.tuple);
    }
    if !has_tracked_addr(before) {
        track_flow(before);
    }
    let ct_info = ct_info();
    let skb = r.skb;
    let dev: u64 = if off.skb_dev == 0 {
        0
    } else {
        read(skb, off.skb_dev).unwrap_or(0)
    };
    let ifindex: u32 = if dev == 0 {
        0
    } else {
        read(dev, off.dev_ifindex).unwrap_or(0)
    };
    let len: u32 = read(skb, off.skb_len).unwrap_or(0);
    let mark: u32 = read(skb, off.skb_mark).unwrap_or(0);
    emit(|ev: &mut Event| {
        ev.kind = kind::NAT;
        ev.hook = r.hook;
        ev.ct_info = ct_info;
        ev.flags = after.flags | r.flags;
        ev.ifindex = ifindex;
        ev.ktime_ns = r.now;
        ev.skb = skb;
        ev.len = len;
        ev.mark = mark;
        ev.nat_ns = r.nat_ns;
        ev.fp = after.fp;
        ev.tuple = after.tuple;
        ev.orig = *before;
    });
}
