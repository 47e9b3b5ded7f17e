//! Batches: each CPU stages its records in a per-CPU buffer and writes them to the ring as one
//! record ([`tracer_common::batch`]) once they fill `BATCH_BYTES`, so that the ring's
//! reservation (its lock, positions and fill query: most of a record's cost under a stream) is
//! paid once per batch.
//!
//! Contract:
//! - A CPU's records keep their order: every record a program of this CPU emits goes through
//!   its staging ([`stage`]), and the records that are not staged (`-w` frames) are written
//!   after the staged ones ([`flush`] first).
//! - Nothing stays staged for long: user space runs [`flush_staged`] on each CPU whose
//!   `BATCHES_BEGUN` counter is ahead of its `BATCHES_ENDED` and that ended no batch since its
//!   last look (`BPF_PROG_TEST_RUN` on that CPU), on its drain timer; before it closes idle
//!   journeys and at the end of a session, on every CPU whose `BATCHES_BEGUN` is ahead,
//!   quiet or not. With `BATCH_BYTES` 0, the default, nothing is staged: user space sets it
//!   only when it does that.
//! - A program that finds the staging busy (it interrupted, or was preempting, another
//!   program of this CPU that is changing it) leaves it alone and writes its record to the
//!   ring directly: that record may then reach user space before records staged earlier
//!   on this CPU.
//! - A batch lost to a full ring is counted record by record in `RINGBUF_FULL`, and a written
//!   one in `EMITTED`, as records written alone are.

use aya_ebpf::{
    bindings::{BPF_RB_AVAIL_DATA, BPF_RB_FORCE_WAKEUP, BPF_RB_NO_WAKEUP},
    macros::{map, raw_tracepoint},
    maps::PerCpuArray,
    programs::RawTracePointContext,
};
use tracer_common::{
    RecordHeader,
    batch::{BATCH_BYTES_MAX, STAGED_RECORD_MAX},
    counter, kind,
};

use crate::maps::{EVENTS, add, count, wake_bytes};

/// Bytes of a CPU's staging buffer: a batch's bytes and the record that fills it.
const STAGE_BYTES: usize = BATCH_BYTES_MAX + STAGED_RECORD_MAX;

/// One CPU's staged records.
#[repr(C)]
pub struct Staging {
    /// 1 while a program of this CPU is changing the staging.
    busy: u32,
    /// Records staged.
    n: u32,
    /// Bytes of `recs` they fill.
    used: u64,
    /// The batch's header, written when the batch leaves: `recs` follows it, so the two are
    /// written to the ring as one.
    head: RecordHeader,
    recs: [u64; STAGE_BYTES / 8],
}

/// Each CPU's [`Staging`] (one entry per CPU).
#[map]
static STAGING: PerCpuArray<Staging> = PerCpuArray::with_max_entries(1, 0);

/// Stage records and write them out once they fill this many bytes (1 to
/// [`BATCH_BYTES_MAX`]); 0, the default, stages none. Set by user space at load time.
#[unsafe(no_mangle)]
static BATCH_BYTES: u32 = 0;

/// The fill at which a batch is written ([`BATCH_BYTES`], at most [`BATCH_BYTES_MAX`]).
#[inline(always)]
fn batch_bytes() -> usize {
    // SAFETY: a plain read of a static the loader patched before verification.
    let b = unsafe { core::ptr::read_volatile(&BATCH_BYTES) } as usize;
    if b > BATCH_BYTES_MAX {
        BATCH_BYTES_MAX
    } else {
        b
    }
}

/// This CPU's staging, marked busy, unless batching is off or another program of this CPU
/// is changing it. [`release`] clears the mark.
#[inline(always)]
fn claim() -> Option<&'static mut Staging> {
    let st = STAGING.get_ptr_mut(0)?;
    // SAFETY: per-CPU value; programs of this CPU reach it only through `claim`, and a
    // program that interrupts another runs to its end before the other goes on, so the
    // busy mark keeps any two of them from changing it at once.
    let st = unsafe { &mut *st };
    // SAFETY: a field of the per-CPU value above.
    if unsafe { core::ptr::read_volatile(&st.busy) } != 0 {
        return None;
    }
    // SAFETY: as above.
    unsafe { core::ptr::write_volatile(&mut st.busy, 1) };
    barrier();
    Some(st)
}

/// Clears [`claim`]'s mark once every change to the staging is made.
#[inline(always)]
fn release(st: &mut Staging) {
    barrier();
    // SAFETY: a field of this CPU's staging, which `st` holds.
    unsafe { core::ptr::write_volatile(&mut st.busy, 0) };
}

/// Keeps the compiler from moving memory accesses across it (it emits no instruction):
/// the staging's changes stay between the busy mark's set and clear. `compiler_fence` is no
/// use here: the BPF backend cannot lower it.
#[inline(always)]
fn barrier() {
    // SAFETY: an empty instruction sequence; without `nomem` the compiler takes it to read and
    // write any memory, which is the point.
    unsafe { core::arch::asm!("", options(nostack, preserves_flags)) };
}

