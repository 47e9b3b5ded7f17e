//! Drop sites named by the kernel: before the first drop record of a location on a CPU, the
//! drop program writes a [`SiteRecord`] with the kernel's own name for it (`bpf_snprintf`'s
//! `%ps`), so user space names drops without a pass over `/proc/kallsyms` per new location.
//!
//! Contract: only when user space set `SITE_NAMES` (it does when the kernel has
//! `bpf_snprintf`, 5.13+); otherwise the branch is dead code to the verifier, which neither
//! checks the helper call nor keeps it, so the program loads on older kernels too. A per-CPU
//! direct-mapped cache of [`SITE_SLOTS`] locations remembers the ones named; a slot is set once
//! the record was staged or reserved (a record written alone and lost to a full ring, counted
//! like any, is written again at the location's next drop; a staged one lost with its batch
//! leaves the location to user space's own lookup). The record is staged just before its
//! drop's record on the same CPU, so the ring holds it first.
//!
//! # Minimum kernel version
//! 5.13 for the naming (`bpf_snprintf`); nothing on older kernels.

use aya_ebpf::{helpers::generated::bpf_snprintf, macros::map, maps::PerCpuArray};
use tracer_common::{SITE_NAME_MAX, SITE_SLOTS, SiteRecord, kind, site_slot};

use crate::{emit::emit, maps::site_names};

/// The format `bpf_snprintf` writes a location with: the symbol without its offset, and
/// ` [module]` for a module's. In `.rodata`, which the loader freezes read-only: the helper
/// takes its format only from such a map (`ARG_PTR_TO_CONST_STR`) and checks it at load.
#[unsafe(no_mangle)]
static SITE_FORMAT: [u8; 4] = *b"%ps\0";

/// The locations named on each CPU, one per [`site_slot`].
#[map]
static SITES_NAMED: PerCpuArray<u64> = PerCpuArray::with_max_entries(SITE_SLOTS, 0);

/// Writes the kernel's name for `location` unless this CPU already did (see the module).
#[inline(always)]
pub fn name_once(location: u64) {
    if !site_names() || location == 0 {
        return;
    }
    let Some(named) = SITES_NAMED.get_ptr_mut(site_slot(location)) else {
        return;
    };
    // SAFETY: per-CPU slot, no concurrent writer on this CPU while the program runs.
    if unsafe { *named } == location {
        return;
    }
    let mut args = [location];
    let mut wrote = false;
    // Staged like the drop record after it (`bpf_snprintf` writes the name in place): a flush
    // here would part the packet's earlier steps from its drop, a batch apart.
    let reserved = emit(|r: &mut SiteRecord| {
        r.head.kind = kind::SITE;
        r.location = location;
        // SAFETY: `name` is SITE_NAME_MAX writable bytes, the format a NUL-terminated string
        // in a frozen read-only map, `args` one u64 for its one conversion.
        let len = unsafe {
            bpf_snprintf(
                r.name.as_mut_ptr().cast(),
                SITE_NAME_MAX as u32,
                SITE_FORMAT.as_ptr().cast(),
                args.as_mut_ptr(),
                8,
            )
        };
        r.len = len as i32;
        wrote = len > 0;
    });
    if reserved && wrote {
        // SAFETY: as above.
        unsafe { *named = location };
    }
}
