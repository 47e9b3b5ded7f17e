//! BPF netfilter programs bracketing the NAT hooks.
//!
//! The nat table runs at `NF_IP_PRI_NAT_DST` (-100) in PRE_ROUTING and LOCAL_OUT and at
//! `NF_IP_PRI_NAT_SRC` (100) in POST_ROUTING and LOCAL_IN (include/uapi/linux/netfilter_ipv4.h,
//! v6.1). User space attaches [`nf_enter`] one priority before and [`nf_exit`] one after the nat
//! table in each of those four hooks (four links each, one program each: one verification
//! instead of four), so the pair sees the packet before and after NAT and times the whole step.
//!
//! aya-obj only parses the section names it knows, so these programs sit in the `classifier`
//! section; user space loads them itself as `BPF_PROG_TYPE_NETFILTER`.
//!
//! No helper call on the common path: `ctx->skb` is a trusted BTF pointer, so its members (and
//! `skb->dev->ifindex`) are plain loads at placeholder offsets the loader patches from the
//! kernel's BTF ([`nf_patch`]), and the packet's first 40 bytes are five plain 8-byte loads
//! through `bpf_rdonly_cast` (a kfunc the loader links in place of a placeholder helper
//! call). Only a packet the fast parse cannot take is copied by a probe read. The
//! `nat_*` probes ([`crate::probe`]) share the parser and the report but keep probe reads:
//! their loaders patch nothing, so nothing they use holds a placeholder.
//!
//! # Minimum kernel version
//! 6.4 (BPF_PROG_TYPE_NETFILTER and netfilter links; `bpf_rdonly_cast` is 6.2), with BTF.

use core::{ffi::c_void, mem::MaybeUninit};

use aya_ebpf::{
    helpers::{
        bpf_ktime_get_ns, bpf_probe_read_kernel, generated::bpf_probe_read_kernel as read_raw,
    },
    macros::map,
    maps::PerCpuArray,
};
use tracer_common::{
    Event, FAMILY_IPV4, KernelOffsets, NatEventV4, PKT_WINDOW, PROTO_TCP, PROTO_UDP, PendingNat,
    Tuple, counter, ct, flag, hook, kind, nf_patch, parse,
};

use crate::{
    emit::{
        count, emit, flow_addr_maybe, flow_followed, flow_v4_maybe, flows_present,
        has_tracked_addr, is_tracked, scratch, trace_all, track_flow, v4_set, v4_tracked, word4,
    },
    first,
};

/// `NF_ACCEPT`: netfilter programs must return `NF_DROP` or `NF_ACCEPT`; we never drop.
const NF_ACCEPT: i32 = 1;
/// `NFCT_INFOMASK`: the low bits of `skb->_nfct` hold `ctinfo`.
const NFCT_INFOMASK: u64 = 7;

/// Packets in flight through a nat hook, one slot per hook number.
#[map]
static NAT_PENDING: PerCpuArray<PendingNat> = PerCpuArray::with_max_entries(5, 0);

/// Before the nat table, in each hook it brackets (one program attached four times: one
/// verification instead of four).
#[unsafe(no_mangle)]
#[unsafe(link_section = "classifier")]
pub extern "C" fn nf_enter(ctx: *mut c_void) -> i32 {
    if enter(ctx, hook_of(ctx)).is_err() {
        count(counter::UNPARSED);
    }
    NF_ACCEPT
}

/// After the nat table, in each hook it brackets.
#[unsafe(no_mangle)]
#[unsafe(link_section = "classifier")]
pub extern "C" fn nf_exit(ctx: *mut c_void) -> i32 {
    if exit(ctx, hook_of(ctx)).is_err() {
        count(counter::UNPARSED);
    }
    NF_ACCEPT
}

/// The netfilter hook the program runs in (`ctx->state->hook`, [`hook`]'s numbering): the
/// same two programs are attached to every hook they bracket.
#[inline(always)]
fn hook_of(ctx: *mut c_void) -> u8 {
    let state: u64 = load(ctx as u64, nf_patch::CTX_STATE);
    load(state, nf_patch::STATE_HOOK)
}

