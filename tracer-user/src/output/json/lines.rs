//! Writing [`Line`]s through serde (loss, evictions, summary), with the terminal-safe escaping
//! of [`TerminalSafe`].

use std::io::{self, Write};

use serde::Serialize;

use super::contract::{Line, Stats};

/// Writes `line` as one line in one `write_all`, then flushes.
pub(super) fn write_line(out: &mut dyn Write, line: &Line) -> io::Result<()> {
    let mut buf = Vec::new();
    serialize(&mut buf, line);
    buf.push(b'\n');
    out.write_all(&buf)?;
    out.flush()
}

/// Appends `value` as compact JSON escaped by [`TerminalSafe`].
pub(super) fn serialize<T: Serialize + ?Sized>(buf: &mut Vec<u8>, value: &T) {
    // Writing into a Vec cannot fail, and the contract's types always serialize (string
    // keys only).
    let _ = value.serialize(&mut serde_json::Serializer::with_formatter(
        buf,
        TerminalSafe,
    ));
}

/// `serde_json`'s compact output, plus `\uXXXX` for what JSON may leave raw but a terminal
/// would obey (C1 controls such as U+009B CSI, DEL, bidi and zero-width characters: the set
/// [`crate::util::safe`] escapes). Lossless: a reader decodes the very same strings.
pub(super) struct TerminalSafe;

impl serde_json::ser::Formatter for TerminalSafe {
    fn write_string_fragment<W: ?Sized + Write>(
        &mut self,
        w: &mut W,
        fragment: &str,
    ) -> io::Result<()> {
        let mut start = 0;
        for (i, c) in fragment.char_indices() {
            if c.is_control() || crate::util::text::is_invisible_format(c) {
                w.write_all(&fragment.as_bytes()[start..i])?;
                write!(w, "\\u{:04x}", u32::from(c))?;
                start = i + c.len_utf8();
            }
        }
        w.write_all(&fragment.as_bytes()[start..])
    }
}

impl From<crate::summary::Stats> for Stats {
    fn from(s: crate::summary::Stats) -> Self {
        // Nothing seen: zeros, as ever; seen but not timed: unknown.
        let timed = s.measured > 0 || s.count == 0;
        Self {
            count: s.count,
            p50_ns: timed.then_some(s.p50_ns),
            p99_ns: timed.then_some(s.p99_ns),
            max_ns: timed.then_some(s.max_ns),
        }
    }
}
