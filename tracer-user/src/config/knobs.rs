//! Hidden knobs: environment variables read once at start-up ([`Knobs::from_env`]) and passed
//! down from there, so that no module reads the environment while tracing. They are for tests
//! (small tables to overrun on purpose, a forced tc mechanism, a kernel without BTF, drop
//! locations the kernel alone names), not
//! part of the CLI contract.

use std::{ffi::OsString, path::PathBuf};

use crate::kernel::btf::VMLINUX_BTF;

/// The ring buffer's size in bytes (a power of two, a multiple of the page size). Unset: the
/// object's 4 MiB.
pub const RING_BYTES_ENV: &str = "PKTRACE_RING_BYTES";
/// How many entries the followed-flows table (`FOLLOWED_FLOWS`) holds. Unset: the object's
/// 65,536.
pub const FLOW_TABLE_ENV: &str = "PKTRACE_FLOW_TABLE";
/// Set to `1` to use clsact filters on every interface, even where tcx links exist.
pub const FORCE_CLSACT_ENV: &str = "PKTRACE_FORCE_CLSACT";
/// Set to `1` to use tcx links on every interface, however many (where the kernel has tcx).
pub const FORCE_TCX_ENV: &str = "PKTRACE_FORCE_TCX";
/// Where the kernel's BTF is looked for (a missing path makes pktrace run as it would on a
/// kernel without BTF).
pub const BTF_PATH_ENV: &str = "PKTRACE_BTF_PATH";
/// Where the kernel's symbols are read to name drop locations the kernel did not name itself
/// (an empty file makes every such lookup find nothing, as with hidden addresses).
pub const KALLSYMS_PATH_ENV: &str = "PKTRACE_KALLSYMS_PATH";
/// `/proc/kallsyms`, the default of [`KALLSYMS_PATH_ENV`].
pub const KALLSYMS: &str = "/proc/kallsyms";
/// The most journeys the join table keeps open.
pub const JOIN_MAX_ENV: &str = "PKTRACE_JOIN_MAX";
/// The most bytes the join table's open journeys hold. Unset: 8 MiB.
pub const JOIN_BYTES_ENV: &str = "PKTRACE_JOIN_BYTES";
/// The fill at which a CPU writes its staged records as one batch (at most
/// `tracer_common::batch::BATCH_BYTES_MAX`); `0` writes every record alone. Unset:
/// `tracer_common::batch::BATCH_BYTES_DEFAULT`.
pub const BATCH_BYTES_ENV: &str = "PKTRACE_BATCH_BYTES";

/// The hidden knobs, read; unset or unreadable values are `None` (the built-in default).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Knobs {
    /// [`RING_BYTES_ENV`].
    pub ring_bytes: Option<u32>,
    /// [`FLOW_TABLE_ENV`], at least 1.
    pub flow_table: Option<u32>,
    /// [`FORCE_CLSACT_ENV`] is `1`.
    pub force_clsact: bool,
    /// [`FORCE_TCX_ENV`] is `1`.
    pub force_tcx: bool,
    /// [`BTF_PATH_ENV`] when set and not empty, else `/sys/kernel/btf/vmlinux`.
    pub btf_path: PathBuf,
    /// [`KALLSYMS_PATH_ENV`] when set and not empty, else [`KALLSYMS`].
    pub kallsyms_path: PathBuf,
    /// [`JOIN_MAX_ENV`], at least 1.
    pub join_max: Option<usize>,
    /// [`JOIN_BYTES_ENV`].
    pub join_bytes: Option<usize>,
    /// [`BATCH_BYTES_ENV`], at most `tracer_common::batch::BATCH_BYTES_MAX`.
    pub batch_bytes: Option<u32>,
}

impl Default for Knobs {
    fn default() -> Self {
        Self::read(|_| None)
    }
}

impl Knobs {
    /// Reads the knobs from the process environment (once, at start-up).
    #[must_use]
    pub fn from_env() -> Self {
        Self::read(|name| std::env::var_os(name))
    }

