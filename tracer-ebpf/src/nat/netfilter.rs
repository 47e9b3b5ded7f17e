//! BPF netfilter programs bracketing the nat table.
//!
//! The nat table runs at `NF_IP_PRI_NAT_DST` (-100) in PRE_ROUTING and LOCAL_OUT and at
//! `NF_IP_PRI_NAT_SRC` (100) in POST_ROUTING and LOCAL_IN (include/uapi/linux/netfilter_ipv4.h,
//! v6.1). User space attaches [`nf_enter`] one priority before and [`nf_exit`] one after the nat
//! table in each of those four hooks (four links each, one program each: one verification
//! instead of four), so the pair sees the packet before and after NAT and times the whole step
//! (rule traversal and rewrite). Contract: the enter program leaves the packet's tuple and
//! start time in this hook's per-CPU pending slot (or marks it skipped, [`super::conntrack`]);
//! the exit program pairs with it by `skb` address and reports the step through the shared
//! path ([`super::report`]). Always `NF_ACCEPT`.
//!
//! aya-obj only parses the section names it knows, so these programs sit in the `classifier`
//! section; user space loads them itself as `BPF_PROG_TYPE_NETFILTER`.
//!
//! No helper call on the common path: `ctx->skb` is a trusted BTF pointer, so its members (and
//! `skb->dev->ifindex`) are plain loads at placeholder offsets the loader patches
//! ([`super::btf`]), and the packet's first 40 bytes are five plain 8-byte loads through
//! `bpf_rdonly_cast`. Only a packet the fast parse cannot take is copied by a probe read.

use core::{ffi::c_void, mem::MaybeUninit};

use aya_ebpf::{helpers::bpf_ktime_get_ns, macros::map, maps::PerCpuArray};
use tracer_common::{PendingNat, Tuple, counter, ct, flag, nf_patch, parse};

use crate::{
    maps::count,
    nat::{
        btf::{load, rdonly_cast},
        conntrack::{Conntrack, NFCT_INFOMASK, conntrack, worth_timing},
        packet::{parse_linear, window_cap},
        report::{report, reported},
        step::{Meta, Rewrite},
    },
};

/// `NF_ACCEPT`: netfilter programs must return `NF_DROP` or `NF_ACCEPT`; we never drop.
const NF_ACCEPT: i32 = 1;

/// Packets in flight through a nat hook, one slot per hook number.
#[map]
static NAT_PENDING: PerCpuArray<PendingNat> = PerCpuArray::with_max_entries(5, 0);

/// Before the nat table, in each hook it brackets (one program attached four times: one
/// verification instead of four).
///
/// # Minimum kernel version
/// 6.4 (`BPF_PROG_TYPE_NETFILTER` and netfilter links; `bpf_rdonly_cast` is 6.2), with BTF.
#[unsafe(no_mangle)]
#[unsafe(link_section = "classifier")]
pub extern "C" fn nf_enter(ctx: *mut c_void) -> i32 {
    if enter(ctx, hook_of(ctx)).is_err() {
        count(counter::UNPARSED);
    }
    NF_ACCEPT
}

/// After the nat table, in each hook it brackets.
///
/// # Minimum kernel version
/// 6.4, with BTF, as [`nf_enter`].
#[unsafe(no_mangle)]
#[unsafe(link_section = "classifier")]
pub extern "C" fn nf_exit(ctx: *mut c_void) -> i32 {
    if exit(ctx, hook_of(ctx)).is_err() {
        count(counter::UNPARSED);
    }
    NF_ACCEPT
}

/// The netfilter hook the program runs in (`ctx->state->hook`, [`tracer_common::hook`]'s
/// numbering): the same two programs are attached to every hook they bracket.
#[inline(always)]
fn hook_of(ctx: *mut c_void) -> u8 {
    let state: u64 = load(ctx as u64, nf_patch::CTX_STATE);
    load(state, nf_patch::STATE_HOOK)
}