/// Reads a kernel value at `base + off`.
#[inline(always)]
pub(crate) fn read<T>(base: u64, off: u32) -> Result<T, ()> {
    // SAFETY: bpf_probe_read_kernel copes with any address.
    unsafe { bpf_probe_read_kernel((base + u64::from(off)) as *const T) }.map_err(|_| ())
}

/// A plain load of the member at placeholder offset `ph` ([`nf_patch`]) of the kernel
/// structure at `base`: the netfilter loader writes the member's real offset into the
/// instruction, the verifier checks the load against the kernel's BTF and the JIT makes it a
/// load that cannot fault (`BPF_PROBE_MEM`). No helper call. Netfilter programs only: `base`
/// must be a BTF pointer the verifier knows (the context, `skb`, `skb->dev`).
#[inline(always)]
fn load<T>(base: u64, ph: i16) -> T {
    // SAFETY: see above; the loader refuses a program whose placeholder it cannot patch.
    unsafe {
        core::ptr::read_volatile((base as *const u8).wrapping_offset(ph as isize).cast::<T>())
    }
}

/// The `struct sk_buff *` of a netfilter program's context (`struct bpf_nf_ctx`), as the
/// trusted BTF pointer the typed loads need.
#[inline(always)]
fn skb_of(ctx: *mut c_void) -> u64 {
    load(ctx as u64, nf_patch::CTX_SKB)
}

/// How many of a packet's `len` bytes are linear (`data_len` are in paged fragments), capped
/// at the window; `Err` for none.
#[inline(always)]
fn window_cap(len: u32, data_len: u32) -> Result<u32, ()> {
    let linear = len.saturating_sub(data_len);
    let cap = if linear > PKT_WINDOW as u32 {
        PKT_WINDOW as u32
    } else {
        linear
    };
    if cap == 0 {
        return Err(());
    }
    Ok(cap)
}

/// Where a packet's linear data is (`skb->data` must point at the IP header, as it does in the
/// netfilter hooks and in `nf_nat_manip_pkt`) and how many bytes it has, capped at the window.
/// By probe reads: for the `nat_*` probes, whose `skb` is a plain number.
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

/// A netfilter program's packet: where its linear data is, how many bytes of it to read
/// ([`window_cap`]) and `skb->len`, by typed loads.
#[derive(Clone, Copy)]
struct Linear {
    data: u64,
    cap: u32,
    len: u32,
}

#[inline(always)]
fn linear_nf(skb: u64) -> Result<Linear, ()> {
    let len: u32 = load(skb, nf_patch::SKB_LEN);
    let data_len: u32 = load(skb, nf_patch::SKB_DATA_LEN);
    let data: u64 = load(skb, nf_patch::SKB_DATA);
    Ok(Linear {
        data,
        cap: window_cap(len, data_len)?,
        len,
    })
}

/// Parses the packet's L3 and L4 headers from its linear data into the NAT programs' scratch.
#[inline(always)]
pub(crate) fn parse_skb(skb: u64, off: &KernelOffsets) -> Result<&'static parse::Parsed, ()> {
    let (data, cap) = linear_of(skb, off)?;
    parse_linear(data, cap)
}

/// Copies the packet's `cap` linear bytes by a probe read and parses them.
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

/// `bpf_rdonly_cast(const void *obj, u32 btf_id)` (kernel/bpf/helpers.c, v6.2): the verifier
/// inlines it as a register move and types the result as an untrusted pointer to the struct
/// `btf_id` names, which the program may load from (`BPF_PROBE_MEM`).
type RdonlyCast = unsafe extern "C" fn(u64, u32) -> u64;

/// `addr` as a read-only pointer to the vmlinux struct of type placeholder `ty`
/// ([`nf_patch`]). Netfilter programs only: the loader turns the placeholder helper call into
/// the kfunc call and the placeholder into the struct's BTF id.
#[inline(always)]
fn rdonly_cast(addr: u64, ty: i32) -> u64 {
    // SAFETY: the loader rewrites this call of a placeholder helper id into a kfunc call that
    // only re-types its argument (and refuses the program if it cannot).
    unsafe {
        let f = core::mem::transmute::<usize, RdonlyCast>(nf_patch::RDONLY_CAST as usize);
        f(addr, ty as u32)
    }
}

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

