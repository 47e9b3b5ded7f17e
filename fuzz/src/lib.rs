//! Fuzz targets for what pktrace reads from the outside world: packets (the parser the kernel
//! programs run, from tracer-common), the Azure CNI state file and `iptables-save` output.
//!
//! tracer-user is a binary crate; its pure modules are compiled into this library with
//! `#[path]` (no change to its layout), so the targets call the very code `pktrace` runs.
//! `output` needs only `config::Format` from the configuration, whose module pulls in the
//! whole CLI: [`config`] is a stand-in holding just that enum.
//!
//! Run with `cargo xtask fuzz` (every target, briefly) or, in this directory,
//! `cargo +nightly fuzz run <target> corpus/<target> seeds/<target> -- -dict=dicts/<target>.dict`.

// `rustfmt::skip`: formatting fuzz/ must not reach into tracer-user's files.
#[rustfmt::skip]
#[path = "../../tracer-user/src"]
#[allow(
    dead_code,
    unfulfilled_lint_expectations,
    reason = "only what the targets call is used"
)]
mod user {
    pub mod explain;
    pub mod journey;
    pub mod output;
    // Only the state file parser: the rest of `resolve` (crictl, the Kubernetes API) needs
    // processes and a network.
    #[path = "resolve/state_file.rs"]
    pub mod resolve;
    pub mod summary;
}

pub use user::{explain, journey, output, resolve, summary};

/// Stand-in for tracer-user's `config` module (which needs the CLI): the output format only.
pub mod config {
    /// How journeys are printed (`-o`).
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub enum Format {
        /// Text blocks for people.
        Text,
        /// JSON lines.
        Json,
    }
}

/// True when `s` holds nothing a terminal would act on: no control character (a line break
/// included: messages are one line), no bidi control or zero-width character (the Trojan
/// Source set of CVE-2021-42574, and friends). Stated here independently of `output::safe`,
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
