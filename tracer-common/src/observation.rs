//! What user space makes of a ring record: an [`Observation`] of one packet at one hook, decoded
//! straight from the record's bytes ([`decode`]) with only the fields someone reads.
//!
//! A record's header says its kind and, with [`flag::WIDE`], its layout; its length must be
//! exactly that layout's (the ring's record header gives the length the program reserved).
//! Anything else is a [`BadRecord`], which the collector counts: nothing is dropped silently.

use core::mem::size_of;

use crate::{
    FAMILY_IPV4, Fingerprint, Tuple,
    record::{
        DropRecord, DropRecordV4, FRAME_MAX, NatRecord, NatRecordV4, RecordHeader, SITE_NAME_MAX,
        SiteRecord, TcFrameRecord, TcRecord, TcRecordV4, ct, flag, hook, kind,
    },
};

/// The tc hook a packet was seen at.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TcHook {
    Ingress,
    Egress,
}

/// A packet seen by a tc program.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TcSeen {
    pub hook: TcHook,
    /// Bits of [`flag`] ([`flag::WIDE`] taken out).
    pub flags: u8,
    pub ifindex: u32,
    pub ktime_ns: u64,
    pub fp: Fingerprint,
    pub tuple: Tuple,
}

/// A NAT step seen by the NAT programs: the packet before and after it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NatSeen {
    /// The netfilter hook ([`hook`]) whose manipulation this was.
    pub hook: u8,
    /// Conntrack `ctinfo` ([`ct`]).
    pub ct_info: u8,
    /// Bits of [`flag`] ([`flag::WIDE`] taken out).
    pub flags: u8,
    /// After the step.
    pub ktime_ns: u64,
    /// Nanoseconds spent in the step; meaningful only when [`Self::latency_ns`] says so.
    pub nat_ns: u64,
    pub fp: Fingerprint,
    pub before: Tuple,
    pub after: Tuple,
}

impl NatSeen {
    /// True for the reverse translation of a reply packet (the reply direction of a conntrack
    /// entry).
    #[must_use]
    pub const fn is_reply(&self) -> bool {
        self.ct_info != ct::NONE && self.ct_info >= ct::IS_REPLY
    }

    /// True when the hook's manipulation rewrites the destination (the kernel's `HOOK2MANIP`:
    /// `PRE_ROUTING` and `LOCAL_OUT`; source in `POST_ROUTING` and `LOCAL_IN`,
    /// `net/netfilter/nf_nat_core.c`, v6.1).
    #[must_use]
    pub const fn manips_dst(&self) -> bool {
        matches!(self.hook, hook::PRE_ROUTING | hook::LOCAL_OUT)
    }

    /// Time spent in the step, `None` when the hook did not measure it.
    #[must_use]
    pub const fn latency_ns(&self) -> Option<u64> {
        if self.flags & flag::NAT_UNTIMED == 0 {
            Some(self.nat_ns)
        } else {
            None
        }
    }
}

/// A packet the kernel freed as a drop (`skb:kfree_skb`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DropSeen {
    /// The packet's device at the drop, 0 when it had none.
    pub ifindex: u32,
    pub ktime_ns: u64,
    pub fp: Fingerprint,
    pub tuple: Tuple,
    /// The kernel's `enum skb_drop_reason` value, or [`crate::DROP_REASON_UNKNOWN`].
    pub reason: u32,
    /// The kernel address the free was called from.
    pub location: u64,
}

/// The kernel's name for a drop location ([`SiteRecord`]): no packet, but what the drops of
/// that location that follow it are named by.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SiteSeen {
    /// The kernel address the free was called from ([`DropSeen::location`]).
    pub location: u64,
    text: [u8; SITE_NAME_MAX],
    /// Bytes of `text` that hold the whole name; 0 when the kernel cut it or gave none.
    len: u8,
    cut: bool,
}

impl SiteSeen {
    /// The record's name as the kernel wrote it (`func` or `func [module]`, or `0x…` for an
    /// address it has no symbol for); `None` when the kernel cut it or failed to write it.
    #[must_use]
    pub fn name(&self) -> Option<&[u8]> {
        (self.len > 0).then(|| &self.text[..usize::from(self.len)])
    }

    /// True when the name was longer than the record holds ([`SITE_NAME_MAX`] - 1 bytes).
    #[must_use]
    pub const fn is_cut(&self) -> bool {
        self.cut
    }

