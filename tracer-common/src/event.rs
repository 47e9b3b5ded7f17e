//! The one event of one packet at one hook ([`Event`], 144 bytes) and the values of its
//! fields: [`kind`], [`hook`], [`flag`] bits and conntrack [`ct`] states.

use core::mem::size_of;

use crate::{Fingerprint, Tuple};

/// Kinds of [`Event`].
pub mod kind {
    /// tc ingress of an attached interface.
    pub const TC_INGRESS: u8 = 1;
    /// tc egress of an attached interface.
    pub const TC_EGRESS: u8 = 2;
    /// A NAT step: `orig` is the packet before it, `tuple` after.
    pub const NAT: u8 = 3;
}

/// Netfilter hook numbers (`enum nf_inet_hooks`, include/uapi/linux/netfilter.h, v6.1).
pub mod hook {
    pub const PRE_ROUTING: u8 = 0;
    pub const LOCAL_IN: u8 = 1;
    pub const FORWARD: u8 = 2;
    pub const LOCAL_OUT: u8 = 3;
    pub const POST_ROUTING: u8 = 4;
}

/// Bits of [`Event::flags`].
pub mod flag {
    /// IPv4 fragment (first or later); later fragments carry no ports.
    pub const FRAGMENT: u8 = 1;
    /// The L4 header did not fit in the captured bytes; ports and fingerprint are partial.
    pub const TRUNCATED: u8 = 2;
    /// NAT event whose latency covers the whole nat hook (rule traversal and rewrite).
    pub const NAT_HOOK_TIMED: u8 = 4;
    /// NAT event whose latency was not measured.
    pub const NAT_UNTIMED: u8 = 8;
    /// tc ingress event of a connection's first packet, which tc ingress noted without knowing
    /// it traced and the NAT program emitted when DNAT made it a traced pod's
    /// ([`crate::parse::first`]): the hook saw the packet at or before `ktime_ns` (the start of
    /// the NAT step), not at it.
    pub const TC_CLAIMED: u8 = 16;
}

/// Conntrack `ctinfo` values (`enum ip_conntrack_info`, include/uapi/linux/netfilter/
/// nf_conntrack_common.h, v6.1); values `>= CT_IS_REPLY` belong to the reply direction.
pub mod ct {
    pub const ESTABLISHED: u8 = 0;
    pub const RELATED: u8 = 1;
    pub const NEW: u8 = 2;
    pub const IS_REPLY: u8 = 3;
    /// No conntrack entry attached to the packet.
    pub const NONE: u8 = 0xff;
}

/// One observation of one packet, as the kernel writes it into the ring buffer.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Event {
    /// One of [`kind`].
    pub kind: u8,
    /// NAT events: the netfilter hook ([`hook`]); tc events: 0.
    pub hook: u8,
    /// NAT events: conntrack `ctinfo` ([`ct`]); tc events: [`ct::NONE`].
    pub ct_info: u8,
    /// Bits of [`flag`].
    pub flags: u8,
    /// Interface index (in the namespace the program is attached in), 0 when unknown.
    pub ifindex: u32,
    /// `bpf_ktime_get_ns()` when the event was taken (NAT: after the step).
    pub ktime_ns: u64,
    /// Kernel `struct sk_buff` address, 0 when the hook cannot see it.
    pub skb: u64,
    /// Network namespace cookie, 0 when unknown.
    pub netns: u64,
    /// Packet length in bytes (tc: from L2, NAT: from L3).
    pub len: u32,
    /// `skb->mark` when the event was taken.
    pub mark: u32,
    /// NAT events: nanoseconds spent in the NAT step, 0 when not measured.
    pub nat_ns: u64,
    pub fp: Fingerprint,
    /// The packet as seen at this point (NAT: after the step).
    pub tuple: Tuple,
    /// NAT events: the packet before the step; zero otherwise.
    pub orig: Tuple,
}
const _: () = assert!(size_of::<Event>() == 144);

impl Event {
    /// Reads an event from ring-buffer bytes; `None` when the record is too short.
    #[must_use]
    pub fn from_bytes(bytes: &[u8]) -> Option<Self> {
        if bytes.len() < size_of::<Self>() {
            return None;
        }
        // SAFETY: `Event` is `repr(C)` plain data, valid for every bit pattern, and the length
        // was checked; `read_unaligned` copes with any alignment of the record.
        Some(unsafe { core::ptr::read_unaligned(bytes.as_ptr().cast::<Self>()) })
    }

    /// True for events of the reply direction of a conntrack entry.
    #[must_use]
    pub const fn is_reply(&self) -> bool {
        self.ct_info != ct::NONE && self.ct_info >= ct::IS_REPLY
    }
}
