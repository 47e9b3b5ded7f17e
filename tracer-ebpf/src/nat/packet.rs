//! Reading a packet inside the NAT programs: how many linear bytes it has, and the copy and
//! full parse both program kinds fall back on.
//!
//! Contract: `skb->data` points at the IP header (as it does in the netfilter hooks and in
//! `nf_nat_manip_pkt`); at most `PKT_WINDOW` bytes, all linear, are copied into this CPU's NAT
//! scratch and parsed there.

use core::ffi::c_void;

use aya_ebpf::helpers::generated::bpf_probe_read_kernel as read_raw;
use tracer_common::{PKT_WINDOW, parse};

use crate::maps::{SCRATCH_NAT, scratch};

/// How many of a packet's `len` bytes are linear (`data_len` are in paged fragments), capped
/// at the window; `Err` for none.
#[inline(always)]
pub fn window_cap(len: u32, data_len: u32) -> Result<u32, ()> {
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

/// Copies the packet's `cap` linear bytes at `data` by a probe read and parses them.
#[inline(always)]
pub fn parse_linear(data: u64, cap: u32) -> Result<&'static parse::Parsed, ()> {
    let scratch = scratch(SCRATCH_NAT).ok_or(())?;
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
