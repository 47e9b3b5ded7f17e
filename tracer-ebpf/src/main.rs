//! pktrace's kernel programs.
//!
//! Words: a *tracked address* is an address of a traced pod, in the filter; a *followed flow*
//! is a tuple learnt from NAT (both directions), so that a packet stays traced after NAT
//! rewrote it; a *traced packet* is one the filter lets through (a tracked address, a followed
//! flow, or every packet with `--trace-all`), and gets an event.
//!
//! - [`tc`]: `tc_ingress` / `tc_egress` on every chosen interface: one event per traced packet,
//!   never changing its fate. tc ingress also notes the last untraced packet that may open a
//!   connection, for the NAT programs to claim when DNAT makes it a traced pod's ([`first`]).
//! - [`nat`]: `nf_enter` / `nf_exit`, BPF netfilter programs bracketing the nat table in each
//!   of the four hooks it runs in, and the `nat_*` fentry/fexit and kprobe/kretprobe pairs on
//!   `nf_nat_manip_pkt`. Both see a packet before and after NAT, time the step, follow the
//!   translated flows and emit one event per step, through one report path.
//! - [`drops`]: `drop_btf` / `drop_raw` / `drop_raw_old` on `skb:kfree_skb`: one event per
//!   traced packet the kernel drops, with its reason and where; `drops::site`: the kernel's
//!   own name for where, written once per location and CPU on kernels with `bpf_snprintf`.
//! - Shared by all: [`maps`] (every map and global user space knows by name), [`filter`]
//!   (tracked addresses, and whether a packet is traced), [`followed`] (followed flows: their
//!   hashes, per-CPU cache and table), [`emit`] (ring records) and [`stage`] (each CPU's
//!   records written to the ring in batches; `flush_staged`, run by user space, writes out
//!   what a CPU left staged).
//!
//! Everything else (joining, attribution, output) happens in user space.
#![no_std]
#![no_main]
// An empty `asm!` as a compiler barrier (`stage`): the BPF target's asm is still unstable.
#![feature(asm_experimental_arch)]

mod drops;
mod emit;
mod filter;
mod first;
mod followed;
mod maps;
mod nat;
mod stage;
mod tc;
mod zero;

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    // The verifier rejects any program that could reach a panic, so this is never called.
    loop {}
}

/// GPL-compatible licence: the NAT programs use `bpf_probe_read_kernel`, a GPL-only helper.
#[unsafe(link_section = "license")]
#[unsafe(no_mangle)]
static LICENSE: [u8; 13] = *b"Dual MIT/GPL\0";
