//! Fuzz targets for what pktrace reads from the outside world: packets (the parser the kernel
//! programs run, from tracer-common), the Azure CNI state file, `iptables-save` output and the
//! filter expression on the command line.
//!
//! The targets call tracer-user's library (`tracer_user::{rules, explain, drops, expr,
//! resolve, util}`), the very code `pktrace` runs; this crate adds only the properties they
//! check.
//! `.cargo/config.toml` sets `AYA_BUILD_SKIP`: the targets need no eBPF object.
//!
//! Run with `cargo xtask fuzz` (every target, briefly) or, in this directory,
//! `cargo +nightly fuzz run <target> corpus/<target> seeds/<target> -- -dict=dicts/<target>.dict`.

/// True when `s` holds nothing a terminal would act on: no control character (a line break
/// included: messages are one line), no bidi control or zero-width character (the Trojan
/// Source set of CVE-2021-42574, and friends). Stated here independently of `util::safe`,
/// whose output must satisfy it.
#[must_use]
pub fn terminal_safe(s: &str) -> bool {
    !s.chars().any(|c| c.is_control() || is_format(c))
}

/// Unicode format characters that change how the text around them is shown.
const fn is_format(c: char) -> bool {
    matches!(c, '\u{ad}' | '\u{61c}' | '\u{180e}' | '\u{200b}'..='\u{200f}'
        | '\u{2028}'..='\u{202e}' | '\u{2060}'..='\u{2069}' | '\u{feff}'
        | '\u{fff9}'..='\u{fffb}')
}
