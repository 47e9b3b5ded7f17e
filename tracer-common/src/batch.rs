//! Batches: a CPU's records staged in a per-CPU buffer by the kernel programs and written to
//! the ring buffer several at a time, so that a ring reservation is paid once per batch rather
//! than once per record (BENCHMARKS.md, "Batching").
//!
//! Contract: a batch is one ring record, a [`RecordHeader`] of kind [`kind::BATCH`] whose
//! `ifindex` says how many records follow, then those records back to back, each a whole
//! record of the layout its own header names ([`record_len`]), in the order one CPU's
//! programs wrote them. A batch holds at most [`BATCH_BYTES_MAX`] bytes of records, each at
//! most [`STAGED_RECORD_MAX`] bytes: the larger `-w` frame records are never staged.
//! [`split`] hands the records out again.

use core::mem::size_of;

use crate::record::{
    DropRecord, DropRecordV4, NatRecord, NatRecordV4, RecordHeader, SiteRecord, TcFrameRecord,
    TcRecord, TcRecordV4, flag, kind,
};

/// Most bytes of records one batch holds (a power of two: the kernel programs mask the
/// staging offset with it).
pub const BATCH_BYTES_MAX: usize = 2048;

/// Most bytes of one staged record (the largest staged layout, [`NatRecord`], is 120).
pub const STAGED_RECORD_MAX: usize = 128;

/// The default fill at which a CPU writes its batch (`BATCH_BYTES`, set at load time): 42
/// IPv4 tc records, or about twelve DNATed TCP packets' tc and NAT records (BENCHMARKS.md
/// measures 2 KiB against 1 KiB).
pub const BATCH_BYTES_DEFAULT: u32 = 2048;

/// Bytes of the record whose header is `head`: its kind's layout, wide or not ([`flag::WIDE`],
/// [`flag::FRAME`]); `None` for a kind that has none (a batch, or an unknown kind).
#[must_use]
pub const fn record_len(head: &RecordHeader) -> Option<usize> {
    let wide = head.flags & flag::WIDE != 0;
    let frame = head.flags & flag::FRAME != 0;
    match (head.kind, wide, frame) {
        (kind::TC_INGRESS | kind::TC_EGRESS, _, true) => Some(size_of::<TcFrameRecord>()),
        (kind::TC_INGRESS | kind::TC_EGRESS, false, false) => Some(size_of::<TcRecordV4>()),
        (kind::TC_INGRESS | kind::TC_EGRESS, true, false) => Some(size_of::<TcRecord>()),
        (kind::NAT, false, _) => Some(size_of::<NatRecordV4>()),
        (kind::NAT, true, _) => Some(size_of::<NatRecord>()),
        (kind::DROP, false, _) => Some(size_of::<DropRecordV4>()),
        (kind::DROP, true, _) => Some(size_of::<DropRecord>()),
        (kind::SITE, _, _) => Some(size_of::<SiteRecord>()),
        _ => None,
    }
}

/// Hands `f` the records a ring record holds, in order: the records of a batch, else the
/// record itself. Returns how many records of a batch could not be handed out (a header of no
/// known layout, or one running past the batch's end, and every record after it; a batch
/// holding more or fewer records than its header says): a count for the collector's bad
/// records, never a silent loss.
pub fn split(bytes: &[u8], mut f: impl FnMut(&[u8])) -> u64 {
    let head_len = size_of::<RecordHeader>();
    if bytes.len() < head_len || bytes[0] != kind::BATCH {
        f(bytes);
        return 0;
    }
    let said = u64::from(u32::from_ne_bytes([bytes[4], bytes[5], bytes[6], bytes[7]]));
    let mut handed = 0u64;
    let mut pos = head_len;
    while pos + head_len <= bytes.len() {
        // SAFETY: `pos + head_len <= len`; the header is plain integers, read unaligned.
        let head: RecordHeader =
            unsafe { core::ptr::read_unaligned(bytes[pos..].as_ptr().cast::<RecordHeader>()) };
        let Some(len) = record_len(&head) else {
            break;
        };
        let Some(rec) = bytes.get(pos..pos + len) else {
            break;
        };
        f(rec);
        handed += 1;
        pos += len;
    }
    let unread = u64::from(pos < bytes.len());
    said.abs_diff(handed).max(unread)
}

#[cfg(test)]
mod tests;
