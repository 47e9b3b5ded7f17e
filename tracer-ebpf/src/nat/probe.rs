//! NAT programs on the function that rewrites packets: `nf_nat_manip_pkt`.
//!
//! `nf_nat_packet` (net/netfilter/nf_nat_core.c) calls `unsigned int nf_nat_manip_pkt(struct
//! sk_buff *skb, struct nf_conn *ct, enum nf_nat_manip_type mtype, enum ip_conntrack_dir dir)`
//! (net/netfilter/nf_nat_proto.c, v5.4–v6.x) only when the connection has a translation for
//! this hook and direction, with `skb->data` at the IP header. An entry program copies the
//! packet's tuple into a per-CPU pending slot with the time; the exit program parses the packet
//! again and, when it changed and is traced, reports the step through the same path as the
//! netfilter brackets ([`super::report`]). The latency is the rewrite itself, not rule
//! traversal. The packet and `skb` are read by probe reads at the offsets user space put in
//! `OFFSETS` (their loaders patch no instruction, unlike the netfilter programs').
//!
//! The event's `hook` is the one whose manipulation `mtype` is (the kernel's `HOOK2MANIP`:
//! `NF_NAT_MANIP_DST` in PRE_ROUTING, `NF_NAT_MANIP_SRC` in POST_ROUTING), and `ct_info` is
//! `IS_REPLY` for `IP_CT_DIR_REPLY`, so the collector derives DNAT/SNAT and `reply` exactly as
//! for the netfilter programs.
//!
//! Two pairs, the same logic:
//! - `nat_fentry_enter` / `nat_fexit_exit`: fentry/fexit. They sit in the `classifier` section
//!   like the netfilter programs (aya would refuse the whole object when its BTF does not load
//!   if they were in `fentry` sections); user space loads them itself as
//!   `BPF_PROG_TYPE_TRACING` with the function's id in the nf_nat module's BTF.
//! - `nat_kprobe_enter` / `nat_kretprobe_exit`: kprobe/kretprobe, loaded by aya. A kretprobe
//!   has no arguments: the exit trusts the slot, which the entry clears first and the exit
//!   after use, so an exit never pairs with an older packet (nor with an entry older than
//!   `STALE_NS`, whose exit was missed).
//!
//! One slot per CPU: a rewrite nested inside another on the same CPU (a softirq interrupting
//! process-context NAT) clears the outer entry, which is then counted in `NAT_UNPAIRED`, never
//! paired with the wrong packet.
//!
//! Not seen here, unlike with the netfilter brackets: the rewrite of an ICMP error's headers
//! (`nf_nat_icmp_reply_translation` calls `nf_nat_ipv4_manip_pkt` directly).
//!
//! Where a kernel inlines `nf_nat_manip_pkt` (it is absent from `/proc/kallsyms` and BTF), the
//! same programs would go on `nf_nat_packet(ct, ctinfo, hooknum, skb)`, which brackets the
//! rewrite and has the hook and `ctinfo` as arguments (the exit would compare the tuples, as
//! it does now). Not built: the function is global in nf_nat_proto.c and called from
//! nf_nat_core.c, so only LTO could inline it; Debian's 6.1 has it (nf_nat module, in its BTF).

use core::ffi::c_void;

use aya_ebpf::{
    helpers::{bpf_ktime_get_ns, bpf_probe_read_kernel},
    macros::{kprobe, kretprobe, map},
    maps::PerCpuArray,
    programs::{ProbeContext, RetProbeContext},
};
use tracer_common::{KernelOffsets, Tuple, counter, ct, hook, parse};

use crate::{
    maps::{count, offsets},
    nat::{
        packet::{parse_linear, window_cap},
        report::{report, reported},
        step::{Meta, Rewrite},
    },
};

/// `NF_NAT_MANIP_DST` (`enum nf_nat_manip_type`, include/net/netfilter/nf_nat.h, v6.1).
const NF_NAT_MANIP_DST: u32 = 1;
/// `IP_CT_DIR_REPLY` (`enum ip_conntrack_dir`,
/// include/uapi/linux/netfilter/nf_conntrack_tuple_common.h, v6.1).
const IP_CT_DIR_REPLY: u32 = 1;
/// An entry older than this is stale (its exit was missed); a rewrite takes microseconds.
const STALE_NS: u64 = 100_000_000;

/// A packet inside `nf_nat_manip_pkt` on this CPU.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct PendingRewrite {
    /// Kernel `struct sk_buff` address; 0: no packet pending.
    skb: u64,
    ktime_ns: u64,
    before: Tuple,
    /// [`hook`] whose manipulation this is.
    hook: u8,
    /// [`ct`] value for the direction.
    ct_info: u8,
    _pad: [u8; 6],
}

/// The packet in flight through `nf_nat_manip_pkt`, one per CPU.
#[map]
static MANIP_PENDING: PerCpuArray<PendingRewrite> = PerCpuArray::with_max_entries(1, 0);

/// Entry of `nf_nat_manip_pkt` (kprobe).
///
/// # Minimum kernel version
/// Any kernel with `CONFIG_KPROBES` and the ring buffer (5.8).
#[kprobe]
pub fn nat_kprobe_enter(ctx: ProbeContext) -> u32 {
    // The enums are 32-bit: the upper half of their registers is undefined (x86-64 SysV ABI).
    let args = (ctx.arg::<u64>(0), ctx.arg::<u32>(2), ctx.arg::<u32>(3));
    let (Some(skb), Some(mtype), Some(dir)) = args else {
        count(counter::UNPARSED);
        return 0;
    };
    if enter(skb, mtype, dir).is_err() {
        count(counter::UNPARSED);
    }
    0
}

