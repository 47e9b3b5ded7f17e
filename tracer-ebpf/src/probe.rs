//! NAT programs on the function that rewrites packets: `nf_nat_manip_pkt`.
//!
//! `nf_nat_packet` (net/netfilter/nf_nat_core.c) calls `unsigned int nf_nat_manip_pkt(struct
//! sk_buff *skb, struct nf_conn *ct, enum nf_nat_manip_type mtype, enum ip_conntrack_dir dir)`
//! (net/netfilter/nf_nat_proto.c, v5.4–v6.x) only when the connection has a translation for
//! this hook and direction, with `skb->data` at the IP header. An entry program copies the
//! packet's tuple into a per-CPU pending slot with the time; the exit program parses the packet
//! again and, when it changed and is tracked, emits a NAT event through the same code as the
//! netfilter brackets ([`crate::nat::report`]). The latency is the rewrite itself, not rule
//! traversal.
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
//!
//! # Minimum kernel version
//! fentry/fexit: 5.5 with BTF (5.11 for module BTF when nf_nat is a module); kprobes: any kernel
//! with `CONFIG_KPROBES` and the ring buffer (5.8).

use core::ffi::c_void;

use aya_ebpf::{
    helpers::bpf_ktime_get_ns,
    macros::{kprobe, kretprobe, map},
    maps::PerCpuArray,
    programs::{ProbeContext, RetProbeContext},
};
use tracer_common::{Tuple, counter, ct, hook};

use crate::{
    emit::{count, offsets},
    nat::{Rewrite, parse_skb, report},
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
    let ct_info = pending.ct_info;
    let rewrite = Rewrite {
        skb,
        hook: pending.hook,
        flags: 0,
        now,
        nat_ns,
        before: &pending.before,
        after,
    };
    report(&rewrite, &off, || ct_info);
    Ok(())
}