/// The `struct sk_buff *` of a netfilter program's context (`struct bpf_nf_ctx`), as the
/// trusted BTF pointer the typed loads need.
#[inline(always)]
fn skb_of(ctx: *mut c_void) -> u64 {
    load(ctx as u64, nf_patch::CTX_SKB)
}

/// A netfilter program's packet: where its linear data is and how many bytes of it to read
/// ([`window_cap`]), by typed loads.
#[derive(Clone, Copy)]
struct Linear {
    data: u64,
    cap: u32,
}

#[inline(always)]
fn linear_nf(skb: u64) -> Result<Linear, ()> {
    let len: u32 = load(skb, nf_patch::SKB_LEN);
    let data_len: u32 = load(skb, nf_patch::SKB_DATA_LEN);
    let data: u64 = load(skb, nf_patch::SKB_DATA);
    Ok(Linear {
        data,
        cap: window_cap(len, data_len)?,
    })
}

/// The packet parsed whole without a probe read when [`parse::parse_ipv4_fast`] takes it (an
/// IPv4 header without options, not a fragment, TCP, UDP or ICMP): its first
/// [`HEAD_BYTES`] come by five 8-byte typed loads through a `struct ipv6hdr` cast
/// ([`nf_patch::TYPE_HEAD`]) onto the stack. Bytes past `cap` (a short packet) are loaded too,
/// without fault (the loads are `BPF_PROBE_MEM`), and the parser does not read them. `None`
/// sends the caller to the copy and the full parser.
#[inline(always)]
fn parse_fast<'a>(
    p: &Linear,
    out: &'a mut MaybeUninit<parse::Parsed>,
) -> Option<&'a mut parse::Parsed> {
    if p.cap < parse::FAST_BYTES as u32 {
        return None;
    }
    let mut head = MaybeUninit::<Head>::uninit();
    let w = head.as_mut_ptr().cast::<u64>();
    let src = rdonly_cast(p.data, nf_patch::TYPE_HEAD) as *const u8;
    let mut i = 0;
    while i < HEAD_BYTES / 8 {
        // SAFETY: byte `8 * i` of `struct ipv6hdr` starts a member that holds the next 8 bytes
        // ([`nf_patch::TYPE_HEAD`]); the verifier checks the load against the kernel's BTF and
        // the JIT makes it one that cannot fault. The head is 8-aligned, HEAD_BYTES long.
        unsafe {
            w.add(i)
                .write(core::ptr::read_volatile(src.add(8 * i).cast::<u64>()));
        }
        i += 1;
    }
    // SAFETY: every byte of the head was written above.
    let head = unsafe { head.assume_init_ref() };
    let (bytes, _) = head.0.split_first_chunk::<{ parse::FAST_PARSE_BYTES }>()?;
    parse::parse_ipv4_fast(bytes, p.cap as usize, out)
}

/// Bytes [`parse_fast`] loads: [`parse::FAST_PARSE_BYTES`] rounded up to whole 8-byte loads.
const HEAD_BYTES: usize = parse::FAST_PARSE_BYTES.next_multiple_of(8);

/// The first [`HEAD_BYTES`] of a packet on the stack, 8-aligned for the stores.
#[repr(C, align(8))]
struct Head([u8; HEAD_BYTES]);

/// The packet's tuple: from [`parse_fast`] for a plain IPv4 TCP/UDP/ICMP packet (every packet
/// crosses the nat hooks, most are never emitted: no helper call, no scratch), else copied and
/// parsed fully.
#[inline(always)]
fn tuple_nf(p: &Linear) -> Result<Tuple, ()> {
    let mut fast = MaybeUninit::uninit();
    if let Some(parsed) = parse_fast(p, &mut fast) {
        return Ok(parsed.tuple);
    }
    Ok(parse_linear(p.data, p.cap)?.tuple)
}