/// Return of `nf_nat_manip_pkt` (kretprobe): the arguments are gone, the slot has them.
///
/// # Minimum kernel version
/// As [`nat_kprobe_enter`].
#[kretprobe]
pub fn nat_kretprobe_exit(_ctx: RetProbeContext) -> u32 {
    if exit(None).is_err() {
        count(counter::UNPARSED);
    }
    0
}

/// Argument `n` of a fentry/fexit context (an array of u64, include/linux/bpf.h, v6.1).
#[inline(always)]
fn btf_arg(ctx: *mut c_void, n: usize) -> u64 {
    // SAFETY: the verifier checks each context load against the function's BTF prototype.
    unsafe { *ctx.cast::<u64>().add(n) }
}

/// Entry of `nf_nat_manip_pkt` (fentry).
///
/// # Minimum kernel version
/// 5.5 with BTF (5.11 for module BTF when nf_nat is a module), and the ring buffer (5.8).
#[unsafe(no_mangle)]
#[unsafe(link_section = "classifier")]
pub extern "C" fn nat_fentry_enter(ctx: *mut c_void) -> i32 {
    // The enums are 32-bit: only the low half of their slots is defined.
    let (mtype, dir) = (btf_arg(ctx, 2) as u32, btf_arg(ctx, 3) as u32);
    if enter(btf_arg(ctx, 0), mtype, dir).is_err() {
        count(counter::UNPARSED);
    }
    0
}

/// Exit of `nf_nat_manip_pkt` (fexit): the arguments are still there, so the slot is checked
/// against the packet.
///
/// # Minimum kernel version
/// As [`nat_fentry_enter`].
#[unsafe(no_mangle)]
#[unsafe(link_section = "classifier")]
pub extern "C" fn nat_fexit_exit(ctx: *mut c_void) -> i32 {
    if exit(Some(btf_arg(ctx, 0))).is_err() {
        count(counter::UNPARSED);
    }
    0
}

#[inline(always)]
fn enter(skb: u64, mtype: u32, dir: u32) -> Result<(), ()> {
    count(counter::NAT_SEEN);
    let slot = MANIP_PENDING.get_ptr_mut(0).ok_or(())?;
    // SAFETY: this CPU's slot; the exit program on this CPU reads it next.
    let pending = unsafe { &mut *slot };
    // Cleared first: a packet the parser cannot read must not leave an older entry for its exit.
    pending.skb = 0;
    let parsed = parse_skb(skb, &offsets())?;
    pending.before = parsed.tuple;
    pending.hook = if mtype == NF_NAT_MANIP_DST {
        hook::PRE_ROUTING
    } else {
        hook::POST_ROUTING
    };
    pending.ct_info = if dir == IP_CT_DIR_REPLY {
        ct::IS_REPLY
    } else {
        ct::ESTABLISHED
    };
    pending.skb = skb;
    // SAFETY: helper without preconditions. Taken last, so only the rewrite is timed.
    pending.ktime_ns = unsafe { bpf_ktime_get_ns() };
    Ok(())
}

/// `seen`: the exit's own `skb` argument where it has one (fexit).
#[inline(always)]
fn exit(seen: Option<u64>) -> Result<(), ()> {
    // SAFETY: helper without preconditions.
    let now = unsafe { bpf_ktime_get_ns() };
    let slot = MANIP_PENDING.get_ptr_mut(0).ok_or(())?;
    // SAFETY: this CPU's slot, written by the entry program on this CPU.
    let pending = unsafe { &mut *slot };
    let skb = pending.skb;
    if skb == 0 || seen.is_some_and(|s| s != skb) {
        count(counter::NAT_UNPAIRED);
        return Ok(());
    }
    // Cleared so that a later exit cannot pair with this entry.
    pending.skb = 0;
    let nat_ns = now.wrapping_sub(pending.ktime_ns);
    if nat_ns > STALE_NS {
        count(counter::NAT_UNPAIRED);
        return Ok(());
    }
    let off = offsets();
    let after = parse_skb(skb, &off)?;
    let Some(follow) = reported(&pending.before, &after.tuple) else {
        return Ok(());
    };
    let ct_info = pending.ct_info;
    let step = Rewrite {
        skb,
        hook: pending.hook,
        flags: 0,
        now,
        nat_ns,
        before: &pending.before,
        after,
    };
    report(&step, &follow, || meta(skb, &off, ct_info));
    Ok(())
}

/// Reads a kernel value at `base + off`.
#[inline(always)]
fn read<T>(base: u64, off: u32) -> Result<T, ()> {
    // SAFETY: bpf_probe_read_kernel copes with any address.
    unsafe { bpf_probe_read_kernel((base + u64::from(off)) as *const T) }.map_err(|_| ())
}

/// Where a packet's linear data is and how many bytes of it to read ([`window_cap`]), by probe
/// reads: the probes' `skb` is a plain number.
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
    Ok((data, window_cap(len, data_len)?))
}

/// Parses the packet's L3 and L4 headers from its linear data into the NAT programs' scratch.
#[inline(always)]
fn parse_skb(skb: u64, off: &KernelOffsets) -> Result<&'static parse::Parsed, ()> {
    let (data, cap) = linear_of(skb, off)?;
    parse_linear(data, cap)
}

/// The record's [`Meta`] of the packet `skb`, by probe reads (a field that cannot be read is
/// 0), with the `ct_info` the entry program derived from the direction.
#[inline(always)]
fn meta(skb: u64, off: &KernelOffsets, ct_info: u8) -> Meta {
    let dev: u64 = if off.skb_dev == 0 {
        0
    } else {
        read(skb, off.skb_dev).unwrap_or(0)
    };
    Meta {
        ct_info,
        ifindex: if dev == 0 {
            0
        } else {
            read(dev, off.dev_ifindex).unwrap_or(0)
        },
    }
}