    fn of(r: &SiteRecord) -> Self {
        // `len` counts the NUL; a whole name is 1..SITE_NAME_MAX bytes before it.
        let whole = usize::try_from(r.len)
            .ok()
            .filter(|&n| (2..=SITE_NAME_MAX).contains(&n));
        let len = whole.map_or(0, |n| n - 1);
        // The name ends at its first NUL, whatever `len` says.
        let len = r.name[..len].iter().position(|&b| b == 0).unwrap_or(len);
        Self {
            location: r.location,
            text: r.name,
            len: u8::try_from(len).unwrap_or(0),
            cut: usize::try_from(r.len).is_ok_and(|n| n > SITE_NAME_MAX),
        }
    }
}

/// One packet at one hook, as user space reads it, or the name of a drop location.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Observation {
    Tc(TcSeen),
    Nat(NatSeen),
    Drop(DropSeen),
    Site(SiteSeen),
}

impl Observation {
    /// Kernel monotonic time of the observation; `None` for a site's name, which is no packet.
    #[must_use]
    pub const fn ktime_ns(&self) -> Option<u64> {
        match self {
            Self::Tc(t) => Some(t.ktime_ns),
            Self::Nat(n) => Some(n.ktime_ns),
            Self::Drop(d) => Some(d.ktime_ns),
            Self::Site(_) => None,
        }
    }

    /// The NAT-invariant fingerprint of the packet; `None` for a site's name.
    #[must_use]
    pub const fn fp(&self) -> Option<Fingerprint> {
        match self {
            Self::Tc(t) => Some(t.fp),
            Self::Nat(n) => Some(n.fp),
            Self::Drop(d) => Some(d.fp),
            Self::Site(_) => None,
        }
    }

    /// The packet as seen at this point (NAT: after the step); `None` for a site's name.
    #[must_use]
    pub const fn tuple(&self) -> Option<&Tuple> {
        match self {
            Self::Tc(t) => Some(&t.tuple),
            Self::Nat(n) => Some(&n.after),
            Self::Drop(d) => Some(&d.tuple),
            Self::Site(_) => None,
        }
    }

    /// The IPv4 identification of the packet (the fingerprint's `ip_id`); `None` for IPv6,
    /// where the fingerprint holds the flow label instead, and for a site's name.
    #[must_use]
    pub const fn ip_id(&self) -> Option<u32> {
        match (self.tuple(), self.fp()) {
            (Some(t), Some(fp)) if t.family == FAMILY_IPV4 => Some(fp.ip_id),
            _ => None,
        }
    }
}

/// Why a ring-buffer record is not an observation (user space counts these).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BadRecord {
    /// Its length is not the one of the layout its header names (or shorter than a header).
    Length(usize),
    /// Its `kind` is none of [`kind`].
    Kind(u8),
}

/// Layouts [`read`] may produce: `repr(C)` plain data, valid for every bit pattern.
trait Plain: Copy {}
impl Plain for RecordHeader {}
impl Plain for TcRecordV4 {}
impl Plain for TcRecord {}
impl Plain for TcFrameRecord {}
impl Plain for NatRecordV4 {}
impl Plain for NatRecord {}
impl Plain for DropRecordV4 {}
impl Plain for DropRecord {}
impl Plain for SiteRecord {}

/// Reads a `T` from the start of `bytes`, `None` when they are shorter.
#[inline]
fn read<T: Plain>(bytes: &[u8]) -> Option<T> {
    if bytes.len() < size_of::<T>() {
        return None;
    }
    // SAFETY: `T` is plain data valid for every bit pattern (`Plain`), the length was checked,
    // and `read_unaligned` copes with any alignment of the record in the ring.
    Some(unsafe { core::ptr::read_unaligned(bytes.as_ptr().cast::<T>()) })
}

/// Reads a whole record of layout `T`: `bytes` must be exactly as long.
#[inline]
fn whole<T: Plain>(bytes: &[u8]) -> Result<T, BadRecord> {
    if bytes.len() == size_of::<T>() {
        read(bytes).ok_or(BadRecord::Length(bytes.len()))
    } else {
        Err(BadRecord::Length(bytes.len()))
    }
}