    /// Reads the knobs through `var` (the environment, or a test's table).
    pub fn read(var: impl Fn(&str) -> Option<OsString>) -> Self {
        let text = |name: &str| var(name).and_then(|v| v.into_string().ok());
        let number = |name: &str| text(name).and_then(|v| v.parse::<u32>().ok());
        let on = |name: &str| var(name).is_some_and(|v| v == "1");
        Self {
            ring_bytes: number(RING_BYTES_ENV),
            flow_table: number(FLOW_TABLE_ENV).map(|n| n.max(1)),
            force_clsact: on(FORCE_CLSACT_ENV),
            force_tcx: on(FORCE_TCX_ENV),
            btf_path: var(BTF_PATH_ENV)
                .filter(|p| !p.is_empty())
                .map_or_else(|| PathBuf::from(VMLINUX_BTF), PathBuf::from),
            kallsyms_path: var(KALLSYMS_PATH_ENV)
                .filter(|p| !p.is_empty())
                .map_or_else(|| PathBuf::from(KALLSYMS), PathBuf::from),
            join_max: text(JOIN_MAX_ENV)
                .and_then(|v| v.parse::<usize>().ok())
                .map(|n| n.max(1)),
            join_bytes: text(JOIN_BYTES_ENV).and_then(|v| v.parse::<usize>().ok()),
            batch_bytes: number(BATCH_BYTES_ENV).map(|n| {
                n.min(u32::try_from(tracer_common::batch::BATCH_BYTES_MAX).unwrap_or(u32::MAX))
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn knobs(vars: &[(&str, &str)]) -> Knobs {
        Knobs::read(|name| {
            vars.iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| OsString::from(v))
        })
    }

    #[test]
    fn unset_knobs_are_the_defaults() {
        let k = knobs(&[]);
        assert_eq!(k, Knobs::default());
        assert_eq!((k.ring_bytes, k.flow_table, k.join_max), (None, None, None));
        assert_eq!((k.join_bytes, k.batch_bytes), (None, None));
        assert!(!k.force_clsact && !k.force_tcx);
        assert_eq!(k.btf_path, PathBuf::from(VMLINUX_BTF));
        assert_eq!(k.kallsyms_path, PathBuf::from(KALLSYMS));
    }

    #[test]
    fn set_knobs_are_read_and_bad_values_ignored() {
        let k = knobs(&[
            (RING_BYTES_ENV, "65536"),
            (FLOW_TABLE_ENV, "0"),
            (FORCE_CLSACT_ENV, "1"),
            (FORCE_TCX_ENV, "yes"),
            (BTF_PATH_ENV, "/nonexistent/btf"),
            (KALLSYMS_PATH_ENV, "/dev/null"),
            (JOIN_MAX_ENV, "0"),
            (JOIN_BYTES_ENV, "65536"),
            (BATCH_BYTES_ENV, "65536"),
        ]);
        assert_eq!(k.join_bytes, Some(65_536));
        assert_eq!(k.batch_bytes, Some(2048), "at most a batch's bytes");
        assert_eq!(k.ring_bytes, Some(65_536));
        assert_eq!(k.flow_table, Some(1), "at least one entry");
        assert_eq!(k.join_max, Some(1), "at least one journey");
        assert!(k.force_clsact && !k.force_tcx, "only 1 switches on");
        assert_eq!(k.btf_path, PathBuf::from("/nonexistent/btf"));
        assert_eq!(k.kallsyms_path, PathBuf::from("/dev/null"));

        let k = knobs(&[
            (RING_BYTES_ENV, "4M"),
            (JOIN_MAX_ENV, "-3"),
            (JOIN_BYTES_ENV, "8M"),
            (BATCH_BYTES_ENV, "0"),
            (BTF_PATH_ENV, ""),
        ]);
        assert_eq!((k.ring_bytes, k.join_max, k.join_bytes), (None, None, None));
        assert_eq!(k.batch_bytes, Some(0), "0 writes every record alone");
        assert_eq!(k.btf_path, PathBuf::from(VMLINUX_BTF), "empty is unset");
    }
}