/// Stages a record of type `T` (at most [`STAGED_RECORD_MAX`] bytes, a multiple of 8),
/// zeroed, then written in place by `fill`; writes the batch to the ring once it fills
/// [`BATCH_BYTES`]. Gives `fill` back, unused, when the record cannot be staged (batching off,
/// `T` too large, the staging busy): the caller then writes it to the ring itself.
#[inline(always)]
pub fn stage<T: 'static, F: FnOnce(&mut T)>(fill: F) -> Result<(), F> {
    let size = core::mem::size_of::<T>();
    let limit = batch_bytes();
    if size > STAGED_RECORD_MAX || limit == 0 {
        return Err(fill);
    }
    let Some(st) = claim() else {
        return Err(fill);
    };
    // Below BATCH_BYTES_MAX (a batch is written once it reaches `limit`) and a multiple of 8:
    // the mask changes nothing and tells the verifier so.
    // SAFETY: a field of this CPU's staging, claimed above.
    let off = unsafe { core::ptr::read_volatile(&st.used) } as usize & (BATCH_BYTES_MAX - 8);
    // SAFETY: as above.
    let n = unsafe { core::ptr::read_volatile(&st.n) };
    if n == 0 {
        count(counter::BATCHES_BEGUN);
    }
    // SAFETY: `off + size <= BATCH_BYTES_MAX - 8 + STAGED_RECORD_MAX`, within `recs`, and
    // 8-aligned (`recs` is, `off` is a multiple of 8); this CPU's staging, claimed above.
    let rec =
        unsafe { crate::zero::zeroed(st.recs.as_mut_ptr().cast::<u8>().add(off).cast::<T>()) };
    fill(rec);
    let (used, n) = (off + size, n + 1);
    let (used, n) = if used >= limit {
        write_out(st, used, n);
        (0, 0)
    } else {
        (used, n)
    };
    // SAFETY: fields of this CPU's staging, claimed above.
    unsafe {
        core::ptr::write_volatile(&mut st.used, used as u64);
        core::ptr::write_volatile(&mut st.n, n);
    }
    release(st);
    Ok(())
}

/// Writes this CPU's staged records to the ring now, unless another program of this CPU is
/// changing them: before a record that is not staged, so the ring holds it after them.
#[inline(always)]
pub fn flush() {
    if batch_bytes() == 0 {
        return;
    }
    let Some(st) = claim() else {
        return;
    };
    // SAFETY: fields of this CPU's staging, claimed above.
    let (used, n) = unsafe {
        (
            core::ptr::read_volatile(&st.used) as usize,
            core::ptr::read_volatile(&st.n),
        )
    };
    if n != 0 {
        write_out(
            st,
            if used > STAGE_BYTES {
                STAGE_BYTES
            } else {
                used
            },
            n,
        );
        // SAFETY: as above.
        unsafe {
            core::ptr::write_volatile(&mut st.used, 0);
            core::ptr::write_volatile(&mut st.n, 0);
        }
    }
    release(st);
}

/// Writes the batch (`n` records in the first `used` bytes, at most [`STAGE_BYTES`]) to the
/// ring as one record, waking the reader when it makes the ring's fill cross `WAKE_BYTES`
/// (see `crate::emit`), and counts its records as emitted or lost.
#[inline(always)]
fn write_out(st: &mut Staging, used: usize, n: u32) {
    st.head = RecordHeader {
        kind: kind::BATCH,
        ifindex: n,
        ..RecordHeader::default()
    };
    let len = core::mem::size_of::<RecordHeader>() + used;
    // SAFETY: `head` and `recs` are contiguous (`repr(C)`, both 8-aligned, `head` 16 bytes)
    // and `used <= STAGE_BYTES`, the size of `recs`.
    let data =
        unsafe { core::slice::from_raw_parts(core::ptr::from_ref(&st.head).cast::<u8>(), len) };
    let wake = wake_bytes();
    let avail = EVENTS.query(u64::from(BPF_RB_AVAIL_DATA));
    let flags = if avail < wake && avail + len as u64 + 8 >= wake {
        BPF_RB_FORCE_WAKEUP
    } else {
        BPF_RB_NO_WAKEUP
    };
    let written = EVENTS.output::<[u8]>(data, u64::from(flags)).is_ok();
    add(
        if written {
            counter::EMITTED
        } else {
            counter::RINGBUF_FULL
        },
        u64::from(n),
    );
    count(counter::BATCHES_ENDED);
}

/// Writes this CPU's staged records to the ring: run by user space on each CPU that holds
/// some (`BPF_PROG_TEST_RUN` with `BPF_F_TEST_RUN_ON_CPU`), never attached.
#[raw_tracepoint]
pub fn flush_staged(_ctx: RawTracePointContext) -> i32 {
    flush();
    0
}

const _: () = assert!(STAGE_BYTES % 8 == 0 && BATCH_BYTES_MAX.is_power_of_two());
