//! What the NAT programs keep or read of the kernel: the structure offsets read from its BTF
//! ([`KernelOffsets`]) and the packet pending between a nat hook's enter and exit programs
//! ([`PendingNat`]).

use core::mem::size_of;

use crate::Tuple;

/// A packet as it entered a nat hook (per-CPU, one slot per hook), until the hook's exit
/// program pairs it with the packet as it left.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct PendingNat {
    /// Kernel `struct sk_buff` address, to check the exit sees the same packet.
    pub skb: u64,
    /// `bpf_ktime_get_ns()` as the packet entered; 0: not timed, `u64::MAX`: skipped by its
    /// conntrack entry, the exit returns at once (see the netfilter programs).
    pub ktime_ns: u64,
    pub before: Tuple,
}
const _: () = assert!(size_of::<PendingNat>() == 56);

/// Kernel structure offsets the NAT programs need, read from the running kernel's BTF at load
/// time (the `OFFSETS` global). A zero offset for a field that cannot be at zero means unknown.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KernelOffsets {
    /// `struct bpf_nf_ctx`, `skb` member.
    pub nf_ctx_skb: u32,
    /// `struct sk_buff`: `len`, `data`, `_nfct`, `dev`.
    pub skb_len: u32,
    pub skb_data: u32,
    pub skb_nfct: u32,
    pub skb_dev: u32,
    /// `struct net_device`, `ifindex`.
    pub dev_ifindex: u32,
    /// `struct sk_buff`, `data_len` (bytes in paged fragments: `len - data_len` is linear).
    pub skb_data_len: u32,
    /// `struct sk_buff`, `head` (the buffer's start) and `network_header` (the IP header's
    /// offset from `head`, a `u16`): where the drop program finds the IP header wherever
    /// `data` points when the packet is freed.
    pub skb_head: u32,
    pub skb_network_header: u32,
}
const _: () = assert!(size_of::<KernelOffsets>() == 36);