/// What the packet's conntrack entry says about it, before the packet is read.
enum Conntrack {
    /// NAT cannot make this packet a reported one: skip it.
    Skip,
    /// Read the packet and time the step.
    Time,
    /// The entry cannot answer: the packet decides ([`worth_timing`]).
    Packet,
}

/// `IPS_SRC_NAT` and `IPS_DST_NAT` (`enum ip_conntrack_status`,
/// include/uapi/linux/netfilter/nf_conntrack_common.h, v6.4): the entry's binding changes the
/// source (destination) of its original direction.
const IPS_SRC_NAT: u64 = 1 << 4;
const IPS_DST_NAT: u64 = 1 << 5;
/// `IPS_SRC_NAT_DONE` and `IPS_DST_NAT_DONE` (same enum): the entry's NAT binding for that
/// manipulation is set up.
const IPS_SRC_NAT_DONE: u64 = 1 << 7;
const IPS_DST_NAT_DONE: u64 = 1 << 8;
/// The hooks whose NAT manipulation is the destination's, one bit per [`hook`] number.
const DST_HOOKS: u64 = (1 << hook::PRE_ROUTING) | (1 << hook::LOCAL_OUT);
const _: () = assert!(
    IPS_DST_NAT == IPS_SRC_NAT << 1
        && IPS_DST_NAT_DONE == IPS_SRC_NAT_DONE << 1
        && CT_ESTABLISHED == 0
        && CT_ESTABLISHED_REPLY == 3
        && ct::NEW == 2
        && CT_RELATED == 1
        && CT_RELATED_REPLY == 4
);
/// `AF_INET`, as `nf_conntrack_man.l3num` holds it.
const AF_INET: u16 = 2;
/// `IP_CT_RELATED` and `IP_CT_RELATED_REPLY`.
const CT_RELATED: u64 = ct::RELATED as u64;
const CT_RELATED_REPLY: u64 = (ct::RELATED + ct::IS_REPLY) as u64;