/// The observation a ring record holds.
///
/// # Errors
/// [`BadRecord::Kind`] for a header of an unknown kind, [`BadRecord::Length`] for a record
/// shorter than a header or of another length than its layout's.
pub fn decode(bytes: &[u8]) -> Result<Observation, BadRecord> {
    let head: RecordHeader = read(bytes).ok_or(BadRecord::Length(bytes.len()))?;
    let wide = head.flags & flag::WIDE != 0;
    match head.kind {
        kind::TC_INGRESS | kind::TC_EGRESS => decode_tc(bytes, &head, wide).map(Observation::Tc),
        kind::NAT => decode_nat(bytes, &head, wide).map(Observation::Nat),
        kind::DROP => decode_drop(bytes, &head, wide).map(Observation::Drop),
        kind::SITE => whole(bytes).map(|r: SiteRecord| Observation::Site(SiteSeen::of(&r))),
        k => Err(BadRecord::Kind(k)),
    }
}

/// The frame a tc record carries with `-w` ([`TcFrameRecord`]): its first bytes as the hook
/// saw them, and its whole length there.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Frame<'a> {
    /// The captured bytes (at most [`FRAME_MAX`]; empty when the kernel's copy failed).
    pub bytes: &'a [u8],
    /// The frame's length at the hook.
    pub orig_len: u32,
}

/// The frame of a ring record that [`decode`] reads as a tc observation and that carries one
/// ([`flag::FRAME`]); `None` for any other record.
#[must_use]
pub fn frame(bytes: &[u8]) -> Option<Frame<'_>> {
    let head: RecordHeader = read(bytes)?;
    let tc = matches!(head.kind, kind::TC_INGRESS | kind::TC_EGRESS);
    if !tc || head.flags & flag::FRAME == 0 || bytes.len() != size_of::<TcFrameRecord>() {
        return None;
    }
    let at = size_of::<TcFrameRecord>() - FRAME_MAX;
    let word = |i: usize| u32::from_ne_bytes([bytes[i], bytes[i + 1], bytes[i + 2], bytes[i + 3]]);
    let (orig_len, cap_len) = (word(at - 8), word(at - 4));
    let cap = (cap_len as usize).min(FRAME_MAX);
    Some(Frame {
        bytes: &bytes[at..at + cap],
        orig_len,
    })
}

fn decode_tc(bytes: &[u8], head: &RecordHeader, wide: bool) -> Result<TcSeen, BadRecord> {
    let (fp, tuple) = if head.flags & flag::FRAME != 0 {
        let r: TcFrameRecord = whole(bytes)?;
        (r.fp, r.tuple)
    } else if wide {
        let r: TcRecord = whole(bytes)?;
        (r.fp, r.tuple)
    } else {
        let r: TcRecordV4 = whole(bytes)?;
        (r.fp, r.tuple.tuple())
    };
    Ok(TcSeen {
        hook: if head.kind == kind::TC_INGRESS {
            TcHook::Ingress
        } else {
            TcHook::Egress
        },
        flags: head.flags & !(flag::WIDE | flag::FRAME),
        ifindex: head.ifindex,
        ktime_ns: head.ktime_ns,
        fp,
        tuple,
    })
}

fn decode_nat(bytes: &[u8], head: &RecordHeader, wide: bool) -> Result<NatSeen, BadRecord> {
    let (nat_ns, fp, before, after) = if wide {
        let r: NatRecord = whole(bytes)?;
        (r.nat_ns, r.fp, r.before, r.after)
    } else {
        let r: NatRecordV4 = whole(bytes)?;
        (r.nat_ns, r.fp, r.before.tuple(), r.after.tuple())
    };
    Ok(NatSeen {
        hook: head.hook,
        ct_info: head.ct_info,
        flags: head.flags & !flag::WIDE,
        ktime_ns: head.ktime_ns,
        nat_ns,
        fp,
        before,
        after,
    })
}

fn decode_drop(bytes: &[u8], head: &RecordHeader, wide: bool) -> Result<DropSeen, BadRecord> {
    let (fp, tuple, reason, location) = if wide {
        let r: DropRecord = whole(bytes)?;
        (r.fp, r.tuple, r.reason, r.location)
    } else {
        let r: DropRecordV4 = whole(bytes)?;
        (r.fp, r.tuple.tuple(), r.reason, r.location)
    };
    Ok(DropSeen {
        ifindex: head.ifindex,
        ktime_ns: head.ktime_ns,
        fp,
        tuple,
        reason,
        location,
    })
}

#[cfg(test)]
mod tests;