/// [`PendingNat::ktime_ns`] of a packet its enter program skipped ([`Conntrack::Skip`]):
/// its exit returns at once. (Not a bit of the `skb` word: the verifier refuses bitwise
/// operations on the `skb` pointer.)
const SKIPPED: u64 = u64::MAX;

#[inline(always)]
fn enter(ctx: *mut c_void, hook_num: u8) -> Result<(), ()> {
    count(counter::NAT_SEEN);
    let skb = skb_of(ctx);
    let slot = NAT_PENDING.get_ptr_mut(u32::from(hook_num)).ok_or(())?;
    let nfct: u64 = load(skb, nf_patch::SKB_NFCT);
    let timed = match conntrack(nfct, hook_num) {
        Conntrack::Skip => {
            // SAFETY: per-CPU slot of this hook; the exit program on this CPU reads it next.
            unsafe {
                (*slot).skb = skb;
                (*slot).ktime_ns = SKIPPED;
            }
            return Ok(());
        }
        Conntrack::Time => true,
        Conntrack::Packet => false,
    };
    let before = tuple_nf(&linear_nf(skb)?)?;
    let ktime_ns = if timed || worth_timing(nfct, &before) {
        // SAFETY: helper without preconditions.
        unsafe { bpf_ktime_get_ns() }
    } else {
        0
    };
    // SAFETY: per-CPU slot of this hook; the exit program on this CPU reads it next.
    unsafe {
        (*slot).skb = skb;
        (*slot).before = before;
        (*slot).ktime_ns = ktime_ns;
    }
    Ok(())
}

#[inline(always)]
fn exit(ctx: *mut c_void, hook_num: u8) -> Result<(), ()> {
    let skb = skb_of(ctx);
    let slot = NAT_PENDING.get_ptr_mut(u32::from(hook_num)).ok_or(())?;
    // SAFETY: per-CPU slot written by this hook's enter program on this CPU.
    let pending: &mut PendingNat = unsafe { &mut *slot };
    if pending.skb != skb {
        count(counter::NAT_UNPAIRED);
        return Ok(());
    }
    // Cleared so that a later packet cannot pair with a stale entry.
    pending.skb = 0;
    if pending.ktime_ns == SKIPPED {
        return Ok(());
    }
    // One parse, whose tuple decides and whose whole is reported: a packet that reaches here
    // was not skipped by its conntrack entry, and most of those are reported.
    let linear = linear_nf(skb)?;
    let mut fast = MaybeUninit::uninit();
    let after: &parse::Parsed = match parse_fast(&linear, &mut fast) {
        Some(p) => p,
        None => parse_linear(linear.data, linear.cap)?,
    };
    let before = &pending.before;
    let Some(follow) = reported(before, &after.tuple) else {
        return Ok(());
    };
    // SAFETY: helper without preconditions. Only for packets that are reported: `nat_ns`
    // includes the few nanoseconds of the parse above.
    let now = unsafe { bpf_ktime_get_ns() };
    let (flags, nat_ns) = if pending.ktime_ns == 0 {
        (flag::NAT_UNTIMED, 0)
    } else {
        (flag::NAT_HOOK_TIMED, now.saturating_sub(pending.ktime_ns))
    };
    let step = Rewrite {
        skb,
        hook: hook_num,
        flags,
        now,
        nat_ns,
        before,
        after,
    };
    report(&step, &follow, || meta(skb));
    Ok(())
}

/// The record's [`Meta`] of the packet `skb`, by typed loads.
#[inline(always)]
fn meta(skb: u64) -> Meta {
    let nfct: u64 = load(skb, nf_patch::SKB_NFCT);
    let dev: u64 = load(skb, nf_patch::SKB_DEV);
    Meta {
        ct_info: if nfct == 0 {
            ct::NONE
        } else {
            (nfct & NFCT_INFOMASK) as u8
        },
        ifindex: if dev == 0 {
            0
        } else {
            load(dev, nf_patch::DEV_IFINDEX)
        },
    }
}