/// Decides from the packet's conntrack entry (`skb->_nfct`), without reading the packet:
///
/// - No entry (`_nfct` 0, or `IP_CT_UNTRACKED`, whose pointer part is 0): `nf_nat_inet_fn`
///   returns at once, NAT cannot change the packet, so there is nothing to pair: skip.
/// - An entry whose binding for this hook's manipulation is set up (`IPS_DST_NAT_DONE` in
///   PRE_ROUTING and LOCAL_OUT, `IPS_SRC_NAT_DONE` in POST_ROUTING and LOCAL_IN), for a packet
///   that is not RELATED (an ICMP error, whose outer addresses need not be the entry's): no
///   rule runs (`nf_nat_inet_fn`, net/netfilter/nf_nat_core.c, v6.4), `nf_nat_packet` only
///   applies the binding. It changes the packet only when the entry's status has the bit for
///   this manipulation and direction (`IPS_DST_NAT` for a destination manipulation of the
///   original direction, `IPS_SRC_NAT` of the reply direction, and the other way round for a
///   source manipulation). Without it the packet leaves NAT as it came, which is never
///   reported ([`should_report`]): skip.
/// - Such an IPv4 entry whose binding changes the packet: the packet is rewritten into the
///   addresses of the entry's other direction (`nf_nat_manip_pkt` with the inverted reply or
///   original tuple). So the packet before and after NAT carries only the four addresses of
///   the entry's two tuples. When none of them is tracked, it can be reported only by
///   `--trace-all` or by a followed flow ([`should_report`]). A followed flow need not hold a
///   tracked address (a flow followed through an earlier SNAT carries the node's address, and
///   a later NAT step in another namespace has an entry of that flow only), but a flow that
///   matches the packet before or after NAT holds only the entry's addresses; looking the
///   entry's tuples up in the flow table would cost more than reading the packet, so the
///   check is on hashes noted before each flow is inserted (`track_flow`): when no flow is
///   followed (`FLOWS_PRESENT` unset), or none of the four addresses is noted in
///   `FLOW_ADDRS`, skip; then for TCP and UDP, when neither of the entry's two tuples
///   (addresses and ports) has its `FLOW_TUPLES` slot set, skip (the packet before NAT is one
///   of them, after NAT the reverse of the other, and a flow's two directions are noted
///   together). Other protocols' entries hold no ports a `Tuple` has (ICMP's type and code):
///   timed. No false negatives, some false positives. With a tracked address, or
///   `--trace-all`, it is read and timed: this also times an established connection that NAT
///   rewrites into a traced pod's packet (DNAT to the pod).
/// - Anything else (the first packet of a connection, RELATED, IPv6, a kernel whose vmlinux
///   BTF has no `struct nf_conn`, where the loader makes every `CT_*` load 0, an address set
///   the IPv4 set cannot answer): the packet decides.
#[inline(always)]
fn conntrack(nfct: u64, hook_num: u8) -> Conntrack {
    let ct = nfct & !NFCT_INFOMASK;
    if ct == 0 {
        return Conntrack::Skip;
    }
    let ctinfo = nfct & NFCT_INFOMASK;
    if ctinfo == CT_RELATED || ctinfo == CT_RELATED_REPLY {
        return Conntrack::Packet;
    }
    // Without branches (the hook is read at run time, and every branch on it would be one
    // more path for the verifier): `dst` is 1 in a destination-manipulating hook, `reply` 1
    // for a packet of the reply direction (`ctinfo` ESTABLISHED_REPLY or NEW_REPLY, 3 or 5;
    // ESTABLISHED and NEW are 0 and 2, RELATED ones returned above), and each `IPS_DST_*` bit
    // is the `IPS_SRC_*` bit shifted by one.
    let dst = (DST_HOOKS >> (hook_num & 7)) & 1;
    let reply = ((ctinfo + 5) >> 3) & 1;
    let done = IPS_SRC_NAT_DONE << dst;
    // The reply direction is rewritten by the other half of the binding.
    let changes = IPS_SRC_NAT << (dst ^ reply);
    let c = rdonly_cast(ct, nf_patch::TYPE_NF_CONN);
    let status: u64 = load(c, nf_patch::CT_STATUS);
    if status & done == 0 {
        return Conntrack::Packet;
    }
    if status & changes == 0 {
        return Conntrack::Skip;
    }
    if load::<u16>(c, nf_patch::CT_ORIG_L3NUM) != AF_INET {
        return Conntrack::Packet;
    }
    if trace_all() {
        return Conntrack::Time;
    }
    let Some(set) = v4_set() else {
        return Conntrack::Packet;
    };
    let (a, b): (u32, u32) = (
        load(c, nf_patch::CT_ORIG_SRC),
        load(c, nf_patch::CT_ORIG_DST),
    );
    let (x, y): (u32, u32) = (
        load(c, nf_patch::CT_REPLY_SRC),
        load(c, nf_patch::CT_REPLY_DST),
    );
    if v4_tracked(set, a, b) || v4_tracked(set, x, y) {
        return Conntrack::Time;
    }
    if !flows_present()
        || !(flow_addr_maybe(a) || flow_addr_maybe(b) || flow_addr_maybe(x) || flow_addr_maybe(y))
    {
        return Conntrack::Skip;
    }
    // An address is in a followed flow (the node's address, for instance, in every followed
    // masqueraded flow): for TCP and UDP, the ports tell.
    let proto: u8 = load(c, nf_patch::CT_PROTO);
    if proto == PROTO_TCP || proto == PROTO_UDP {
        // The ports as a `Tuple` holds them (host order).
        let port = |ph| u16::from_be(load::<u16>(c, ph));
        let followed = flow_v4_maybe(
            a,
            b,
            port(nf_patch::CT_ORIG_SPORT),
            port(nf_patch::CT_ORIG_DPORT),
        ) || flow_v4_maybe(
            x,
            y,
            port(nf_patch::CT_REPLY_SPORT),
            port(nf_patch::CT_REPLY_DPORT),
        );
        return if followed {
            Conntrack::Time
        } else {
            Conntrack::Skip
        };
    }
    Conntrack::Time
}

