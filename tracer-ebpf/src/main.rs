//! pktrace's kernel programs.
//!
//! - `tc_ingress` / `tc_egress`: tc classifiers (tcx or clsact) on every chosen interface. They
//!   copy the packet's first bytes, parse them with the shared parser, and emit one event per
//!   packet of a tracked pod address or flow. They never change a packet's fate. tc ingress
//!   also notes the last packet it let pass that may open a connection, for the NAT programs
//!   to claim when DNAT makes it a traced pod's (`first`).
//! - `nf_enter` / `nf_exit`: BPF netfilter programs bracketing the nat table in each of the
//!   four hooks it runs in (`nf_enter` just before its priority, `nf_exit` just after; one
//!   program per side, attached four times). The pair sees the packet before and after NAT and
//!   times the whole step (rule traversal and rewrite). They keep following a flow after NAT
//!   rewrote it by adding the translated tuples to `TRACKED_FLOWS`.
//! - `nat_*`: fentry/fexit and kprobe/kretprobe pairs on `nf_nat_manip_pkt`, the function that
//!   rewrites a packet: the same events as the netfilter pair, timing the rewrite itself.
//!
//! Everything else (joining, attribution, output) happens in user space.
#![no_std]
#![no_main]

mod emit;
mod first;
mod nat;
mod probe;
mod tc;

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
