//! Ring records: every event reaches user space through [`emit`], staged in this CPU's batch
//! ([`crate::stage`]) when it can be, else through [`emit_direct`].
//!
//! Contract: a record is one of the layouts of [`tracer_common::record`] (a header, then its
//! kind's payload; user space tells them apart by the header's kind and layout bit and checks
//! the length), zeroed before it is filled, submitted without a wakeup unless its
//! bytes made the ring's fill cross `WAKE_BYTES`; a full ring is counted (`RINGBUF_FULL`),
//! never silent.

use aya_ebpf::bindings::{BPF_RB_AVAIL_DATA, BPF_RB_FORCE_WAKEUP, BPF_RB_NO_WAKEUP};
use tracer_common::{NatRecord, NatRecordV4, TcFrameRecord, TcRecord, TcRecordV4, counter};

use crate::{
    maps::{EVENTS, count, wake_bytes},
    stage::stage,
};

/// Emits a record of type `T`, filled in place by `fill`: staged in this CPU's batch when
/// batching is on and the staging free ([`stage`]), else written to the ring alone
/// ([`emit_direct`]). True when it was staged or reserved (and so written, or counted lost
/// with its batch).
#[inline(always)]
pub fn emit<T: 'static>(fill: impl FnOnce(&mut T)) -> bool {
    match stage(fill) {
        Ok(()) => true,
        Err(fill) => emit_direct(fill),
    }
}

/// Reserves a record of type `T` (a [`TcRecordV4`], [`TcRecord`], [`TcFrameRecord`],
/// [`NatRecordV4`], [`NatRecord`], a drop record or a [`tracer_common::SiteRecord`]) in the
/// ring buffer, zeroes it, lets `fill` write it in place (no copy on the small BPF stack) and
/// submits it; a full buffer is counted as a loss. True when the record was reserved (and so
/// written). Records that are never staged (`-w` frames) come here after
/// [`crate::stage::flush`], so that the ring holds them after this CPU's staged records.
#[inline(always)]
pub fn emit_direct<T: 'static>(fill: impl FnOnce(&mut T)) -> bool {
    // Bytes the record takes in the ring buffer: the record header (`BPF_RINGBUF_HDR_SZ`) and
    // `T`, rounded up to 8.
    let record_bytes = (8 + core::mem::size_of::<T>() as u64).next_multiple_of(8);
    match EVENTS.reserve::<T>(0) {
        Some(mut entry) => {
            // SAFETY: the reservation is `size_of::<T>()` bytes, 8-byte aligned (every record
            // type is plain integers, a multiple of 8 bytes: asserted below).
            let ev = unsafe { crate::zero::zeroed(entry.as_mut_ptr()) };
            fill(ev);
            let wake = wake_bytes();
            // Edge-triggered: only the event whose record made the fill cross `wake` wakes the
            // reader. While the reader lags, the fill stays above it and every further event
            // would pay for a wakeup it does not need; the reader's drain timer covers the
            // rare crossing no event sees (producers on several CPUs reserving at once).
            let avail = EVENTS.query(u64::from(BPF_RB_AVAIL_DATA));
            let flags = if avail >= wake && avail < wake + record_bytes {
                BPF_RB_FORCE_WAKEUP
            } else {
                BPF_RB_NO_WAKEUP
            };
            entry.submit(u64::from(flags));
            count(counter::EMITTED);
            true
        }
        None => {
            count(counter::RINGBUF_FULL);
            false
        }
    }
}

const _: () = assert!(
    core::mem::size_of::<TcRecordV4>() % 8 == 0
        && core::mem::align_of::<TcRecordV4>() == 8
        && core::mem::size_of::<TcRecord>() % 8 == 0
        && core::mem::align_of::<TcRecord>() == 8
        && core::mem::size_of::<TcFrameRecord>() % 8 == 0
        && core::mem::align_of::<TcFrameRecord>() == 8
        && core::mem::size_of::<NatRecordV4>() % 8 == 0
        && core::mem::align_of::<NatRecordV4>() == 8
        && core::mem::size_of::<NatRecord>() % 8 == 0
        && core::mem::align_of::<NatRecord>() == 8
);