/// `IP_CT_ESTABLISHED` and `IP_CT_ESTABLISHED_REPLY` (`enum ip_conntrack_info`).
const CT_ESTABLISHED: u64 = ct::ESTABLISHED as u64;
const CT_ESTABLISHED_REPLY: u64 = ct::IS_REPLY as u64;

/// Whether the enter program reads the clock for a packet its conntrack entry could not decide
/// ([`Conntrack::Packet`]; 0 in the pending slot: not timed). The clock is skipped only for a
/// packet of an established connection (`ctinfo` ESTABLISHED or ESTABLISHED_REPLY: NAT
/// applies the connection's binding, no rules run) whose addresses the IPv4 set says are not
/// tracked, while no flow is followed (`FLOWS_PRESENT` unset: a flow-table lookup would cost
/// more than the clock). Such a packet is reported only when NAT rewrites it into a traced
/// pod's packet (DNAT to the pod, the reverse translation of a reply to it): a connection
/// established before pktrace started, on a kernel where the entry could not answer (no
/// `struct nf_conn` in vmlinux BTF). Its event carries `NAT_UNTIMED` (`latency_ns` null) and
/// the report follows its flow, so from then on every packet is timed. New and related
/// packets, `--trace-all`, IPv6 and address sets the IPv4 set cannot answer are always timed.
#[inline(always)]
fn worth_timing(nfct: u64, before: &Tuple) -> bool {
    let ctinfo = nfct & NFCT_INFOMASK;
    if (ctinfo != CT_ESTABLISHED && ctinfo != CT_ESTABLISHED_REPLY)
        || trace_all()
        || flows_present()
        || before.family != FAMILY_IPV4
    {
        return true;
    }
    let Some(set) = v4_set() else {
        return true;
    };
    v4_tracked(set, word4(&before.saddr), word4(&before.daddr))
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
    // Most packets are not rewritten, or not tracked: decide on the tuples alone.
    if after.tuple == *before {
        return Ok(());
    }
    let Some(follow) = follow_of(before, &after.tuple) else {
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
    follow.apply(before, &after.tuple);
    let nfct: u64 = load(skb, nf_patch::SKB_NFCT);
    let dev: u64 = load(skb, nf_patch::SKB_DEV);
    let m = Meta {
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
        len: linear.len,
        mark: load(skb, nf_patch::SKB_MARK),
    };
    let rewrite = Rewrite {
        skb,
        hook: hook_num,
        flags,
        now,
        nat_ns,
        before,
        after,
    };
    first::claim(&rewrite);
    emit_step(&rewrite, &m);
    Ok(())
}

/// Which flows a reported NAT step follows ([`follow_of`]).
struct Follow {
    before: bool,
    after: bool,
}

impl Follow {
    /// Follows the flows under their new addresses, in both directions, as
    /// [`report_checked`] does.
    #[inline(always)]
    fn apply(&self, before: &Tuple, after: &Tuple) {
        if self.after {
            track_flow(after);
        }
        if self.before {
            track_flow(before);
        }
    }
}

/// [`should_report`] for a packet NAT changed, and which of its tuples [`report_checked`]
/// would follow, asking each question once: `None` when the step is not reported. With
/// `--trace-all` nothing is followed (`track_flow` returns at once); otherwise a tuple without
/// a traced pod's address is followed.
#[inline(always)]
fn follow_of(before: &Tuple, after: &Tuple) -> Option<Follow> {
    if trace_all() {
        return Some(Follow {
            before: false,
            after: false,
        });
    }
    let (tb, ta) = (has_tracked_addr(before), has_tracked_addr(after));
    if tb || ta || flow_followed(before) || flow_followed(after) {
        return Some(Follow {
            before: !tb,
            after: !ta,
        });
    }
    None
}

/// Writes the members every NAT record layout shares ([`NatEventV4`], [`Event`]) from a step
/// and its [`Meta`].
macro_rules! nat_header {
    ($ev:ident, $r:ident, $m:ident) => {
        $ev.kind = kind::NAT;
        $ev.hook = $r.hook;
        $ev.ct_info = $m.ct_info;
        $ev.flags = $r.after.flags | $r.flags;
        $ev.ifindex = $m.ifindex;
        $ev.ktime_ns = $r.now;
        $ev.skb = $r.skb;
        $ev.len = $m.len;
        $ev.mark = $m.mark;
        $ev.nat_ns = $r.nat_ns;
        $ev.fp = $r.after.fp;
    };
}

/// The event of a step: the compact record when the packet is IPv4 before and after it, else
/// the full [`Event`].
#[inline(always)]
fn emit_step(r: &Rewrite<'_>, m: &Meta) {
    if r.before.family == FAMILY_IPV4 && r.after.tuple.family == FAMILY_IPV4 {
        emit_v4(r, m);
    } else {
        emit_event(r, m);
    }
}

/// The event of a step whose packet is IPv4 before and after it, as the compact record.
#[inline(always)]
fn emit_v4(r: &Rewrite<'_>, m: &Meta) {
    let (b, a) = (r.before, &r.after.tuple);
    emit(|ev: &mut NatEventV4| {
        nat_header!(ev, r, m);
        ev.saddr = [a.saddr[0], a.saddr[1], a.saddr[2], a.saddr[3]];
        ev.daddr = [a.daddr[0], a.daddr[1], a.daddr[2], a.daddr[3]];
        ev.sport = a.sport;
        ev.dport = a.dport;
        ev.proto = a.proto;
        ev.orig_proto = b.proto;
        ev.orig_saddr = [b.saddr[0], b.saddr[1], b.saddr[2], b.saddr[3]];
        ev.orig_daddr = [b.daddr[0], b.daddr[1], b.daddr[2], b.daddr[3]];
        ev.orig_sport = b.sport;
        ev.orig_dport = b.dport;
    });
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

/// What an event says about the packet besides its headers, read only when it is emitted.
pub(crate) struct Meta {
    /// [`ct`] value.
    pub ct_info: u8,
    pub ifindex: u32,
    pub len: u32,
    pub mark: u32,
}

/// Shared end of the `nat_*` probe pairs: when the packet changed and its flow is tracked,
/// follows the flow under its new addresses (both directions) and emits the NAT event.
/// `ct_info` is only asked for when the event is emitted; the rest is read by probe reads.
#[inline(always)]
pub(crate) fn report(r: &Rewrite<'_>, off: &KernelOffsets, ct_info: impl FnOnce() -> u8) {
    if !should_report(r.before, &r.after.tuple) {
        return;
    }
    let skb = r.skb;
    report_checked(r, || {
        let ct_info = ct_info();
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
            len: read(skb, off.skb_len).unwrap_or(0),
            mark: read(skb, off.skb_mark).unwrap_or(0),
        }
    });
}

/// True when NAT changed the packet and its flow is tracked on either side.
#[inline(always)]
fn should_report(before: &Tuple, after: &Tuple) -> bool {
    *after != *before && (is_tracked(before) || is_tracked(after))
}

/// Follows the flow and emits the event once [`should_report`] said yes; `meta` is read after
/// the flow is followed, as before.
#[inline(always)]
fn report_checked(r: &Rewrite<'_>, meta: impl FnOnce() -> Meta) {
    let (before, after) = (r.before, r.after);
    // Keep following the flow under its new addresses, in both directions.
    if !has_tracked_addr(&after.tuple) {
        track_flow(&after.tuple);
    }
    if !has_tracked_addr(before) {
        track_flow(before);
    }
    let m = meta();
    first::claim(r);
    emit_step(r, &m);
}

/// The event of a step as the full [`Event`].
#[inline(always)]
fn emit_event(r: &Rewrite<'_>, m: &Meta) {
    emit(|ev: &mut Event| {
        nat_header!(ev, r, m);
        ev.tuple = r.after.tuple;
        ev.orig = *r.before;
    });
}
